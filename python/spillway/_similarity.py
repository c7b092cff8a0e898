"""spillway.similarity: all-pairs similarity of float32, float16 and bf16 rows (embeddings)."""

from __future__ import annotations

from typing import Optional, Sequence, Union

import numpy as np

from . import _arrays, _core
from ._checks import choice, integer, same_place
from ._errors import DTypeError, warn_host_fallback
from ._gram import (MAX_TOP_K, SINKS, _budget_bytes, _check_sink_args, _device_rows, _gpu, _pairwise_out, _row_ld,
                    _sparse_format)
from ._progress import run_with_progress
from ._report import deliver

METRICS = ("cosine", "ip", "euclidean")

# Element type -> the binding's code. bf16 is NumPy's ml_dtypes.bfloat16 (what CuPy 14 and JAX
# use), or uint16 bit patterns with bf16=True.
_CODES = {"float32": "f", "float16": "h", "bfloat16": "b"}


def _dtype_code(name: str, bf16: bool, who: str, what: str) -> str:
    if bf16:
        if name not in ("uint16", "bfloat16"):
            raise DTypeError(f"{who}: bf16=True reads uint16 bit patterns; {what} has dtype {name}")
        return "b"
    if name == "uint16":
        raise DTypeError(f"{who}: {what} is uint16; if it holds bf16 bit patterns pass bf16=True "
                        "(or a.view(ml_dtypes.bfloat16))")
    if name == "void16":
        raise DTypeError(f"{who}: {what} has a 2-byte void dtype (np.save writes ml_dtypes.bfloat16 arrays so, and "
                        "np.load reads them back as void): if it holds bf16, pass a.view(ml_dtypes.bfloat16), or "
                        "a.view(np.uint16) with bf16=True")
    code = _CODES.get(name)
    if code is None:
        hint = " (convert with .astype(np.float32))" if name in ("float64", "longdouble") else ""
        raise DTypeError(f"{who}: {what} has dtype {name}; spillway.similarity takes float32, float16 or bf16 rows{hint}")
    return code


def _host_rows(x, bf16: bool, what: str):
    """(array, code, ld) of host rows: 2-D, rows contiguous, rows of any positive stride."""
    a = np.asarray(x)
    if a.ndim != 2:
        raise ValueError(f"similarity: {what} must be 2-D (rows, dims); got shape {a.shape}"
                         + (" (one row: a[None, :])" if a.ndim == 1 else ""))
    code = _dtype_code(a.dtype.name, bf16, "similarity", what)
    rows, cols = a.shape
    item = a.dtype.itemsize
    if rows == 0 or cols == 0:  # no elements (NumPy may give such arrays any strides)
        return a, code, max(cols, 1)
    if cols > 1 and a.strides[1] != item:
        raise ValueError(f"similarity: the rows of {what} must be contiguous (column stride {item} bytes); got "
                         f"strides {a.strides}: pass np.ascontiguousarray({what})")
    if rows > 1 and (a.strides[0] % item or a.strides[0] < max(cols, 1) * item):
        raise ValueError(f"similarity: {what}'s row stride {a.strides[0]} bytes does not step over its {cols} "
                         f"columns of {item} bytes: pass np.ascontiguousarray({what})")
    ld = a.strides[0] // item if rows > 1 else max(cols, 1)
    return a, code, ld


def _check_binary(binary, sink, k, metric, has_b, include_diagonal, devices):
    """The binary mode's arguments (ValueError for values, TypeError for a non-integer)."""
    if binary is None:
        return
    c = integer("similarity", "binary", binary, "an integer in [k, 128]", compat=False)
    if sink != "topk" or has_b:
        raise ValueError("similarity: binary= is a mode of sink='topk' of A·Aᵀ (no b)")
    if metric != "cosine":
        raise ValueError(f"similarity: binary= ranks by the sign bits' angle: metric must be 'cosine', got {metric!r}")
    if include_diagonal:
        raise ValueError("similarity: binary= excludes the diagonal (include_diagonal=True is not taken)")
    if devices is not None and len(list(devices)) > 1:
        raise ValueError(f"similarity: binary= runs on one GPU; devices={list(devices)}")
    if not int(k) <= c <= MAX_TOP_K:
        raise ValueError(f"similarity: binary must be an integer in [k = {int(k)}, {MAX_TOP_K}]; got {binary!r}")


def _device_similarity_rows(x, stream, bf16: bool, what: str):
    d = _device_rows(x, stream, "similarity", what)
    ld = _row_ld(d) if d.shape[0] > 1 else max(d.shape[1], 1)
    return d, _dtype_code(d.dtype, bf16, "similarity", what), ld


def similarity(
    a,
    b=None,
    *,
    metric: str = "cosine",
    sink: str = "full",
    k: Optional[int] = None,
    threshold: Optional[float] = None,
    tf32: bool = False,
    budget: Union[str, int, None] = None,
    devices: Optional[Sequence[int]] = None,
    progress=True,
    include_diagonal: bool = False,
    both_halves: bool = False,
    cosine_zero: float = 0.0,
    check_finite: bool = True,
    bf16: bool = False,
    stream=None,
    host_fallback: Optional[bool] = None,
    report: Optional[dict] = None,
    return_report: bool = False,
    max_panel_rows: int = 0,
    format: str = "coo",
    binary: Optional[int] = None,
    _host_block_rows: int = 0,
    _register: bool = True,
):
    """All-pairs similarity of embedding rows: A·Aᵀ (the symmetric half only) or A·Bᵀ.

    Every row's nearest rows by cosine, inner product or Euclidean distance — ``sink="topk"`` —
    or all scores, or the pairs past a threshold, on the GPU's tensor cores (bf16/float16 with
    float accumulation; float32 in exact FP32, or TF32 with ``tf32=True``), out of core: rows in
    host memory larger than the card stream through it under ``budget`` on one or several GPUs.

    Parameters
    ----------
    a, b : 2-D rows (n x d; b has a's d): NumPy float32, float16 or bfloat16 (``ml_dtypes``)
        arrays, or uint16 bf16 bit patterns with ``bf16=True``; read-only and mmap'd arrays
        included; or CuPy/PyTorch device arrays (DLPack / ``__cuda_array_interface__``, used in
        place, in core on their GPU). Rows contiguous; any row stride.
    metric : "cosine" (a zero row scores ``cosine_zero`` against everything), "ip" (inner
        product) or "euclidean" (a distance: smaller is closer).
    sink : "full" (n x n, or n x m with b), "triangle" (upper triangle with the diagonal,
        row-major, n(n+1)/2), "condensed" (SciPy's ``pdist`` order), "topk" (``(values,
        indices)``, n x k, closest first, ties by the smaller index, -1 pads a short row; the row
        itself excluded unless ``include_diagonal``) or "threshold" (``scipy.sparse.coo_array`` of
        the pairs >= threshold, <= for Euclidean; upper triangle unless ``both_halves``).
    k : top-k list length, 1..128 (sink="topk").  threshold : the cut (sink="threshold").
    binary : sink="topk" of A·Aᵀ under cosine only: an **approximate** top-k from binary-quantized
        candidates — each row's ``binary`` (k..128) nearest rows by the Hamming distance of the
        rows' sign bits, rescored exactly, the best k kept. Every score is exact; a true neighbour
        outside its row's candidates is missed (recall: docs/similarity.md). One GPU (Hopper), all
        rows resident on it, no progress reports; with no GPU the host implementation (all
        pairs' Hamming distances: small inputs).
    format : sink="threshold": "coo" (``scipy.sparse.coo_array``, the default) or "csr"
        (``scipy.sparse.csr_array``).
    budget : device memory per GPU ("8GiB", bytes, or None for 80% of free memory).
    devices : GPU ordinals (default: all visible; device input runs on its own GPU). The top-k of
        bf16 / float16 / TF32 rows on Hopper (the fused job) runs on the GPUs named, each with
        lists of its own merged at the end, and with none named on the current GPU.
    progress : True for a tqdm bar (when tqdm is installed), False for none, or ``fn(done, total)``.
    check_finite : refuse rows holding NaN or infinity (ValueError naming the first such row)
        before anything runs; False skips the scan and such rows score what IEEE arithmetic gives.
    stream : device input only: the stream its pending writes are on (default: the framework's
        current stream); spillway waits for it, then runs on its own streams and returns when done.
    host_fallback : with no GPU, run the host implementation in double (default: yes, with a
        :class:`HostFallbackWarning` once); False raises RuntimeError instead.
    report : a dict to fill with what the job did (strips, devices, seconds, bytes moved; per device
        in ``tasks_per_device`` and ``bytes_per_device``).
    return_report : return ``(result, spillway.Report)`` instead of the result alone.

    Raises TypeError for a wrong kind of object or dtype (:class:`spillway.DTypeError`,
    :class:`spillway.ArgumentTypeError`), ValueError for values and shapes (NaN rows included),
    MemoryError for a budget too small (:class:`spillway.BudgetError`).

    Scores are float32. Results are NumPy arrays for host input; for device input the top-k
    lists and dense results are arrays of the input's framework on its GPU (threshold: a SciPy COO
    array on the host). Host rows that are not page-locked are page-locked for the job
    (``cudaHostRegister``) so their copies run by DMA; where the driver refuses (a read-only file
    mapping), they are copied from pageable memory. Ctrl-C cancels: :class:`spillway.Cancelled`
    carries the report.
    """
    choice("similarity", "metric", metric, METRICS)
    choice("similarity", "sink", sink, SINKS)
    _check_sink_args("similarity", sink, k, threshold, b is not None)
    _check_binary(binary, sink, k, metric, b is not None, include_diagonal, devices)
    sparse = _sparse_format("similarity", sink, format)
    budget_bytes = _budget_bytes(budget, "similarity")
    devs = [] if devices is None else [int(d) for d in devices]

    a_dev = _arrays.is_device_array(a)
    b_dev = b is not None and _arrays.is_device_array(b)
    if b is not None:
        same_place("similarity", a_dev, b_dev)
    da = None
    if a_dev:
        da, code, ld = _device_similarity_rows(a, stream, bf16, "a")
        ptr, (n, d), device, strm = da.ptr, da.shape, da.device, da.stream
        if b is not None:
            db, code_b, b_ld = _device_similarity_rows(b, stream if stream is not None else da.stream, bf16, "b")
            if db.device != device:
                raise ValueError(f"similarity: a is on GPU {device} but b on GPU {db.device}; in-core jobs need one GPU")
            b_ptr, b_rows, b_cols = db.ptr, db.shape[0], db.shape[1]
        if devs and devs != [device]:
            raise ValueError(f"similarity: device input runs on its own GPU ({device}); devices={devs} names others")
    else:
        if stream is not None:
            raise ValueError("similarity: stream= orders device input; a is host data")
        a, code, ld = _host_rows(a, bf16, "a")
        ptr, (n, d), device, strm = int(a.ctypes.data), a.shape, -1, 0
        if b is not None:
            b, code_b, b_ld = _host_rows(b, bf16, "b")
            b_ptr, b_rows, b_cols = int(b.ctypes.data), b.shape[0], b.shape[1]
    if b is None:
        b_ptr, b_rows, b_ld = 0, 0, 0
    else:
        if code_b != code:
            raise DTypeError("similarity: a and b must have the same dtype")
        if b_cols != d:
            raise ValueError(f"similarity: a has {d} columns but b has {b_cols}; A·Bᵀ needs rows of the same length")
    if tf32 and code != "f":
        raise ValueError("similarity: tf32=True is for float32 rows (bf16 and float16 always run on tensor cores)")

    if host_fallback is None:
        host_fallback = not a_dev and not devs and not _gpu()
        if host_fallback:
            warn_host_fallback("spillway.similarity", _core.no_gpu_reason())
    res = run_with_progress(
        lambda bar: _core._similarity(ptr, n, d, ld, b_ptr, b_rows, b_ld, code, metric, sink, int(k or 0),
                                      float(threshold or 0.0), bool(include_diagonal), bool(both_halves),
                                      float(cosine_zero), bool(tf32), bool(check_finite), budget_bytes, devs,
                                      bool(host_fallback), int(max_panel_rows), int(_host_block_rows), bool(_register),
                                      device, strm, bar, sparse is not None and format == "csr",
                                      int(binary or 0)),
        progress, f"spillway.similarity {sink}", report)
    if sink not in ("topk", "threshold") and da is not None:  # dense results of device input, on its GPU
        res["values"] = _arrays.from_numpy_like(da, res["values"])
    out = _pairwise_out(res, sink, n, n if b is None else b_rows, da, sparse, "spillway.similarity", "strips")
    return deliver(out, res["report"], None, return_report)
