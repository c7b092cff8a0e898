#!/usr/bin/env bash
# Installs what spillway's build, tests and benchmarks need on a fresh Debian 12 machine that has
# the CUDA toolkit (13.x) installed. Idempotent: installs only what is missing.
#   - Debian packages (needs root, or sudo): cmake, ninja-build, g++, libgtest-dev, libbenchmark-dev,
#     python3-venv
#   - a Python venv at .venv with NumPy (used by the tests that prove .npy files round-trip with
#     the real NumPy); nothing is installed into the system Python.
set -euo pipefail
cd "$(dirname "$0")/.."

need_pkgs=()
have_pkg() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }
for p in cmake ninja-build g++ libgtest-dev libbenchmark-dev python3-venv; do
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

# The CUDA toolkit is a prerequisite (spillway is a CUDA library); find nvcc.
if ! command -v nvcc >/dev/null; then
  if [[ -x /usr/local/cuda/bin/nvcc ]]; then
    echo "setup: nvcc is at /usr/local/cuda/bin (add it to PATH; the CMake presets find it there)"
  else
    echo "setup: the CUDA toolkit (nvcc) is not installed; install CUDA 13 first" >&2
    exit 1
  fi
fi

# Python venv with NumPy for the .npy interoperability tests.
PY=${PYTHON:-python3}
if [[ ! -x .venv/bin/python ]]; then
  "$PY" -m venv .venv
fi
if ! .venv/bin/python -c "import numpy" 2>/dev/null; then
  .venv/bin/python -m pip install -q --disable-pip-version-check numpy
fi
echo "setup: ok ($(.venv/bin/python -c 'import numpy; print("numpy", numpy.__version__)'))"
