#!/usr/bin/env bash
# Installs what spillway's build, tests and benchmarks need on a fresh Debian 12 machine that has
# the CUDA toolkit (13.x) installed. Idempotent: installs only what is missing.
#   - Debian packages (needs root, or sudo): cmake, ninja-build, g++, libgtest-dev, libbenchmark-dev,
#     python3-venv, clang-14 and libclang-rt-14-dev (libFuzzer, for the fuzz tests), libopenmpi-dev
#     and openmpi-bin (the optional spillway::mpi component and its tests)
#   - a Python venv at .venv with NumPy (used by the tests that prove .npy files round-trip with
#     the real NumPy); nothing is installed into the system Python.
set -euo pipefail
cd "$(dirname "$0")/.."

need_pkgs=()
have_pkg() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }
for p in cmake ninja-build g++ libgtest-dev libbenchmark-dev python3-venv clang-14 libclang-rt-14-dev libopenmpi-dev openmpi-bin; do
  have_pkg "$p" || need_pkgs+=("$p")
done
if ((${#need_pkgs[@]})); then
  SUDO=""
  if [[ $(id -u) -ne 0 ]]; then
    command -v sudo >/dev/null || { echo "setup: need root (or sudo) to apt-get install ${need_pkgs[*]}" >&2; exit 1; }
    SUDO="sudo"
  fi
  echo "setup: installing ${need_pkgs[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need_pkgs[@]}"
fi

# The CUDA toolkit is a prerequisite (spillway is a CUDA library). The CMake presets take nvcc from,
# in order: $CUDACXX, the first nvcc on PATH, /usr/local/cuda/bin/nvcc (the presets append that
# directory to PATH). Say which one the build will use.
if [[ -n "${CUDACXX:-}" ]]; then
  [[ -x "$CUDACXX" ]] || { echo "setup: CUDACXX=$CUDACXX is not an executable nvcc" >&2; exit 1; }
  nvcc_path=$CUDACXX; nvcc_why="from CUDACXX"
elif command -v nvcc >/dev/null; then
  nvcc_path=$(command -v nvcc); nvcc_why="the first nvcc on PATH"
elif [[ -x /usr/local/cuda/bin/nvcc ]]; then
  nvcc_path=/usr/local/cuda/bin/nvcc; nvcc_why="not on PATH; the presets fall back to /usr/local/cuda/bin"
else
  echo "setup: the CUDA toolkit (nvcc) is not installed: install CUDA 13, then put its bin/ on PATH" \
       "or set CUDACXX=/path/to/nvcc" >&2
  exit 1
fi
nvcc_version=$("$nvcc_path" --version | sed -n 's/.*release \([0-9.]*\).*/\1/p')
echo "setup: nvcc $nvcc_path (CUDA ${nvcc_version:-unknown}; $nvcc_why)"

# Python venv with NumPy for the .npy interoperability tests, and what the Python package
# (python/) needs to build and test: nanobind, scikit-build-core, pytest, SciPy, tqdm, ml_dtypes
# (NumPy's bfloat16, for spillway.similarity's bf16 rows).
PY=${PYTHON:-python3}
if [[ ! -x .venv/bin/python ]]; then
  "$PY" -m venv .venv
fi
py_need=()
for m in numpy:numpy nanobind:nanobind scikit_build_core:scikit-build-core pytest:pytest scipy:scipy tqdm:tqdm ml_dtypes:ml_dtypes numba.cuda:numba-cuda; do
  .venv/bin/python -c "import ${m%%:*}" 2>/dev/null || py_need+=("${m#*:}")
done
if ((${#py_need[@]})); then
  .venv/bin/python -m pip install -q --disable-pip-version-check "${py_need[@]}"
fi
echo "setup: ok ($(.venv/bin/python -c 'import numpy; print("numpy", numpy.__version__)'))"
