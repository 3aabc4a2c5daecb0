#!/usr/bin/env bash
# Installs the Debian bookworm packages Specula needs, only those that are missing, then configures and
# builds the project. Safe to run again: with everything present it only (re)builds.
#   ./setup.sh            install + build (Release) into build/
#   SPECULA_BUILD_DIR=dir ./setup.sh
set -euo pipefail
cd "$(dirname "$0")"

packages=(
  cmake g++ ninja-build
  libtorch-dev
  libopenblas0-openmp        # not optional: reference BLAS makes LibTorch 2-6x slower
  libeigen3-dev
  libboost-program-options-dev libboost-math-dev
  libboost-context-dev       # fibers: the CUDA kernels' row code run with block semantics (--device cuda-host)
  catch2 libbenchmark-dev nlohmann-json3-dev
  python3 python3-matplotlib
  libsentencepiece-dev sentencepiece libicu-dev  # hf: tokenizers (tokenizer.model, tokenizer.json regexes)
  python3-torch python3-regex                    # the [hf] tests' independent PyTorch / GPT-2 BPE references
  clang-format                                   # the format check (ctest -R format)
  slurm-wlm munge                                # the Slurm test (ctest -L slurm): a one-node cluster on localhost
)
sudo_cmd=""; [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"  # also for the BLAS choice below, on a machine set up before
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}" >&2
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
fi

# LibTorch must see OpenBLAS (OpenMP flavour), not the reference BLAS that libtorch-dev pulls in.
if command -v update-alternatives >/dev/null; then
  # gcc knows the multiarch triplet (dpkg-architecture is in dpkg-dev, which is not installed).
  arch=$(gcc -print-multiarch 2>/dev/null || true)
  [ -n "$arch" ] || arch=$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || echo x86_64-linux-gnu)
  for lib in libblas.so.3 liblapack.so.3; do
    alt=$(update-alternatives --list "${lib}-${arch}" 2>/dev/null | grep openblas-openmp | head -n1 || true)
    # Already chosen: nothing to do (and no sudo password asked on a re-run).
    current=$(update-alternatives --query "${lib}-${arch}" 2>/dev/null | sed -n 's/^Value: //p' || true)
    [ -n "$alt" ] && [ "$current" = "$alt" ] && continue
    if [ -z "$alt" ] || ! $sudo_cmd update-alternatives --set "${lib}-${arch}" "$alt" >/dev/null 2>&1; then
      echo "setup: warning: could not point ${lib}-${arch} at OpenBLAS (OpenMP); LibTorch will run 2-6x slower" >&2
    fi
  done
fi

build_dir=${SPECULA_BUILD_DIR:-build}
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=${CMAKE_BUILD_TYPE:-Release} >&2
cmake --build "$build_dir" -j "$(nproc)" >&2
