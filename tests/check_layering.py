#!/usr/bin/env python3
"""The layering rule: one folder = one library = one layer, and nothing includes upward.

Reads every #include "..." of the sources under the layered folders and fails, naming file, line and the
included header, when a folder includes one it may not. LAYERS below is the whole rule, bottom up: a folder
may include its own headers and those of the folders listed for it, nothing else. It also fails when a
source folder is missing from the table (a new folder states its layer here) or when the table has a cycle.

Usage: check_layering.py [REPOSITORY_ROOT]
       check_layering.py --self-test   (shows the check fails on an upward include, an unlisted folder and a
                                        cycle: a check that cannot fail is a defect)
"""
import os
import re
import sys
import tempfile

# folder: the folders it may include (directly). Bottom up; README.md "Architecture" draws the same picture.
LAYERS = {
    "kernels/shared": [],
    "kernels": ["kernels/shared"],
    "verify/constraints": ["kernels/shared"],
    "verify/sampling": ["kernels/shared", "verify/constraints"],
    "verify/verifiers": ["kernels/shared", "verify/sampling"],
    "verify/device": ["kernels/shared", "kernels", "verify/sampling", "verify/verifiers"],
    "harness/io": ["kernels/shared"],
    "harness/config": ["kernels/shared", "kernels", "verify/sampling", "harness/io"],
    "harness/models": ["kernels/shared", "verify/sampling", "verify/verifiers", "harness/io"],
    "harness/models/transformer": ["kernels/shared", "verify/sampling", "verify/verifiers", "harness/io",
                                   "harness/models"],
    "harness/models/hf": ["kernels/shared", "verify/sampling", "harness/io", "harness/models",
                          "harness/models/transformer"],
    "harness/models/registry": ["kernels/shared", "harness/io", "harness/models", "harness/models/transformer",
                                "harness/models/hf"],
    "draft": ["kernels/shared", "verify/constraints", "verify/sampling", "verify/verifiers", "verify/device",
              "harness/io", "harness/models"],
    "draft/heads": ["kernels/shared", "verify/sampling", "verify/verifiers", "harness/io", "harness/models",
                    "harness/models/transformer", "draft"],
    "draft/registry": ["kernels/shared", "verify/sampling", "harness/models", "harness/models/registry", "draft",
                       "draft/heads"],
    "harness/generation": ["kernels/shared", "kernels", "verify/constraints", "verify/sampling", "verify/verifiers",
                           "verify/device", "harness/models", "draft"],
    "harness/experiment": ["kernels/shared", "kernels", "verify/constraints", "verify/sampling", "verify/verifiers",
                           "harness/io", "harness/config", "harness/models", "harness/generation"],
    "harness/runner": ["kernels/shared", "kernels", "verify/constraints", "verify/sampling", "verify/verifiers",
                       "verify/device", "harness/io",
                       "harness/config", "harness/models", "harness/models/transformer", "harness/models/registry",
                       "draft", "draft/registry", "harness/generation", "harness/experiment"],
    "harness/train": ["kernels/shared", "verify/sampling", "harness/io", "harness/config", "harness/models",
                      "harness/models/transformer", "draft/heads"],
    "harness/bench": ["kernels/shared", "kernels", "verify/constraints", "verify/sampling", "verify/verifiers",
                      "harness/io", "harness/config", "harness/models/transformer", "harness/experiment"],
    "harness/cli": ["kernels/shared", "kernels", "verify/constraints", "verify/sampling", "verify/verifiers",
                    "verify/device", "harness/io", "harness/config", "harness/models", "harness/models/transformer",
                    "harness/models/hf", "harness/models/registry", "draft", "draft/heads", "draft/registry",
                    "harness/generation", "harness/experiment", "harness/runner", "harness/train",
                    "harness/bench"],
    # Test-only libraries: the statistics and the mutant switch. No production folder may include them.
    "tests/statistics": ["kernels/shared"],
    "tests/support": ["kernels/shared"],
}
SOURCE_ROOTS = ["kernels", "verify", "draft", "harness", "tests/statistics", "tests/support"]
SOURCE = re.compile(r"\.(h|hpp|cpp|cc|cu|cuh)$")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def cycle_in(layers):
    """A cycle of the table as a list of folders, or None."""
    state = {}

    def visit(folder, path):
        state[folder] = "open"
        for dep in layers.get(folder, []):
            if state.get(dep) == "open":
                return path[path.index(dep):] + [dep] if dep in path else [folder, dep]
            if dep not in state:
                found = visit(dep, path + [dep])
                if found:
                    return found
        state[folder] = "done"
        return None

    for folder in layers:
        if folder not in state:
            found = visit(folder, [folder])
            if found:
                return found
    return None


def violations(root, layers):
    """Every breach of `layers` by the sources under `root`, as messages."""
    errors = []
    for folder, deps in layers.items():
        for dep in deps:
            if dep not in layers:
                errors.append(f"tests/check_layering.py: {folder} lists {dep}, which is not a layer")
    cycle = cycle_in(layers)
    if cycle:
        errors.append("tests/check_layering.py: the layers form a cycle: " + " -> ".join(cycle))
    checked = 0
    for top in SOURCE_ROOTS:
        for dirpath, dirnames, filenames in os.walk(os.path.join(root, top)):
            dirnames[:] = sorted(d for d in dirnames if d not in ("tools", "__pycache__"))
            folder = os.path.relpath(dirpath, root)
            sources = sorted(f for f in filenames if SOURCE.search(f))
            if not sources:
                continue
            if folder not in layers:
                errors.append(f"{folder}/: a source folder with no layer in tests/check_layering.py")
                continue
            allowed = set(layers[folder]) | {folder}
            for name in sources:
                path = os.path.join(dirpath, name)
                with open(path, encoding="utf-8") as f:
                    for number, line in enumerate(f, 1):
                        match = INCLUDE.match(line)
                        if not match:
                            continue
                        header = match.group(1)
                        target = os.path.dirname(header)
                        checked += 1
                        if target not in allowed:
                            errors.append(f"{folder}/{name}:{number}: includes {header}: {folder} may include only "
                                          + ", ".join(sorted(allowed)))
    return errors, checked


def self_test():
    """The check on a small tree with known breaches finds exactly those."""
    with tempfile.TemporaryDirectory() as root:
        def write(path, text):
            os.makedirs(os.path.dirname(os.path.join(root, path)), exist_ok=True)
            with open(os.path.join(root, path), "w", encoding="utf-8") as f:
                f.write(text)
        write("kernels/shared/math.h", "#pragma once\n")
        write("verify/sampling/ok.cpp", '#include "kernels/shared/math.h"\n#include <vector>\n')
        write("verify/sampling/up.cpp", '#include "verify/sampling/ok.h"\n  #  include "harness/generation/generator.h"\n')
        write("verify/unlisted/x.cpp", "int x;\n")
        errors, _ = violations(root, LAYERS)
        expected = ["verify/sampling/up.cpp:2: includes harness/generation/generator.h",
                    "verify/unlisted/: a source folder with no layer"]
        found = [e for e in errors if any(e.startswith(x) for x in expected)]
        if len(found) != 2 or len(errors) != 2:
            print("self-test: expected exactly", expected, "got", errors)
            return 1
        cyclic = dict(LAYERS)
        cyclic["kernels/shared"] = ["verify/sampling"]
        errors, _ = violations(root, cyclic)
        if not any("form a cycle" in e for e in errors):
            print("self-test: a cycle kernels/shared -> verify/sampling -> kernels/shared was not reported:", errors)
            return 1
    print("layering self-test: an upward include, an unlisted folder and a cycle are each reported")
    return 0


def main():
    if sys.argv[1:] == ["--self-test"]:
        return self_test()
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), ".."))
    errors, checked = violations(root, LAYERS)
    for error in errors:
        print(error)
    if errors:
        print(f"layering: {len(errors)} violation(s)")
        return 1
    print(f"layering: {checked} includes in {len(LAYERS)} layers, none upward")
    return 0


if __name__ == "__main__":
    sys.exit(main())
