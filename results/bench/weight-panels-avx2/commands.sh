#!/bin/bash
# The few-row kernel on panel-packed weights against row-major weights (SPECULA_WEIGHT_LAYOUT), target-27m,
# one thread, fp32 and fp16, three pairs each in ABBA order; each run's JSON lands here (it records the CPU,
# its ISA and the load average), then a table of medians.
set -e
cd "$(dirname "$0")/../../.."
out=results/bench/weight-panels-avx2
run() {  # LAYOUT DTYPE N
  SPECULA_WEIGHT_LAYOUT=$1 build/specula bench forward --model transformer:results/models/target-27m \
    --weights-dtype "$2" --threads 1 --trees "3,2,1" --min-time 1.5 --output "$out/$2-$1-$3.json" > /dev/null
}
for dtype in float32 float16; do
  for n in 1 2 3; do
    if [ $((n % 2)) = 1 ]; then run panels $dtype $n; run row_major $dtype $n
    else run row_major $dtype $n; run panels $dtype $n; fi
  done
done
python3 - "$out" <<'PY'
import glob, json, statistics, sys
out = sys.argv[1]
print("| weights | layout | 1-token ÷ floor | 1-token ms | K = 2 | K = 4 | K = 8 | tree 3,2,1 (15 rows) | load |")
print("|---|---|---:|---:|---:|---:|---:|---:|---|")
for dtype in ("float32", "float16"):
    for layout in ("row_major", "panels"):
        runs = [json.load(open(f)) for f in sorted(glob.glob(f"{out}/{dtype}-{layout}-*.json"))]
        def med(name):
            return statistics.median(c["median_wall_us"] for r in runs for c in r["models"][0]["cases"]
                                     if c["name"] == name) / 1e3
        one = med("1-token")
        floor = statistics.median(r["models"][0]["one_token_vs_weight_read"] for r in runs)
        cells = [f"{med(n):.1f} ({med(n) / one:.2f})" for n in ("chunk K=2", "chunk K=4", "chunk K=8", "tree 3,2,1")]
        loads = sorted(float(r["machine"]["load_average_before"].split()[0]) for r in runs)
        print(f"| {dtype} | {layout} | {floor:.2f} | {one:.1f} | " + " | ".join(cells) + f" | {loads[0]:.2f}-{loads[-1]:.2f} |")
PY
