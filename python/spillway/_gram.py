"""spillway.gram, spillway.pack_bits and spillway.from_packed_bytes."""

from __future__ import annotations

import mmap
import time
from typing import Optional, Sequence, Union

import numpy as np

from . import _arrays, _core
from ._core import BitMatrix
from ._checks import choice, integer, is_integer, real, same_place
from ._errors import Cancelled, DTypeError, warn_host_fallback
from ._progress import run_with_progress
from ._report import deliver, one_launch

METRICS = ("counts", "jaccard", "cosine", "hamming")
SINKS = ("full", "triangle", "condensed", "topk", "threshold")
MAX_TOP_K = 128  # spillway::pairwise::max_top_k

# Rows are packed in blocks of about this many input bytes: an mmap'd file is read once, in
# order, and each block's pages are released after packing (see _release_pages).
_PACK_BLOCK_BYTES = 32 << 20


def _gpu() -> bool:
    return _core.device_count() > 0


def _file_mapping(a: np.ndarray) -> Optional[mmap.mmap]:
    """The shared file mapping under an np.memmap / np.load(mmap_mode=...) array whose pages may be
    dropped after reading, if there is one.

    Only shared mappings qualify: their pages are the file's (page cache), so dropping them loses
    nothing. A copy-on-write mapping (``mmap_mode="c"``) is skipped: MADV_DONTNEED would throw away
    the caller's in-memory edits and show the file's bytes again. A bare ``mmap.mmap`` (say under
    ``np.frombuffer``) does not say whether it is shared, so only a read-only one (ACCESS_READ,
    always shared) qualifies."""
    obj = a
    for _ in range(64):
        if isinstance(obj, mmap.mmap):
            return obj if memoryview(obj).readonly else None
        nxt = getattr(obj, "_mmap", None)
        if isinstance(nxt, mmap.mmap):
            # np.memmap normalises its mode to "r", "r+", "w+" (all MAP_SHARED) or "c" (MAP_PRIVATE).
            return nxt if getattr(obj, "mode", None) in ("r", "r+", "w+") else None
        obj = getattr(obj, "base", None)
        if obj is None:
            return None
    return None


def _release_pages(mm: mmap.mmap, base_addr: int, first: int, last: int) -> None:
    """Drops the pages of file bytes [first, last) (addresses) from this process's memory.

    The mapping is a shared view of a file (see _file_mapping), so MADV_DONTNEED only unmaps the
    pages (the page cache keeps them, tmpfs/shm included; a later read maps them again): the
    resident set stays one block, however large the file. Only whole pages inside the range are
    released."""
    if not hasattr(mm, "madvise") or not hasattr(mmap, "MADV_DONTNEED"):
        return
    page = mmap.PAGESIZE
    lo = -(-(first - base_addr) // page) * page
    hi = ((last - base_addr) // page) * page
    if hi > lo:
        try:
            mm.madvise(mmap.MADV_DONTNEED, lo, hi - lo)
        except (OSError, ValueError):
            pass


def _mapping_address(mm: mmap.mmap) -> int:
    return int(np.frombuffer(mm, dtype=np.uint8, count=1).ctypes.data)


def pack_bits(
    a,
    *,
    nonzero_as_one: bool = False,
    pinned: Optional[bool] = None,
    stream=None,
) -> BitMatrix:
    """Packs a 2-D 0/1 array into a :class:`BitMatrix` (32 columns per word).

    ``a``: a NumPy array (bool or any integer dtype; uint8/int8/bool are packed straight from
    memory), including a read-only ``np.load(path, mmap_mode="r")`` array, which is read in row
    blocks of ~32 MiB and released block by block, so a file larger than RAM packs with one
    block resident; or a CuPy/PyTorch/Numba device array (packed on its GPU, the bits then
    copied to host memory). Rows must be contiguous (column stride 1). A value other than 0 or
    1 raises ValueError naming its row and column, unless ``nonzero_as_one``.

    ``pinned``: page-lock the bits (default: when a GPU is present), so GPU jobs copy them at
    full rate. A :class:`BitMatrix` passes through unchanged.
    """
    if isinstance(a, BitMatrix):
        return a
    if _arrays.is_device_array(a):
        d = _device_matrix(a, stream, "pack_bits")
        return _core._pack_device_to_host(d.ptr, d.shape[0], d.shape[1], _row_ld(d), d.dtype, d.device, d.stream,
                                          nonzero_as_one)
    if not isinstance(a, np.ndarray):
        a = np.asarray(a)
    if a.ndim != 2:
        raise ValueError(f"pack_bits: a must be 2-D (rows, cols); got shape {a.shape}"
                         + (" (one row: a[None, :])" if a.ndim == 1 else ""))
    if not (a.dtype == np.bool_ or np.issubdtype(a.dtype, np.integer)):
        raise DTypeError(f"pack_bits: a has dtype {a.dtype}; spillway packs bool or integer 0/1 data "
                         "(convert with (a != 0).astype(np.uint8))")
    rows, cols = a.shape
    if pinned is None:
        pinned = _gpu()
    bm = BitMatrix(rows, cols, pinned)
    if rows == 0 or cols == 0:
        return bm
    if a.strides[1] != a.itemsize and cols > 1:
        raise ValueError(f"pack_bits: the rows of a must be contiguous (column stride {a.itemsize} bytes), "
                         f"got strides {a.strides}; pass np.ascontiguousarray(a)")
    row_bytes = max(1, abs(a.strides[0]) if rows > 1 else cols * a.itemsize)
    block = max(1, _PACK_BLOCK_BYTES // row_bytes)
    mm = _file_mapping(a)
    base = _mapping_address(mm) if mm is not None and len(mm) > 0 else None
    for r0 in range(0, rows, block):
        r1 = min(rows, r0 + block)
        part = a[r0:r1]
        _core._pack_rows(bm, part, r0, nonzero_as_one)
        if base is not None:
            start = int(part.ctypes.data)
            _release_pages(mm, base, start, start + (r1 - r0 - 1) * a.strides[0] + cols * a.itemsize)
    return bm


def from_packed_bytes(bytes_, cols: int, *, bitorder: str = "big", pinned: Optional[bool] = None) -> BitMatrix:
    """A :class:`BitMatrix` from ``np.packbits(a, axis=1, bitorder=...)`` output (uint8, 2-D)."""
    b = np.asarray(bytes_)
    if b.dtype != np.uint8:
        raise DTypeError(f"from_packed_bytes: expected uint8 bytes (np.packbits output), got dtype {b.dtype}")
    if b.ndim != 2:
        raise ValueError(f"from_packed_bytes: expected a 2-D array (rows, bytes), got shape {b.shape}")
    cols = integer("from_packed_bytes", "cols", cols, "a column count (int)")
    if cols < 0:
        raise ValueError(f"from_packed_bytes: cols must be >= 0, got {cols}")
    choice("from_packed_bytes", "bitorder", bitorder, ("big", "little"))
    return _core._from_packed_bytes(b, cols, bitorder, _gpu() if pinned is None else bool(pinned))


def _budget_bytes(budget, who: str = "gram") -> int:
    if budget is None:
        return 0
    if is_integer(budget):
        if budget <= 0:
            raise ValueError(f"{who}: budget must be a positive byte count, got {budget}")
        return int(budget)
    if isinstance(budget, str):
        return int(_core._parse_byte_size(budget))
    raise TypeError(f"{who}: budget must be bytes (int), a size like '8GiB', or None; got {type(budget).__name__}")


def _row_ld(d: _arrays.DeviceArray) -> int:
    rows, cols = d.shape
    return d.strides[0] if rows > 1 else cols


def _device_rows(x, stream, who: str, what: str = "a") -> _arrays.DeviceArray:
    """A 2-D device array whose rows are contiguous (column stride 1, row stride >= cols)."""
    d = _arrays.device_array(x, stream)
    if len(d.shape) != 2:
        raise ValueError(f"{who}: {what} must be 2-D (rows, cols); got shape {d.shape}")
    rows, cols = d.shape
    if cols > 1 and d.strides[1] != 1:
        raise ValueError(f"{who}: the rows of device array {what} must be contiguous (column stride 1); got "
                         f"strides {d.strides} (elements): make it contiguous first")
    if rows > 1 and d.strides[0] < cols:
        raise ValueError(f"{who}: {what}'s row stride {d.strides[0]} is smaller than its {cols} columns")
    return d


def _device_matrix(x, stream, who: str) -> _arrays.DeviceArray:
    d = _device_rows(x, stream, who)
    if d.dtype not in ("uint8", "int8", "bool"):
        raise DTypeError(f"{who}: device input must be bool, uint8 or int8 0/1 data; got {d.dtype}")
    return d


def _check_sink_args(who: str, sink: str, k, threshold, has_b: bool) -> None:
    """The checks on k / threshold / b that every pairwise entry point makes for its sink."""
    if sink == "topk":
        if k is None:
            raise ValueError(f"{who}: sink='topk' needs k (1..{MAX_TOP_K})")
        integer(who, "k", k, f"an integer in [1, {MAX_TOP_K}]")
        if not 1 <= int(k) <= MAX_TOP_K:
            raise ValueError(f"{who}: k must be an integer in [1, {MAX_TOP_K}]; got {k!r}")
    elif k is not None:
        raise ValueError(f"{who}: k is for sink='topk', not sink={sink!r}")
    if sink == "threshold":
        if threshold is None:
            raise ValueError(f"{who}: sink='threshold' needs threshold=")
        if not np.isfinite(real(who, "threshold", threshold)):
            raise ValueError(f"{who}: threshold must be a finite number; got {threshold!r}")
    elif threshold is not None:
        raise ValueError(f"{who}: threshold is for sink='threshold', not sink={sink!r}")
    if has_b and sink in ("triangle", "condensed"):
        raise ValueError(f"{who}: sink={sink!r} is a layout of the symmetric A·Aᵀ; with b given use "
                         "'full', 'topk' or 'threshold'")


def gram(
    a,
    b=None,
    *,
    metric: str = "counts",
    sink: str = "full",
    k: Optional[int] = None,
    threshold: Optional[float] = None,
    budget: Union[str, int, None] = None,
    devices: Optional[Sequence[int]] = None,
    progress=True,
    include_diagonal: bool = False,
    both_halves: bool = False,
    nonzero_as_one: bool = False,
    stream=None,
    host_fallback: Optional[bool] = None,
    jaccard_empty: float = 1.0,
    cosine_zero: float = 0.0,
    report: Optional[dict] = None,
    return_report: bool = False,
    max_panel_rows: int = 0,
    format: str = "coo",
    _host_block_rows: int = 0,
):
    """The Gram matrix A·Aᵀ (or A·Bᵀ) of 0/1 data, on the b1 tensor cores, out of core.

    Parameters
    ----------
    a, b : 0/1 data, 2-D (rows x cols; b has a's cols): a NumPy array (bool/uint8/int8 or any
        integer dtype, read-only and mmap'd arrays included), a :class:`BitMatrix`, or a
        CuPy/PyTorch/Numba device array (DLPack / ``__cuda_array_interface__``, zero-copy).
    metric : "counts" (|a∧b|, int32), "jaccard" (float32), "cosine" (float32) or "hamming"
        (|a|+|b|-2|a∧b|, int32, a distance: smaller is closer).
    sink : "full" (rows x rows array), "triangle" (upper triangle with the diagonal, row-major,
        n(n+1)/2), "condensed" (SciPy's ``pdist`` order, n(n-1)/2), "topk" (``(values,
        indices)``, rows x k; largest similarity or smallest Hamming first, ties by the smaller
        index; -1 pads a short row) or "threshold" (``scipy.sparse.coo_array`` of the entries
        >= threshold, <= for Hamming; upper triangle unless ``both_halves``).
    k : top-k list length, 1..128 (sink="topk").  threshold : the cut (sink="threshold").
    format : sink="threshold": "coo" (``scipy.sparse.coo_array``, the default) or "csr"
        (``scipy.sparse.csr_array``, assembled as CSR by the job: no row array is made).
    budget : device memory per GPU ("8GiB", bytes, or None — the default, as every call's — for
        80% of the least free memory over the GPUs used): A and C are streamed in row strips to
        stay inside it.
    devices : GPU ordinals to use (default: all visible).
    progress : True for a tqdm bar (when tqdm is installed), False for none, or a callable
        ``fn(done, total)`` called on this thread as strips complete.
    include_diagonal : whether row i may list/keep itself (topk, threshold of A·Aᵀ).
    stream : device input only: the CUDA stream (int handle or the framework's stream object)
        the work is ordered on; default the framework's current stream.
    host_fallback : with no GPU, run the host implementation (default: yes, with a
        :class:`HostFallbackWarning` once); False raises RuntimeError instead.
    report : a dict to fill with what the job did (tasks, devices, seconds, bytes moved; with
        several devices ``tasks_per_device`` and ``bytes_per_device`` give the split).
    return_report : return ``(result, spillway.Report)`` instead of the result alone.

    Raises TypeError for a wrong kind of object or dtype (:class:`spillway.DTypeError`,
    :class:`spillway.ArgumentTypeError`: also ValueErrors in the 0.1 series), ValueError for values
    and shapes, MemoryError for a budget too small (:class:`spillway.BudgetError`).

    Returns NumPy arrays for host input and arrays of the input's framework for device input
    (device input runs in core on its GPU: "full"/"triangle"/"condensed" are written into a new
    device array on ``stream`` without waiting; "topk"/"threshold" pack on the GPU and run the
    out-of-core job from the bits). Ctrl-C cancels: :class:`spillway.Cancelled` (a
    KeyboardInterrupt) carries the partial report.
    """
    start = time.perf_counter()
    choice("gram", "metric", metric, METRICS)
    choice("gram", "sink", sink, SINKS)
    _check_sink_args("gram", sink, k, threshold, b is not None)
    sparse = _sparse_format("gram", sink, format)
    budget_bytes = _budget_bytes(budget)
    devs = [] if devices is None else [int(d) for d in devices]

    a_dev = _arrays.is_device_array(a)
    b_dev = b is not None and _arrays.is_device_array(b)
    if b is not None:
        same_place("gram", a_dev, b_dev)
    if a_dev and sink in ("full", "triangle", "condensed"):
        out, device = _gram_device_dense(a, b, metric, sink, stream, nonzero_as_one, jaccard_empty, cosine_zero)
        return deliver(out, one_launch(start, device), report, return_report)
    if a_dev:
        da = _device_matrix(a, stream, "gram")
        a_bits = pack_bits(a, nonzero_as_one=nonzero_as_one, stream=stream)
        b_bits = None if b is None else pack_bits(b, nonzero_as_one=nonzero_as_one, stream=stream)
    else:
        if stream is not None:
            raise ValueError("gram: stream= orders device input; a is host data")
        da = None
        a_bits = pack_bits(a, nonzero_as_one=nonzero_as_one)
        b_bits = None if b is None else pack_bits(b, nonzero_as_one=nonzero_as_one)
    if b_bits is not None and b_bits.cols != a_bits.cols:
        raise ValueError(f"gram: a has {a_bits.cols} columns but b has {b_bits.cols}; A·Bᵀ needs equal column counts")

    if host_fallback is None:
        host_fallback = not devs and not _gpu()
        if host_fallback:
            warn_host_fallback("spillway.gram", _core.no_gpu_reason())
    res = run_with_progress(
        lambda bar: _core._gram(a_bits, b_bits, metric, sink, int(k or 0), float(threshold or 0.0),
                                bool(include_diagonal), bool(both_halves), budget_bytes, devs, bool(host_fallback),
                                int(max_panel_rows), int(_host_block_rows), float(jaccard_empty),
                                float(cosine_zero), bar, sparse is not None and format == "csr"),
        progress, f"spillway.gram {sink}", report)
    out = _pairwise_out(res, sink, a_bits.rows, a_bits.rows if b_bits is None else b_bits.rows, da, sparse,
                        "spillway.gram", "tasks")
    return deliver(out, res["report"], None, return_report)


def _pairwise_out(res, sink: str, n: int, m: int, da, sparse, who: str, unit: str):
    """A pairwise job's result from the binding's dict: (values, indices) for top-k, a SciPy COO
    or CSR array (``sparse``, the class) for threshold, the values for dense sinks; the top-k lists of device input (``da``) as
    arrays of its framework. Raises Cancelled, carrying the partial result, when the
    job was cancelled."""
    rep = res["report"]
    if sink == "topk":
        out = (res["values"], res["indices"])
        if da is not None:
            out = (_arrays.from_numpy_like(da, out[0]), _arrays.from_numpy_like(da, out[1]))
    elif sink == "threshold":
        if "indptr" in res:
            out = sparse((res["values"], res["cols"], res["indptr"]), shape=(n, m))
        else:
            out = sparse((res["values"], (res["rows"], res["cols"])), shape=(n, m))
    else:
        out = res["values"]
    if res["interrupted"] or rep["cancelled"]:
        raise Cancelled(
            f"{who} cancelled: {rep['tasks_completed']} of {rep['tasks_total']} {unit} completed "
            "(the exception's .report lists them, .partial holds what they produced)",
            rep,
            out,
        )
    return out


def _sparse_format(who: str, sink: str, format):
    """The SciPy array class a threshold sink returns for ``format`` ("coo" or "csr"), None for the
    other sinks (which take only the default "coo")."""
    choice(who, "format", format, ("coo", "csr"))
    if sink != "threshold":
        if format != "coo":
            raise ValueError(f"{who}: format is for sink='threshold'; got format={format!r} with sink={sink!r}")
        return None
    try:
        from scipy.sparse import coo_array, csr_array
    except ImportError as e:  # SciPy is optional: only the threshold sink needs it
        raise ImportError(f"{who}: sink='threshold' returns a scipy.sparse.{format}_array; install SciPy "
                          "(pip install scipy) or use sink='topk' / 'full'") from e
    return csr_array if format == "csr" else coo_array


def _gram_device_dense(a, b, metric, sink, stream, nonzero_as_one, jaccard_empty, cosine_zero):
    da = _device_matrix(a, stream, "gram")
    db = None if b is None else _device_matrix(b, da.stream if stream is None else stream, "gram")
    if db is not None:
        if db.device != da.device:
            raise ValueError(f"gram: a is on GPU {da.device} but b on GPU {db.device}; in-core products need one GPU")
        if db.shape[1] != da.shape[1]:
            raise ValueError(f"gram: a has {da.shape[1]} columns but b has {db.shape[1]}; A·Bᵀ needs equal column counts")
        if db.dtype != da.dtype:
            raise DTypeError(f"gram: a is {da.dtype} but b is {db.dtype}; give both the same dtype")
    n = da.shape[0]
    if sink == "full":
        shape = (n, n if db is None else db.shape[0])
    elif sink == "triangle":
        shape = (n * (n + 1) // 2,)
    else:
        shape = (n * (n - 1) // 2 if n > 0 else 0,)
    dtype = "float32" if metric in ("jaccard", "cosine") else "int32"
    out, out_ptr = _arrays.empty_like_framework(da, shape, dtype)
    _core._gram_device(da.ptr, n, da.shape[1], _row_ld(da), 0 if db is None else db.ptr,
                       0 if db is None else db.shape[0], 0 if db is None else _row_ld(db), da.dtype, out_ptr, metric,
                       sink, float(jaccard_empty), float(cosine_zero), da.device, da.stream, bool(nonzero_as_one))
    return out, da.device
