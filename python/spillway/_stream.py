"""spillway.stream: host arrays larger than the card through a Python callable, chunk by chunk."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence, Union

import numpy as np

from . import _arrays, _core
from ._checks import choice, integer
from ._errors import Cancelled, DTypeError
from ._gram import _budget_bytes
from ._progress import run_with_progress
from ._report import deliver

ARRAY_KINDS = ("cupy", "torch", "numba")


@dataclass
class Chunk:
    """One chunk as ``fn`` sees it. ``inputs``/``outputs`` are device arrays (CuPy, PyTorch or
    Numba, as asked) of rows ``[begin, begin + count)`` of the host arrays, valid only during the
    call and the GPU work it enqueues on ``stream`` (the framework's stream object, also made the
    current stream during the call). Outputs are copied back after ``fn`` returns, in stream order;
    ``fn`` should only enqueue work, not synchronize."""

    index: int
    begin: int
    count: int
    device: int
    stream: Any
    inputs: list
    outputs: list


class _CAI:
    """A device slice described by __cuda_array_interface__ v3 (stream None: the data is ready on
    the chunk's stream, which the callable works on)."""

    def __init__(self, ptr, shape, typestr):
        self.__cuda_array_interface__ = {
            "data": (int(ptr), False),
            "shape": tuple(shape),
            "typestr": typestr,
            "strides": None,
            "version": 3,
            "stream": None,
        }


def _checked(arrays, role: str, writable: bool):
    out = []
    for i, a in enumerate(arrays):
        if not isinstance(a, np.ndarray):
            raise TypeError(f"stream: {role}[{i}] must be a NumPy array, got {type(a).__name__}")
        if a.ndim == 0:
            raise ValueError(f"stream: {role}[{i}] is 0-d; chunks are cut along the first axis")
        if not a.flags.c_contiguous:
            raise ValueError(f"stream: {role}[{i}] is not C-contiguous (strides {a.strides}); its rows must be "
                             "contiguous to be streamed without a copy")
        if a.dtype.hasobject or a.dtype.fields is not None or a.dtype.byteorder == ">":
            raise DTypeError(f"stream: {role}[{i}] has dtype {a.dtype}; only plain native-endian numbers go to the GPU")
        if writable and not a.flags.writeable:
            raise ValueError(f"stream: {role}[{i}] is read-only")
        out.append(a)
    return out


def stream(
    fn: Callable[[Chunk], None],
    inputs: Sequence[np.ndarray],
    outputs: Sequence[np.ndarray],
    *,
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

    ``inputs`` and ``outputs`` are C-contiguous NumPy arrays sharing their first axis (the rows
    chunks are cut along); pageable memory is staged through pinned buffers, copies overlap
    ``fn``'s work over a ring of ``slots`` device buffers per GPU, and chunks go to every GPU in
    ``devices`` (default: all). ``budget`` caps device memory per GPU ("4GiB", bytes, or None for
    80% of free); ``chunk`` caps the rows per chunk (a chunk may be a few rows shorter: the
    cap is taken as ``chunk`` rows' bytes per slot, and each device buffer starts on a 256-byte
    boundary). ``fn(c: Chunk)`` runs under the GIL on one thread per GPU with
    ``c.inputs``/``c.outputs`` as ``arrays`` ("cupy", "torch" or "numba") device arrays, zero-copy
    views of the slot's memory, and ``c.stream`` the chunk's stream (the current stream while
    ``fn`` runs). The GIL is released while spillway waits and copies.

    Returns the report (chunks, devices, seconds, bytes moved) as a dict; with
    ``return_report=True``, ``(outputs, spillway.Report)`` (``outputs`` the list of output arrays,
    written); ``report=`` a dict to fill as well. Blocks until every chunk's outputs are back in
    the host arrays. Raises TypeError for a wrong kind of object or dtype, ValueError for values
    and shapes, MemoryError for a budget too small, RuntimeError with no GPU. Ctrl-C cancels cleanly
    (:class:`spillway.Cancelled`; the outputs' completed chunks are listed in its report); an
    exception from ``fn`` stops the job and is raised as it was.
    """
    if not callable(fn):
        raise TypeError("stream: fn must be callable as fn(chunk)")
    choice("stream", "arrays", arrays, ARRAY_KINDS)
    ins = _checked(inputs, "inputs", False)
    outs = _checked(outputs, "outputs", True)
    if not ins and not outs:
        raise ValueError("stream: give at least one input or output array")
    units = (ins or outs)[0].shape[0]
    for role, group in (("inputs", ins), ("outputs", outs)):
        for i, a in enumerate(group):
            if a.shape[0] != units:
                raise ValueError(f"stream: {role}[{i}] has {a.shape[0]} rows, the first array {units}; "
                                 "all arrays share their first axis")
    if chunk is not None and integer("stream", "chunk", chunk, "a positive row count") < 1:
        raise ValueError(f"stream: chunk must be a positive row count, got {chunk!r}")
    if integer("stream", "slots", slots, "a positive integer") < 1:
        raise ValueError(f"stream: slots must be a positive integer, got {slots!r}")
    budget_bytes = _budget_bytes(budget, "stream")
    devs = [] if devices is None else [int(d) for d in devices]
    if units == 0:
        empty = {"tasks_total": 0, "tasks_completed": 0, "cancelled": False, "completed_tasks": [], "devices": [],
                 "elapsed_seconds": 0.0, "bytes_moved": 0, "on_host": False,
                 "tasks_per_device": [], "bytes_per_device": []}
        return deliver(list(outs), empty, report, True) if return_report else deliver(empty, empty, report, False)
    if _core.device_count() == 0:
        raise RuntimeError(f"spillway.stream needs a GPU, and there is none: {_core.no_gpu_reason()} (fn runs GPU "
                           "code on device arrays; there is no host form)")
    row_bytes = sum(a.nbytes // units for a in ins + outs)
    max_chunk_bytes = int(chunk) * row_bytes if chunk is not None else 0
    wrap = _wrapper(arrays)
    descs = [(a.shape[1:], a.dtype) for a in ins + outs]
    n_in = len(ins)

    def call(index, begin, count, device, handle, ptrs):
        views, stream_obj, ctx = wrap(device, handle, [(p, (count,) + sh, dt) for p, (sh, dt) in zip(ptrs, descs)])
        with ctx:
            fn(Chunk(index, begin, count, device, stream_obj, views[:n_in], views[n_in:]))

    res = run_with_progress(
        lambda bar: _core._stream_job(units, ins, outs, call, budget_bytes, devs, int(slots),
                                      max_chunk_bytes, bar),
        progress, "spillway.stream", report)
    rep = res["report"]
    if res["interrupted"] or rep["cancelled"]:
        raise Cancelled(f"spillway.stream cancelled: {rep['tasks_completed']} of {rep['tasks_total']} chunks completed",
                        rep)
    return deliver(list(outs), rep, None, True) if return_report else rep


def _typestr(dt: np.dtype) -> str:
    return dt.str


def _wrapper(kind: str):
    """(device, stream handle, [(ptr, shape, dtype)]) -> (views, stream object, context manager)."""
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
                views = [cupy.asarray(_CAI(p, sh, _typestr(dt))) for p, sh, dt in specs]
            return views, s, _Both(cupy.cuda.Device(device), s)

        return wrap
    if kind == "torch":
        import torch

        def wrap(device, handle, specs):
            dev = torch.device("cuda", device)
            s = torch.cuda.ExternalStream(handle, device=dev)
            views = [torch.as_tensor(_CAI(p, sh, _typestr(dt)), device=dev) for p, sh, dt in specs]
            return views, s, _Both(torch.cuda.device(dev), torch.cuda.stream(s))

        return wrap
    from numba import cuda

    def wrap(device, handle, specs):
        ctx = cuda.gpus[device]
        with ctx:
            s = cuda.external_stream(handle)
            views = [cuda.from_cuda_array_interface(_CAI(p, sh, _typestr(dt)).__cuda_array_interface__, owner=None,
                                                    sync=False) for p, sh, dt in specs]
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
