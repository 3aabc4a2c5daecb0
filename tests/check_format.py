#!/usr/bin/env python3
"""The formatting rule: every C++ and CUDA source is as clang-format leaves it under the committed
.clang-format. Names the files that differ; `clang-format -i FILE` fixes one.

Usage: check_format.py CLANG_FORMAT REPOSITORY_ROOT
       check_format.py CLANG_FORMAT --self-test   (a misformatted snippet is reported: a check that cannot fail
                                                   is a defect)
"""
import os
import re
import subprocess
import sys

FOLDERS = ["kernels", "verify", "draft", "harness", "tests"]
SOURCE = re.compile(r"\.(h|hpp|cpp|cc|cu|cuh)$")
DIAGNOSTIC = "code should be clang-formatted"


def differing(clang_format, paths, root):
    """The paths clang-format would change (one process for all: its diagnostics name the files)."""
    run = subprocess.run([clang_format, "--dry-run", "--style=file"] + paths, cwd=root, capture_output=True,
                         text=True)
    if run.returncode != 0:
        raise SystemExit(f"format: {clang_format} failed: {run.stderr.strip()}")
    return sorted({line.split(":", 1)[0] for line in run.stderr.splitlines() if DIAGNOSTIC in line})


def self_test(clang_format):
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    run = subprocess.run([clang_format, "--dry-run", "--style=file", "--assume-filename=x.cpp"],
                         input="int   f( int x ){return x;}\n", capture_output=True, text=True, cwd=root)
    if DIAGNOSTIC not in run.stderr:
        print("format self-test: a misformatted snippet was not reported")
        return 1
    print("format self-test: a misformatted snippet is reported")
    return 0


def main():
    if len(sys.argv) != 3:
        print(__doc__)
        return 2
    clang_format = sys.argv[1]
    if sys.argv[2] == "--self-test":
        return self_test(clang_format)
    root = os.path.abspath(sys.argv[2])
    paths = []
    for top in FOLDERS:
        for dirpath, dirnames, filenames in os.walk(os.path.join(root, top)):
            dirnames.sort()
            paths += [os.path.relpath(os.path.join(dirpath, n), root) for n in sorted(filenames) if SOURCE.search(n)]
    bad = differing(clang_format, paths, root)
    for path in bad:
        print(f"{path}: not clang-formatted (clang-format -i {path})")
    if bad:
        print(f"format: {len(bad)} of {len(paths)} sources differ from .clang-format")
        return 1
    print(f"format: {len(paths)} sources as .clang-format leaves them")
    return 0


if __name__ == "__main__":
    sys.exit(main())
