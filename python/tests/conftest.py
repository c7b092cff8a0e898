"""Shared fixtures: printed seeds, and the GPU gate.

GPU tests call the ``gpu`` fixture: it skips with the reason where no GPU is usable and fails
instead under SPILLWAY_REQUIRE_GPU=1 (the GPU machine, where a skip would hide a broken set-up).
Tests needing CuPy / PyTorch / Numba / two GPUs go through ``need(...)`` with the same rule.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import spillway

REQUIRE_GPU = os.environ.get("SPILLWAY_REQUIRE_GPU", "") == "1"


def need(condition: bool, reason: str) -> None:
    """Skips (or, under SPILLWAY_REQUIRE_GPU=1, fails) unless `condition`."""
    if condition:
        return
    if REQUIRE_GPU:
        pytest.fail(f"SPILLWAY_REQUIRE_GPU=1 but {reason}")
    pytest.skip(reason)


def need_gpus(k: int) -> None:
    """For tests that need k GPUs: with fewer visible they skip ("needs k GPUs; m visible", as the
    C++ suites do), and fail only where SPILLWAY_REQUIRE_GPUS (scripts/gpu-check.sh sets it to the
    machine's GPU count) promises k or more."""
    have = spillway.device_count()
    if have >= k:
        return
    promised = int(os.environ.get("SPILLWAY_REQUIRE_GPUS", "0") or 0)
    if promised >= k:
        pytest.fail(f"SPILLWAY_REQUIRE_GPUS={promised} but {have} GPUs are visible; this test needs {k}")
    pytest.skip(f"needs {k} GPUs; {have} visible")


@pytest.fixture
def gpu():
    need(spillway.gpu_available(), f"no GPU: {spillway.no_gpu_reason()}")


@pytest.fixture
def rng(request):
    """A NumPy generator from a printed seed (SPILLWAY_TEST_SEED fixes it)."""
    env = os.environ.get("SPILLWAY_TEST_SEED")
    seed = int(env) if env else random.SystemRandom().randrange(1 << 31)
    print(f"[seed] {request.node.nodeid}: SPILLWAY_TEST_SEED={seed}")
    return np.random.default_rng(seed)


def random01(rng, rows, cols, density=0.3, dtype=np.uint8):
    return (rng.random((rows, cols)) < density).astype(dtype)


def reference(a, b, metric):
    """The Gram matrix in float64/int64 NumPy: counts, jaccard, cosine or hamming."""
    a64 = a.astype(np.int64)
    b64 = a64 if b is None else b.astype(np.int64)
    c = a64 @ b64.T
    na = a64.sum(axis=1)[:, None]
    nb = b64.sum(axis=1)[None, :]
    if metric == "counts":
        return c.astype(np.int32)
    if metric == "hamming":
        return (na + nb - 2 * c).astype(np.int32)
    with np.errstate(divide="ignore", invalid="ignore"):
        if metric == "jaccard":
            u = na + nb - c
            return np.where(u == 0, 1.0, c / np.where(u == 0, 1, u)).astype(np.float32)
        d = np.sqrt((na * nb).astype(np.float64))
        return np.where((na == 0) | (nb == 0), 0.0, c / np.where(d == 0, 1, d)).astype(np.float32)


def reference_topk(full, k, larger, exclude_diagonal):
    """Per-row top-k of a dense matrix: best value first, ties by the smaller column; -1 pads."""
    n, m = full.shape
    vals = np.zeros((n, k), dtype=full.dtype)
    idx = np.full((n, k), -1, dtype=np.int64)
    for i in range(n):
        cols = np.arange(m)
        v = full[i]
        if exclude_diagonal:
            keep = cols != i
            cols, v = cols[keep], v[keep]
        key = -v.astype(np.float64) if larger else v.astype(np.float64)
        order = np.lexsort((cols, key))[:k]
        vals[i, : len(order)] = v[order]
        idx[i, : len(order)] = cols[order]
    return vals, idx


def reference_threshold(full, t, larger, symmetric, both_halves, include_diagonal):
    n, m = full.shape
    # Scores against the threshold as spillway compares them (pairwise::detail::passes): a float32
    # score against float32(t), so a score equal to t as written passes (cosine 7/20 at 0.35,
    # Jaccard 7/10 at 0.7); float64 and integer scores against t in float64.
    if full.dtype == np.float32:
        keep = full >= np.float32(t) if larger else full <= np.float32(t)
    else:
        wide = full.astype(np.float64) if np.issubdtype(full.dtype, np.floating) else full
        keep = wide >= t if larger else wide <= t
    if symmetric:
        i, j = np.indices((n, m))
        if not both_halves:
            keep &= j >= i
        if not include_diagonal:
            keep &= i != j
    r, c = np.nonzero(keep)  # row-major order: sorted by row, then column
    return r, c, full[r, c]


_RSS_PRELUDE = """
import json as _json, resource as _resource
def _status_bytes(key):
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None
def _rss_now():
    return _status_bytes("VmRSS")
_result = {}
"""

_RSS_EPILOGUE = """
_result["ru_maxrss"] = _resource.getrusage(_resource.RUSAGE_SELF).ru_maxrss * 1024
_result["vm_hwm"] = _status_bytes("VmHWM")
print(_json.dumps(_result))
"""


def run_measuring_rss(code: str, timeout: float = 900) -> dict:
    """Runs `code` in a fresh Python and returns its ``_result`` dict plus its peak RSS in bytes:
    ``ru_maxrss`` (getrusage) and ``vm_hwm`` (/proc/self/status VmHWM, where Linux has it).
    `code` may call ``_rss_now()`` (current VmRSS) and fill ``_result``.

    Why through /bin/sh: at exec, Linux folds the old address space's high-water mark into the
    process's ru_maxrss (fs/exec.c, exec_mmap), and subprocess forks (or vforks) the pytest
    process, so a child exec'd straight from pytest reports at least pytest's own peak RSS -- on
    the GPU machine, with CuPy, PyTorch and CUDA contexts loaded, over 1 GiB, whatever the child
    did. The shell forks the child from its own few-MiB process instead (the command is not the
    shell's last, so it is not exec'd in place), and ru_maxrss is the child's own again."""
    body = _RSS_PRELUDE + textwrap.dedent(code) + _RSS_EPILOGUE
    out = subprocess.run(["/bin/sh", "-c", '"$0" -c "$1"; exit $?', sys.executable, body], capture_output=True,
                         text=True, timeout=timeout)
    assert out.returncode == 0, out.stdout + out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.fixture
def sigint_handled():
    """Python's own SIGINT handler for a test that delivers Ctrl-C. A process started in the
    background by a non-interactive shell (`cmd &`, as CI scripts may be) inherits SIGINT ignored,
    and then Python installs no handler: `_thread.interrupt_main()` and a real SIGINT do nothing,
    as they would not interrupt a user's script started that way either."""
    import signal

    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, old)
