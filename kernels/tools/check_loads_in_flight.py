#!/usr/bin/env python3
"""ctest cuda_loads_in_flight: the fused sampler's pass 1 keeps kLoadsInFlight loads of a row in flight per thread.

for_each_loaded_vec (kernels/fused_sampler_row.h) loads a thread's vectors kLoadsInFlight at a time before it uses
the first: a row is read at HBM speed only with that many bytes in flight. Whether the compiler kept them together
is a property of the generated code, not of the source, so this compiles sampler_kernels.cu to PTX for each
architecture and asks, of every fused sampler kernel, for one basic block (the code between two labels or branches)
holding at least kLoadsInFlight streaming loads (ld.global.cs: the read-once inputs, load_vec_once). A loop that
loads one vector and processes it holds one, as before the batching did.

Usage: check_loads_in_flight.py --nvcc NVCC --source-dir DIR [--arch sm_80 --arch sm_90]
       check_loads_in_flight.py --self-test
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile

KERNEL = re.compile(r"fused_sampler_(?:group_|cluster_)?kernel")
# A basic block ends at a label or a branch.
BLOCK_EDGE = re.compile(r"\n\$L__BB\d+_\d+:|\n\s*(?:@!?%p\d+\s+)?bra(?:\.uni)?\s")
STREAMING_LOAD = re.compile(r"\bld\.global\.cs\.")


def loads_in_flight(ptx):
    """{kernel entry name: the most streaming loads in one of its basic blocks}."""
    found = {}
    for entry in re.split(r"(?:^|\n)(?:\.visible\s+)?\.entry\s+", ptx)[1:]:
        name = entry.split("(", 1)[0].strip()
        if not KERNEL.search(name):
            continue
        if "trap;" in entry and "ld.global" not in entry:
            continue  # a stub for an architecture it does not run on (the cluster kernel below sm_90)
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
        return ["no fused sampler kernel in the PTX"]
    return [f"{name}: at most {n} streaming loads in one basic block, {need} wanted"
            for name, n in sorted(found.items()) if n < need]


def self_test():
    # A loop that loads one vector a turn fails; one that loads four before using them passes; a PTX without the
    # kernels fails; a stub (trap, no loads) is left out.
    one = ".entry _Z20fused_sampler_kernelILi256ELi4EE(\n$L__BB0_1:\n\tld.global.cs.v4.u32 {%r1}, [%rd1];\n" \
          "\tadd.f32 %f1, %f2, %f3;\n\t@%p1 bra $L__BB0_1;\n"
    four = ".entry _Z28fused_sampler_cluster_kernelILi256ELi4EE(\n$L__BB0_1:\n" + \
           "".join(f"\tld.global.cs.v4.u32 {{%r{i}}}, [%rd{i}];\n" for i in range(4)) + "\t@%p1 bra $L__BB0_1;\n"
    stub = "\n.entry _Z28fused_sampler_cluster_kernelILi256ELi4EE(\n\ttrap;\n"
    ok = bool(failures(loads_in_flight(one), 4)) and not failures(loads_in_flight(four), 4) and \
        bool(failures(loads_in_flight(".entry _Z5otherv(\n"), 4)) and loads_in_flight(four + stub) == \
        loads_in_flight(four)
    print("self-test " + ("passed" if ok else "FAILED"))
    return 0 if ok else 1


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--nvcc")
    ap.add_argument("--source-dir")
    ap.add_argument("--arch", action="append")
    ap.add_argument("--self-test", action="store_true")
    a = ap.parse_args()
    if a.self_test:
        return self_test()
    if not a.nvcc or not a.source_dir:
        ap.error("--nvcc and --source-dir are required")
    need = required_loads(a.source_dir)
    bad = []
    with tempfile.TemporaryDirectory() as tmp:
        for arch in a.arch or ["sm_80", "sm_90"]:
            ptx_path = os.path.join(tmp, f"sampler_kernels.{arch}.ptx")
            # The build's defines and flags that change code generation (kernels/CMakeLists.txt).
            cmd = [a.nvcc, "-DSPECULA_HAS_CUDA=1", "-DNDEBUG", "-O3", f"-I{a.source_dir}", f"-arch={arch}",
                   "--fmad=false", "-std=c++17", "-x", "cu", "--ptx",
                   os.path.join(a.source_dir, "kernels", "sampler_kernels.cu"), "-o", ptx_path]
            run = subprocess.run(cmd, capture_output=True, text=True)
            if run.returncode != 0:
                sys.exit(f"{' '.join(cmd)} failed ({run.returncode}):\n{run.stderr[-4000:]}")
            with open(ptx_path, encoding="utf-8") as f:
                found = loads_in_flight(f.read())
            print(f"{arch}: {len(found)} fused sampler kernels, streaming loads in one basic block: "
                  f"{sorted(set(found.values()))} (kLoadsInFlight = {need})")
            bad += [f"{arch}: {line}" for line in failures(found, need)]
    for line in bad:
        print(line)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
