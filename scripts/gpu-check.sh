#!/usr/bin/env bash
# GPU check for spillway: run on the lent GPU machine over binaries built here.
#
#   scripts/gpu-check.sh pack [targets...]      (here, no GPU needed) build the "gpu" preset (sm_90a)
#                                              and copy test/bench binaries + libbenchmark into gpubin/
#   scripts/gpu-check.sh tests [module...]      (GPU machine) every test binary, SPILLWAY_REQUIRE_GPU=1:
#                                              a skipped GPU test is a failure; prints how many GPU tests ran
#   scripts/gpu-check.sh sanitizer [module...]  (GPU machine) compute-sanitizer memcheck over the GPU
#                                              tests, racecheck over the modules with shared-memory kernels
#   scripts/gpu-check.sh bench [name...]        (GPU machine) benchmarks, medians of repetitions, JSON to
#                                              $OUT (or gpubin/results), a short table last
#   scripts/gpu-check.sh python                 (GPU machine) build the Python package (python/) for sm_90a
#                                              with that machine's python3 into /tmp/spillway-site, then
#                                              pytest python/tests with SPILLWAY_REQUIRE_GPU=1 (a skip fails);
#                                              PY_WHEEL=path.whl installs a wheel carried there instead of
#                                              building (~3 min of device time saved)
#   scripts/gpu-check.sh python-bench           (GPU machine) the same build, then python/benchmarks/
#                                              gram_topk_bench.py: Python vs C++ vs torch._int_mm top-32
#                                              (PY_BENCH=matmul_bench.py: spillway.matmul vs the PyTorch route)
#                                              (PY_BENCH=similarity_bench.py: spillway.similarity top-32 of 10^6 x 768
#                                              bf16 vs the C++ call; PY_BENCH_ARGS="--torch" adds the PyTorch route)
#   scripts/gpu-check.sh python-wheel           (GPU machine) a fat spillway-cu13 wheel (the package's default
#                                              architectures) built with that machine's build tools, installed
#                                              --no-index from the folder into a fresh venv (system packages
#                                              visible), show_config, then python/tests from it (a skip fails)
#   scripts/gpu-check.sh knn                    (GPU machine) spillway-knn, 10^6 x 768 bf16 top-32 cosine (medians
#                                              of 3 after a warm-up; rows page-locked, pageable, staged; on
#                                              GPUs 0,1 too where two are visible) against the PyTorch
#                                              blocked baseline on the same rows
#   scripts/gpu-check.sh knn-scale              (GPU machine) issue 34's scale rows with spillway-knn's own rows:
#                                              10^6 x 768 bf16 clustered (10,000 centres) top-32 on one GPU and
#                                              on GPUs 0,1; 10^7 x 768 on GPUs 0,1 (the median of KNN_SCALE_REPEAT
#                                              = 3 calls after a warm-up, ~5.5 min; 1: one cold call with phases;
#                                              KNN_SCALE_ROWS, KNN_CLUSTER_ROWS); sampled rows checked, phases
#   scripts/gpu-check.sh fingerprints           (GPU machine) issue 34's ChEMBL-size search: spillway-gram --fingerprints
#                                              1940000 (FP_ROWS), Tanimoto >= 0.7, both halves, as CSR (--csr, the .npz
#                                              read back by SciPy) and as COO, medians of 3 after a warm-up; the
#                                              first 20,000 rows (FP_SUBSET) against NumPy's integer test
#   scripts/gpu-check.sh ode-baseline           (GPU machine) spillway_ode_bench (the DiffEqGPU Lorenz ensemble,
#                                              one GPU) and benchmarks/ode_diffrax_baseline.py (diffrax's Dopri5
#                                              under jax.vmap, same problem) in one call (DIFFRAX_ARGS: more
#                                              arguments, e.g. "--modes adaptive32,adaptive64 --check 20000")
#   scripts/gpu-check.sh gemm-alt               (GPU machine) spillway_gemm_bench --alternations: per GEMM type at
#                                              8192³, 20 alternated pairs of spillway (automatic) and cuBLAS(Lt),
#                                              medians, spreads, SM clock / power / temperature (NVML)
#                                              (GEMM_ALTERNATIONS, GEMM_ALTERNATION_SIZE, GEMM_ALTERNATION_TYPES:
#                                              a comma list such as e4m3,e4m3f; default every type)
#   scripts/gpu-check.sh all                    tests, sanitizer, bench (may exceed one 10-minute command)
#   scripts/gpu-check.sh mpi                    (GPU machine) spillway::dist under mpirun: the GPU tests and the
#                                              host MPI tests with -np 1, then -np 2 (one GPU per rank: skipped
#                                              with the reason on a one-GPU machine, a failure when
#                                              SPILLWAY_REQUIRE_GPUS>=2), spillway-gram-mpi --check and
#                                              spillway-knn-mpi (the fused top-k across ranks) on sampled rows
#   scripts/gpu-check.sh knn-mpi                (GPU machine, two GPUs) spillway-knn-mpi 10^6 x 768 bf16 top-32
#                                              with one rank, then two, alternated KNN_MPI_ROUNDS times (default
#                                              2), and spillway-knn in one process on one GPU and on two
#   scripts/gpu-check.sh mpi-bench              (GPU machine) spillway-gram-mpi --bench (100,000 x 200,000,
#                                              top-32 and triangle) with one rank, then two; the disk's
#                                              fsync'd write rate (dd) first. MPI_BENCH_DIR: where the
#                                              triangle goes (default /tmp/spillway_mpi_bench, ~20 GB)
#
# Each mode fits one 10-minute device command for the default module set, except `tests` on a
# several-GPU machine (2026-11-30, nvidia-h200-x2: it ran past 590 s with one hung gram test): there
# run `tests gram`, `tests gemm`, `tests core io pipeline map`, `tests pairwise similarity ode` as
# separate commands. Pass modules or benchmark names to split further. Every binary runs under
# `timeout` (TEST_TIMEOUT 300 s, V2_TIMEOUT 120 s, SANITIZER_TIMEOUT 240 s, BENCH_TIMEOUT 400 s), so
# a hang fails instead of eating the command.
# Environment: SPILLWAY_COMMIT (the commit the header names, where the machine's .git copy lags the
# working tree it was sent; default $GPUBIN/COMMIT, then git), GPUBIN (default gpubin), SANITIZER_FILTER (gtest filter for the
# sanitizer runs, default excludes tests tagged Large), BENCH_REPS (default 5), BENCH_FILTER.
set -uo pipefail
cd "$(dirname "$0")/.."
mode=${1:-tests}
shift || true
GPUBIN=${GPUBIN:-gpubin}
RESULTS=${OUT:-$GPUBIN/results}
mkdir -p "$RESULTS"
export LD_LIBRARY_PATH="$PWD/$GPUBIN:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
MODULES_DEFAULT="core io pipeline map gram gemm pairwise similarity ode"

summary=()
status=0
# Suites of forced tile kernels (gram: GramForced*Gpu): run in a process of their own.
EXPERIMENTAL='*ForcedWgmmaGpu.*:*ForcedMmaSync*Gpu.*'
# Suites that check what happens with no GPU (they skip where one is visible).
NOGPU='*NoGpu*'
# Fault-injection and memory-pressure suites (pipeline, gram, gemm: tests/*/fault_*_test.cu): under
# the sanitizer they run in a process of their own, with their own time limit.
FAULT='Fault*Gpu.*'


run_tests() {
  local mods=${*:-$MODULES_DEFAULT}
  export SPILLWAY_REQUIRE_GPU=1
  SPILLWAY_REQUIRE_GPUS=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || echo 1)
  export SPILLWAY_REQUIRE_GPUS
  # The .npy interoperability test needs a python3 with NumPy (the GPU machine's image has one).
  if [[ -z ${SPILLWAY_PYTHON:-} ]] && python3 -c "import numpy" 2>/dev/null; then
    export SPILLWAY_PYTHON=$(command -v python3)
  fi
  for m in $mods; do
    for bin in "$GPUBIN/spillway_${m}_tests" "$GPUBIN/spillway_${m}_host_tests"; do
      [[ -x $bin ]] || continue
      local name log gpu_total
      name=$(basename "$bin")
      log="$RESULTS/$name.log"
      gpu_total=$("$bin" --gtest_list_tests --gtest_filter='*Gpu*.*' | grep -c '^  ' || true)
      # Experimental variants ($EXPERIMENTAL) run in a process of their own, so that a crash there
      # cannot hide the results of the default paths.
      timeout "${TEST_TIMEOUT:-300}" "$bin" --gtest_color=no --gtest_filter="-$EXPERIMENTAL:$NOGPU" >"$log" 2>&1
      local rc=$?
      # The no-GPU behaviour suites skip where a GPU is visible: here they run with the GPUs hidden.
      if "$bin" --gtest_list_tests --gtest_filter="$NOGPU" | grep -q '^  '; then
        CUDA_VISIBLE_DEVICES= SPILLWAY_REQUIRE_GPU=0 timeout 120 "$bin" --gtest_color=no --gtest_filter="$NOGPU" >"$log.nogpu" 2>&1
        local rc3=$?
        summary+=("$(printf '%-34s rc=%-3s %s' "$name(no GPU)" "$rc3" "$(grep -E '^\[  (PASSED|FAILED|SKIPPED) ' "$log.nogpu" | tr '\n' ' ')")")
        if [[ $rc3 -ne 0 ]] || grep -q '^\[  SKIPPED \]' "$log.nogpu"; then status=1; grep -E '^\[  FAILED  \]|Failure|SKIPPED' "$log.nogpu" | head -10; fi
      fi
      if "$bin" --gtest_list_tests --gtest_filter="$EXPERIMENTAL" | grep -q '^  '; then
        timeout "${V2_TIMEOUT:-120}" "$bin" --gtest_color=no --gtest_filter="$EXPERIMENTAL" >"$log.v2" 2>&1
        local rc2=$?
        summary+=("$(printf '%-34s rc=%-3s %s' "$name(V2)" "$rc2" "$(grep -E '^\[  (PASSED|FAILED) ' "$log.v2" | tr '\n' ' ')")")
        [[ $rc2 -ne 0 ]] && { status=1; grep -E '^\[  FAILED  \]|Failure' "$log.v2" | head -10; }
      fi
      local passed failed skipped
      passed=$(grep -oP '^\[  PASSED  \] \K[0-9]+' "$log" | tail -1)
      failed=$(grep -oP '^\[  FAILED  \] \K[0-9]+(?= tests?, listed)' "$log" | tail -1)
      skipped=$(grep -oP '^\[  SKIPPED \] \K[0-9]+' "$log" | tail -1)
      # Tests that need more GPUs than this machine has skip with "needs N GPUs": allowed here
      # (they run on the several-GPU kinds, where SPILLWAY_REQUIRE_GPUS makes them mandatory).
      local multi
      multi=$(grep -cE 'needs [0-9]+ GPUs; [0-9]+ visible' "$log" || true)
      summary+=("$(printf '%-34s rc=%-3s passed=%-4s failed=%-3s skipped=%-3s (multi-GPU skips %s) gpu-tests=%s' "$name" "$rc" "${passed:-0}" "${failed:-0}" "${skipped:-0}" "${multi:-0}" "$gpu_total")")
      if [[ $rc -ne 0 || ${skipped:-0} -ne ${multi:-0} ]]; then
        status=1
        grep -E '^\[  FAILED  \]|Failure|error' "$log" | head -20
      fi
    done
  done
  # The seed programs check their own results (exit status), on the GPU here.
  if [[ -z ${*:-} ]]; then
    for bin in "$GPUBIN"/spillway-seed-*; do
      [[ -x $bin ]] || continue
      local b log
      b=$(basename "$bin")
      log="$RESULTS/$b.log"
      timeout 120 "$bin" >"$log" 2>&1
      local rc=$?
      summary+=("$(printf '%-34s rc=%-3s %s' "$b" "$rc" "$(tail -1 "$log" | cut -c1-80)")")
      [[ $rc -ne 0 ]] && { status=1; tail -5 "$log"; }
    done
  fi
}

# Tests too large for the sanitizers' 10-100x slowdown (their kernels also run in the smaller tests).
# The several-device suites (*MultiGpu*, *TwoDevices*, *TwoGpu*: {0, 0} on one GPU, {0, 1} on two)
# are small and run under the sanitizer too: memory crossing devices is what they are for.
SANITIZER_EXCLUDE='*Large*:*Big*:*Beyond2To31*:*SixtyFourBit*:*Past2To31*:*NoGpu*'
# racecheck only where kernels share memory between threads, on small problems.
racecheck_filter() {
  case $1 in
    gram) echo 'GramSanitizeGpu.*:GramKernelsGpu.EdgeShapesEveryPathAAt:GramKernelsGpu.UpperOnlyWithPanelOffsets:GramForcedWgmmaGpu.Int32CountStoreEdgeShapes:GramForcedMmaSyncTmaGpu.EdgeShapesAAt:GramForcedMmaSyncTmaGpu.MbarrierPhasesAcrossTiles:GramForcedMmaSyncCpAsyncGpu.EdgeShapesAAt' ;;
    gemm) echo 'FragmentSinkGemm.EveryAccumulatorReachesTheSinkOnce:WgmmaKernelGpu.BetaAndAlpha:WgmmaKernelGpu.PublicPathSmallShapes:SimtKernelGpu.BetaZeroIgnoresNanC:SimtKernelGpu.Batched:GemmMmaSyncKernelGpu.HalfEdgeShapes:GemmMmaSyncKernelGpu.Int8EdgeShapesExact:DmmaKernelGpu.EdgeShapes:DmmaKernelGpu.Batched:GemmGpu.SplitKForcedHalf' ;;
    map) echo 'GufuncGpu.*:GufuncStagedGpu.*:ReduceGpu.*' ;;
    similarity) echo 'SimilarityGpu.FusedTopKExactTiesGoToTheSmallerColumns:SimilarityGpu.FusedTopKOverflowedBucketsAreRecomputed' ;;
    ode) echo 'Rk4CoupledGpu.MeanFieldComplexFloatMatchesHost:Rk4FusedGpu.GraphAndPlainLaunchesAgreeBitwise' ;;
    *) echo '' ;;
  esac
}

sanitize_one() {  # tool binary filter label
  local tool=$1 bin=$2 filter=$3 label=$4
  local log="$RESULTS/sanitizer_${label}_${tool}.log"
  timeout "${SANITIZER_TIMEOUT:-240}" compute-sanitizer --tool "$tool" --error-exitcode 99 --report-api-errors no "$bin" --gtest_filter="$filter" --gtest_color=no >"$log" 2>&1
  local rc=$?
  local errs ran
  errs=$(grep -oP '(ERROR SUMMARY|RACECHECK SUMMARY): \K[0-9]+' "$log" | tail -1)
  ran=$(grep -oP '^\[  PASSED  \] \K[0-9]+' "$log" | tail -1)
  summary+=("$(printf '%-34s %-9s rc=%-3s errors=%-4s tests=%s' "$label" "$tool" "$rc" "${errs:-?}" "${ran:-0}")")
  [[ $rc -ne 0 ]] && { status=1; grep -E "Invalid|Race|Error|FAILED" "$log" | head -20; }
}

run_sanitizer() {
  local mods=${*:-$MODULES_DEFAULT}
  export SPILLWAY_REQUIRE_GPU=1
  local filter=${SANITIZER_FILTER:-"*Gpu*.*:-$SANITIZER_EXCLUDE:$EXPERIMENTAL:$FAULT"}
  for m in $mods; do
    local bin="$GPUBIN/spillway_${m}_tests"
    [[ -x $bin ]] || continue
    sanitize_one memcheck "$bin" "$filter" "spillway_${m}_tests"
    if [[ -z ${SANITIZER_FILTER:-} ]] && "$bin" --gtest_list_tests --gtest_filter="$FAULT" | grep -q '^  '; then
      sanitize_one memcheck "$bin" "$FAULT:-$SANITIZER_EXCLUDE" "spillway_${m}_tests_fault"
    fi
    if "$bin" --gtest_list_tests --gtest_filter="$EXPERIMENTAL" | grep -q '^  '; then
      sanitize_one memcheck "$bin" "$EXPERIMENTAL" "spillway_${m}_tests_V2"
    fi
    local rf
    rf=$(racecheck_filter "$m")
    [[ -n $rf ]] && sanitize_one racecheck "$bin" "$rf" "spillway_${m}_tests"
  done
}

run_bench() {
  local names=${*:-}
  local reps=${BENCH_REPS:-5}
  for bin in "$GPUBIN"/spillway_*_bench; do
    [[ -x $bin ]] || continue
    local b
    b=$(basename "$bin")
    if [[ -n $names && " $names " != *" ${b#spillway_} "* && " $names " != *" $b "* ]]; then continue; fi
    # gram_bench, stream_bench and similarity_bench take medians inside (fixed iterations / their
    # own repetitions; similarity_bench's 10^6-row jobs take ~40 s a run).
    local r=$reps
    case $b in spillway_gram_bench | spillway_stream_bench | spillway_similarity_bench) r=1 ;; esac
    local args=(--benchmark_repetitions="$r" --benchmark_report_aggregates_only=true
      --benchmark_out="$RESULTS/$b.json" --benchmark_out_format=json)
    [[ -n ${BENCH_FILTER:-} ]] && args+=(--benchmark_filter="$BENCH_FILTER")
    # SM clock (MHz) before, sampled every 0.5 s during, and after each binary: a throttled or
    # boost-pinned GPU shows here, beside the figures.
    local clk_before clk_log sampler
    clk_before=$(nvidia-smi --query-gpu=clocks.sm,clocks.max.sm --format=csv,noheader 2>/dev/null | paste -sd';')
    clk_log=$(mktemp)
    nvidia-smi --query-gpu=clocks.sm --format=csv,noheader,nounits -lms 500 >"$clk_log" 2>/dev/null &
    sampler=$!
    timeout "${BENCH_TIMEOUT:-400}" "$bin" "${args[@]}" >"$RESULTS/$b.txt" 2>&1 || { status=1; tail -20 "$RESULTS/$b.txt"; }
    kill "$sampler" 2>/dev/null
    wait "$sampler" 2>/dev/null
    summary+=("$(printf '%-34s SM clock (sm, max.sm): before %s; during min/median/max %s; after %s' "$b" "$clk_before" \
      "$(sort -n "$clk_log" | awk '/^[0-9]+$/ {v[n++] = $1} END {if (n) printf "%d/%d/%d MHz (%d samples)", v[0], v[int(n / 2)], v[n - 1], n; else printf "n/a"}')" \
      "$(nvidia-smi --query-gpu=clocks.sm,clocks.max.sm --format=csv,noheader 2>/dev/null | paste -sd';')")")
    rm -f "$clk_log"
  done
  python3 scripts/bench_table.py "$RESULTS"/*.json || true
}

# The Python package: built there (a wheel is not carried), into a directory of its own so the
# image's Python stays as it is; its tests then run with every skip counted as a failure.
run_python() {
  local what=${1:-tests} py=${SPILLWAY_PYTHON:-python3} site=${PY_SITE:-/tmp/spillway-site}
  export SPILLWAY_REQUIRE_GPU=1
  SPILLWAY_REQUIRE_GPUS=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || echo 1)
  export SPILLWAY_REQUIRE_GPUS
  local t0=$SECONDS
  if [[ -n ${PY_WHEEL:-} ]]; then
    # A wheel built elsewhere for this machine's Python (scripts/python-package.sh build with
    # PYTHON=python3.12 CUDAARCHS=90a), carried here: installed as is, no build on this machine.
    # shellcheck disable=SC2086  # PY_WHEEL may be a glob
    if ! "$py" -m pip install -q --no-deps --no-index --no-compile --upgrade --target "$site" $PY_WHEEL \
      >"$RESULTS/python_build.log" 2>&1; then
      status=1
      tail -30 "$RESULTS/python_build.log"
      summary+=("python package: installing $PY_WHEEL FAILED (log: $RESULTS/python_build.log)")
      return
    fi
    summary+=("$(printf '%-34s installed from %s' "python package" "$(basename $PY_WHEEL)")")
  elif ! "$py" -m pip install -q --no-build-isolation --no-deps --no-compile --upgrade --target "$site" \
    --config-settings=cmake.define.CMAKE_CUDA_ARCHITECTURES=90a ./python >"$RESULTS/python_build.log" 2>&1; then
    status=1
    tail -30 "$RESULTS/python_build.log"
    summary+=("python package: build FAILED (log: $RESULTS/python_build.log)")
    return
  else
    summary+=("$(printf '%-34s built for sm_90a in %ss' "python package" "$((SECONDS - t0))")")
  fi
  if [[ $what == bench ]]; then
    PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 timeout "${BENCH_TIMEOUT:-400}" "$py" \
      "python/benchmarks/${PY_BENCH:-gram_topk_bench.py}" ${PY_BENCH_ARGS:-} --json "$RESULTS/python_bench.json" 2>&1 | tee "$RESULTS/python_bench.txt"
    [[ ${PIPESTATUS[0]} -ne 0 ]] && status=1
    return
  fi
  PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}" timeout "${PYTEST_TIMEOUT:-420}" "$py" -m pytest -q -rs -p no:cacheprovider \
    python/tests >"$RESULTS/python_tests.log" 2>&1
  local rc=$?
  summary+=("$(printf '%-34s rc=%-3s %s' "python/tests" "$rc" "$(tail -1 "$RESULTS/python_tests.log")")")
  [[ $rc -ne 0 ]] && { status=1; grep -E '^(FAILED|ERROR|SKIPPED)|Error' "$RESULTS/python_tests.log" | head -30; }
}

# issue 33: a fat wheel built here (no index is reachable: this machine's scikit-build-core and
# nanobind, a build folder of its own so no cached architecture narrows it), installed --no-index.
run_python_wheel() {
  local py=${SPILLWAY_PYTHON:-python3} w=/tmp/spillway-wheels v=/tmp/spillway-venv t0=$SECONDS
  export SPILLWAY_REQUIRE_GPU=1 SPILLWAY_REQUIRE_GPUS=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || echo 1)
  rm -rf "$w" "$v" /tmp/spillway-wheel-build
  # The fresh venv sees the interpreter's packages (NumPy, numba-cuda, CuPy, PyTorch) through a .pth
  # of its site directories: the GPU image's python3 is itself a venv, and --system-site-packages
  # reaches only the base interpreter's (2026-11-28: pip then found no NumPy with --no-index).
  if ! { env -u CUDAARCHS "$py" -m pip wheel -q --no-build-isolation --no-deps -w "$w" \
      --config-settings=build-dir=/tmp/spillway-wheel-build ./python && "$py" -m venv --system-site-packages "$v" &&
      "$py" -c 'import site; print("\n".join(site.getsitepackages()))' \
        >"$("$v/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/_parent_site.pth" &&
      "$v/bin/python" -m pip install -q --no-index --find-links "$w" spillway-cu13; } >"$RESULTS/python_wheel.log" 2>&1; then
    status=1; tail -30 "$RESULTS/python_wheel.log"; summary+=("python wheel: build or install FAILED"); return
  fi
  summary+=("$(printf '%-34s %s built + installed in %ss' "python wheel" "$(basename "$w"/*.whl)" "$((SECONDS - t0))")")
  (cd /tmp && "$v/bin/python" -c 'import spillway; spillway.show_config()') 2>&1 | tee -a "$RESULTS/python_wheel.log"
  timeout "${PYTEST_TIMEOUT:-420}" "$v/bin/python" -m pytest -q -rs -p no:cacheprovider python/tests >"$RESULTS/python_wheel_tests.log" 2>&1
  local rc=$?
  summary+=("$(printf '%-34s rc=%-3s %s' "python/tests (wheel)" "$rc" "$(tail -1 "$RESULTS/python_wheel_tests.log")")")
  [[ $rc -ne 0 ]] && { status=1; grep -E '^(FAILED|ERROR|SKIPPED)|Error' "$RESULTS/python_wheel_tests.log" | head -30; }
}

# spillway::dist (issue 15) under mpirun, one GPU per rank. Root needs OpenMPI's consent; in
# containers its single-copy shared-memory path fails. -np N runs only with N GPUs visible.
# --bind-to none: OpenMPI binds each rank to one core when there are at most two ranks, and a rank's
# host phases (the top-k owners' merge, the triangle's staging copy, pack_bits) are OpenMP loops
# (2026-11-28, two ranks bound: the merge took 19-32 ms against the 3-5 ms predicted).
MPIRUN=(mpirun --oversubscribe --bind-to none --mca btl_vader_single_copy_mechanism none)
mpi_gpus() { nvidia-smi -L 2>/dev/null | grep -c '^GPU' || echo 0; }
mpi_too_few() {  # label np gpus: records the skip (or the failure under SPILLWAY_REQUIRE_GPUS>=np)
  if [[ ${SPILLWAY_REQUIRE_GPUS:-0} -ge $2 ]]; then
    status=1
    summary+=("$(printf '%-34s FAILED: -np %s needs %s GPUs, %s visible' "$1" "$2" "$2" "$3")")
  else
    summary+=("$(printf '%-34s skipped: -np %s needs %s GPUs (one per rank), %s visible: run on nvidia-h200-x2' "$1" "$2" "$2" "$3")")
  fi
}
run_mpi() {
  export SPILLWAY_REQUIRE_GPU=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  command -v mpirun >/dev/null || { status=1; summary+=("mpi: no mpirun on this machine"); return; }
  if [[ -z ${SPILLWAY_PYTHON:-} ]] && python3 -c "import numpy" 2>/dev/null; then
    export SPILLWAY_PYTHON=$(command -v python3)
  fi
  local gpus np bin log rc passed skipped
  gpus=$(mpi_gpus)
  if ldd "$GPUBIN/spillway_dist_tests" 2>/dev/null | grep -q 'libmpi_cxx.*not found'; then
    export LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$PWD/$GPUBIN/mpi-fallback"
  fi
  for np in 1 2; do
    for bin in spillway_dist_gpu_tests spillway_dist_tests spillway-gram-mpi spillway-knn-mpi; do
      if [[ ! -x $GPUBIN/$bin ]]; then
        status=1
        summary+=("$(printf '%-34s missing from %s (pack the gpu preset on a machine with MPI)' "$bin" "$GPUBIN")")
        continue
      fi
      if [[ $bin != spillway_dist_tests && $np -gt $gpus ]]; then mpi_too_few "$bin -np $np" "$np" "$gpus"; continue; fi
      log="$RESULTS/${bin}_np$np.log"
      if [[ $bin == spillway-knn-mpi ]]; then
        # The fused top-k across ranks: 20,011 bf16 rows, sampled rows against the host in double.
        timeout 300 "${MPIRUN[@]}" -np "$np" "$GPUBIN/$bin" --rows 20011 --dim 96 --bf16 --k 16 --check 8 >"$log" 2>&1
        rc=$?
        summary+=("$(printf '%-34s rc=%-3s %s' "$bin -np $np" "$rc" "$(grep -E '^check:' "$log" | tail -1)")")
        [[ $rc -ne 0 ]] && { status=1; tail -20 "$log"; }
        continue
      fi
      if [[ $bin == spillway-gram-mpi ]]; then
        timeout 300 "${MPIRUN[@]}" -np "$np" "$GPUBIN/$bin" --rows 20011 --cols 4096 --sink all --k 32 --check >"$log" 2>&1
        rc=$?
        summary+=("$(printf '%-34s rc=%-3s %s' "$bin -np $np" "$rc" "$(grep -E '^check:' "$log" | tail -1)")")
        [[ $rc -ne 0 ]] && { status=1; tail -20 "$log"; }
        continue
      fi
      timeout "${TEST_TIMEOUT:-300}" "${MPIRUN[@]}" -np "$np" "$GPUBIN/$bin" --gtest_color=no >"$log" 2>&1
      rc=$?
      passed=$(grep -oP '^\[  PASSED  \] \K[0-9]+' "$log" | head -1)
      skipped=$(grep -oP '^\[  SKIPPED \] \K[0-9]+' "$log" | head -1)
      summary+=("$(printf '%-34s rc=%-3s passed=%-4s skipped=%-3s (per rank)' "$bin -np $np" "$rc" "${passed:-0}" "${skipped:-0}")")
      if [[ $rc -ne 0 || ${skipped:-0} -ne 0 ]]; then status=1; grep -E '^\[  FAILED  \]|Failure|SKIPPED|needs' "$log" | head -20; fi
    done
  done
}
run_mpi_bench() {
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  local dir=${MPI_BENCH_DIR:-/tmp/spillway_mpi_bench} gpus np log
  mkdir -p "$dir"
  gpus=$(mpi_gpus)
  if ldd "$GPUBIN/spillway-gram-mpi" 2>/dev/null | grep -q 'libmpi_cxx.*not found'; then
    export LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$PWD/$GPUBIN/mpi-fallback"
  fi
  # The disk's rate for the triangle file: written and fsync'd (else 20 GB land in the page cache).
  dd if=/dev/zero of="$dir/dd.bin" bs=16M count="${DD_COUNT:-640}" conv=fsync 2>"$RESULTS/mpi_dd.log"
  rm -f "$dir/dd.bin"
  summary+=("$(printf '%-34s %s' "disk write (dd, fsync)" "$(tail -1 "$RESULTS/mpi_dd.log")")")
  for np in 1 2; do
    if [[ $np -gt $gpus ]]; then mpi_too_few "spillway-gram-mpi --bench" "$np" "$gpus"; continue; fi
    log="$RESULTS/spillway-gram-mpi_bench_np$np.log"
    timeout "${BENCH_TIMEOUT:-400}" "${MPIRUN[@]}" -np "$np" "$GPUBIN/spillway-gram-mpi" --bench --output "$dir/c.npy" >"$log" 2>&1 || status=1
    rm -f "$dir"/c.npy*
    # The triangle again with each rank's own MPI_File_write_at (no collective aggregation).
    timeout "${BENCH_TIMEOUT:-400}" "${MPIRUN[@]}" -np "$np" "$GPUBIN/spillway-gram-mpi" --rows 100000 --cols 200000 \
      --sink triangle --sync --independent-io --repeat 3 --output "$dir/c.npy" >>"$log" 2>&1 || status=1
    rm -f "$dir"/c.npy*
    # (With several ranks --bench runs top-k under every split: auto, model, pairs, cyclic, snake,
    # greedy; each prints "top-32 total T s --split S (deal; predicted P s)".)
    cat "$log"
    summary+=("$(printf '%-34s %s' "gram-mpi --bench -np $np" "$(grep -E '^  (top-[0-9]+|triangle) total' "$log" | sed 's/^ *//' | sed -E 's/ \(median of.*//' | paste -sd'|')")")
    # Each rank's share: the split's prediction against the measurement (top-k, triangle, [pairs-split top-k]).
    summary+=("$(printf '%-34s %s' "  predicted vs measured -np $np" "$(grep -oE 'rank [0-9]+ share: predicted [0-9.]+ s, measured [0-9.]+ s' "$log" | sed -E 's/ share: predicted /: /; s/ s, measured / vs /' | paste -sd'|')")")
  done
}

# Issue 11's all-pairs row: 10^6 x 768 bf16 rows, top-32 cosine, 8 GiB budget, spillway-knn three
# times (and once each with pageable and staged rows) against the PyTorch blocked baseline (benchmarks/knn_torch_baseline.py) in the same call,
# on the same rows (the script writes them; KNN_ROWS to shrink, KNN_FILE for where).
run_fingerprints() {
  # Issue 34's ChEMBL-size search: Tanimoto >= 0.7 over FP_ROWS (1.94 M) clustered 2,048-bit
  # fingerprints, both halves, as CSR in host memory (gram_threshold_csr), then as COO; medians of 3
  # after a warm-up; sampled rows against the host; the .npz read back by SciPy where it is there.
  local rows=${FP_ROWS:-1940000} log f=/tmp/spillway_fp.npz form
  for form in csr coo; do
    log="$RESULTS/fingerprints_$form.log"
    local extra=()
    [[ $form == csr ]] && extra=(--csr "$f")
    timeout "${BENCH_TIMEOUT:-400}" "$GPUBIN/spillway-gram" --fingerprints "$rows" --epilogue jaccard --sink threshold \
      --threshold 0.7 --both-halves --repeat 3 --profile --samples 2000 "${extra[@]}" >"$log" 2>&1 || status=1
    grep -q '^check: sampled entries match' "$log" || { status=1; tail -5 "$log"; }
    summary+=("$(printf '%-34s %s' "fingerprints $form" "$(tr '\r' '\n' <"$log" | grep -E 'computed' | sed 's/ (1.*//') | $(tr '\r' '\n' <"$log" | grep -E '^threshold' | sed 's/ (mean.*//')")")
  done
  if python3 -c "import scipy.sparse" 2>/dev/null; then
    summary+=("$(printf '%-34s %s' "fingerprints .npz (SciPy)" "$(python3 -c "import scipy.sparse as sp; m = sp.load_npz('$f'); print(m.shape, m.nnz, 'symmetric', (m != m.T).nnz == 0, 'sorted', m.has_sorted_indices)")")")
    # The first FP_SUBSET (20,000) rows of the same set (the generator seeds each 40-row cluster on
    # its own) on the GPU, against NumPy's exact integer test over every pair.
    local sub=${FP_SUBSET:-20000} p=/tmp/spillway_fp_subset
    log="$RESULTS/fingerprints_numpy.log"
    if timeout 300 "$GPUBIN/spillway-gram" --fingerprints "$sub" --epilogue jaccard --sink threshold --threshold 0.7 \
      --both-halves --save-input "$p.npy" --csr "$p.npz" >"$log" 2>&1 &&
      timeout 300 python3 tests/examples/gram_threshold_csr.py check-packed "$p" 2048 >>"$log" 2>&1; then
      summary+=("$(printf '%-34s %s' "fingerprints $sub rows (NumPy)" "$(tail -1 "$log" | cut -c1-110)")")
    else
      status=1
      summary+=("$(printf '%-34s %s' "fingerprints $sub rows (NumPy)" "FAILED: $(tail -1 "$log" | cut -c1-100)")")
    fi
    rm -f "$p.npy" "$p.npz"
  fi
  rm -f "$f"
}

run_knn() {
  local rows=${KNN_ROWS:-1000000} f=${KNN_FILE:-/tmp/spillway_knn_emb.npy} log="$RESULTS/knn.log" r
  if ! python3 benchmarks/knn_torch_baseline.py --rows "$rows" --dim 768 --k 32 --out "$f" >"$log" 2>&1; then
    status=1
    summary+=("knn: the PyTorch baseline failed (needs python3 with torch and a GPU): $(tail -1 "$log")")
    return
  fi
  summary+=("$(printf '%-34s %s' "knn baseline (torch, same rows)" "$(grep -E '^torch' "$log" | cut -c1-90)")")
  # Each run: a warm-up call, then three timed (--repeat 3: the median is the figure). Rows
  # page-locked before the call (the acceptance row), then pageable rows that the call page-locks
  # itself and rows copied from pageable memory (page_lock::never); with two GPUs visible the
  # page-locked rows once more on GPUs 0 and 1 (one GPU's run above is the baseline).
  local runs=("pinned" "pageable" "staged")
  (($(nvidia-smi -L 2>/dev/null | grep -c '^GPU') >= 2)) && runs+=("pinned --devices 0,1")
  for r in "${runs[@]}"; do
    # shellcheck disable=SC2086  # "pinned --devices 0,1" is two options
    if ! timeout "${BENCH_TIMEOUT:-400}" "$GPUBIN/spillway-knn" --input "$f" --bf16 --k 32 --budget 8GiB --check 4 \
      --repeat 3 --rows-memory $r >>"$log" 2>&1; then
      status=1
    fi
  done
  rm -f "$f"
  while read -r line; do
    summary+=("$(printf '%-34s %s' "spillway-knn" "$(echo "$line" | sed 's/ (.*TFLOP.s of symmetric-half work)//' | cut -c1-110)")")
  done < <(grep -E '^top-32' "$log")
  # Each run checks its sample: every one must say so.
  (($(grep -c 'all correct' "$log") == ${#runs[@]})) || { status=1; summary+=("knn: a run's sampled rows were wrong or unchecked (see $log)"); }
}

# Issue 34's scale rows with spillway-knn's own rows (no files): 10^6 x 768 bf16 top-32 on the
# clustered set (10,000 centres, spread 1.25) on one GPU and, where two are visible, on GPUs 0 and 1
# (medians of 3 after a warm-up); then 10^7 x 768 random rows on GPUs 0 and 1, one cold call
# (~80 s; KNN_SCALE_ROWS to change, 0 to skip). Every run checks sampled rows and prints its
# phases and candidates per row (--profile). KNN_CLUSTER_ROWS sizes the clustered runs.
run_knn_scale() {
  local log="$RESULTS/knn_scale.log" crows=${KNN_CLUSTER_ROWS:-1000000} srows=${KNN_SCALE_ROWS:-10000000} runs=0
  local two=0
  (($(nvidia-smi -L 2>/dev/null | grep -c '^GPU') >= 2)) && two=1
  : >"$log"
  local c=(--rows "$crows" --dim 768 --bf16 --k 32 --budget 8GiB --clusters $((crows >= 20000 ? 10000 : crows / 2)) --spread 1.25
    --repeat 3 --check 4 --profile)
  local sets=("one GPU")
  ((two)) && sets+=("two GPUs")
  for set in "${sets[@]}"; do
    local dev=()
    [[ $set == "two GPUs" ]] && dev=(--devices 0,1)
    echo "== clustered, $set" >>"$log"
    runs=$((runs + 1))
    timeout "${BENCH_TIMEOUT:-400}" "$GPUBIN/spillway-knn" "${c[@]}" "${dev[@]}" >>"$log" 2>&1 || status=1
  done
  if ((two && srows > 0)); then
    # Issue 34's protocol: the median of KNN_SCALE_REPEAT calls after a warm-up (1: one cold call,
    # with --profile; 3 takes ~5.5 minutes at 10^7 rows).
    local rep=${KNN_SCALE_REPEAT:-3} prof=()
    ((rep <= 1)) && prof=(--profile)
    echo "== random, $srows rows, two GPUs, $( ((rep > 1)) && echo "median of $rep after a warm-up" || echo "one cold call")" >>"$log"
    runs=$((runs + 1))
    timeout "${BENCH_TIMEOUT:-540}" "$GPUBIN/spillway-knn" --rows "$srows" --dim 768 --bf16 --k 32 --devices 0,1 --check 3 \
      --repeat "$rep" "${prof[@]}" >>"$log" 2>&1 || status=1
  elif ((srows > 0)); then
    summary+=("knn-scale: the $srows-row run needs two GPUs (fewer visible): not run")
  fi
  while read -r line; do
    summary+=("$(printf '%-34s %s' "spillway-knn" "$(echo "$line" | cut -c1-150)")")
  done < <(grep -E '^(== |top-32|mean |profile)' "$log")
  (($(grep -c 'all correct' "$log") == runs)) || { status=1; summary+=("knn-scale: a run's sampled rows were wrong or unchecked (see $log)"); }
}

run_ode_baseline() {
  local log="$RESULTS/ode_baseline.log"
  if ! CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-0} timeout "${BENCH_TIMEOUT:-400}" "$GPUBIN/spillway_ode_bench" \
    --benchmark_repetitions=3 --benchmark_report_aggregates_only=true >"$log" 2>&1; then
    status=1
  fi
  while read -r line; do summary+=("$(echo "$line" | cut -c1-120)"); done < <(grep -E '_median' "$log")
  if ! CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-0} timeout "${BENCH_TIMEOUT:-400}" python3 \
    benchmarks/ode_diffrax_baseline.py --reps 2 ${DIFFRAX_ARGS:-} >>"$log" 2>&1; then
    status=1
    summary+=("ode-baseline: the diffrax baseline failed (needs python3 with jax and diffrax): $(tail -1 "$log")")
  fi
  while read -r line; do summary+=("$(echo "$line" | cut -c1-120)"); done < <(grep -E '^(adaptive|fixed)' "$log")
}

run_gemm_alternations() {
  local log="$RESULTS/gemm_alternations.log"
  if ! CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-0} timeout "${BENCH_TIMEOUT:-400}" "$GPUBIN/spillway_gemm_bench" \
    --alternations="${GEMM_ALTERNATIONS:-20}" --alternation_size="${GEMM_ALTERNATION_SIZE:-8192}" \
    --alternation_types="${GEMM_ALTERNATION_TYPES:-}" >"$log" 2>&1; then
    status=1
  fi
  while read -r line; do summary+=("$line"); done <"$log"
}

# The fused top-k across MPI ranks at issue 34's size: -np 1 against -np 2 (one GPU each), in
# alternation, then one process on one GPU and on two for the same rows (medians of 3 after a warm-up).
run_knn_mpi() {
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  if ldd "$GPUBIN/spillway-knn-mpi" 2>/dev/null | grep -q 'libmpi_cxx.*not found'; then
    export LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$PWD/$GPUBIN/mpi-fallback"
  fi
  local args=(--rows "${KNN_MPI_ROWS:-1000000}" --dim 768 --bf16 --k 32 --budget 8GiB --repeat 3 --check 4)
  local gpus round np log
  gpus=$(mpi_gpus)
  for round in $(seq "${KNN_MPI_ROUNDS:-2}"); do
    for np in 1 2; do
      if [[ $np -gt $gpus ]]; then mpi_too_few "spillway-knn-mpi -np $np" "$np" "$gpus"; continue; fi
      log="$RESULTS/knn_mpi_np${np}_r$round.log"
      timeout 300 "${MPIRUN[@]}" -np "$np" "$GPUBIN/spillway-knn-mpi" "${args[@]}" >"$log" 2>&1 || status=1
      summary+=("$(printf '%-34s %s; %s' "knn-mpi -np $np (round $round)" "$(grep -oE 'in [0-9.]+ s \(median\)' "$log")" "$(grep -E '^check:' "$log" | grep -oE 'all correct|WRONG')")")
      grep -E '^rank 0 of the last call' "$log" | tail -1
    done
  done
  for dev in 0 0,1; do
    log="$RESULTS/knn_one_process_$dev.log"
    timeout 300 "$GPUBIN/spillway-knn" "${args[@]}" --devices "$dev" >"$log" 2>&1 || status=1
    summary+=("$(printf '%-34s %s; %s' "knn one process --devices $dev" "$(grep -oE 'in [0-9.]+ s \(median\)' "$log")" "$(grep -E '^check:' "$log" | grep -oE 'all correct|WRONG')")")
  done
}

case $mode in
  pack)
    export PATH=/usr/local/cuda/bin:$PATH
    cmake --preset gpu >/dev/null || exit 1
    if (($#)); then cmake --build --preset gpu --target "$@" || exit 1; else cmake --build --preset gpu || exit 1; fi
    rm -rf "$GPUBIN" && mkdir -p "$GPUBIN"
    for f in build-gpu/bin/spillway_*_tests build-gpu/bin/spillway_*_host_tests build-gpu/bin/spillway_*_bench build-gpu/bin/spillway-*; do
      [[ -x $f ]] && cp "$f" "$GPUBIN/"
    done
    cp -P /usr/lib/x86_64-linux-gnu/libbenchmark.so.1* "$GPUBIN/" 2>/dev/null || true
    cp -L /usr/local/cuda/lib64/libcudart.so.13 "$GPUBIN/" 2>/dev/null || true
    # spillway::mpi links MPI::MPI_CXX (libmpi_cxx): a fallback copy, used by the mpi modes only
    # where the GPU machine's OpenMPI lacks it (libmpi itself is always the machine's own).
    mkdir -p "$GPUBIN/mpi-fallback" && cp -L /usr/lib/x86_64-linux-gnu/libmpi_cxx.so.40 "$GPUBIN/mpi-fallback/" 2>/dev/null || true
    git rev-parse --short HEAD >"$GPUBIN/COMMIT" 2>/dev/null || true
    du -sh "$GPUBIN"
    exit 0
    ;;
  tests) run_tests "$@" ;;
  sanitizer) run_sanitizer "$@" ;;
  bench) run_bench "$@" ;;
  python) run_python tests ;;
  mpi) run_mpi ;;
  mpi-bench) run_mpi_bench ;;
  knn-mpi) run_knn_mpi ;;
  python-bench) run_python bench ;;
  python-wheel) run_python_wheel ;;
  knn) run_knn ;;
  fingerprints) run_fingerprints ;;
  knn-scale) run_knn_scale ;;
  ode-baseline) run_ode_baseline ;;
  gemm-alt) run_gemm_alternations ;;
  all)
    run_tests
    run_sanitizer
    run_bench
    ;;
  *)
    echo "usage: $0 pack|tests|sanitizer|bench|python|python-bench|python-wheel|mpi|mpi-bench|knn-mpi|knn|knn-scale|fingerprints|ode-baseline|gemm-alt|all [...]" >&2
    exit 2
    ;;
esac

echo
echo "==== spillway gpu-check: $mode on $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1), $(date -u +%F), commit ${SPILLWAY_COMMIT:-$(cat "$GPUBIN/COMMIT" 2>/dev/null || git rev-parse --short HEAD 2>/dev/null)} ===="
for line in "${summary[@]}"; do echo "$line"; done
echo "status: $([[ $status -eq 0 ]] && echo PASS || echo FAIL)"
exit $status
