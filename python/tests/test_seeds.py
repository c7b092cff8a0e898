"""The five seed programs in python/examples/seeds/, run as a user runs them (a subprocess each).

Each program checks its own result against NumPy, prints one ``numpy check: ... OK`` line per
check and exits 1 on a mismatch. The host tests hide the GPUs from the program
(CUDA_VISIBLE_DEVICES="") so they run its no-GPU path on every machine, GPU machines included; the
GPU tests run its GPU path and skip (fail under SPILLWAY_REQUIRE_GPU=1) where there is no GPU, or
where a framework it needs is missing. Seeds come from the ``rng`` fixture (printed) and are passed
as ``--seed``; each program prints its seed again.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import need

SEEDS = Path(__file__).resolve().parents[1] / "examples" / "seeds"
PROGRAMS = ("gram_beyond_memory", "bigger_than_vram", "gufunc_discount", "rk4_on_device", "timing_async")


def run_seed(name: str, *args, gpu: bool, timeout: float = 300) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env["PYTHONUNBUFFERED"] = "1"
    env.pop("NUMBA_ENABLE_CUDASIM", None)   # each program decides (002 sets it with no GPU)
    if not gpu:
        env["CUDA_VISIBLE_DEVICES"] = ""     # the program's no-GPU path, on any machine
    cmd = [sys.executable, str(SEEDS / f"{name}.py"), *map(str, args)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    print(f"$ {'CUDA_VISIBLE_DEVICES= ' if not gpu else ''}{' '.join(cmd)}\n{r.stdout}{r.stderr}")
    return r


def numpy_checks(r: subprocess.CompletedProcess, expected: int) -> list[str]:
    """Asserts exit 0, `expected` NumPy check lines, each OK, and the closing OK."""
    checks = re.findall(r"^numpy check: (.*)$", r.stdout, re.M)
    assert r.returncode == 0, f"exit {r.returncode}\n{r.stdout}{r.stderr}"
    assert len(checks) == expected, f"{len(checks)} numpy checks, expected {expected}:\n{r.stdout}"
    for c in checks:
        assert re.search(r": OK\b", c) and "MISMATCH" not in c, c
    assert r.stdout.rstrip().splitlines()[-1] == "OK", r.stdout
    return checks


def gpu_ran(r: subprocess.CompletedProcess) -> None:
    """A GPU run that skipped a part (a framework missing) is a skip here, a failure under
    SPILLWAY_REQUIRE_GPU=1."""
    skipped = re.search(r"^(?:GPU part )?skipped.*$", r.stdout, re.M)
    need(skipped is None, skipped.group(0) if skipped else "")


def have(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def seed_of(rng) -> int:
    return int(rng.integers(1 << 31))


@pytest.mark.parametrize("name", PROGRAMS)
def test_seed_help(name):
    r = subprocess.run([sys.executable, str(SEEDS / f"{name}.py"), "--help"], capture_output=True, text=True,
                       timeout=120, env={**os.environ, "CUDA_VISIBLE_DEVICES": ""})
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("usage:") and "Seed 00" in r.stdout, r.stdout


# ---- the no-GPU paths (every machine) ----


def test_gram_beyond_memory_host(rng):
    r = run_seed("gram_beyond_memory", "--rows", 700, "--cols", 333, "--seed", seed_of(rng), gpu=False)
    numpy_checks(r, 1)
    assert "running on the host implementation (no GPU:" in r.stdout
    assert re.search(r"\d+ strips on the host", r.stdout)


def test_bigger_than_vram_host_says_why(rng):
    r = run_seed("bigger_than_vram", "--n", 1000, "--seed", seed_of(rng), gpu=False)
    assert r.returncode == 0, r.stderr
    line = re.search(r"^GPU part skipped: (.*)$", r.stdout, re.M)
    assert line and "no host form" in line.group(1) and "no GPU here:" in line.group(1), r.stdout
    assert "numpy check" not in r.stdout   # nothing ran, so nothing claims to be checked


def test_gufunc_discount_simulator(rng):
    need(have("numba.cuda"), "numba-cuda is not installed (spillway.gufunc compiles bodies with it)")
    r = run_seed("gufunc_discount", "--dates", 3, "--m", 24, "--seed", seed_of(rng), gpu=False)
    checks = numpy_checks(r, 2)
    assert all("bit for bit" in c for c in checks)
    assert "path 'simulator'" in r.stdout
    assert re.search(r"^GPU part skipped .*no GPU here: .*Numba's CUDA simulator$", r.stdout, re.M), r.stdout


@pytest.mark.parametrize("side, mode", [(128, "all 16384 elements"), (300, "1000 sampled elements")])
def test_rk4_on_device_host(rng, side, mode):
    r = run_seed("rk4_on_device", "--n", side, "--steps", 60, "--seed", seed_of(rng), gpu=False)
    checks = numpy_checks(r, 3)
    assert mode in checks[0], checks[0]
    assert f"the host implementation runs N = {side}" in r.stdout


def test_rk4_on_device_blow_up_fails_clearly(rng):
    # The seed's own coupling ("sum") at n*dt = 9 rad per step: RK4 diverges; the program must say
    # why and exit 1, not report a mismatch of NaNs.
    r = run_seed("rk4_on_device", "--n", 300, "--steps", 20, "--coupling", "sum", "--seed", seed_of(rng), gpu=False)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "blew up" in r.stdout and "--coupling mean" in r.stdout
    assert r.stdout.rstrip().splitlines()[-1] == "FAILED"


def test_timing_async_host_says_why():
    r = run_seed("timing_async", "--iterations", 5, gpu=False)
    assert r.returncode == 0, r.stderr
    assert re.search(r"^GPU part skipped: timing needs a GPU .*no GPU here: ", r.stdout, re.M), r.stdout
    assert "numpy check" not in r.stdout


# ---- the GPU paths ----


def test_gram_beyond_memory_gpu(gpu, rng):
    # 3000 rows: the full Jaccard matrix is 34 MiB; an 8 MiB budget forces several strips.
    r = run_seed("gram_beyond_memory", "--rows", 3000, "--cols", 1000, "--budget", "8MiB", "--seed", seed_of(rng),
                 gpu=True)
    numpy_checks(r, 1)
    m = re.search(r"(\d+) strips on \[", r.stdout)
    assert m and int(m.group(1)) > 1, r.stdout


@pytest.mark.parametrize("arrays", ["cupy", "torch", "numba"])
def test_bigger_than_vram_gpu(gpu, rng, arrays):
    need(have(arrays), f"{arrays} is not installed")
    # 72 MB of host arrays through a 16 MiB budget: several chunks.
    r = run_seed("bigger_than_vram", "--n", 3_000_000, "--budget", "16MiB", "--arrays", arrays,
                 "--seed", seed_of(rng), gpu=True)
    gpu_ran(r)
    numpy_checks(r, 1)
    m = re.search(rf"with {arrays}: (\d+) chunks on GPU", r.stdout)
    assert m and int(m.group(1)) > 1, r.stdout


def test_gufunc_discount_gpu(gpu, rng):
    need(have("numba.cuda"), "numba-cuda is not installed (spillway.gufunc compiles bodies with it)")
    # 200 dates of (4000, 5) float64: 64 MB in + out > 32 MiB, so host arrays are streamed.
    r = run_seed("gufunc_discount", "--dates", 200, "--budget", "16MiB", "--repeats", 5, "--seed", seed_of(rng),
                 gpu=True)
    gpu_ran(r)
    checks = numpy_checks(r, 3)
    assert all("bit for bit" in c for c in checks)
    assert "path 'host-streamed'" in r.stdout, r.stdout
    assert re.search(r"cooperative form is [\d.]+x", r.stdout)


@pytest.mark.parametrize("arrays, side", [("cupy", 512), ("numba", 512), ("numpy", 128)])
def test_rk4_on_device_gpu(gpu, rng, arrays, side):
    if arrays != "numpy":
        need(have(arrays), f"{arrays} is not installed")
    r = run_seed("rk4_on_device", "--n", side, "--steps", 100, "--arrays", arrays, "--seed", seed_of(rng), gpu=True)
    gpu_ran(r)
    numpy_checks(r, 3)
    if arrays == "numpy":
        assert "from NumPy arrays on the GPU" in r.stdout, r.stdout
    else:
        assert re.search(rf"on the GPU \({arrays} arrays, in place\): [\d.]+ ms per step \(CUDA events\)", r.stdout)


def test_timing_async_gpu(gpu):
    need(have("numba.cuda"), "numba-cuda is not installed (the seed's kernel is a Numba kernel)")
    r = run_seed("timing_async", "--iterations", 100, gpu=True)
    gpu_ran(r)
    numpy_checks(r, 1)
    assert re.search(r"^timing check: .*: OK$", r.stdout, re.M), r.stdout
