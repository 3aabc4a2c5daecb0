#!/bin/bash
# specula bench forward on the bundled 27M target, one thread, with the packed matrices on 2 MB pages (the
# default) and on LibTorch's 4 KB pages (SPECULA_HUGE_PAGES=off), in ABBA blocks per dtype (on off off on, then
# off on on off), so that the machine's drift falls on both alike; each JSON records the CPU, its ISA, the
# kernel, the load average and the huge-page bytes the kernel granted. Then each case's on/off time ratio per
# adjacent pair, and the 1-token step against its floor.
set -e
cd "$(dirname "$0")/../../.."
out=results/bench/huge-pages-avx2
run() {  # DTYPE on|off INDEX
  SPECULA_HUGE_PAGES=$2 build/specula bench forward --model transformer:results/models/target-27m \
    --weights-dtype "$1" --threads 1 --trees "3,2,1" --min-time 1 --output "$out/$1-$2-$3.json" > /dev/null
}
for dtype in bfloat16 float32 float16; do
  i=0
  for setting in on off off on off on on off; do run "$dtype" "$setting" $((i++)); done
done
python3 - "$out" <<'PY'
import glob, json, os, sys, statistics
out = sys.argv[1]
names = ("1-token", "chunk K=2", "chunk K=4", "chunk K=8", "tree 3,2,1")
def case(d, name):
    return next(c for c in d["models"][0]["cases"] if c["name"] == name)
runs = {}
for f in glob.glob(f"{out}/*.json"):
    dtype, setting, i = os.path.basename(f)[:-5].split("-")
    runs[(dtype, int(i))] = (setting, json.load(open(f)))
print("| matrices | run | pages | huge-page MB granted | 1-token µs | floor µs (GB/s) | 1-token ÷ floor | "
      + " | ".join(n + " ÷ 1-token" for n in names[1:]) + " | load before |")
print("|---|---:|---|---:|---:|---:|---:|" + "---:|" * (len(names) - 1) + "---|")
for (dtype, i), (setting, d) in sorted(runs.items()):
    m = d["models"][0]
    cells = [f'{case(d, n)["ratio_wall_vs_1_token"]:.2f}' for n in names[1:]]
    print(f'| {dtype} | {i} | {setting} | {m["process_huge_page_bytes_after_load"] / 1e6:.0f} | '
          f'{case(d, "1-token")["median_wall_us"]:.0f} | {m["weight_read_median_wall_us"]:.0f} '
          f'({m["read_bandwidth_gb_s"]:.1f}) | {m["one_token_vs_weight_read"]:.2f} | ' + " | ".join(cells)
          + f' | {d["machine"]["load_average_before"]} |')
print()
print("on ÷ off, wall-time medians, per adjacent pair (runs 0-1, 2-3, 4-5, 6-7): median [min, max]")
for dtype in sorted({k[0] for k in runs}):
    for n in names + ("floor",):
        ratios = []
        for i in range(0, 8, 2):
            (sa, da), (sb, db) = runs[(dtype, i)], runs[(dtype, i + 1)]
            on, off = (da, db) if sa == "on" else (db, da)
            t = (lambda d: d["models"][0]["weight_read_median_wall_us"]) if n == "floor" else \
                (lambda d: case(d, n)["median_wall_us"])
            ratios.append(t(on) / t(off))
        print(f'{dtype:9s} {n:12s} {statistics.median(ratios):.3f} [{min(ratios):.3f}, {max(ratios):.3f}]')
PY
