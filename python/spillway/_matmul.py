"""spillway.matmul: C = alpha·A·B + beta·C of host arrays, out of core on the GPUs."""

from __future__ import annotations

import time
from typing import Optional, Sequence, Union

import numpy as np

from . import _arrays, _core
from ._checks import choice, is_integer
from ._errors import ArgumentTypeError, Cancelled, DTypeError, warn_host_fallback
from ._gram import _budget_bytes
from ._progress import run_with_progress
from ._report import deliver, one_launch

# Input dtype -> the dtype of C (the accumulator's for float16, bf16 and int8).
RESULT_DTYPES = {
    np.dtype(np.float32): np.dtype(np.float32),
    np.dtype(np.float64): np.dtype(np.float64),
    np.dtype(np.float16): np.dtype(np.float32),
    np.dtype(np.int8): np.dtype(np.int32),
    np.dtype(np.complex64): np.dtype(np.complex64),
}
# FP8 dtype name -> its NumPy dtype (ml_dtypes) where ml_dtypes is importable.
FP8_DTYPES: dict = {}
try:  # bf16 and FP8: NumPy's ml_dtypes (what CuPy 14 and JAX use)
    import ml_dtypes as _ml_dtypes

    BFLOAT16 = np.dtype(_ml_dtypes.bfloat16)
    RESULT_DTYPES[BFLOAT16] = np.dtype(np.float32)
    for _name in ("float8_e4m3fn", "float8_e5m2"):
        FP8_DTYPES[_name] = np.dtype(getattr(_ml_dtypes, _name))
        RESULT_DTYPES[FP8_DTYPES[_name]] = np.dtype(np.float32)
except ImportError:  # pragma: no cover - ml_dtypes is a dependency of the package
    BFLOAT16 = None

_TYPES_TEXT = ("float32, float64, float16, bf16 (ml_dtypes.bfloat16), complex64, int8 or FP8 (ml_dtypes.float8_e4m3fn, "
               "float8_e5m2; torch.float8_e4m3fn, torch.float8_e5m2 on the device)")
_FP8_ACCUMULATION = ("promoted", "fast")


def _fp8_arguments(fp8: str, scale_a, scale_b, fp8_accumulation: str) -> tuple:
    """Checks matmul's FP8 arguments: (scale_a, scale_b, fast) as floats and a bool. ``fp8`` is
    the FP8 dtype name of the inputs, "" for other inputs (then the scales must stay 1)."""
    choice("matmul", "fp8_accumulation", fp8_accumulation, _FP8_ACCUMULATION)
    out = []
    for name, v in (("scale_a", scale_a), ("scale_b", scale_b)):
        if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)):
            raise ArgumentTypeError(f"matmul: {name} must be a real number, got {type(v).__name__}")
        f = float(v)
        if fp8 and (not np.isfinite(f) or f == 0.0 or abs(f) > float(np.finfo(np.float32).max)):
            raise ValueError(f"matmul: {name}={v!r}; a per-tensor scale must be finite and non-zero in float32")
        if not fp8 and f != 1.0:
            raise ValueError(f"matmul: {name}={v!r} is for FP8 inputs (float8_e4m3fn, float8_e5m2); fold a scale of "
                             "other inputs into alpha")
        out.append(f)
    return out[0], out[1], fp8_accumulation == "fast"


def _register_mask(dtype: np.dtype) -> int:
    """Which operands the job page-locks where they are pageable (bit 0 A, 1 B, 2 C), by what ran
    fastest from NumPy memory on the H200 (32768², 8 GiB budget, python/benchmarks/matmul_bench.py):
    float16 all three (0.52 s; 0.60 s with A and B, 0.83 s with B, 1.52 s staged), float32 B only
    (0.53 s; 0.66 s staged, 0.68 s with A and B, 0.81 s with all three: locking a 4-byte A or C
    costs more than staging it). int8 follows float16 and float64 float32, by element size."""
    return 7 if dtype.itemsize <= 2 else 2


def _host_matrix(x, name: str) -> np.ndarray:
    if _arrays.is_device_array(x):
        raise TypeError(f"matmul: {name} is a device array and the other operand is not; pass both on the device "
                        "(in core, on their device) or both in host memory (out of core)")
    a = np.asarray(x)
    if a.ndim != 2:
        raise ValueError(f"matmul: {name} must be 2-D, got {a.ndim}-D with shape {a.shape}")
    if a.dtype not in RESULT_DTYPES:
        hint = " (if it holds bf16 bit patterns: .view(ml_dtypes.bfloat16))" if a.dtype == np.uint16 else \
            " (if it holds FP8 bit patterns: .view(ml_dtypes.float8_e4m3fn))" if a.dtype == np.uint8 else \
            " (convert with .astype(...))"
        raise DTypeError(f"matmul: {name} has dtype {a.dtype}; spillway.matmul takes {_TYPES_TEXT}{hint}")
    return a


def pinned_empty(shape, dtype=np.float32, order: str = "C") -> np.ndarray:
    """An uninitialised NumPy array in page-locked host memory (``cudaHostAlloc``), C- or
    Fortran-ordered; ordinary memory where no GPU is usable. GPU copies of page-locked arrays run
    by DMA at the link's full rate, where NumPy's own (pageable) memory is page-locked for each
    call or copied through pinned staging buffers by host threads: ``spillway.matmul`` of 32768²
    arrays on the H200 took 0.27 s (float32, ``tf32=True``) and 0.15 s (float16) from page-locked
    arrays, 0.53 s and 0.52 s from NumPy's (python/benchmarks/matmul_bench.py). The memory is freed
    with the last
    array viewing it."""
    dt = np.dtype(dtype)
    choice("pinned_empty", "order", order, ("C", "F"))
    shape = (shape,) if is_integer(shape) else tuple(shape)
    if not all(is_integer(s) for s in shape):
        raise ArgumentTypeError(f"pinned_empty: shape must be an int or a sequence of ints, got {shape!r}")
    shape = tuple(int(s) for s in shape)
    if any(s < 0 for s in shape):
        raise ValueError(f"pinned_empty: negative dimension in shape {shape}")
    count = int(np.prod(shape, dtype=np.int64))
    raw = _core._host_bytes(count * dt.itemsize, _core.device_count() > 0)
    return raw.view(dt).reshape(shape, order=order)


def matmul(
    a,
    b,
    *,
    out: Optional[np.ndarray] = None,
    alpha: float = 1.0,
    beta: float = 0.0,
    tf32: bool = False,
    scale_a: float = 1.0,
    scale_b: float = 1.0,
    fp8_accumulation: str = "promoted",
    budget: Union[str, int, None] = None,
    devices: Optional[Sequence[int]] = None,
    progress=True,
    host_fallback: Optional[bool] = None,
    report: Optional[dict] = None,
    return_report: bool = False,
    stream=None,
    _register: Optional[int] = None,
):
    """``alpha * a @ b + beta * out`` of host arrays, streamed through the GPUs under a budget.

    The out-of-core GEMM of spillway (``gemm_out_of_core``): A, B and C stay in host memory
    (NumPy arrays, ``np.load(..., mmap_mode="r")`` files included) and move through the cards in
    panels and blocks chosen to move the fewest bytes, copies overlapped with the tensor-core
    (or, for exact float32, CUDA-core) GEMMs of the blocks; one or several GPUs.

    Parameters
    ----------
    a, b : 2-D host arrays of one dtype, ``a.shape[1] == b.shape[0]``: float32 (exact FP32, or
        TF32 tensor cores with ``tf32=True``), float64, float16 or bf16 (``ml_dtypes.bfloat16``;
        both give float32 results, summed in float32 on the tensor cores), complex64 (results in
        complex64; alpha and beta real), int8 (results in int32, exact) or FP8
        (``ml_dtypes.float8_e4m3fn`` / ``float8_e5m2``; on the device ``torch.float8_e4m3fn`` /
        ``torch.float8_e5m2``; results in float32, products summed in float32 on Hopper's FP8 tensor
        cores). C- or Fortran-ordered (a transposed view such as ``x.T`` is read in place); other
        strides are refused.
    out : the result array (a new C-ordered array if None): shape (a.shape[0], b.shape[1]),
        dtype float32 / float64 / int32 as above, C- or Fortran-ordered, not overlapping a or b.
        Needed when ``beta != 0`` (C is read); with ``beta == 0`` it is never read.
    alpha, beta : the scalars.
    scale_a, scale_b : FP8 only: per-tensor dequantization scales (cuBLASLt's convention), the
        result is ``alpha * scale_a * scale_b * a @ b + beta * out``; 1 for other inputs.
    fp8_accumulation : FP8 only: "promoted" (default: every 128 products of k summed on the tensor
        cores, then added in float32 registers) or "fast" (the tensor cores' reduced-precision
        accumulation over the whole k; faster, less accurate for long k). Host GEMMs sum in float32.
    budget : device memory per GPU ("8GiB", bytes, or None for 80% of free memory).
    devices : GPU ordinals (default: all visible).
    progress : True for a tqdm bar (when tqdm is installed), False for none, or ``fn(done, total)``.
    host_fallback : with no GPU, run the host GEMM (default: yes, with a
        :class:`HostFallbackWarning` once; float32 is then exact even with ``tf32=True``); False
        raises RuntimeError instead.
    report : a dict to fill with what the job did (blocks, devices, seconds, bytes moved; per device
        in ``tasks_per_device`` and ``bytes_per_device``).
    return_report : return ``(out, spillway.Report)`` instead of ``out`` alone.
    stream : device arrays only: the CUDA stream to enqueue on (an int handle, a CuPy/PyTorch/Numba
        stream or anything with ``__cuda_stream__``; default: the inputs' current stream).

    Device arrays (CuPy, PyTorch, Numba, anything with DLPack or ``__cuda_array_interface__``), both
    on one device: spillway's in-core GEMM on that device, enqueued on ``stream`` (the inputs' own
    stream by default) without waiting; ``out`` (a device array of the result dtype) is made in
    the first input's framework when not given. ``budget``, ``devices`` and ``host_fallback`` do
    not apply (ValueError where given with device arrays); ``progress`` is ignored.

    Raises TypeError for a wrong kind of object or dtype (:class:`spillway.DTypeError`; a device
    array is refused: ``matmul`` multiplies host arrays), ValueError for values and shapes,
    MemoryError for a budget too small (:class:`spillway.BudgetError`). Blocks until ``out`` is
    written.

    NumPy memory is pageable: the job page-locks the operands whose staging costs more than locking
    them (``cudaHostRegister``, undone after; B for float32/float64, all three for float16/int8) and
    copies the others through pinned staging buffers; arrays from :func:`pinned_empty` skip both. Ctrl-C cancels:
    :class:`spillway.Cancelled` carries the report (``completed_tasks``) and ``out``, whose
    completed blocks are written and the rest untouched.
    """
    if _arrays.is_device_array(a) and _arrays.is_device_array(b):
        for name, v in (("budget", budget), ("devices", devices), ("host_fallback", host_fallback)):
            if v is not None:
                raise ValueError(f"matmul: {name}= is for host arrays (out of core); device arrays are multiplied "
                                 "in core on their own device")
        return _matmul_device(a, b, out, alpha, beta, tf32, stream, report, return_report, scale_a, scale_b,
                              fp8_accumulation)
    if stream is not None:
        raise ValueError("matmul: stream= is for device arrays; host arrays run on spillway's own streams")
    a = _host_matrix(a, "a")
    b = _host_matrix(b, "b")
    if a.dtype != b.dtype:
        raise DTypeError(f"matmul: a is {a.dtype} and b is {b.dtype}; both must have the same dtype")
    if a.shape[1] != b.shape[0]:
        raise ValueError(f"matmul: shapes {a.shape} and {b.shape} do not chain (a has {a.shape[1]} columns, b "
                         f"{b.shape[0]} rows)")
    if tf32 and a.dtype != np.float32:
        raise ValueError(f"matmul: tf32=True is for float32 inputs, not {a.dtype}")
    for name, v in (("alpha", alpha), ("beta", beta)):
        if isinstance(v, (complex, np.complexfloating)) and v.imag != 0:
            raise ValueError(f"matmul: {name}={v!r}: the scalars are real (complex64 inputs too)")
    fp8 = a.dtype.name if a.dtype.name in FP8_DTYPES else ""
    sa, sb, fast = _fp8_arguments(fp8, scale_a, scale_b, fp8_accumulation)
    rdt = RESULT_DTYPES[a.dtype]
    shape = (a.shape[0], b.shape[1])
    if out is None:
        if beta != 0:
            raise ValueError(f"matmul: beta={beta} reads C; pass out= (the C to scale and add to)")
        out = np.empty(shape, dtype=rdt)
    else:
        if not isinstance(out, np.ndarray):
            raise TypeError(f"matmul: out must be a NumPy array, got {type(out).__name__}")
        if out.shape != shape:
            raise ValueError(f"matmul: out has shape {out.shape}; the product is {shape}")
        if out.dtype != rdt:
            raise DTypeError(f"matmul: out has dtype {out.dtype}; {a.dtype} inputs give {rdt}")
        if not out.flags.writeable:
            raise ValueError("matmul: out is read-only")
        if np.may_share_memory(out, a) or np.may_share_memory(out, b):
            raise ValueError("matmul: out overlaps a or b; blocks of C would be written while A and B are read")
    budget_bytes = _budget_bytes(budget, "matmul")
    devs = [] if devices is None else [int(d) for d in devices]
    if host_fallback is None:
        host_fallback = not devs and _core.device_count() == 0
        if host_fallback:
            warn_host_fallback("spillway.matmul", _core.no_gpu_reason())
    mask = _register_mask(a.dtype) if _register is None else int(_register)
    # bf16 and FP8 reach the binding as their bit patterns (NumPy's buffer protocol knows neither).
    bf16 = BFLOAT16 is not None and a.dtype == BFLOAT16
    a_in, b_in = (a.view(np.uint16), b.view(np.uint16)) if bf16 else (a.view(np.uint8), b.view(np.uint8)) if fp8 \
        else (a, b)
    res = run_with_progress(
        lambda bar: _core._matmul(a_in, b_in, out, float(np.real(alpha)), float(np.real(beta)), bool(tf32),
                                  budget_bytes, devs, bool(host_fallback), mask, bar, bf16, fp8, sa, sb, fast),
        progress, "spillway.matmul", report)
    rep = res["report"]
    if res["interrupted"] or rep["cancelled"]:
        raise Cancelled(
            f"spillway.matmul cancelled: {rep['tasks_completed']} of {rep['tasks_total']} blocks completed "
            "(the exception's .report lists them, .partial is out)",
            rep,
            out,
        )
    return deliver(out, rep, None, return_report)


_DEVICE_RESULT = {"float32": "float32", "float64": "float64", "float16": "float32", "bfloat16": "float32",
                  "int8": "int32", "complex64": "complex64", "float8_e4m3fn": "float32", "float8_e5m2": "float32"}


def _fp8_device_view(x):
    """A PyTorch FP8 tensor as (its uint8 view, its dtype name), which DLPack may not export; any
    other array as (itself, None)."""
    name = str(getattr(x, "dtype", ""))
    if _arrays.framework_of(x) == "torch" and name in ("torch.float8_e4m3fn", "torch.float8_e5m2"):
        import torch

        return x.view(torch.uint8), name[len("torch."):]
    return x, None


def _matmul_device(a, b, out, alpha, beta, tf32, stream, report, return_report, scale_a=1.0, scale_b=1.0,
                   fp8_accumulation="promoted"):
    """matmul of device arrays: in core on their device, enqueued on the stream, not waited for."""
    (a, fa), (b, fb) = _fp8_device_view(a), _fp8_device_view(b)
    da = _arrays.device_array(a, stream)
    db = _arrays.device_array(b, da.stream if stream is None else stream)
    if fa is not None:
        da.dtype = fa
    if fb is not None:
        db.dtype = fb
    for name, d in (("a", da), ("b", db)):
        if len(d.shape) != 2:
            raise ValueError(f"matmul: {name} must be 2-D, got shape {d.shape}")
        if d.dtype not in _DEVICE_RESULT:
            raise DTypeError(f"matmul: {name} has dtype {d.dtype}; spillway.matmul takes {_TYPES_TEXT}")
    if da.dtype != db.dtype:
        raise DTypeError(f"matmul: a is {da.dtype} and b is {db.dtype}; both must have the same dtype")
    if da.device != db.device:
        raise ValueError(f"matmul: a is on device {da.device} and b on device {db.device}; device arrays are "
                         "multiplied in core on their one device")
    if da.shape[1] != db.shape[0]:
        raise ValueError(f"matmul: shapes {da.shape} and {db.shape} do not chain (a has {da.shape[1]} columns, b "
                         f"{db.shape[0]} rows)")
    if tf32 and da.dtype != "float32":
        raise ValueError(f"matmul: tf32=True is for float32 inputs, not {da.dtype}")
    for name, v in (("alpha", alpha), ("beta", beta)):
        if isinstance(v, (complex, np.complexfloating)) and v.imag != 0:
            raise ValueError(f"matmul: {name}={v!r}: the scalars are real (complex64 inputs too)")
    fp8 = da.dtype if da.dtype.startswith("float8") else ""
    sa, sb, fast = _fp8_arguments(fp8, scale_a, scale_b, fp8_accumulation)
    shape = (da.shape[0], db.shape[1])
    rdt = _DEVICE_RESULT[da.dtype]
    if out is None:
        if beta != 0:
            raise ValueError(f"matmul: beta={beta} reads C; pass out= (the C to scale and add to)")
        out, _ = _arrays.empty_like_framework(da, shape, rdt)
    if not _arrays.is_device_array(out):
        raise TypeError(f"matmul: out must be a device array with device inputs, got {type(out).__name__}")
    dc = _arrays.device_array(out, da.stream, writable=True)
    if dc.shape != shape:
        raise ValueError(f"matmul: out has shape {dc.shape}; the product is {shape}")
    if dc.device != da.device:
        raise ValueError(f"matmul: out is on device {dc.device}, the inputs on device {da.device}")
    strides = [*da.strides, *db.strides, *dc.strides]
    t0 = time.perf_counter()
    _core._matmul_device(da.ptr, db.ptr, dc.ptr, da.shape[0], da.shape[1], db.shape[1], strides, da.dtype,
                         dc.dtype, float(np.real(alpha)), float(np.real(beta)), bool(tf32), da.device, da.stream, sa,
                         sb, fast)
    return deliver(out, one_launch(t0, da.device), report, return_report)
