#!/bin/bash
# specula bench forward on the bundled 27M target, one thread, with the packed matrices on 2 MB pages (the
# default) and on LibTorch's 4 KB pages (SPECULA_HUGE_PAGES=off), in ABBA blocks per dtype (on off off on, then
# off on on off), so that the machine's drift falls on both alike; each JSON records the CPU, its ISA, the
# kernel, the load average and the huge-page bytes the kernel granted. Then each case's on/off time ratio per
# adjacent pair, and the 1-token step against its floor.
#
#   commands.sh            the whole forwards above and table.txt (its output)
#   commands.sh tree       tree-ab/ and tree-ab.txt: bf16 1-token and tree only, eight more ABBA pairs
#   commands.sh kernel     kernel_ab.txt: the kernel alone, in-process ABBA (kernel_ab.cpp), one pass appended
#   commands.sh forward    forward_ab.txt: whole forwards, two copies of the model in one process (forward_ab.cpp)
#   python3 to_json.py     kernel_ab.json, forward_ab.json from the two .txt files, with each pass's machine
#   commands.sh resident   resident.txt: resident memory after loading and at peak, on and off
#   commands.sh end-to-end end-to-end-ab/: bench end-to-end on 8 settings, on off off on (summary.txt by hand)
set -e
cd "$(dirname "$0")/../../.."
out=results/bench/huge-pages-avx2
case "${1:-}" in
  tree)
    mkdir -p $out/tree-ab
    i=0
    for s in on off off on off on on off on off off on off on on off; do
      SPECULA_HUGE_PAGES=$s build/specula bench forward --model transformer:results/models/target-27m \
        --weights-dtype bfloat16 --threads 1 --chunks 1 --trees "3,2,1" --min-time 1 --output $out/tree-ab/$s-$i.json \
        > /dev/null
      i=$((i + 1))
    done
    python3 - "$out" <<'PY' > $out/tree-ab.txt
import glob, json, os, statistics, sys
out = sys.argv[1]
runs = {}
for f in glob.glob(f"{out}/tree-ab/*.json"):
    s, i = os.path.basename(f)[:-5].split("-")
    d = json.load(open(f))
    c = {x["name"]: x["median_wall_us"] for x in d["models"][0]["cases"]}
    runs[int(i)] = (s, c["1-token"], c["tree 3,2,1"], d["machine"]["load_average_before"], d["git_revision"])
print("# bf16 1-token and tree 3,2,1 only, 16 runs alternating on/off (ABBA blocks), one thread; wall medians (us)")
print("run pages 1-token tree load_before revision")
for i in sorted(runs):
    print(i, *runs[i])
for k, n in ((1, "1-token"), (2, "tree")):
    r = []
    for i in range(0, 16, 2):
        a, b = runs[i], runs[i + 1]
        on, off = (a, b) if a[0] == "on" else (b, a)
        r.append(on[k] / off[k])
    print(n, "on/off per adjacent pair: median", round(statistics.median(r), 3), [round(x, 3) for x in r])
PY
    exit 0 ;;
  kernel)
    g++ -O2 -std=c++17 -I. $out/kernel_ab.cpp build/harness/libspecula_transformer.a -o /tmp/kernel_ab
    { echo "# $(date -u); $(grep -m1 'model name' /proc/cpuinfo); flags: $(grep -o -w 'avx2\|avx512f\|avx512_bf16\|f16c\|fma' /proc/cpuinfo | sort -u | tr '\n' ' '); THP $(cat /sys/kernel/mm/transparent_hugepage/enabled); load $(cat /proc/loadavg)"
      for dtype in bfloat16 float16 float32; do for rows in 1 2 4 8 15; do /tmp/kernel_ab $dtype $rows 200; done; done
      echo "# load after $(cat /proc/loadavg)"; } >> $out/kernel_ab.txt
    exit 0 ;;
  forward)
    c++ -O2 -DNDEBUG -D_GLIBCXX_USE_CXX11_ABI=1 -fopenmp -std=gnu++17 -I. -isystem /usr/include/torch/csrc/api/include \
      $out/forward_ab.cpp -o /tmp/forward_ab build/harness/libspecula_transformer.a build/harness/libspecula_models.a \
      build/harness/libspecula_io.a build/kernels/libspecula_kernels.a -Wl,--no-as-needed \
      /usr/lib/x86_64-linux-gnu/libtorch_cpu.so.1.13.0 /usr/lib/x86_64-linux-gnu/libtorch.so.1.13.0 \
      /usr/lib/x86_64-linux-gnu/libc10.so -Wl,--as-needed -lpthread
    { echo "# $(date -u); $(grep -m1 'model name' /proc/cpuinfo); THP $(cat /sys/kernel/mm/transparent_hugepage/enabled); one thread; git $(git rev-parse --short HEAD); load $(cat /proc/loadavg)"
      for dtype in bfloat16 float16 float32; do /tmp/forward_ab results/models/target-27m $dtype 300; done
      echo "# load after $(cat /proc/loadavg)"; } >> $out/forward_ab.txt
    exit 0 ;;
  end-to-end)
    mkdir -p $out/end-to-end-ab
    i=0
    for s in on off off on; do
      SPECULA_HUGE_PAGES=$s build/specula bench end-to-end \
        --set "draft.drafter=ngram:results/models/ngram-order6-distilled-27m.txt | transformer:results/models/draft" \
        --set "draft.method=block" --set "draft.num_draft_tokens=4, 7" --output $out/end-to-end-ab/$s-$i.json
      i=$((i + 1))
    done
    exit 0 ;;
  resident)
    { echo "# resident memory of specula bench forward on the 27M target (one thread; --chunks 1 --min-time 0.01), huge pages on and off; $(date -u); RSS after load from /proc/self/status in the JSON, peak from getrusage(RUSAGE_CHILDREN).ru_maxrss"
      for s in on off; do for d in float32 bfloat16; do SPECULA_HUGE_PAGES=$s python3 - "$d" "$s" <<'PY'
import json, resource, subprocess, sys
d, s = sys.argv[1], sys.argv[2]
subprocess.run(["build/specula", "bench", "forward", "--model", "transformer:results/models/target-27m", "--weights-dtype", d,
                "--threads", "1", "--chunks", "1", "--min-time", "0.01", "--min-iterations", "2", "--output", "/tmp/rss.json"],
               stdout=subprocess.DEVNULL, check=True)
peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
m = json.load(open("/tmp/rss.json"))["models"][0]
print(f"SPECULA_HUGE_PAGES={s} {d}: weights {m['weight_bytes'] / 1e6:.1f} MB, moved {m['weight_bytes_moved_to_huge_pages'] / 1e6:.1f} MB, "
      f"granted {m['process_huge_page_bytes_after_load'] / 1e6:.1f} MB, RSS after load {m['process_resident_bytes_after_load'] / 1e6:.1f} MB, "
      f"peak RSS {peak / 1e6:.1f} MB")
PY
      done; done; } > $out/resident.txt
    exit 0 ;;
esac
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
