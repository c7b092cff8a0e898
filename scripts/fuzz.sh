#!/usr/bin/env bash
# Builds and runs spillway's coverage-guided fuzz targets (libFuzzer, clang, ASan + UBSan).
#
#   scripts/fuzz.sh run <target> [seconds]   build, then fuzz for `seconds` (default 60) from the
#                                            checked-in corpus and every regression input; exit 1
#                                            on any finding (crash, leak, UB, timeout, OOM), whose
#                                            input is kept in $FUZZ_DIR/findings/<target>/
#   scripts/fuzz.sh replay <target>          run the checked-in corpus and regressions once
#   scripts/fuzz.sh coverage <target> [s]    fuzz `s` seconds (default 60), then report line
#                                            coverage of the parser headers over the corpus found
#   targets: npy (io/npy.hpp), raw (io/raw.hpp + gram::from_packed_bytes),
#            map_shapes (map/signature.hpp, map/shape.hpp)
#
# Environment: CLANGXX (default clang++-14, else clang++), CUDA_HOME (default /usr/local/cuda),
# FUZZ_DIR (build and scratch folder, default build-fuzz). Debian 12: clang-14 and
# libclang-rt-14-dev (scripts/setup.sh installs them). ctest runs `run <target> 60` for each target
# (label "fuzz"); a longer run is the same command with more seconds (docs/reliability.md).
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:?usage: scripts/fuzz.sh run|replay|coverage <target> [seconds]}
target=${2:?target: npy, raw or map_shapes}
secs=${3:-60}
case "$target" in npy|raw|map_shapes) ;; *) echo "fuzz.sh: unknown target '$target' (npy, raw, map_shapes)" >&2; exit 2;; esac
CXX=${CLANGXX:-$(command -v clang++-14 || command -v clang++ || true)}
[[ -n "$CXX" ]] || { echo "fuzz.sh: no clang++ (install clang-14 and libclang-rt-14-dev)" >&2; exit 2; }
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
FUZZ_DIR=${FUZZ_DIR:-build-fuzz}
mkdir -p "$FUZZ_DIR/findings/$target"
src=tests/fuzz/${target}_fuzz.cpp
flags=(-std=c++17 -g -O1 -fno-omit-frame-pointer -fopenmp -Iinclude -I"$CUDA_HOME/include" -I"$CUDA_HOME/include/cccl"
       -L"$CUDA_HOME/lib64" -Wl,-rpath,"$CUDA_HOME/lib64" -lcudart)
# Allocation failures come back as exceptions (the library turns them into out_of_memory by name)
# instead of ASan aborting; leaks are findings.
export ASAN_OPTIONS=${ASAN_OPTIONS:-allocator_may_return_null=1:detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
corpus="$FUZZ_DIR/corpus/$target"
fuzz_args=(-timeout=10 -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$FUZZ_DIR/findings/$target/")

build() {  # $1: binary, rest: extra flags
  local bin=$1; shift
  if [[ ! -x "$bin" || "$bin" -ot "$src" || -n "$(find include/spillway -newer "$bin" -name '*.hpp' -print -quit)" ]]; then
    "$CXX" "$@" "${flags[@]}" "$src" -o "$bin"
  fi
}

case "$mode" in
  run)
    build "$FUZZ_DIR/${target}_fuzz" -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all
    rm -rf "$corpus" && mkdir -p "$corpus" && cp tests/fuzz/corpus/"$target"/* "$corpus"/
    # Regressions first, as plain inputs: each must pass before fuzzing starts.
    if compgen -G "tests/fuzz/regressions/$target/*" >/dev/null; then
      "$FUZZ_DIR/${target}_fuzz" "${fuzz_args[@]}" tests/fuzz/regressions/"$target"/* 2>&1 | tail -n 3
    fi
    log="$FUZZ_DIR/${target}.log"
    set +e
    regress=()
    [[ -d tests/fuzz/regressions/$target ]] && regress=(tests/fuzz/regressions/"$target")
    "$FUZZ_DIR/${target}_fuzz" "${fuzz_args[@]}" -max_total_time="$secs" "$corpus" "${regress[@]}" >"$log" 2>&1
    rc=$?
    set -e
    grep -E "^#[0-9]+ +DONE|stat::number_of_executed_units|stat::peak_rss_mb|_fuzz: |ERROR|SUMMARY" "$log" || true
    echo "fuzz $target: $(grep -c . <(ls "$corpus")) corpus files after ${secs} s, exit $rc"
    if ((rc != 0)); then echo "fuzz $target: FINDING; input kept in $FUZZ_DIR/findings/$target/ (log $log)" >&2; exit 1; fi
    ;;
  replay)
    build "$FUZZ_DIR/${target}_fuzz" -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all
    shopt -s nullglob
    "$FUZZ_DIR/${target}_fuzz" "${fuzz_args[@]}" tests/fuzz/corpus/"$target"/* tests/fuzz/regressions/"$target"/* 2>&1 | tail -n 2
    ;;
  coverage)
    build "$FUZZ_DIR/${target}_fuzz" -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all
    rm -rf "$corpus" && mkdir -p "$corpus" && cp tests/fuzz/corpus/"$target"/* "$corpus"/
    "$FUZZ_DIR/${target}_fuzz" "${fuzz_args[@]}" -max_total_time="$secs" "$corpus" >/dev/null 2>&1
    cov_bin="$FUZZ_DIR/${target}_fuzz_cov"
    "$CXX" -fsanitize=fuzzer -fprofile-instr-generate -fcoverage-mapping "${flags[@]}" "$src" -o "$cov_bin"
    LLVM_PROFILE_FILE="$FUZZ_DIR/${target}.profraw" "$cov_bin" -runs=0 "$corpus" >/dev/null 2>&1
    profdata=$(command -v llvm-profdata-14 || command -v llvm-profdata)
    llvmcov=$(command -v llvm-cov-14 || command -v llvm-cov)
    "$profdata" merge -sparse "$FUZZ_DIR/${target}.profraw" -o "$FUZZ_DIR/${target}.profdata"
    case "$target" in
      npy) files=(include/spillway/io/npy.hpp);;
      raw) files=(include/spillway/io/raw.hpp include/spillway/gram/bit_matrix.hpp);;
      map_shapes) files=(include/spillway/map/signature.hpp include/spillway/map/shape.hpp);;
    esac
    "$llvmcov" report "$cov_bin" -instr-profile="$FUZZ_DIR/${target}.profdata" "${files[@]}"
    echo "fuzz $target: corpus $(ls "$corpus" | wc -l) files after ${secs} s"
    ;;
  *) echo "fuzz.sh: unknown mode '$mode' (run, replay, coverage)" >&2; exit 2;;
esac
