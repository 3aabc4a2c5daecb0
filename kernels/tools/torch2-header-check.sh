#!/usr/bin/env bash
# Compiles every C++ source of a build (its compile_commands.json) against a LibTorch 2.x with CUDA's headers, as
# C++20 and with the code only a CUDA LibTorch builds (SPECULA_TORCH_CUDA) switched on, syntax only: what a GPU
# machine's torch wheel (a newer LibTorch than Debian bookworm's 1.13) will compile, checked here before a lease.
# The headers are Debian trixie's libtorch-cuda-dev (contrib), fetched once into DIR from deb.debian.org.
#
#   kernels/tools/torch2-header-check.sh [--build build] [--headers DIR] [--jobs N]
#
# Prints each source that does not compile, with its first errors; exits 1 if any does.
set -euo pipefail
cd "$(dirname "$0")/../.."
build=build headers=.torch2-headers jobs=$(nproc)
while (($#)); do
  case "$1" in
    --build) build=$2; shift 2 ;;
    --headers) headers=$2; shift 2 ;;
    --jobs) jobs=$2; shift 2 ;;
    -h|--help) sed -n '2,9p' "$0"; exit 0 ;;
    *) echo "torch2-header-check: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
done
[ -f "$build/compile_commands.json" ] || { echo "torch2-header-check: no $build/compile_commands.json" >&2; exit 1; }
archive=http://deb.debian.org/debian
if [ ! -f "$headers/.unpacked" ]; then
  mkdir -p "$headers"
  # The package's file in the archive, from trixie contrib's index.
  deb=$(curl -fsS "$archive/dists/trixie/contrib/binary-amd64/Packages.xz" | xz -dc |
        awk '/^Package: libtorch-cuda-dev$/ {p = 1} p && !done && /^Filename:/ {print $2; done = 1}')
  [ -n "$deb" ] || { echo "torch2-header-check: trixie contrib has no libtorch-cuda-dev" >&2; exit 1; }
  curl -fsS -o "$headers/libtorch-cuda-dev.deb" "$archive/$deb"
  dpkg -x "$headers/libtorch-cuda-dev.deb" "$headers"
  echo "$deb" > "$headers/.unpacked"
fi
include=$(cd "$headers/usr/include" && pwd)
echo "torch2-header-check: $(cat "$headers/.unpacked"), $(jq length "$build/compile_commands.json" 2>/dev/null ||
  echo some) sources, C++20"
/usr/bin/python3 - "$build/compile_commands.json" "$include" "$jobs" <<'PY'
import concurrent.futures, json, shlex, subprocess, sys
commands, include, jobs = json.load(open(sys.argv[1])), sys.argv[2], int(sys.argv[3])

def check(entry):
    args, out, skip = shlex.split(entry["command"]), [], False
    for a in args:
        if skip:
            skip = False
        elif a in ("-o", "-MF", "-MT"):
            skip = True
        elif a not in ("-MD", "-c") and not a.startswith("-O"):
            out.append("-std=gnu++20" if a.startswith("-std=") else a)
    # The 2.x headers before the system's 1.13 ones; the CUDA-only paths on.
    out[1:1] = ["-isystem", include + "/torch/csrc/api/include", "-isystem", include, "-DSPECULA_TORCH_CUDA"]
    r = subprocess.run(out + ["-fsyntax-only"], cwd=entry["directory"], capture_output=True, text=True)
    problems = [l for l in r.stderr.splitlines() if "error" in l or "warning" in l]
    return entry["file"], r.returncode, problems

sources = {e["file"]: e for e in commands if e["file"].endswith(".cpp")}
failed = 0
with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
    for name, rc, problems in pool.map(check, sources.values()):
        if rc != 0 or problems:
            failed += 1
            print(f"{name}:", *problems[:5], sep="\n  ")
print(f"torch2-header-check: {len(sources) - failed} of {len(sources)} sources compile cleanly")
sys.exit(1 if failed else 0)
PY
