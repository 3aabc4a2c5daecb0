#!/usr/bin/env python3
"""ctest cuda_loads_in_flight: the kernels' one read of a row keeps kLoadsInFlight loads in flight per thread.

for_each_loaded_vec (kernels/fused_sampler_row.h) loads a thread's vectors kLoadsInFlight at a time before it uses
the first: a row is read at HBM speed only with that many bytes in flight. The fused sampler's pass 1 reads its
logits so; a split row's verification stages its p and q slices with a plain copy loop the compiler unrolls as far
(verify_row.h, stage_rows). Whether the loads stay together is a property of the generated code, not of the source,
so this compiles the kernels to PTX and asks, of every such kernel, for one basic block (the code between two labels,
branches or barriers) holding at least kLoadsInFlight streaming loads (ld.global.cs: the read-once inputs,
load_vec_once). A loop that loads one vector and processes it holds one, as the sampler's did before the batching.
PTX, not SASS: ptxas may still schedule the loads apart. Checked where each kernel runs: the sampler on sm_80 and
sm_90, the cluster verifiers on sm_90, the global-memory exchange's verifiers on sm_80.

Usage: check_loads_in_flight.py --nvcc NVCC --source-dir DIR
       check_loads_in_flight.py --self-test
"""
import argparse
import concurrent.futures
import os
import re
import subprocess
import sys
import tempfile

# (source, architecture, the kernels that must hold the loads).
TARGETS = [
    ("sampler_kernels.cu", "sm_80", r"fused_sampler_(?:group_|cluster_)?kernel"),
    ("sampler_kernels.cu", "sm_90", r"fused_sampler_(?:group_|cluster_)?kernel"),
    ("verify_kernels.cu", "sm_90", r"(?:chain|block|tree)_verify_cluster_kernel"),
    ("verify_group_kernels.cu", "sm_80", r"(?:chain|block|tree)_verify_group_kernel"),
]
SAMPLER = TARGETS[0][2]
# A basic block ends at a label or a branch; a barrier or a return ends the run of loads counted too.
LABEL = re.compile(r"\n\$L__BB\d+_\d+:")
BLOCK_EDGE = re.compile(r"\n\$L__BB\d+_\d+:|\n\s*(?:@!?%p\d+\s+)?(?:bra(?:\.uni)?|brx\.idx|bar\.sync|barrier\.sync"
                        r"|ret|exit)\b")
STREAMING_LOAD = re.compile(r"\bld\.global\.cs\.")


def loads_in_flight(ptx, kernels=SAMPLER):
    """{name of each kernel entry matching `kernels`: the most streaming loads in one of its basic blocks}."""
    found = {}
    for entry in re.split(r"(?:^|\n)(?:\.visible\s+)?\.entry\s+", ptx)[1:]:
        name = entry.split("(", 1)[0].strip()
        if not re.search(kernels, name):
            continue
        if "trap;" in entry and "ld.global" not in entry:
            continue  # a stub for an architecture it does not run on (the cluster kernel below sm_90)
        if not LABEL.search(entry):
            found[name] = -1  # no label in nvcc's form: the split into basic blocks would prove nothing
            continue
        found[name] = max(len(STREAMING_LOAD.findall(block)) for block in BLOCK_EDGE.split(entry))
    return found


def required_loads(source_dir):
    header = os.path.join(source_dir, "kernels", "fused_sampler_row.h")
    with open(header, encoding="utf-8") as f:
        m = re.search(r"constexpr int kLoadsInFlight = (\d+);", f.read())
    if not m:
        sys.exit(f"{header}: no 'constexpr int kLoadsInFlight = N;'")
    return int(m.group(1))


def failures(found, need):
    if not found:
        return ["none of the kernels in the PTX"]
    return [f"{name}: no basic-block label ($L__BB) in its PTX, so its blocks cannot be told apart" if n < 0 else
            f"{name}: at most {n} streaming loads in one basic block, {need} wanted"
            for name, n in sorted(found.items()) if n < need]


def self_test():
    """The check on hand-written PTX: each case's verdict as expected."""
    def kernel(name, body, visible=False):
        return f"\n{'.visible ' if visible else ''}.entry {name}(\n$L__BB0_1:\n{body}"
    load = "\tld.global.cs.v4.u32 {{%r{0}}}, [%rd{0}];\n"
    one = kernel("_Z20fused_sampler_kernelILi256ELi4EE",
                 load.format(1) + "\tadd.f32 %f1, %f2, %f3;\n\t@%p1 bra $L__BB0_1;\n" + load.format(2))
    four = kernel("_Z28fused_sampler_cluster_kernelILi256ELi4EE",
                  "".join(load.format(i) for i in range(4)) + "\t@%p1 bra.uni $L__BB0_1;\n", visible=True)
    split = kernel("_Z20fused_sampler_kernelILi512ELi1EE",  # four loads, but a barrier between two and two
                   load.format(1) + load.format(2) + "\tbar.sync 0;\n" + load.format(3) + load.format(4))
    unlabelled = "\n.entry _Z20fused_sampler_kernelILi256ELi1EE(\n" + "".join(load.format(i) for i in range(4))
    stub = "\n.entry _Z28fused_sampler_cluster_kernelILi256ELi4EE(\n\ttrap;\n"
    cases = [
        ("one load a turn fails", bool(failures(loads_in_flight(one), 4))),
        ("four together pass (.visible, bra.uni)", not failures(loads_in_flight(four), 4)),
        ("a barrier splits them", bool(failures(loads_in_flight(split), 4))),
        ("a kernel without labels fails", bool(failures(loads_in_flight(unlabelled), 4))),
        ("no kernel fails", bool(failures(loads_in_flight("\n.entry _Z5otherv(\n"), 4))),
        ("a stub is left out", loads_in_flight(four + stub) == loads_in_flight(four)),
    ]
    for label, ok in cases:
        print(f"{'ok  ' if ok else 'FAIL'}  {label}")
    ok = all(ok for _, ok in cases)
    print("self-test " + ("passed" if ok else "FAILED"))
    return 0 if ok else 1


def compile_ptx(nvcc, source_dir, source, arch, out_dir):
    """nvcc's PTX of kernels/`source` for `arch`, with the build's defines and the flags that change code generation
    (kernels/CMakeLists.txt)."""
    out = os.path.join(out_dir, f"{source}.{arch}.ptx")
    cmd = [nvcc, "-DSPECULA_HAS_CUDA=1", "-DNDEBUG", "-O3", f"-I{source_dir}", f"-arch={arch}", "--fmad=false",
           "-std=c++17", "-x", "cu", "--ptx", os.path.join(source_dir, "kernels", source), "-o", out]
    run = subprocess.run(cmd, capture_output=True, text=True)
    if run.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({run.returncode}):\n{run.stderr[-4000:]}")
    with open(out, encoding="utf-8") as f:
        return f.read()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--nvcc")
    ap.add_argument("--source-dir")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--self-test", action="store_true")
    a = ap.parse_args()
    if a.self_test:
        return self_test()
    if not a.nvcc or not a.source_dir:
        ap.error("--nvcc and --source-dir are required")
    need = required_loads(a.source_dir)
    bad = []
    with tempfile.TemporaryDirectory() as tmp, concurrent.futures.ThreadPoolExecutor(a.jobs) as pool:
        ptx = pool.map(lambda t: compile_ptx(a.nvcc, a.source_dir, t[0], t[1], tmp), TARGETS)
        for (source, arch, kernels), text in zip(TARGETS, ptx):
            found = loads_in_flight(text, kernels)
            print(f"{source} {arch}: {len(found)} kernels, streaming loads in one basic block: "
                  f"{sorted(set(found.values()))} (kLoadsInFlight = {need})")
            bad += [f"{source} {arch}: {line}" for line in failures(found, need)]
    for line in bad:
        print(line)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
