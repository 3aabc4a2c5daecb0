#!/usr/bin/env bash
# Builds what the GPU checks need on a GPU machine, against that machine's own LibTorch: the one in its Python's
# torch wheel (which holds a full CUDA LibTorch), with the other dependencies carried as Debian packages.
#
#   Here (a Debian machine with network):
#     kernels/tools/gpu-build.sh --collect .gpu-debs       # apt-get download the packages of gpu-debs.txt
#   There (nvcc and a Python whose torch has CUDA; no network), with .gpu-debs carried:
#     kernels/tools/gpu-build.sh [--debs .gpu-debs] [--build build-gpu] [--python PY] [--jobs N] [--configure-only]
#     kernels/tools/gpu-check.sh --build build-gpu
#
# The build mode unpacks the .deb files into BUILD-deps (dpkg -x, once), finds LibTorch's CMake package with
# `PY -c 'import torch; print(torch.utils.cmake_prefix_path)'`, checks that torch was built with CUDA and uses its
# C++ ABI, configures with CMake (Ninja, Release) and builds specula, its LibTorch module, specula_gpu_tests and
# specula_kernel_host_tests, its kernels for the machine's own GPU only (nvidia-smi's compute capability; sm_80 and
# sm_90 where it cannot tell). It prints `export LD_LIBRARY_PATH=...` for running them. --configure-only stops after
# CMake (and accepts a torch without CUDA), which is how the script is checked on a machine without a GPU.
set -euo pipefail
cd "$(dirname "$0")/../.."

debs=.gpu-debs build=build-gpu python="" jobs=$(nproc) configure_only=0 collect=""
while (($#)); do
  case "$1" in
    --collect) collect=$2; shift 2 ;;
    --debs) debs=$2; shift 2 ;;
    --build) build=$2; shift 2 ;;
    --python) python=$2; shift 2 ;;
    --jobs) jobs=$2; shift 2 ;;
    --configure-only) configure_only=1; shift ;;
    -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
    *) echo "gpu-build: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
done
list=kernels/tools/gpu-debs.txt
packages=$(sed 's/#.*//' "$list" | tr -s ' \t' '\n' | sed '/^$/d')

if [ -n "$collect" ]; then
  mkdir -p "$collect"
  (cd "$collect" && for p in $packages; do
    ls "${p}"_*.deb >/dev/null 2>&1 || apt-get download -q "$p" >/dev/null 2>&1 || { echo "gpu-build: cannot download $p" >&2; exit 1; }
  done)
  echo "gpu-build: $(ls "$collect"/*.deb | wc -l) packages in $collect ($(du -sh "$collect" | cut -f1)); carry it to the GPU machine"
  exit 0
fi

fail() { echo "gpu-build: $*" >&2; exit 1; }
command -v nvcc >/dev/null || [ -x /usr/local/cuda/bin/nvcc ] || fail "no nvcc on PATH or in /usr/local/cuda/bin"
command -v cmake >/dev/null || fail "no cmake"
command -v ninja >/dev/null || fail "no ninja"
if [ -z "$python" ]; then
  for p in python3 /opt/torch/.venv/bin/python; do
    "$p" -c 'import torch' 2>/dev/null && { python=$p; break; }
  done
fi
[ -n "$python" ] || fail "no Python with torch found (give --python PY)"
torch_prefix=$("$python" -c 'import torch; print(torch.utils.cmake_prefix_path)') || fail "$python cannot import torch"
torch_cuda=$("$python" -c 'import torch; print(torch.version.cuda or "")')
torch_abi=$("$python" -c 'import torch; print(int(torch._C._GLIBCXX_USE_CXX11_ABI))')
echo "gpu-build: torch $("$python" -c 'import torch; print(torch.__version__)') (CUDA ${torch_cuda:-none}," \
  "C++11 ABI $torch_abi) from $torch_prefix"
[ -n "$torch_cuda" ] || [ "$configure_only" = 1 ] || fail "$python's torch has no CUDA: the GPU checks need a CUDA LibTorch"

# The carried packages, unpacked once into a private prefix.
[ -d "$debs" ] || fail "no folder $debs (collect it here with --collect $debs, and carry it)"
# Beside the build folder, not inside the carried one: what travels to the machine stays the .deb files alone.
mkdir -p "${build%/}-deps"
prefix=$(cd "${build%/}-deps" && pwd)
if [ ! -f "$prefix/.unpacked" ]; then
  for p in $packages; do
    deb=$(ls "$debs/${p}"_*.deb 2>/dev/null | head -n1)
    [ -n "$deb" ] || fail "$debs has no ${p}_*.deb (collect it with --collect $debs)"
    dpkg -x "$deb" "$prefix"
  done
  touch "$prefix/.unpacked"
fi
multiarch=x86_64-linux-gnu
lib=$prefix/usr/lib/$multiarch
export PKG_CONFIG_PATH=$lib/pkgconfig:$prefix/usr/share/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}
export PKG_CONFIG_SYSROOT_DIR=""
export LD_LIBRARY_PATH=$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
# The .pc files name /usr; point them at the prefix.
for pc in "$lib"/pkgconfig/*.pc "$prefix"/usr/share/pkgconfig/*.pc; do
  [ -f "$pc" ] && sed -i -E "s|^prefix *= */usr\$|prefix=$prefix/usr|" "$pc"
done
pkgconfig=$(command -v pkg-config || echo "$prefix/usr/bin/pkgconf")

# The C++ standard torch's headers accept: C++17, unless they refuse anything older than C++20 (newer LibTorch
# releases do, with an #error naming it).
torch_include=$("$python" -c 'import os, torch; print(os.path.join(os.path.dirname(torch.__file__), "include"))')
cxx_standard=17
if grep -rqsE --include='*.h' 'C\+\+20 or later compatible compiler is required' "$torch_include/c10" "$torch_include/ATen" \
    "$torch_include/torch/csrc/api/include/torch" 2>/dev/null; then
  cxx_standard=20
fi
echo "gpu-build: C++$cxx_standard (torch's headers under $torch_include)"

# The GPU's compute capability (9.0 -> 90), so that nvcc compiles the kernels once.
arch=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -n1 | tr -d ' .' || true)
[[ "$arch" =~ ^[0-9]+$ ]] || arch="80;90"
echo "gpu-build: CUDA architectures $arch"
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DSPECULA_CUDA_ARCHITECTURES="$arch" \
  -DCMAKE_PREFIX_PATH="$torch_prefix;$prefix/usr;$lib/cmake" \
  -DCMAKE_INCLUDE_PATH="$prefix/usr/include" -DCMAKE_LIBRARY_PATH="$lib" \
  -DBoost_NO_SYSTEM_PATHS=ON -DBoost_ROOT="$prefix/usr" \
  -DPKG_CONFIG_EXECUTABLE="$pkgconfig" \
  -DCMAKE_CXX_FLAGS="-D_GLIBCXX_USE_CXX11_ABI=$torch_abi" -DCMAKE_CXX_STANDARD="$cxx_standard" \
  -DCMAKE_BUILD_RPATH="$lib"
[ "$configure_only" = 1 ] && { echo "gpu-build: configured $build"; exit 0; }
cmake --build "$build" -j "$jobs" --target specula specula_torch specula_gpu_tests specula_kernel_host_tests
echo "gpu-build: built into $build; to run its programs: export LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
