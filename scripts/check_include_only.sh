#!/usr/bin/env bash
# Proves the headers work by include path alone, as for a user with no CMake: compiles each given
# source with nothing but `nvcc -std=c++17 --extended-lambda -I include` (CCCL comes with nvcc).
# Device code is compiled to PTX only (no ptxas): what is checked is that the headers are found and
# compile, and that keeps this test at about a minute on two cores.
#   usage: check_include_only.sh [--nvcc PATH] [--out DIR] SOURCE...
#   e.g.:  bash scripts/check_include_only.sh examples/timing.cu examples/gram.cu
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
nvcc="${NVCC:-nvcc}"
out="${TMPDIR:-/tmp}/spillway_include_only.$$"
srcs=()
while (($#)); do
  case "$1" in
    --nvcc) nvcc="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    -h|--help) sed -n '2,7p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) srcs+=("$1"); shift ;;
  esac
done
((${#srcs[@]})) || { echo "check_include_only: no sources given (try --help)" >&2; exit 2; }
mkdir -p "$out"
failed=0
for src in "${srcs[@]}"; do
  [[ "$src" = /* ]] || src="$root/$src"
  obj="$out/$(basename "$src").o"
  if "$nvcc" -std=c++17 --extended-lambda -I "$root/include" \
      -gencode=arch=compute_90a,code=compute_90a -c "$src" -o "$obj"; then
    echo "ok      $src"
  else
    echo "FAILED  $src (compiled with only -I include)"
    failed=$((failed + 1))
  fi
done
echo "${#srcs[@]} sources, $failed failed, compiled with only -I $root/include"
((failed == 0))
