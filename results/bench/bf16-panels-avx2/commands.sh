#!/bin/bash
# bf16 against fp32 weights (the same checkpoint, --weights-dtype), panel layout, target-27m, one thread, three
# pairs in ABBA order; each run's JSON lands here (the CPU, its ISA, the layout, the load average), then a
# table of medians: the bf16 step against the fp32 one and against its own weight-read floor, and the K-row
# and tree ratios.
set -e
cd "$(dirname "$0")/../../.."
out=results/bench/bf16-panels-avx2
run() {  # DTYPE N
  build/specula bench forward --model transformer:results/models/target-27m --weights-dtype "$1" --threads 1 \
    --trees "3,2,1" --min-time 1.5 --output "$out/$1-$2.json" > /dev/null
}
for n in 1 2 3; do
  if [ $((n % 2)) = 1 ]; then run bfloat16 $n; run float32 $n; else run float32 $n; run bfloat16 $n; fi
done
python3 - "$out" <<'PY'
import glob, json, statistics, sys
out = sys.argv[1]
print("| weights | 1-token ms | 1-token ÷ floor | K = 2 | K = 4 | K = 8 | tree 3,2,1 (15 rows) | load |")
print("|---|---:|---:|---:|---:|---:|---:|---|")
one = {}
for dtype in ("float32", "bfloat16"):
    runs = [json.load(open(f)) for f in sorted(glob.glob(f"{out}/{dtype}-*.json"))]
    def ratios(name):
        return [c["ratio_wall_vs_1_token"] for r in runs for c in r["models"][0]["cases"] if c["name"] == name]
    one[dtype] = statistics.median(r["models"][0]["one_token_median_wall_us"] for r in runs) / 1e3
    floor = [r["models"][0]["one_token_vs_weight_read"] for r in runs]
    cells = []
    for n in ("chunk K=2", "chunk K=4", "chunk K=8", "tree 3,2,1"):
        v = ratios(n)
        cells.append(f"{statistics.median(v):.2f} ({min(v):.2f}-{max(v):.2f})")
    loads = sorted(float(r["machine"]["load_average_before"].split()[0]) for r in runs)
    print(f"| {dtype} | {one[dtype]:.1f} | {statistics.median(floor):.2f} ({min(floor):.2f}-{max(floor):.2f}) | "
          + " | ".join(cells) + f" | {loads[0]:.2f}-{loads[-1]:.2f} |")
print(f"\nbf16 1-token step / fp32 1-token step (medians): {one['bfloat16'] / one['float32']:.2f}")
PY
