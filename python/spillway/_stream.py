"""spillway.stream: host arrays larger than the card through a Python callable, chunk by chunk."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, List, Optional, Sequence, Union

import numpy as np

from . import _arrays, _core
from ._checks import choice, integer
from ._errors import ArgumentTypeError, Cancelled, DTypeError
from ._gram import _budget_bytes
from ._progress import run_with_progress
from ._report import complete, deliver

ARRAY_KINDS = ("cupy", "torch", "numba")


@dataclass
class Chunk:
    """One chunk as ``fn`` sees it. ``inputs``/``outputs`` are device arrays (CuPy, PyTorch or
    Numba, as asked) of units ``[begin, begin + count)`` of the host arrays -- rows of a C-ordered
    array (first axis), the last axis of an F-ordered one, in the host array's order --, valid only
    during the call and the GPU work it enqueues on ``stream`` (the framework's stream object, also
    made the current stream during the call). ``resident`` holds the resident operands, whole, as
    arrays of the same framework on this chunk's device. Outputs are copied back after ``fn``
    returns, in stream order; ``fn`` should only enqueue work, not synchronize."""

    index: int
    begin: int
    count: int
    device: int
    stream: Any
    inputs: list
    outputs: list
    resident: list = field(default_factory=list)


class _CAI:
    """A device slice described by __cuda_array_interface__ v3 (stream None: the data is ready on
    the chunk's stream, which the callable works on)."""

    def __init__(self, ptr, shape, typestr, strides=None):
        self.__cuda_array_interface__ = {
            "data": (int(ptr), False),
            "shape": tuple(shape),
            "typestr": typestr,
            "strides": None if strides is None else tuple(strides),
            "version": 3,
            "stream": None,
        }


_FIX_ORDER = ("np.ascontiguousarray(x) or np.asfortranarray(x) copies it in memory; for data larger than RAM, "
              "write it in C or F order to a file and pass np.load(path, mmap_mode='r') (or np.memmap)")


def _check_dtype(a, what: str):
    if a.dtype.hasobject or a.dtype.fields is not None or a.dtype.byteorder == ">":
        raise DTypeError(f"stream: {what} has dtype {a.dtype}; only plain native-endian numbers go to the GPU")


def _checked(arrays, role: str, writable: bool):
    if isinstance(arrays, np.ndarray) or not isinstance(arrays, (list, tuple)):
        raise TypeError(f"stream: {role} must be a list or tuple of NumPy arrays, got {type(arrays).__name__}")
    out = []
    for i, a in enumerate(arrays):
        if not isinstance(a, np.ndarray):
            raise TypeError(f"stream: {role}[{i}] must be a NumPy array, got {type(a).__name__}")
        if a.ndim == 0:
            raise ValueError(f"stream: {role}[{i}] is 0-d; chunks are cut along the first axis (the last of an "
                             "F-ordered array)")
        if not (a.flags.c_contiguous or a.flags.f_contiguous):
            raise ValueError(f"stream: {role}[{i}] (shape {a.shape}, strides {a.strides}) is not C-contiguous nor "
                             f"F-contiguous: a chunk of it would not be one block of memory. {_FIX_ORDER}")
        _check_dtype(a, f"{role}[{i}]")
        if writable and not a.flags.writeable:
            raise ValueError(f"stream: {role}[{i}] is read-only")
        out.append(a)
    return out


def _chunk_axes(groups):
    """The chunked axis of every array (0: rows of a C-ordered array; -1: the last axis of an
    F-ordered one, whose units are then the contiguous blocks) and the unit count they share. An
    array that is both (1-D, or one dimension longer than 1) takes the axis whose length matches."""
    flat = [(role, i, a) for role, group in groups for i, a in enumerate(group)]
    units = None
    for _, _, a in flat:
        if a.flags.c_contiguous != a.flags.f_contiguous:
            units = a.shape[0] if a.flags.c_contiguous else a.shape[-1]
            break
    if units is None:
        units = flat[0][2].shape[0]
    axes = []
    for role, i, a in flat:
        if a.flags.c_contiguous and a.flags.f_contiguous:
            axis = 0 if a.shape[0] == units else -1
        else:
            axis = 0 if a.flags.c_contiguous else -1
        if a.shape[axis] != units:
            where = "first axis (C order)" if axis == 0 else "last axis (F order)"
            raise ValueError(f"stream: {role}[{i}] (shape {a.shape}) has {a.shape[axis]} units along its {where}, the "
                             f"others {units}; all arrays share their first axis (the last, for an F-ordered array)")
        axes.append(axis)
    return axes, units


def _f_strides(shape, itemsize):
    out, acc = [], itemsize
    for n in shape:
        out.append(acc)
        acc *= max(int(n), 1)
    return tuple(out)


def _dtype_of(name: str, what: str) -> np.dtype:
    try:
        return np.dtype(name)
    except TypeError:
        if name == "bfloat16":
            try:
                import ml_dtypes

                return np.dtype(ml_dtypes.bfloat16)
            except ImportError:
                pass
        raise DTypeError(f"stream: {what} has dtype {name}, which spillway cannot describe to fn's arrays") from None


class _Resident:
    """A resident operand: host bytes every slot gets a copy of, and/or a device array used where it
    lies on its own GPU."""

    def __init__(self, shape, dtype, strides, host=None, dev=None):
        self.shape, self.dtype, self.strides = tuple(shape), dtype, strides  # strides: bytes, None for C
        self.host = host  # contiguous NumPy array handed to the job (None: not copied per slot)
        self.dev = dev  # _arrays.DeviceArray of a device resident
        self.slot_index = -1  # its place among the job's residents (pointers after inputs and outputs)


def _residents(resident) -> List[_Resident]:
    if resident is None:
        return []
    if isinstance(resident, np.ndarray) or _arrays.is_device_array(resident) or not isinstance(resident, (list, tuple)):
        raise TypeError(f"stream: resident must be a list or tuple of arrays (NumPy or device arrays), got "
                        f"{type(resident).__name__}; wrap one array as resident=[w]")
    out = []
    for i, r in enumerate(resident):
        what = f"resident[{i}]"
        if isinstance(r, np.ndarray):
            _check_dtype(r, what)
            if not (r.flags.c_contiguous or r.flags.f_contiguous):
                r = np.ascontiguousarray(r)  # whole on every device, so small: a copy costs little
            strides = None if r.flags.c_contiguous else _f_strides(r.shape, r.itemsize)
            out.append(_Resident(r.shape, r.dtype, strides, host=r))
        elif _arrays.is_device_array(r):
            d = _arrays.device_array(r)
            dt = _dtype_of(d.dtype, what)
            c = _arrays._c_strides(d.shape)
            f = tuple(s // dt.itemsize for s in _f_strides(d.shape, dt.itemsize))
            real = [(s, n) for s, n in zip(d.strides, d.shape) if n > 1]
            if real == [(s, n) for s, n in zip(c, d.shape) if n > 1]:
                strides = None
            elif real == [(s, n) for s, n in zip(f, d.shape) if n > 1]:
                strides = _f_strides(d.shape, dt.itemsize)
            else:
                raise ValueError(f"stream: {what} is a device array with strides {d.strides} (elements) for shape "
                                 f"{d.shape}: not contiguous; pass a contiguous copy (x.copy() in CuPy, "
                                 "x.contiguous() in PyTorch)")
            out.append(_Resident(d.shape, dt, strides, dev=d))
        else:
            raise TypeError(f"stream: {what} must be a NumPy array or a device array (CuPy, PyTorch, Numba: DLPack "
                            f"or __cuda_array_interface__), got {type(r).__name__}")
    return out


def stream(
    fn: Callable[[Chunk], None],
    inputs: Sequence[np.ndarray],
    outputs: Sequence[np.ndarray],
    *,
    resident: Optional[Sequence[Any]] = None,
    budget: Union[str, int, None] = None,
    devices: Optional[Sequence[int]] = None,
    chunk: Optional[int] = None,
    arrays: str = "cupy",
    slots: int = 4,
    progress=True,
    report: Optional[dict] = None,
    return_report: bool = False,
):
    """Streams host arrays through the GPU(s) chunk by chunk, ``fn`` doing each chunk's GPU work.

    ``inputs`` and ``outputs`` are contiguous NumPy arrays sharing the axis chunks are cut along:
    the first axis of a C-ordered array, the last of an F-ordered (Fortran) one -- the axis whose
    slices are contiguous, so neither is copied, and ``fn`` sees an F-ordered array's chunk
    F-ordered with ``count`` as its last dimension. Pageable memory is staged through pinned
    buffers, copies overlap ``fn``'s work over a ring of ``slots`` device buffers per GPU, and
    chunks go to every GPU in ``devices`` (default: all). ``resident``: arrays every chunk gets
    whole (weights, tables): NumPy arrays are copied to each slot once; a device array (CuPy,
    PyTorch, Numba) is used where it lies on its own GPU (no copy) and copied through the host
    once to the job's other GPUs. ``budget`` caps device memory per GPU ("4GiB", bytes, or None
    for 80% of free); the host residents' copies count in each slot. ``chunk`` caps the units per
    chunk (a chunk may be a few units shorter: the cap is taken as ``chunk`` units' bytes per slot,
    and each device buffer starts on a 256-byte boundary). ``fn(c: Chunk)`` runs under the GIL on
    one thread per GPU with ``c.inputs``/``c.outputs``/``c.resident`` as ``arrays`` ("cupy",
    "torch" or "numba") device arrays, zero-copy views of device memory, and ``c.stream`` the
    chunk's stream (the current stream while ``fn`` runs). The GIL is released while spillway
    waits and copies.

    Returns the report (chunks, devices, seconds, bytes moved; per GPU: chunks, bytes and
    seconds) as a dict; with ``return_report=True``, ``(outputs, spillway.Report)`` (``outputs``
    the list of output arrays, written); ``report=`` a dict to fill as well. Blocks until every
    chunk's outputs are back in the host arrays (device residents: waits for their producers'
    streams first). Raises TypeError for a wrong kind of object or dtype, ValueError for values
    and shapes, MemoryError for a budget too small, RuntimeError with no GPU. Ctrl-C cancels
    cleanly (:class:`spillway.Cancelled`; the outputs' completed chunks are listed in its
    report); an exception from ``fn`` stops the job and is raised as it was.
    """
    if not callable(fn):
        raise TypeError("stream: fn must be callable as fn(chunk)")
    choice("stream", "arrays", arrays, ARRAY_KINDS)
    ins = _checked(inputs, "inputs", False)
    outs = _checked(outputs, "outputs", True)
    if not ins and not outs:
        raise ValueError("stream: give at least one input or output array")
    axes, units = _chunk_axes((("inputs", ins), ("outputs", outs)))
    res = _residents(resident)
    if chunk is not None and integer("stream", "chunk", chunk, "a positive unit count") < 1:
        raise ValueError(f"stream: chunk must be a positive row count, got {chunk!r}")
    if integer("stream", "slots", slots, "a positive integer") < 1:
        raise ValueError(f"stream: slots must be a positive integer, got {slots!r}")
    budget_bytes = _budget_bytes(budget, "stream")
    if devices is not None and (isinstance(devices, (str, bytes)) or not hasattr(devices, "__iter__")):
        raise ArgumentTypeError(f"stream: devices must be a list of GPU ordinals, got {devices!r}")
    devs = [] if devices is None else [integer("stream", "devices", d, "GPU ordinals") for d in devices]
    if units == 0:
        empty = complete({"tasks_total": 0, "tasks_completed": 0, "cancelled": False, "completed_tasks": [],
                          "devices": [], "elapsed_seconds": 0.0, "bytes_moved": 0, "on_host": False,
                          "tasks_per_device": [], "bytes_per_device": []})
        return deliver(list(outs), empty, report, True) if return_report else deliver(empty, empty, report, False)
    if _core.device_count() == 0:
        raise RuntimeError(f"spillway.stream needs a GPU, and there is none: {_core.no_gpu_reason()} (fn runs GPU "
                           "code on device arrays; there is no host form)")
    row_bytes = sum(a.nbytes // units for a in ins + outs)
    max_chunk_bytes = int(chunk) * row_bytes if chunk is not None else 0
    wrap = _wrapper(arrays)
    descs = []
    for a, axis in zip(ins + outs, axes):
        if axis == 0:
            descs.append((lambda n, sh=a.shape: (n,) + sh[1:], a.dtype, None))
        else:
            descs.append((lambda n, sh=a.shape: sh[:-1] + (n,), a.dtype, "F"))
    n_in, n_streamed = len(ins), len(ins) + len(outs)

    # Device residents: the producers' pending writes first (this call blocks, so one host wait),
    # and a host copy where the job has GPUs other than the array's own.
    job_devices = devs or list(range(_core.device_count()))
    host_residents = []
    for r in res:
        if r.dev is not None:
            _core._stream_synchronize(r.dev.stream, r.dev.device)
            if any(d != r.dev.device for d in job_devices):
                nbytes = int(np.prod(r.shape, dtype=np.int64)) * r.dtype.itemsize
                r.host = np.empty(nbytes, np.uint8)
                if nbytes:
                    _core._copy_to_host(int(r.host.ctypes.data), r.dev.ptr, nbytes, r.dev.device, r.dev.stream)
        if r.host is not None and r.host.nbytes > 0:  # an empty one is handed over as an empty array
            r.slot_index = n_streamed + len(host_residents)
            host_residents.append(r.host)

    timers = {}  # device -> _TimingEvents: start before its first chunk's fn, stop after its latest

    def view(ptr, shape, dt, order):
        strides = _f_strides(shape, dt.itemsize) if order == "F" and len(shape) > 1 else None
        return ptr, shape, dt, strides

    def call(index, begin, count, device, handle, ptrs):
        specs = [view(p, mk(count), dt, order) for p, (mk, dt, order) in zip(ptrs, descs)]
        for r in res:
            if r.dev is not None and r.dev.device == device:
                specs.append((r.dev.ptr, r.shape, r.dtype, r.strides))  # where it lies: no copy
            else:
                specs.append((ptrs[r.slot_index] if r.slot_index >= 0 else 0, r.shape, r.dtype, r.strides))
        views, stream_obj, ctx = wrap(device, handle, specs)
        t = timers.get(device)
        if t is None:
            t = timers[device] = _core._TimingEvents(device)
            t.record_start(handle)
        with ctx:
            fn(Chunk(index, begin, count, device, stream_obj, views[:n_in], views[n_in:n_streamed],
                     views[n_streamed:]))
        t.record_stop(handle)

    out = run_with_progress(
        lambda bar: _core._stream_job(units, ins, outs, host_residents, call, budget_bytes, devs, int(slots),
                                      max_chunk_bytes, bar),
        progress, "spillway.stream", report)
    rep = out["report"]
    rep["seconds_per_device"] = [timers[d].elapsed_ms() / 1e3 if d in timers else 0.0 for d in rep["devices"]]
    if report is not None:
        report["seconds_per_device"] = list(rep["seconds_per_device"])
    if out["interrupted"] or rep["cancelled"]:
        raise Cancelled(f"spillway.stream cancelled: {rep['tasks_completed']} of {rep['tasks_total']} chunks completed",
                        rep)
    return deliver(list(outs), rep, None, True) if return_report else rep


def _typestr(dt: np.dtype) -> str:
    return dt.str


def _wrapper(kind: str):
    """(device, stream handle, [(ptr, shape, dtype, byte strides or None)]) -> (views, stream object,
    context manager)."""
    import importlib.util

    module = {"cupy": "cupy", "torch": "torch", "numba": "numba"}[kind]
    if importlib.util.find_spec(module) is None:
        raise ImportError(f"stream: arrays={kind!r} hands fn {module} device arrays; install {module} or choose "
                          f"another of {ARRAY_KINDS}")
    if kind == "cupy":
        import cupy

        def wrap(device, handle, specs):
            with cupy.cuda.Device(device):
                s = _arrays.cupy_stream(handle, device)
                views = [cupy.asarray(_CAI(p, sh, _typestr(dt), st)) for p, sh, dt, st in specs]
            return views, s, _Both(cupy.cuda.Device(device), s)

        return wrap
    if kind == "torch":
        import torch

        def wrap(device, handle, specs):
            dev = torch.device("cuda", device)
            s = torch.cuda.ExternalStream(handle, device=dev)
            views = [torch.as_tensor(_CAI(p, sh, _typestr(dt), st), device=dev) for p, sh, dt, st in specs]
            return views, s, _Both(torch.cuda.device(dev), torch.cuda.stream(s))

        return wrap
    from numba import cuda

    # numba-cuda fills its device list lazily and not thread-safely: two GPUs' workers asking for
    # it at once raised "key already in dictionary: 0" inside numba (two H200s, 2026-11-28). It is
    # filled here, on the calling thread, before any worker runs.
    len(cuda.gpus)

    def wrap(device, handle, specs):
        ctx = cuda.gpus[device]
        with ctx:
            s = cuda.external_stream(handle)
            views = [cuda.from_cuda_array_interface(_CAI(p, sh, _typestr(dt), st).__cuda_array_interface__,
                                                    owner=None, sync=False) for p, sh, dt, st in specs]
        return views, s, _Both(ctx)

    return wrap


class _Both:
    """Enters the given context managers in order (device, then stream)."""

    def __init__(self, *cms):
        self._cms = cms

    def __enter__(self):
        for c in self._cms:
            c.__enter__()
        return self

    def __exit__(self, *exc):
        for c in reversed(self._cms):
            c.__exit__(*exc)
        return False
