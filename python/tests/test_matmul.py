"""spillway.matmul: host arrays through the out-of-core GEMM. The tests without the `gpu` fixture
run everywhere: with no GPU on the host GEMM (CI), on a GPU machine on the GPU."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import warnings

import numpy as np
import pytest

import spillway
from conftest import need

import ml_dtypes

BF16 = ml_dtypes.bfloat16
E4M3, E5M2 = ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2
FP8 = (np.dtype(E4M3), np.dtype(E5M2))
SUPPORTED = [np.float32, np.float64, np.float16, np.int8, BF16, np.complex64, E4M3, E5M2]


def no_gpu_env():
    env = dict(os.environ)
    env["CUDA_VISIBLE_DEVICES"] = ""
    return env


def mm(*args, **kw):
    kw.setdefault("progress", False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", spillway.HostFallbackWarning)
        return spillway.matmul(*args, **kw)


def operand(rng, shape, dtype, order="C"):
    if np.dtype(dtype) == np.int8:
        x = rng.integers(-128, 128, size=shape).astype(np.int8)
    elif np.dtype(dtype) == np.complex64:
        x = (rng.uniform(-1, 1, size=shape) + 1j * rng.uniform(-1, 1, size=shape)).astype(np.complex64)
    else:
        x = rng.uniform(-1, 1, size=shape).astype(dtype)
    return np.asarray(x, order=order)


def check(got, a, b, alpha=1.0, beta=0.0, c0=None, tf32=False):
    """Against float64 (int64 for int8) NumPy, within the GEMM's bound for the type."""
    if a.dtype == np.int8:
        want = alpha * (a.astype(np.int64) @ b.astype(np.int64))
        if beta != 0:
            want = want + beta * c0.astype(np.int64)
        np.testing.assert_array_equal(got.astype(np.int64), want)
        return
    cplx = a.dtype == np.complex64
    wide = np.complex128 if cplx else np.float64
    a64, b64 = a.astype(wide), b.astype(wide)
    want = alpha * (a64 @ b64) + (beta * c0.astype(wide) if beta != 0 else 0)
    s = abs(alpha) * (np.abs(a64) @ np.abs(b64)) + (abs(beta) * np.abs(c0.astype(wide)) if beta != 0 else 0)
    k = a.shape[1]
    # Inputs are exact in the accumulator (bf16, float16 and FP8 in float32); a complex multiply-add
    # rounds its real and imaginary parts (x2, and sqrt(2) for the modulus: 4 covers both). FP8 on
    # the tensor cores adds at reduced precision (2^-12 per addition; docs/gemm.md, "FP8"): these
    # tests' k stays within one promoted run of 128.
    eps = 2.0**-52 if a.dtype == np.float64 else 2.0**-12 if a.dtype in FP8 else 2.0**-23
    u = 2.0**-10 if tf32 else 0.0
    bound = (4.0 if cplx else 1.25) * ((k + 2) * eps + 2 * u) * s + 1e-30
    err = np.abs(got.astype(wide) - want)
    assert np.all(err <= bound), f"worst err/bound {np.max(err / bound):.3g} at {np.unravel_index(np.argmax(err / bound), err.shape)}"


@pytest.mark.parametrize("dtype", SUPPORTED)
@pytest.mark.parametrize("orders", ["CC", "CF", "FC", "FF"])
def test_matches_numpy_every_type_and_order(rng, dtype, orders):
    a = operand(rng, (67, 45), dtype, orders[0])
    b = operand(rng, (45, 38), dtype, orders[1])
    rep = {}
    c = mm(a, b, report=rep)
    assert c.shape == (67, 38) and c.dtype == spillway._matmul.RESULT_DTYPES[np.dtype(dtype)]
    check(c, a, b)
    assert rep["tasks_completed"] == rep["tasks_total"] >= 1 and not rep["cancelled"]


@pytest.mark.parametrize("dtype", SUPPORTED)
def test_alpha_beta_into_out_of_either_order(rng, dtype):
    a = operand(rng, (50, 33), dtype)
    b = operand(rng, (33, 41), dtype, "F")
    rdt = spillway._matmul.RESULT_DTYPES[np.dtype(dtype)]
    for order in "CF":
        c0 = np.asarray(operand(rng, (50, 41), np.int8 if rdt == np.int32 else rdt).astype(rdt), order=order)
        c = c0.copy(order=order)
        alpha, beta = (2, -3) if dtype == np.int8 else (1.5, -0.75)
        got = mm(a, b, out=c, alpha=alpha, beta=beta)
        assert got is c
        check(c, a, b, alpha, beta, c0)


def test_beta_zero_never_reads_out(rng):
    a, b = operand(rng, (20, 10), np.float32), operand(rng, (10, 30), np.float32)
    c = np.full((20, 30), np.nan, dtype=np.float32)
    mm(a, b, out=c)
    check(c, a, b)


def test_transposed_views_and_read_only_memmap(rng, tmp_path):
    x = operand(rng, (40, 60), np.float32)
    np.save(tmp_path / "x.npy", x)
    xm = np.load(tmp_path / "x.npy", mmap_mode="r")
    c = mm(xm.T, xm)  # (60, 40) @ (40, 60), the first operand a Fortran-ordered view
    check(c, x.T, x)


def test_empty_and_k_zero(rng):
    a = np.zeros((5, 0), np.float32)
    b = np.zeros((0, 7), np.float32)
    c = np.full((5, 7), 3.0, np.float32)
    mm(a, b, out=c, beta=0.5)
    np.testing.assert_array_equal(c, np.full((5, 7), 1.5, np.float32))
    assert mm(np.zeros((0, 4), np.float64), np.zeros((4, 3), np.float64)).shape == (0, 3)


@pytest.mark.parametrize(
    "call, error, message",
    [
        (lambda: mm(np.zeros((3, 4), np.float32), np.zeros((5, 2), np.float32)), ValueError, "do not chain"),
        (lambda: mm(np.zeros((3, 4), np.float32), np.zeros((4, 2), np.float64)), TypeError, "same dtype"),
        (lambda: mm(np.zeros((3, 4), np.int32), np.zeros((4, 2), np.int32)), TypeError, "dtype int32"),
        (lambda: mm(np.zeros((3,), np.float32), np.zeros((3, 2), np.float32)), ValueError, "must be 2-D"),
        (lambda: mm(np.zeros((3, 4), np.float32), np.zeros((4, 2), np.float32), beta=1.0), ValueError, "pass out="),
        (lambda: mm(np.zeros((3, 4), np.float64), np.zeros((4, 2), np.float64), tf32=True), ValueError, "tf32"),
        (lambda: mm(np.zeros((3, 4), np.float32), np.zeros((4, 2), np.float32), out=np.zeros((3, 3), np.float32)),
         ValueError, "out has shape"),
        (lambda: mm(np.zeros((3, 4), np.float16), np.zeros((4, 2), np.float16), out=np.zeros((3, 2), np.float16)),
         TypeError, "float32"),
        (lambda: mm(np.zeros((6, 8), np.float32)[::2, ::2], np.zeros((4, 2), np.float32)), ValueError,
         "np.ascontiguousarray"),
        (lambda: mm(np.zeros((3, 4), np.float32), np.zeros((4, 2), np.float32), budget=-5), ValueError, "budget"),
        (lambda: mm(np.zeros((3, 4), BF16), np.zeros((4, 2), BF16), out=np.zeros((3, 2), BF16)), TypeError,
         "float32"),
        (lambda: mm(np.zeros((3, 4), np.uint16), np.zeros((4, 2), np.uint16)), TypeError, "bfloat16"),
        (lambda: mm(np.zeros((3, 4), np.complex64), np.zeros((4, 2), np.complex64), alpha=1j), ValueError,
         "scalars are real"),
        (lambda: mm(np.zeros((3, 4), np.complex128), np.zeros((4, 2), np.complex128)), TypeError, "complex128"),
        (lambda: mm(np.zeros((3, 4), np.float32), np.zeros((4, 2), np.float32), scale_a=2.0), ValueError,
         "scale_a=2.0 is for FP8 inputs"),
        (lambda: mm(np.zeros((3, 4), E4M3), np.zeros((4, 2), E4M3), scale_b=0.0), ValueError,
         "scale_b=0.0; a per-tensor scale must be finite and non-zero"),
        (lambda: mm(np.zeros((3, 4), E4M3), np.zeros((4, 2), E4M3), scale_a=float("nan")), ValueError, "scale_a=nan"),
        (lambda: mm(np.zeros((3, 4), E5M2), np.zeros((4, 2), E5M2), scale_a=1e39), ValueError, "float32"),
        (lambda: mm(np.zeros((3, 4), E4M3), np.zeros((4, 2), E4M3), scale_a="2"), TypeError, "real number"),
        (lambda: mm(np.zeros((3, 4), E4M3), np.zeros((4, 2), E4M3), fp8_accumulation="exact"), ValueError,
         "fp8_accumulation"),
        (lambda: mm(np.zeros((3, 4), E4M3), np.zeros((4, 2), E5M2)), TypeError, "same dtype"),
        (lambda: mm(np.zeros((3, 4), np.uint8), np.zeros((4, 2), np.uint8)), TypeError, "float8_e4m3fn"),
    ],
)
def test_bad_input_is_refused_clearly(call, error, message):
    with pytest.raises(error, match=message):
        call()


@pytest.mark.parametrize("dtype", [E4M3, E5M2])
@pytest.mark.parametrize("accumulation", ["promoted", "fast"])
def test_fp8_scales_multiply_the_product(rng, dtype, accumulation):
    """alpha·scale_a·scale_b·A·B + beta·C: the scales are cuBLASLt's per-tensor dequantization."""
    a, b = operand(rng, (40, 300), dtype), operand(rng, (300, 24), dtype, "F")
    c0 = operand(rng, (40, 24), np.float32)
    c = c0.copy()
    mm(a, b, out=c, alpha=0.5, beta=2.0, scale_a=0.25, scale_b=6.0, fp8_accumulation=accumulation)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    want = 0.75 * (a64 @ b64) + 2.0 * c0
    # Runs of 128 at 2^-12 (promoted) or the whole k (fast) on the tensor cores; float32 on the host.
    run = 300 if accumulation == "fast" else 128
    s = 0.75 * (np.abs(a64) @ np.abs(b64)) + 2.0 * np.abs(c0)
    bound = 1.25 * ((run + 2) * 2.0**-12 + 6 * 2.0**-23) * s + 1e-30
    assert np.all(np.abs(c - want) <= bound), f"worst err/bound {np.max(np.abs(c - want) / bound):.3g}"


def test_out_overlapping_an_operand_is_refused():
    x = np.zeros((4, 4), np.float32)
    with pytest.raises(ValueError, match="overlaps"):
        mm(x, x, out=x)


def test_progress_callback_sees_every_block(rng):
    a, b = operand(rng, (300, 64), np.float32), operand(rng, (64, 200), np.float32)
    seen = []
    c = mm(a, b, progress=lambda done, total: seen.append((done, total)), budget=2 << 20)
    check(c, a, b)
    assert seen and seen[-1][0] == seen[-1][1] >= 1, seen


def test_progress_exception_cancels_and_leaves_unwritten_blocks(rng):
    a, b = operand(rng, (2048, 256), np.float32), operand(rng, (256, 2048), np.float32)
    c = np.full((2048, 2048), np.nan, np.float32)

    def stop(done, total):
        if done >= 1 and done < total:
            raise RuntimeError("stop here")

    with pytest.raises(RuntimeError, match="stop here"):
        mm(a, b, out=c, progress=stop, budget=8 << 20)
    # Whatever was written is right; the rest is untouched (NaN).
    want = a.astype(np.float64) @ b.astype(np.float64)
    written = ~np.isnan(c)
    assert np.all(np.abs(c[written] - want[written]) <= 1e-3)


class _FakeDeviceArray:
    """Looks like device data to spillway's checks (never dereferenced by the tests that use it)."""

    def __init__(self, shape, typestr="<f4"):
        self.__cuda_array_interface__ = {"shape": shape, "typestr": typestr, "data": (0, False), "version": 3}


def test_device_and_host_operands_do_not_mix():
    with pytest.raises(TypeError, match="both on the device"):
        mm(_FakeDeviceArray((3, 4)), np.zeros((4, 2), np.float32))
    with pytest.raises(TypeError, match="both on the device"):
        mm(np.zeros((3, 4), np.float32), _FakeDeviceArray((4, 2)))


@pytest.mark.parametrize("kw", [{"budget": "1GiB"}, {"devices": [0]}, {"host_fallback": True}])
def test_out_of_core_options_are_refused_for_device_arrays(kw):
    with pytest.raises(ValueError, match="in core on their own device"):
        mm(_FakeDeviceArray((3, 4)), _FakeDeviceArray((4, 2)), **kw)


def test_stream_is_for_device_arrays():
    with pytest.raises(ValueError, match="stream= is for device arrays"):
        mm(np.zeros((3, 4), np.float32), np.zeros((4, 2), np.float32), stream=0)


# ---- on the GPU -------------------------------------------------------------------------------------


def test_gpu_out_of_core_many_blocks_matches_numpy(gpu, rng):
    """A budget far below the operands: many blocks, k whole, every type, the GPU path."""
    for dtype in SUPPORTED:
        a = operand(rng, (1500, 700), dtype)
        b = operand(rng, (700, 1300), dtype, "F")
        rep = {}
        c = mm(a, b, budget=6 << 20, report=rep)
        check(c, a, b)
        assert not rep["on_host"] and rep["devices"] and rep["tasks_total"] >= 9, rep
        assert rep["bytes_moved"] > 0


@pytest.mark.parametrize("dtype", SUPPORTED)
def test_gpu_pageable_operands_page_locked_or_staged(gpu, rng, dtype):
    """NumPy operands page-locked for the job (each subset of A, B, C) or staged: the same product,
    and the caller's memory is pageable again afterwards."""
    a = operand(rng, (1100, 600), dtype)
    b = operand(rng, (600, 900), dtype)  # C-ordered: NumPy's layout, B MN-major
    rdt = spillway._matmul.RESULT_DTYPES[np.dtype(dtype)]
    c0 = operand(rng, (1100, 900), np.int8 if rdt == np.int32 else rdt).astype(rdt)
    for mask in (0, 1, 2, 4, 7):
        c = c0.copy()
        mm(a, b, out=c, alpha=2.0, beta=-1.0, budget=6 << 20, _register=mask)
        check(c, a, b, alpha=2.0, beta=-1.0, c0=c0)
    c = c0.copy()
    mm(a, b, out=c, alpha=2.0, beta=-1.0, budget=6 << 20)  # the default subset for the type
    check(c, a, b, alpha=2.0, beta=-1.0, c0=c0)
    import importlib.util

    need(importlib.util.find_spec("cupy") is not None, "CuPy is not installed (it reads the pointers' attributes)")
    import cupy

    for x in (a, b, c):  # 0: cudaMemoryTypeUnregistered -- no registration outlived the job
        assert cupy.cuda.runtime.pointerGetAttributes(x.ctypes.data).type == 0


def test_gpu_tf32_within_its_bound(gpu, rng):
    a, b = operand(rng, (900, 1100), np.float32), operand(rng, (1100, 700), np.float32)
    check(mm(a, b, tf32=True, budget=8 << 20), a, b, tf32=True)


def test_gpu_no_fallback_with_a_gpu(gpu, rng):
    a, b = operand(rng, (30, 20), np.float32), operand(rng, (20, 10), np.float32)
    rep = {}
    mm(a, b, host_fallback=False, report=rep)
    assert not rep["on_host"]


def test_no_gpu_without_fallback_raises():
    """With the GPUs hidden: host_fallback=False refuses, naming the option; the default runs on
    the host and says so."""
    code = textwrap.dedent(
        """
        import warnings
        import numpy as np, spillway
        assert not spillway.gpu_available()
        a = np.arange(6, dtype=np.float32).reshape(2, 3)
        try:
            spillway.matmul(a, a.T, host_fallback=False, progress=False)
        except RuntimeError as e:
            print(e)
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            rep = {}
            c = spillway.matmul(a, a.T, progress=False, report=rep)
        print(rep["on_host"], c.tolist(), [type(x.message).__name__ for x in w])
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env=no_gpu_env()).stdout
    assert "needs a GPU, and there is none" in out and "host_fallback" in out, out
    assert "True [[5.0, 14.0], [14.0, 50.0]] ['HostFallbackWarning']" in out, out


@pytest.mark.parametrize("order", ["C", "F"])
def test_pinned_empty_is_an_array_of_that_layout(order):
    x = spillway.pinned_empty((7, 5), np.float16, order=order)
    assert x.shape == (7, 5) and x.dtype == np.float16
    assert x.flags.c_contiguous if order == "C" else x.flags.f_contiguous
    x[...] = np.arange(35, dtype=np.float16).reshape(7, 5)
    assert float(x[6, 4]) == 34.0
    assert spillway.pinned_empty(0, np.int8).shape == (0,)
    with pytest.raises(ValueError, match="order"):
        spillway.pinned_empty((2, 2), order="K")


def test_matmul_of_pinned_arrays(rng):
    a = spillway.pinned_empty((90, 70), np.float32)
    b = spillway.pinned_empty((70, 60), np.float32, order="F")
    a[...] = operand(rng, (90, 70), np.float32)
    b[...] = operand(rng, (70, 60), np.float32)
    c = spillway.pinned_empty((90, 60), np.float32)
    rep = {}
    assert mm(a, b, out=c, report=rep) is c
    check(c, a, b)


DEVICE_TYPES = ["float32", "float64", "float16", "int8", "bfloat16", "complex64", "float8_e4m3fn", "float8_e5m2"]


def _to_framework(fw, x):
    if fw == "cupy":
        import cupy

        return cupy.asarray(x)
    import torch

    if x.dtype == BF16:
        return torch.from_numpy(x.view(np.uint16).astype(np.int16)).view(torch.bfloat16).cuda()
    if x.dtype in FP8:
        return torch.from_numpy(np.ascontiguousarray(x).view(np.uint8)).cuda().view(getattr(torch, x.dtype.name))
    return torch.from_numpy(x).cuda()


def _from_framework(fw, y):
    if fw == "cupy":
        return y.get()
    return y.cpu().numpy()


@pytest.mark.parametrize(
    "fw, dtype",
    # CuPy has no FP8 arrays: FP8 from PyTorch only.
    [(fw, dt) for fw in ("cupy", "torch") for dt in DEVICE_TYPES if not (fw == "cupy" and dt.startswith("float8"))])
def test_gpu_device_arrays_in_core_match_numpy(gpu, rng, fw, dtype):
    """Device arrays: spillway's in-core GEMM on their device, on the inputs' stream; the result in
    the first input's framework; poisoned out= written whole; C-order and transposed views."""
    import importlib.util

    need(importlib.util.find_spec(fw) is not None, f"{fw} is not installed")
    dt = BF16 if dtype == "bfloat16" else np.dtype(getattr(ml_dtypes, dtype)) if dtype.startswith("float8") \
        else np.dtype(dtype)
    a = operand(rng, (130, 70), dt)
    b = operand(rng, (70, 90), dt)
    da, db = _to_framework(fw, a), _to_framework(fw, b)
    rep = {}
    dc = mm(da, db, report=rep)
    assert type(dc).__module__.split(".")[0] == type(da).__module__.split(".")[0]
    got = _from_framework(fw, dc)
    assert got.dtype == spillway._matmul.RESULT_DTYPES[np.dtype(dt)]
    check(got, a, b)
    assert rep["devices"] == [0] and rep["tasks_total"] == 1
    # out= given (poisoned where it can be), alpha and beta, and a transposed view of b.
    rdt = spillway._matmul.RESULT_DTYPES[np.dtype(dt)]
    c0 = operand(rng, (130, 90), np.int8 if rdt == np.int32 else rdt).astype(rdt)
    dcc = _to_framework(fw, c0.copy())
    bt = operand(rng, (90, 70), dt)
    dbt = _to_framework(fw, bt)
    dbt_t = dbt.T
    alpha, beta = (2, -3) if dtype == "int8" else (1.5, -0.75)
    out = mm(da, dbt_t, out=dcc, alpha=alpha, beta=beta)
    assert out is dcc
    check(_from_framework(fw, dcc), a, np.ascontiguousarray(bt.T), alpha, beta, c0)
