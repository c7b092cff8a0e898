#!/usr/bin/env bash
# spillway-cu13, the Python package, built and tested the way a user installs it: the sdist from
# python/ (the C++ headers carried inside it), then the wheel built FROM that sdist unpacked in a
# temporary directory outside the repository (so the build cannot reach back into the tree), then
# that wheel installed into a fresh venv and python/tests run against the installed package.
# The extension is compiled once. Needs: python3 with venv and pip (and an index to reach), the
# CUDA 13 toolkit (nvcc from $CUDACXX, PATH or /usr/local/cuda/bin). No root, no scripts/setup.sh:
# cmake and ninja come from PyPI when the machine's are missing or too old.
#
#   bash scripts/python-package.sh          build, then test in a fresh venv (CI runs this)
#   bash scripts/python-package.sh build    only the sdist and the wheel
#
# Output: build-python/dist/spillway_cu13-<version>.tar.gz and spillway_cu13-<version>-<tag>.whl.
# Environment:
#   CUDAARCHS  the wheel's CUDA architectures. Unset: "native", one architecture to keep the build
#              short (the GPU present, 9.0 as 90a; no GPU: 90a). CUDAARCHS=fat: the package's fat
#              default (sm_80 + sm_90a SASS, compute_90 PTX), as a wheel for other machines.
#   PYTHON     the interpreter for the build tools and the test venv (default python3)
#   KEEP=1     keep the temporary directory (unpacked sdist, test venv) and print where it is
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
what=${1:-test}
[[ $what == test || $what == build ]] || { echo "usage: $0 [test|build]" >&2; exit 2; }
PY=${PYTHON:-python3}
case ${CUDAARCHS-native} in
  fat) unset CUDAARCHS ;;
  *) export CUDAARCHS=${CUDAARCHS-native} ;;
esac

out=$repo/build-python/dist
work=$(mktemp -d "${TMPDIR:-/tmp}/spillway-package.XXXXXX")
if [[ ${KEEP:-0} == 1 ]]; then echo "package: keeping $work"; else trap 'rm -rf "$work"' EXIT; fi
rm -f "$out"/spillway_cu13-*
mkdir -p "$out"

# The build frontend (pypa/build) in a venv of its own; it makes an isolated environment for the
# backend (scikit-build-core, nanobind) as pip does.
"$PY" -m venv "$work/tools"
"$work/tools/bin/python" -m pip install -q --disable-pip-version-check build

t0=$SECONDS
"$work/tools/bin/python" -m build -q --sdist --outdir "$out" python
sdist=$(ls "$out"/spillway_cu13-*.tar.gz)
tar -xzf "$sdist" -C "$work"
src=$(ls -d "$work"/spillway_cu13-*/)
echo "package: $(basename "$sdist") unpacked in $src; building the wheel there (CUDAARCHS=${CUDAARCHS:-the fat default})"
"$work/tools/bin/python" -m build --wheel --outdir "$out" "$src"
wheel=$(ls "$out"/spillway_cu13-*.whl)
echo "package: $(basename "$wheel") in $((SECONDS - t0)) s"
[[ $what == build ]] && exit 0

# A fresh venv with only the wheel and its test extras; the tests run from the temporary
# directory, so `import spillway` can only find the installed package.
"$PY" -m venv "$work/venv"
"$work/venv/bin/python" -m pip install -q --disable-pip-version-check "${wheel}[test]"
cd "$work"
"$work/venv/bin/python" -c 'import spillway, sys; spillway.show_config(); sys.exit(not spillway.__file__.startswith(sys.argv[1]))' "$work/venv/"
"$work/venv/bin/python" -m pytest -q -rs -p no:cacheprovider "$repo/python/tests"
