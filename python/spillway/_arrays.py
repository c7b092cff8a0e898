"""Device arrays from CuPy, PyTorch (DLPack) and Numba (``__cuda_array_interface__``), zero-copy.

spillway reads a device array where it lies: only its pointer, shape, strides and dtype are taken,
and the work is ordered on one CUDA stream (``stream=``, else the framework's current stream):

- DLPack (CuPy, PyTorch, any producer with ``__dlpack__``/``__dlpack_device__`` on a CUDA device):
  ``x.__dlpack__(stream=s)`` is called with spillway's stream ``s``, so the producer orders its
  pending writes before it (the DLPack stream contract; 0, the legacy default stream, is passed
  as 1, its DLPack name).
- ``__cuda_array_interface__`` (Numba and others without DLPack): version 3's ``stream`` entry,
  when given, is the producer's stream: spillway's stream waits on an event recorded there.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

import numpy as np

from . import _core

_KDL_CPU, _KDL_CUDA, _KDL_CUDA_HOST, _KDL_CUDA_MANAGED = 1, 2, 3, 13
_DL_INT, _DL_UINT, _DL_FLOAT, _DL_BFLOAT, _DL_BOOL = 0, 1, 2, 4, 6


@dataclass
class DeviceArray:
    """What spillway reads of a device array (the object itself is kept alive in ``obj``)."""

    obj: Any
    framework: str  # "cupy", "torch", "numba" or "dlpack"
    ptr: int
    shape: tuple
    strides: tuple  # in elements
    dtype: str  # "uint8", "int8", "bool" or another numpy-style name (refused later)
    device: int
    stream: int  # the stream spillway orders its work on (0: legacy default)


def framework_of(x) -> str:
    mod = type(x).__module__.split(".")[0]
    if mod in ("cupy", "cupy_backends"):
        return "cupy"
    if mod == "torch":
        return "torch"
    if mod in ("numba", "numba_cuda"):
        return "numba"
    return "dlpack" if hasattr(x, "__dlpack__") else "cai"


def stream_handle(stream) -> Optional[int]:
    """A CUDA stream handle from an int, an object of the CUDA stream protocol
    (``__cuda_stream__()`` -> ``(version, handle)``) or a CuPy/PyTorch/Numba stream object (None
    stays None). A wrong kind of object is a TypeError."""
    if stream is None:
        return None
    if isinstance(stream, (bool, np.bool_)):
        raise TypeError("stream must be an int handle or a stream object, got bool")
    if isinstance(stream, (int, np.integer)):
        if stream < 0:
            raise ValueError(f"stream handle must be >= 0, got {stream}")
        return int(stream)
    protocol = getattr(stream, "__cuda_stream__", None)
    if protocol is not None and callable(protocol):
        got = protocol()
        if not (isinstance(got, tuple) and len(got) == 2):
            raise TypeError(f"{type(stream).__name__}.__cuda_stream__() must return (version, handle), got {got!r}")
        return int(got[1])
    for attr in ("cuda_stream", "ptr"):  # torch.cuda.Stream, cupy.cuda.Stream
        v = getattr(stream, attr, None)
        if isinstance(v, int):
            return v
    h = getattr(stream, "handle", None)  # numba.cuda stream: a ctypes c_void_p
    if h is not None:
        v = getattr(h, "value", h)
        return int(v or 0)
    raise TypeError(
        f"stream must be an int handle or a CuPy/PyTorch/Numba stream object, got {type(stream).__name__}"
    )


def _current_stream(framework: str, x, device: int) -> int:
    if framework == "cupy":
        import cupy

        with cupy.cuda.Device(device):
            return int(cupy.cuda.get_current_stream().ptr)
    if framework == "torch":
        import torch

        return int(torch.cuda.current_stream(x.device).cuda_stream)
    return 0


def is_device_array(x) -> bool:
    dev = getattr(x, "__dlpack_device__", None)
    if dev is not None:
        try:
            kind = dev()[0]
        except Exception:  # noqa: BLE001 - a producer that cannot say is treated as host data
            kind = _KDL_CPU
        if kind in (_KDL_CUDA, _KDL_CUDA_MANAGED):
            return True
        if kind == _KDL_CPU:
            return False
    return hasattr(x, "__cuda_array_interface__")


def _dtype_name(code: int, bits: int) -> str:
    if bits == 8 and code == _DL_UINT:
        return "uint8"
    if bits == 8 and code == _DL_INT:
        return "int8"
    if bits == 8 and code == _DL_BOOL:
        return "bool"
    kind = {_DL_INT: "int", _DL_UINT: "uint", _DL_FLOAT: "float", _DL_BFLOAT: "bfloat", _DL_BOOL: "bool",
            5: "complex"}.get(code, f"code{code}_")
    return f"{kind}{bits}"


def device_array(x, stream=None) -> DeviceArray:
    """Reads a device array's description without copying it; orders `stream` after the producer."""
    fw = framework_of(x)
    want = stream_handle(stream)
    dev = getattr(x, "__dlpack_device__", None)
    if fw != "numba" and dev is not None and hasattr(x, "__dlpack__"):
        kind, device = dev()
        if kind not in (_KDL_CUDA, _KDL_CUDA_MANAGED):
            raise ValueError(f"spillway: a {type(x).__name__} on DLPack device type {kind} is not CUDA device memory")
        s = want if want is not None else _current_stream(fw, x, int(device))
        capsule = x.__dlpack__(stream=1 if s == 0 else s)
        ptr, shape, strides, code, bits, _dt, dev_id = _core._dlpack_info(capsule)
        return DeviceArray(x, fw, int(ptr), tuple(shape), tuple(strides), _dtype_name(code, bits), int(dev_id), s)
    cai = getattr(x, "__cuda_array_interface__", None)
    if cai is None:
        raise TypeError(f"spillway: {type(x).__name__} is neither DLPack nor __cuda_array_interface__ device data")
    ptr = int(cai["data"][0])
    shape = tuple(int(v) for v in cai["shape"])
    typestr = cai["typestr"]
    try:
        dtype = np.dtype(typestr).name
    except TypeError:
        dtype = typestr
    itemsize = int(typestr[2:]) if typestr[2:].isdigit() else 1
    if cai.get("strides") is None:
        strides = tuple(int(v) for v in _c_strides(shape))
    else:
        byte_strides = tuple(int(v) for v in cai["strides"])
        if any(s % itemsize for s in byte_strides):
            raise ValueError(f"spillway: strides {byte_strides} are not multiples of the item size {itemsize}")
        strides = tuple(s // itemsize for s in byte_strides)
    device = _core._pointer_device(ptr) if ptr else 0
    if ptr and device < 0:
        raise ValueError("spillway: __cuda_array_interface__ points to host memory, not device memory")
    producer = cai.get("stream") if int(cai.get("version", 0)) >= 3 else None
    s = want if want is not None else (int(producer) if producer is not None else 0)
    if s == 1:
        s = 0  # CAI's name for the legacy default stream
    if producer is not None and ptr:
        producer = 0 if int(producer) == 1 else int(producer)
        if producer != s:
            _core._stream_wait(producer, s, device)
    return DeviceArray(x, fw, ptr, shape, strides, dtype, max(device, 0), s)


def _c_strides(shape):
    out, acc = [], 1
    for n in reversed(shape):
        out.append(acc)
        acc *= max(int(n), 1)
    return tuple(reversed(out))


class _StreamHandle:
    """A raw CUDA stream handle offered through the CUDA stream protocol (``__cuda_stream__``)."""

    __slots__ = ("_handle",)

    def __init__(self, handle: int):
        self._handle = int(handle)

    def __cuda_stream__(self):
        return (0, self._handle)


def cupy_stream(handle: int, device: int):
    """A CuPy stream object for a stream spillway owns (call inside ``cupy.cuda.Device(device)``):
    ``Stream.from_external`` where CuPy has it (CuPy 14 deprecates ``ExternalStream``), else
    ``ExternalStream``. The caller keeps the stream alive while the object is used."""
    import cupy

    from_external = getattr(cupy.cuda.Stream, "from_external", None)
    if from_external is not None:
        return from_external(_StreamHandle(handle))
    return cupy.cuda.ExternalStream(handle, device)


def empty_like_framework(d: DeviceArray, shape: tuple, dtype: str):
    """A new device array of the input's framework on its device; returns (array, pointer)."""
    fw = d.framework
    if fw in ("dlpack", "cai"):
        fw = _first_available("cupy", "torch", "numba")
    # The framework's allocator is told the stream spillway writes on, so its pool does not hand
    # the memory to other work before that stream is done with it.
    if fw == "cupy":
        import cupy

        with cupy.cuda.Device(d.device):
            s = cupy_stream(d.stream, d.device) if d.stream else cupy.cuda.Stream.null
            with s:
                out = cupy.empty(shape, dtype=dtype)
        return out, int(out.data.ptr)
    if fw == "torch":
        import torch

        dev = torch.device("cuda", d.device)
        s = torch.cuda.ExternalStream(d.stream, device=dev) if d.stream else torch.cuda.default_stream(dev)
        with torch.cuda.stream(s):
            out = torch.empty(shape, dtype=getattr(torch, dtype), device=dev)
        return out, int(out.data_ptr())
    from numba import cuda

    with cuda.gpus[d.device]:
        out = cuda.device_array(shape, dtype=dtype)
    return out, int(out.__cuda_array_interface__["data"][0])


def from_numpy_like(d: DeviceArray, host):
    """A host result as a device array of the input's framework (top-k lists of device input)."""
    fw = d.framework
    if fw in ("dlpack", "cai"):
        fw = _first_available("cupy", "torch", "numba")
    if fw == "cupy":
        import cupy

        with cupy.cuda.Device(d.device):
            return cupy.asarray(host)
    if fw == "torch":
        import torch

        return torch.from_numpy(host).to(f"cuda:{d.device}")
    from numba import cuda

    with cuda.gpus[d.device]:
        return cuda.to_device(host)


def _first_available(*names):
    import importlib.util

    for n in names:
        if importlib.util.find_spec(n) is not None:
            return n
    raise RuntimeError("spillway: device results need CuPy, PyTorch or Numba to hold them; none is installed")
