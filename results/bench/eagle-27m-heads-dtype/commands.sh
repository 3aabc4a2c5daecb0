#!/bin/bash
# EAGLE head of target-27m with its matrices in fp32 against the target's fp16 (weights_dtype), and
# autoregressive decoding, one thread, in ABAB order (two rounds); each run's --metrics-json lands here, with
# machine.json (the CPU, its ISA, the load average before and after).
set -e
cd "$(dirname "$0")/../../.."
out=results/bench/eagle-27m-heads-dtype
P="$(printf 'ROMEO:\nBut soft, what light through yonder window breaks?\n')"
run() {  # NAME T [specula generate options]
  name=$1 T=$2; shift 2
  build/specula generate --target transformer:results/models/target-27m "$@" --prompt "$P" --max-new-tokens 160 \
    --num-samples 4 --seed 1 --temperature "$T" --threads 1 --output /dev/null --metrics-json "$out/$name-T$T.json" \
    > /dev/null
}
machine() {  # the CPU, its ISA and the load average, beside the metrics
  python3 - "$out/machine.json" "$1" <<'PY'
import json, os, subprocess, sys
path, when = sys.argv[1:]
doc = json.load(open(path)) if when == "after" and os.path.exists(path) else {}
if when == "before":
    info = open("/proc/cpuinfo").read()
    flags = next(l for l in info.splitlines() if l.startswith("flags")).split()
    doc = {"cpu_model": next(l for l in info.splitlines() if l.startswith("model name")).split(":", 1)[1].strip(),
           "logical_cores": os.cpu_count(), "cpu_avx2": "avx2" in flags, "cpu_avx512f": "avx512f" in flags,
           "git_revision": subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                                          text=True).stdout.strip()}
doc["load_average_" + when] = open("/proc/loadavg").read().split()[:3]
json.dump(doc, open(path, "w"), indent=1)
PY
}
machine before
for round in 1 2; do
  for T in 0 0.8; do
    run "ar-$round" "$T"
    run "eagle-float32-$round" "$T" --draft eagle:results/models/eagle-27m,weights_dtype=float32 --method chain --num-draft-tokens 4
    run "eagle-float16-$round" "$T" --draft eagle:results/models/eagle-27m --method chain --num-draft-tokens 4
  done
done
machine after
python3 - "$out" <<'PY'
import json, sys, glob, os
rows = []
for f in sorted(glob.glob(os.path.join(sys.argv[1], "*-T*.json"))):
    d = json.load(open(f))
    name = os.path.basename(f)[:-5]
    draft = 1000 * d["draft_seconds"] / d["draft_calls"] if d.get("draft_calls") else 0.0
    rows.append(f"{name:<24} decode tok/s {d['decode_tokens_per_second']:7.1f}  tau {d['mean_accepted_length']:.2f}  "
                f"draft ms/call {draft:.2f}")
print("\n".join(rows))
PY
