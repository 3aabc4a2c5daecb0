#!/usr/bin/env bash
# The one command to run when a machine with an NVIDIA GPU is available: the gpu-labelled tests, the three
# compute-sanitizer tools over them, the end-to-end `generate --device cuda` check against the CPU driver,
# the CUDA benchmarks, the bundled target's forward on the GPU (`bench forward --device cuda`, whose cost
# profile `specula run --cost-profile` reads), a 1.1 B-parameter Llama-shaped model's forward on the GPU, the whole
# loop on the GPU at batch 1 (`bench end-to-end --device cuda`, with that profile's predictions) and in batched
# lockstep (`--batch`), written as one JSON report with the kernels' and the loop's targets read off the benchmarks. On a GPU machine without Debian's packages, build first
# with kernels/tools/gpu-build.sh (collect .gpu-debs here with --collect, carry it) and pass --build build-gpu.
#
#   kernels/tools/gpu-check.sh [--build DIR] [--report FILE] [--cost-profile FILE] [--corpus FILE] [--quick]
#                              [--steps NAME,..]
#
#   --build DIR    the build folder holding specula and specula_gpu_tests (default: build)
#   --report FILE  the JSON report (default: results/bench/gpu-check-<host>.json)
#   --cost-profile FILE  the GPU's cost profile for target-27m (default: the report's name, -cost-profile.json)
#   --corpus FILE  the text the end-to-end runs take their prompts from (default ../shared/data/tinyshakespeare.txt;
#                  where it is missing those steps are skipped, saying so)
#   --quick        a first look inside a short lease: benchmarks with 5 iterations instead of 50, batches 1 and
#                  16 of one repetition, and each step under a shorter time limit (tests 150 s, each sanitizer
#                  60 s, each benchmark 60 s, the batched end-to-end run 150 s)
#   --steps NAME,..  run only these steps, the others recorded as skipped (a lease too short for every step spreads
#                  them over calls): gpu_tests, sanitizer_memcheck, sanitizer_racecheck, sanitizer_synccheck,
#                  generate_e2e, bench_sampler, bench_verify, bench_forward, make_llama_1b, bench_forward_1b,
#                  bench_end_to_end, bench_end_to_end_batch (bench_end_to_end reads the cost profile bench_forward
#                  writes, bench_forward_1b the model make_llama_1b makes)
#
# Every step runs under its own time limit and is recorded with its exit status, wall time and the last
# lines of its output, so one failing step never hides the others. The script exits 0 only when every step
# passed; a step that could not run (no GPU, no compute-sanitizer) is recorded as "skipped" with the reason.
set -uo pipefail
cd "$(dirname "$0")/../.."

build=build
report=""
profile=""
corpus=../shared/data/tinyshakespeare.txt
iterations=50
limit_tests=900 limit_sanitizer=600 limit_bench=600 limit_e2e=600 limit_make=300
batches=1,4,16,64
e2e_quick=()
all_steps=gpu_tests,sanitizer_memcheck,sanitizer_racecheck,sanitizer_synccheck,generate_e2e,bench_sampler,bench_verify
all_steps=$all_steps,bench_forward,make_llama_1b,bench_forward_1b,bench_end_to_end,bench_end_to_end_batch
selected=$all_steps
while (($#)); do
  case "$1" in
    --build) build=$2; shift 2 ;;
    --report) report=$2; shift 2 ;;
    --quick)
      iterations=5 limit_tests=150 limit_sanitizer=60 limit_bench=60 limit_e2e=150 limit_make=180 batches=1,16
      e2e_quick=(--set experiment.repetitions=1 --set experiment.max_new_tokens=48)
      shift ;;
    --cost-profile) profile=$2; shift 2 ;;
    --corpus) corpus=$2; shift 2 ;;
    --steps) selected=$2; shift 2 ;;
    -h|--help) sed -n '2,28p' "$0"; exit 0 ;;
    *) echo "gpu-check: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
done
for name in ${selected//,/ }; do
  [[ ",$all_steps," == *",$name,"* ]] || { echo "gpu-check: unknown step '$name' in --steps (one of $all_steps)" >&2; exit 2; }
done
[ -n "$report" ] || report="results/bench/gpu-check-$(hostname -s).json"
[ -n "$profile" ] || profile="${report%.json}-cost-profile.json"
for exe in specula specula_gpu_tests; do
  [ -x "$build/$exe" ] || [ -x "$build/tests/$exe" ] || { echo "gpu-check: $build has no $exe (build first)" >&2; exit 2; }
done
specula=$build/specula
gpu_tests=$build/tests/specula_gpu_tests
[ -x "$gpu_tests" ] || gpu_tests=$build/specula_gpu_tests

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
steps=$work/steps.jsonl
: >"$steps"

sanitizer=$(command -v compute-sanitizer || true)
for d in /usr/local/cuda/bin /usr/local/cuda/compute-sanitizer /opt/nvidia/compute-sanitizer; do
  [ -n "$sanitizer" ] || { [ -x "$d/compute-sanitizer" ] && sanitizer=$d/compute-sanitizer; }
done

# step NAME LIMIT_S COMMAND...: runs the command, records its outcome (a step --steps left out: skipped).
step() {
  local name=$1 limit=$2
  shift 2
  if [[ ",$selected," != *",$name,"* ]]; then
    skip "$name" "not selected (--steps)"
    return
  fi
  local log=$work/$name.log start end rc
  echo "== $name: $*" >&2
  start=$(date +%s.%N)
  timeout --kill-after=10 "$limit" "$@" >"$log" 2>&1
  rc=$?
  end=$(date +%s.%N)
  tail -n 5 "$log" | sed 's/^/   /' >&2
  python3 - "$name" "$rc" "$start" "$end" "$log" "$*" >>"$steps" <<'EOF'
import json, sys
name, rc, start, end, log, cmd = sys.argv[1:]
text = open(log, errors="replace").read()
rc = int(rc)
status = "passed" if rc == 0 else ("skipped" if rc == 77 else ("timeout" if rc in (124, 137) else "failed"))
record = {"step": name, "status": status, "exit_code": rc, "seconds": round(float(end) - float(start), 2),
          "command": cmd, "output_tail": text[-6000:]}
# A step graph whose capture failed falls back to eager steps (and may leave LibTorch's allocator degraded): the
# step's figures would not be what they say, so the step fails, naming the line.
capture = [line for line in text.splitlines() if "CUDA graph capture failed" in line]
if capture and status == "passed":
    record["status"] = "failed"
    record["reason"] = capture[0][:500]
print(json.dumps(record))
EOF
}

skip() {  # skip NAME REASON
  python3 -c 'import json,sys; print(json.dumps({"step": sys.argv[1], "status": "skipped", "reason": sys.argv[2]}))' \
    "$1" "$2" >>"$steps"
  echo "== $1: skipped ($2)" >&2
}

device=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -n1)
[ -n "$device" ] || device="none (nvidia-smi: $(nvidia-smi 2>&1 | head -n1))"
echo "gpu-check on $(hostname -s): $device" >&2

# 1. The gpu-labelled tests (exit 77 = no usable device).
step gpu_tests "$limit_tests" "$gpu_tests"

# 2. compute-sanitizer over the tests. The 200k-row law tests and the largest vocabularies are left to step
# 1 (the sanitizers slow kernels 10-100x); [sanitize] selects small cases of every kernel and dispatch.
if [ -z "$sanitizer" ]; then
  for tool in memcheck racecheck synccheck; do skip "sanitizer_$tool" "compute-sanitizer not found"; done
else
  for tool in memcheck racecheck synccheck; do
    extra=()
    [ "$tool" = memcheck ] && extra=(--leak-check full)
    step "sanitizer_$tool" "$limit_sanitizer" "$sanitizer" --tool "$tool" "${extra[@]}" --error-exitcode 3 --print-limit 20 \
      "$gpu_tests" "[sanitize]"
  done
fi

# 3. The driver end to end: generate --device cuda against --device cpu, token for token. A GPU machine may
# lack the bundled checkpoints or Debian's LibTorch: the transformer pairs are then skipped by name (the step's
# last output line counts them) and the bigram pairs still check every method on the device.
step generate_e2e "$limit_tests" python3 tests/gpu/generate_device_check.py --binary "$specula" --allow-no-transformer

# 4. The kernels' benchmarks.
step bench_sampler "$limit_bench" "$specula" bench sampler --device cuda --iterations "$iterations" --output "$work/bench-sampler.json"
step bench_verify "$limit_bench" "$specula" bench verify --device cuda --iterations "$iterations" --output "$work/bench-verify.json"

# 5. The bundled target's forward on the GPU: 1..64 rows and trees of 15, 31 and 63 nodes against the 1-token
# step and the copy-bandwidth floor, the draft transformer's step beside it; the cost profile for other machines.
# Each chunk also as one pooled step of B sequences (the batch sizes of step 6 but 1), graph and eager: what a batched
# lockstep step costs beside the lone one.
models=results/models
forward_batches=$(echo "$batches" | tr ',' '\n' | grep -vx 1 | paste -sd, -)
if [ -f "$models/target-27m/config.json" ] && [ -f "$models/draft/config.json" ]; then
  step bench_forward "$limit_bench" "$specula" bench forward --device cuda --model "transformer:$models/target-27m" \
    --model "transformer:$models/draft" --chunks 1,2,4,8,16,32,64 --trees "1,2,2,2;1,2,2,2,2;1,2,2,2,2,2" \
    ${forward_batches:+--batches "$forward_batches"} \
    --min-time 0.2 --min-iterations "$iterations" --output "$work/bench-forward.json" --cost-profile "$profile"
else
  skip bench_forward "the bundled checkpoints are not here"
fi

# 5b. A Llama-shaped model of about 1.1 B parameters (22 layers, d 2048, 16 heads, ff 5632: TinyLlama's shape; byte
# vocabulary), random weights from one training step on the CPU, stored in bfloat16; its forward on the GPU against
# the floor. Targets (#36): the 1-token step <= 1.5x its floor, 16 rows and the 15-node tree <= 1.15x one token.
big=$work/llama-1b
step make_llama_1b "$limit_make" "$specula" train --corpus README.md --output "$big" --steps 1 --batch-size 1 \
  --seq-len 64 --warmup-steps 0 --eval-interval 1 --eval-windows 1 --validation-fraction 0.05 --d-model 2048 \
  --n-layers 22 --n-heads 16 --d-ff 5632 --max-seq-len 2048 --weights-dtype bfloat16 --threads "$(nproc)"
if [ -f "$big/config.json" ]; then
  step bench_forward_1b "$limit_bench" "$specula" bench forward --device cuda --model "transformer:$big" \
    --chunks 1,2,4,8,16,32,64 --trees "1,2,2,2;1,2,2,2,2;1,2,2,2,2,2" --min-time 0.2 \
    --min-iterations "$iterations" --output "$work/bench-forward-1b.json"
else
  skip bench_forward_1b "the 1 B model was not made (see make_llama_1b)"
fi

# 5c. The whole loop at batch 1 on the GPU: every bundled drafter, chain / block / static tree, T = 0 and 0.8, each
# generation paired against autoregressive decoding on the device in the same run, with this GPU's cost profile
# (step 5) predicting each setting's speedup beside the measured one.
if [ ! -f "$corpus" ]; then
  skip bench_end_to_end "no corpus at $corpus (give --corpus FILE)"
elif [ -f "$models/target-27m/config.json" ] && [ -f "$profile" ]; then
  step bench_end_to_end "$limit_e2e" "$specula" bench end-to-end --experiment experiments/bench-end-to-end.ini \
    --device cuda --cost-profile "$profile" --set "experiment.prompts_from_corpus=$corpus" \
    ${e2e_quick[@]+"${e2e_quick[@]}"} --set "experiment.output_dir=$work/runs-1" \
    --output "$work/bench-end-to-end.json"
else
  skip bench_end_to_end "the bundled checkpoints or this GPU's cost profile ($profile) are not here"
fi

# 6. The whole loop on the GPU in batched lockstep: models, sampler and verifier on the device, one target forward
# per step for each batch, speculative against autoregressive decoding of the same batch at each batch size.
if [ ! -f "$corpus" ]; then
  skip bench_end_to_end_batch "no corpus at $corpus (give --corpus FILE)"
elif [ -f "$models/target-27m/config.json" ] && [ -f "$models/ngram-order6-distilled-27m.txt" ]; then
  step bench_end_to_end_batch "$limit_e2e" "$specula" bench end-to-end --experiment experiments/bench-batch.ini \
    --device cuda --batch "$batches" ${e2e_quick[@]+"${e2e_quick[@]}"} --set "experiment.output_dir=$work/runs" \
    --set "experiment.prompts_from_corpus=$corpus" \
    --output "$work/bench-end-to-end-batch.json"
else
  skip bench_end_to_end_batch "the bundled checkpoints are not here"
fi

# The LibTorch the build links: whether its CUDAGraph::reset() frees the capture stream's cuBLAS workspace
# (clearCublasWorkspacesForStream), which every step graph captured on that stream has baked in (kernels/README.md,
# "Step graphs and cuBLAS workspaces").
torch_lib=$(sed -n 's/^Torch_DIR:PATH=//p' "$build/CMakeCache.txt" 2>/dev/null | head -n1)
torch_lib=${torch_lib:+$torch_lib/../../../lib/libtorch_cuda.so}

mkdir -p "$(dirname "$report")"
python3 - "$steps" "$report" "$device" "$work" "$torch_lib" <<'EOF'
import json, os, platform, sys, datetime
steps_file, report, device, work, torch_lib = sys.argv[1:]
libtorch = {"libtorch_cuda": torch_lib or None}
if torch_lib and os.path.exists(torch_lib):
    with open(torch_lib, "rb") as f:
        libtorch["graph_reset_clears_cublas_workspaces"] = b"clearCublasWorkspacesForStream" in f.read()
steps = [json.loads(line) for line in open(steps_file)]
benches = {}
for name in ("bench-sampler", "bench-verify", "bench-forward", "bench-forward-1b", "bench-end-to-end",
             "bench-end-to-end-batch"):
    path = os.path.join(work, name + ".json")
    if os.path.exists(path):
        benches[name] = json.load(open(path))

# The kernels' speed targets (kernels/README.md, "One row over a cluster"), read off the benchmarks: a measurement,
# not a pass condition of the check.
def case(bench, kernel, vocab, batch):
    for c in benches.get(bench, {}).get("cases", []):
        if c["kernel"] == kernel and c["vocab_size"] == vocab and c["batch"] == batch:
            return c
    return None
targets = []
for name, bench, kernel, batch, field, limit, at_most in (
        ("full pipeline, V 128256, B 64: x floor", "bench-sampler", "sampler/full", 64, "times_floor", 3.0, True),
        ("full pipeline, V 128256, B 1: us", "bench-sampler", "sampler/full", 1, "mean_us", 15.0, True),
        ("top-p alone, V 128256, B 64: us", "bench-sampler", "sampler/t0.8_topp0.9/float-first", 64, "mean_us", 30.0,
         True),
        ("chain verify K 4, V 128256, B 64: x floor", "bench-verify", "verify/chain", 64, "times_floor", 3.0, True),
        ("full pipeline, V 128256, B 64: x LibTorch", "bench-sampler", "sampler/full", 64, "speedup_vs_libtorch", 5.0,
         False),
        ("top-p alone, V 128256, B 64: x LibTorch", "bench-sampler", "sampler/t0.8_topp0.9/float-first", 64,
         "speedup_vs_libtorch", 5.0, False),
        ("chain verify K 4, V 128256, B 64: x LibTorch", "bench-verify", "verify/chain", 64, "speedup_vs_libtorch",
         5.0, False)):
    c = case(bench, kernel, 128256, batch)
    value = c.get(field) if c else None
    met = None if value is None else (value <= limit if at_most else value >= limit)
    targets.append({"target": name, "value": value, "limit": limit, "at_most": at_most, "met": met})

# The whole loop's targets (#36), read off the forward and end-to-end reports: measurements, not pass conditions.
def forward_case(bench, name):
    models = benches.get(bench, {}).get("models", [])
    for c in (models[0].get("cases", []) if models else []):
        if c["name"] == name:
            return c
    return None
loop = []
one = forward_case("bench-forward-1b", "1-token")
for name, value, limit in (
        ("1 B model: 1-token step x floor", one and one.get("ratio_wall_vs_weight_read"), 1.5),
        ("1 B model: 16 rows x 1-token", (forward_case("bench-forward-1b", "chunk K=16") or {}).get(
            "ratio_wall_vs_1_token"), 1.15),
        ("1 B model: 15-node tree x 1-token", (forward_case("bench-forward-1b", "tree 1,2,2,2") or {}).get(
            "ratio_wall_vs_1_token"), 1.15)):
    loop.append({"target": name, "value": value, "limit": limit, "at_most": True,
                 "met": None if value is None else value <= limit})
e2e = benches.get("bench-end-to-end", {})
for name, key, limit in (("best speedup at T 0", "best_at_temperature_0", 2.5),
                         ("best speedup at T 0.8", "best_at_temperature_0.8", 2.0)):
    best = e2e.get(key) or {}
    value = best.get("decode_speedup") if isinstance(best, dict) else None
    loop.append({"target": name, "value": value, "limit": limit, "at_most": False,
                 "met": None if value is None else value >= limit})
# Every setting's decoding speedup against the cost model and against this GPU's cost profile's prediction
# (within 10%): the worst setting's |measured / predicted - 1|.
for name, field in (("cost model, worst setting: |measured / model - 1|", "decode_over_cost_model"),
                    ("cost-profile prediction, worst setting: |measured / predicted - 1|", "decode_over_profile")):
    errors = [abs(s[field] - 1.0) for s in e2e.get("settings", []) if isinstance(s.get(field), (int, float))]
    worst = max(errors) if errors else None
    loop.append({"target": name, "value": worst, "limit": 0.10, "at_most": True,
                 "met": None if worst is None else worst <= 0.10})
targets += loop
# A run of some steps (--steps) passes when they all pass; "complete" says whether every step ran.
left_out = [s["step"] for s in steps if s.get("reason") == "not selected (--steps)"]
ran = [s for s in steps if s["step"] not in left_out]
doc = {"host": platform.node(), "device": device, "date": datetime.datetime.now(datetime.timezone.utc).isoformat(),
       "libtorch": libtorch,
       "passed": all(s["status"] == "passed" for s in ran), "complete": not left_out, "left_out": left_out,
       "steps": steps, "benchmarks": benches,
       "kernel_targets": targets[:len(targets) - len(loop)], "loop_targets": loop}
tmp = report + ".tmp"
with open(tmp, "w") as f:
    json.dump(doc, f, indent=1)
    f.write("\n")
os.replace(tmp, report)
for s in steps:
    print(f"{s['step']:<22} {s['status']:<8} {s.get('seconds', '')}")
for t in targets:
    print(f"target {t['target']:<45} {t['value']!s:<12} {'met' if t['met'] else 'not met' if t['met'] is False else '-'}")
print("wrote", report)
sys.exit(0 if doc["passed"] else 1)
EOF
