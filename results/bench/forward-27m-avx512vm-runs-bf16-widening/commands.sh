#!/bin/bash
# specula bench forward on the bundled 27M target, one and two threads, fp32 / bf16 / fp16 matrices, in three
# rounds whose dtype order alternates (a: fp32 bf16 fp16, b: fp16 bf16 fp32, c: as a), so that the machine's
# drift falls on every dtype alike; each JSON records the CPU, its ISA, the kernel and the load average. Then a
# table of per-run ratios and the bf16 / fp32 1-token ratio within each round.
set -e
cd "$(dirname "$0")/../../.."
out=results/bench/forward-27m-avx512vm-runs-bf16-widening
run() {  # DTYPE THREADS ROUND
  build/specula bench forward --model transformer:results/models/target-27m --weights-dtype "$1" --threads "$2" \
    --trees "3,2,1;2,2,1;4,2,1" --min-time 1.5 --output "$out/$1-$2thread-$3.json" > /dev/null
}
for round in a b c; do
  if [ $round = b ]; then order="float16 bfloat16 float32"; else order="float32 bfloat16 float16"; fi
  for dtype in $order; do run "$dtype" 1 "$round"; done
  for dtype in $order; do run "$dtype" 2 "$round"; done
done
python3 - "$out" <<'PY'
import glob, json, os, sys
out = sys.argv[1]
def case(d, name):
    return next(c for c in d["models"][0]["cases"] if c["name"] == name)
print("| matrices, threads, round | 1-token µs | floor µs (GB/s) | 1-token ÷ floor | 2 rows | 4 rows | 8 rows | tree 3,2,1 (15) | load before |")
print("|---|---:|---:|---:|---:|---:|---:|---:|---|")
runs = {}
for f in sorted(glob.glob(f"{out}/*.json")):
    d = json.load(open(f))
    dtype, threads, rnd = os.path.basename(f)[:-5].split("-")
    runs[(dtype, threads, rnd)] = d
    m = d["models"][0]
    one = case(d, "1-token")["median_wall_us"]
    floor, gbs = m["weight_read_median_wall_us"], m["read_bandwidth_gb_s"]
    cells = [f'{case(d, n)["ratio_wall_vs_1_token"]:.2f}' for n in ("chunk K=2", "chunk K=4", "chunk K=8", "tree 3,2,1")]
    print(f'| {dtype}, {threads}, {rnd} | {one:.0f} | {floor:.0f} ({gbs:.1f}) | {m["one_token_vs_weight_read"]:.2f} | '
          + " | ".join(cells) + f' | {d["machine"]["load_average_before"]} |')
print()
for threads in ("1thread", "2thread"):
    for rnd in "abc":
        a, b = runs.get(("float32", threads, rnd)), runs.get(("bfloat16", threads, rnd))
        if a and b:
            print(f'{threads} round {rnd}: bf16 1-token / fp32 1-token = '
                  f'{case(b, "1-token")["median_wall_us"] / case(a, "1-token")["median_wall_us"]:.3f}')
PY
