"""Device arrays from CuPy, PyTorch (DLPack) and Numba (``__cuda_array_interface__``), zero-copy.

spillway reads a device array where it lies: only its pointer, shape, strides and dtype are taken,
and the work is ordered on one CUDA stream. The rule (docs/python.md, "Device arrays and
streams: the rule") is implemented here, once, for every call:

- the stream: ``stream=`` (an int handle, a CuPy/PyTorch/Numba stream, or any object with
  ``__cuda_stream__``), else the framework's current stream (CuPy, PyTorch), else the stream a
  ``__cuda_array_interface__`` v3 names, else the legacy default stream;
- DLPack (>= 1.0 first: ``x.__dlpack__(max_version=(1, 0), stream=s)``, the pre-1.0 signature when
  the producer raises TypeError; capsules named ``dltensor_versioned`` or ``dltensor``): the
  producer orders its pending writes before ``s`` (the DLPack stream contract; 0, the legacy
  default stream, is passed as 1, its DLPack name);
- ``__cuda_array_interface__`` v3: a ``stream`` entry other than ``s`` gets an event recorded on
  it that ``s`` waits for (no host wait); no entry (v2, or None) means the data is ready.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from typing import Any, Optional

import numpy as np

from . import _core
from ._errors import DTypeError

_KDL_CPU, _KDL_CUDA, _KDL_CUDA_HOST, _KDL_CUDA_MANAGED = 1, 2, 3, 13
_DL_INT, _DL_UINT, _DL_FLOAT, _DL_BFLOAT, _DL_BOOL = 0, 1, 2, 4, 6
_DL_FP8 = {10: "float8_e4m3fn", 12: "float8_e5m2"}  # kDLFloat8_e4m3fn, kDLFloat8_e5m2
_DL_FLAG_READ_ONLY, _DL_FLAG_IS_COPIED = 1 << 0, 1 << 1
DLPACK_MAX_VERSION = (1, 0)  # the newest DLPack major.minor spillway reads


@dataclass
class DeviceArray:
    """What spillway reads of a device array (the object itself is kept alive in ``obj``)."""

    obj: Any
    framework: str  # "cupy", "torch", "numba", "dlpack" or "cai"
    ptr: int
    shape: tuple
    strides: tuple  # in elements
    dtype: str  # "uint8", "int8", "bool" or another numpy-style name (refused later)
    device: int
    stream: int  # the stream spillway orders its work on (0: legacy default)
    readonly: bool = False  # the producer said so (CAI data[1], DLPack 1.0's read-only flag)


def framework_of(x) -> str:
    mod = type(x).__module__.split(".")[0]
    if mod in ("cupy", "cupy_backends"):
        return "cupy"
    if mod == "torch":
        return "torch"
    if mod in ("numba", "numba_cuda"):
        return "numba"
    return "dlpack" if hasattr(x, "__dlpack__") else "cai"


def _int_like(v) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))


def stream_handle(stream) -> Optional[int]:
    """A CUDA stream handle from an int, an object of the CUDA stream protocol
    (``__cuda_stream__()`` -> ``(0, handle)``) or a CuPy/PyTorch/Numba stream object (None
    stays None). A wrong kind of object is a TypeError, a negative handle or an unknown protocol
    version a ValueError."""
    if stream is None:
        return None
    if isinstance(stream, (bool, np.bool_)):
        raise TypeError("stream must be an int handle or a stream object, got bool")
    if isinstance(stream, (int, np.integer)):
        if stream < 0:
            raise ValueError(f"stream handle must be >= 0, got {stream}")
        return int(stream)
    protocol = getattr(stream, "__cuda_stream__", None)
    if protocol is not None:
        # The CUDA stream protocol: a method returning (version, handle); early drafts made it an
        # attribute holding the tuple, which is read the same way.
        got = protocol() if callable(protocol) else protocol
        name = type(stream).__name__
        if not (isinstance(got, tuple) and len(got) == 2 and _int_like(got[0]) and _int_like(got[1])):
            raise TypeError(f"{name}.__cuda_stream__ must give (version, handle), two ints; got {got!r}")
        if int(got[0]) != 0:
            raise ValueError(f"{name}.__cuda_stream__ gave protocol version {int(got[0])}; spillway reads version 0 "
                             f"(the (version, handle) form), got {got!r}")
        if int(got[1]) < 0:
            raise ValueError(f"{name}.__cuda_stream__ gave a negative stream handle {int(got[1])}")
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
        f"stream must be an int handle, a CuPy/PyTorch/Numba stream object or an object with __cuda_stream__, "
        f"got {type(stream).__name__}"
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


def default_stream(x) -> int:
    """The stream the rule gives a device array when no ``stream=`` is given: the framework's
    current stream (CuPy, PyTorch), else the stream its ``__cuda_array_interface__`` v3 names
    (1, the interface's name for the legacy default stream, as 0), else the legacy default
    stream (0)."""
    fw = framework_of(x)
    if fw in ("cupy", "torch"):
        dev = getattr(x, "__dlpack_device__", None)
        device = int(dev()[1]) if dev is not None else 0
        return _current_stream(fw, x, device)
    cai = getattr(x, "__cuda_array_interface__", None)
    if isinstance(cai, dict) and _int_like(cai.get("version", 0)) and int(cai.get("version", 0)) >= 3:
        s = cai.get("stream")
        if s is not None:
            return _cai_stream(s, type(x).__name__)
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
    if bits == 8 and code in _DL_FP8:  # DLPack 1.1's FP8 codes, as producers that know them export FP8
        return _DL_FP8[code]
    kind = {_DL_INT: "int", _DL_UINT: "uint", _DL_FLOAT: "float", _DL_BFLOAT: "bfloat", _DL_BOOL: "bool",
            5: "complex"}.get(code, f"code{code}_")
    return f"{kind}{bits}"


# ---- DLPack capsules ------------------------------------------------------------------------------

class _DLPackVersion(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class _DLManagedTensorVersionedHead(ctypes.Structure):
    """The fields of DLPack 1.0's DLManagedTensorVersioned before its DLTensor."""

    _fields_ = [("version", _DLPackVersion), ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p),
                ("flags", ctypes.c_uint64)]


_capsule_is_valid = ctypes.pythonapi.PyCapsule_IsValid
_capsule_is_valid.argtypes = [ctypes.py_object, ctypes.c_char_p]
_capsule_is_valid.restype = ctypes.c_int
_capsule_get_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_get_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
_capsule_get_pointer.restype = ctypes.c_void_p
_capsule_get_name = ctypes.pythonapi.PyCapsule_GetName
_capsule_get_name.argtypes = [ctypes.py_object]
_capsule_get_name.restype = ctypes.c_char_p


def capsule_header(capsule, who: str = "spillway") -> tuple:
    """(versioned, (major, minor), flags) of a DLPack capsule, read without consuming it: a
    ``dltensor_versioned`` capsule (DLPack >= 1.0) carries its version and flags (read-only,
    copied); a ``dltensor`` capsule (before 1.0) neither ((0, 0), 0). A capsule of another name
    (``used_dltensor``: already consumed) or another object is a TypeError; a versioned capsule of
    a major version spillway does not read a ValueError."""
    if type(capsule).__name__ != "PyCapsule":
        raise TypeError(f"{who}: __dlpack__() must return a DLPack capsule, got {type(capsule).__name__}")
    if _capsule_is_valid(capsule, b"dltensor_versioned"):
        head = _DLManagedTensorVersionedHead.from_address(_capsule_get_pointer(capsule, b"dltensor_versioned"))
        version = (int(head.version.major), int(head.version.minor))
        if version[0] != DLPACK_MAX_VERSION[0]:
            raise ValueError(f"{who}: the producer's DLPack capsule is version {version[0]}.{version[1]}; spillway "
                             f"reads major version {DLPACK_MAX_VERSION[0]} (asked with max_version="
                             f"{DLPACK_MAX_VERSION})")
        return True, version, int(head.flags)
    if _capsule_is_valid(capsule, b"dltensor"):
        return False, (0, 0), 0
    try:
        name = _capsule_get_name(capsule)
        name = name.decode() if name is not None else None
    except Exception:  # noqa: BLE001 - an unreadable name is reported as unknown
        name = None
    raise TypeError(f"{who}: __dlpack__() returned a capsule named {name!r}; expected 'dltensor_versioned' or "
                    "'dltensor' ('used_...': the capsule was consumed already)")


def dlpack_capsule(x, stream: int):
    """``x.__dlpack__`` asked for DLPack >= 1.0 (``max_version=(1, 0)``) with ``stream`` in DLPack's
    naming (the legacy default stream 0 is passed as 1); a producer that predates ``max_version``
    raises TypeError and is asked again with the old signature."""
    ds = 1 if stream == 0 else int(stream)
    try:
        return x.__dlpack__(max_version=DLPACK_MAX_VERSION, stream=ds)
    except TypeError as first:
        try:
            return x.__dlpack__(stream=ds)
        except TypeError as second:
            raise TypeError(f"spillway: {type(x).__name__}.__dlpack__ refused both __dlpack__(max_version="
                            f"{DLPACK_MAX_VERSION}, stream={ds}) ({first}) and __dlpack__(stream={ds}) ({second})") \
                from second


def _cai_stream(v, name: str) -> int:
    """A __cuda_array_interface__ v3 ``stream`` entry as a handle (1, the legacy default, as 0).

    Version 3 disallows 0 as ambiguous (legacy or per-thread default stream), but numba-cuda's own
    DeviceNDArray gives 0 for arrays of the default stream; it is read as the legacy default stream,
    the conservative reading (that stream orders itself after every blocking stream)."""
    if not _int_like(v):
        raise TypeError(f"spillway: {name}.__cuda_array_interface__['stream'] must be an int or None, got {v!r}")
    v = int(v)
    if v < 0:
        raise ValueError(f"spillway: {name}.__cuda_array_interface__['stream'] is {v}; a stream handle is >= 1")
    return 0 if v == 1 else v


def device_array(x, stream=None, writable: bool = False) -> DeviceArray:
    """Reads a device array's description without copying it; orders `stream` (the rule's stream
    when None) after the producer. ``writable``: spillway writes into it, so a producer that says
    it is read-only (or, DLPack 1.0, a copy) is refused with a ValueError."""
    fw = framework_of(x)
    want = stream_handle(stream)
    name = type(x).__name__
    dev = getattr(x, "__dlpack_device__", None)
    if fw != "numba" and dev is not None and hasattr(x, "__dlpack__"):
        kind, device = dev()
        if kind not in (_KDL_CUDA, _KDL_CUDA_MANAGED):
            raise ValueError(f"spillway: a {name} on DLPack device type {kind} is not CUDA device memory")
        s = want if want is not None else _current_stream(fw, x, int(device))
        capsule = dlpack_capsule(x, s)
        _versioned, _version, flags = capsule_header(capsule, f"spillway: {name}")
        if writable and flags & _DL_FLAG_READ_ONLY:
            raise ValueError(f"spillway: the {name} spillway writes into is read-only (its DLPack capsule says so)")
        if writable and flags & _DL_FLAG_IS_COPIED:
            raise ValueError(f"spillway: the {name} spillway writes into was exported as a copy (DLPack flag "
                             "IS_COPIED): the writes would not reach it")
        ptr, shape, strides, code, bits, dev_type, dev_id = _core._dlpack_info(capsule)
        if int(dev_type) not in (_KDL_CUDA, _KDL_CUDA_MANAGED) or int(dev_id) != int(device):
            raise ValueError(f"spillway: {name}.__dlpack__() describes memory on DLPack device ({dev_type}, {dev_id}) "
                             f"though {name}.__dlpack_device__() said ({kind}, {device})")
        return DeviceArray(x, fw, int(ptr), tuple(shape), tuple(strides), _dtype_name(code, bits), int(dev_id), s,
                           bool(flags & _DL_FLAG_READ_ONLY))
    cai = getattr(x, "__cuda_array_interface__", None)
    if cai is None:
        raise TypeError(f"spillway: {name} is neither DLPack nor __cuda_array_interface__ device data")
    if not isinstance(cai, dict):
        raise TypeError(f"spillway: {name}.__cuda_array_interface__ must be a dict, got {type(cai).__name__}")
    for key in ("data", "shape", "typestr"):
        if key not in cai:
            raise ValueError(f"spillway: {name}.__cuda_array_interface__ has no {key!r} entry: {cai!r}")
    version = cai.get("version", 0)
    if not _int_like(version):
        raise TypeError(f"spillway: {name}.__cuda_array_interface__['version'] must be an int, got {version!r}")
    data = cai["data"]
    if not (isinstance(data, tuple) and len(data) == 2 and _int_like(data[0])):
        raise TypeError(f"spillway: {name}.__cuda_array_interface__['data'] must be (pointer, read_only), got "
                        f"{data!r}")
    if cai.get("mask") is not None:
        raise ValueError(f"spillway: {name} is a masked device array (__cuda_array_interface__['mask'] is set); "
                         "spillway reads unmasked data only")
    readonly = bool(data[1])
    if writable and readonly:
        raise ValueError(f"spillway: the {name} spillway writes into is read-only (__cuda_array_interface__['data']"
                         f" = {data!r})")
    ptr = int(data[0])
    shape = tuple(int(v) for v in cai["shape"])
    typestr = cai["typestr"]
    if not isinstance(typestr, str) or len(typestr) < 3:
        raise TypeError(f"spillway: {name}.__cuda_array_interface__['typestr'] must be a type string such as "
                        f"'<f4', got {typestr!r}")
    if typestr[0] == ">" and typestr[2:] != "1":
        raise DTypeError(f"spillway: {name} holds big-endian data (typestr {typestr!r}); only native-endian numbers "
                         "go to the GPU")
    try:
        dtype = np.dtype(typestr).name
    except TypeError:
        dtype = typestr
    itemsize = int(typestr[2:]) if typestr[2:].isdigit() else 1
    if cai.get("strides") is None:
        strides = tuple(int(v) for v in _c_strides(shape))
    else:
        byte_strides = tuple(int(v) for v in cai["strides"])
        if len(byte_strides) != len(shape):
            raise ValueError(f"spillway: {name}.__cuda_array_interface__ gives {len(byte_strides)} strides for "
                             f"{len(shape)} dimensions")
        if any(s % itemsize for s in byte_strides):
            raise ValueError(f"spillway: strides {byte_strides} are not multiples of the item size {itemsize}")
        strides = tuple(s // itemsize for s in byte_strides)
    producer = _cai_stream(cai["stream"], name) if int(version) >= 3 and cai.get("stream") is not None else None
    device = _core._pointer_device(ptr) if ptr else 0
    if ptr and device < 0:
        raise ValueError("spillway: __cuda_array_interface__ points to host memory, not device memory")
    s = want if want is not None else (producer if producer is not None else 0)
    if s == 1:
        s = 0  # the legacy default stream, by its CAI/DLPack name
    if producer is not None and ptr and producer != s:
        _core._stream_wait(producer, s, device)
    return DeviceArray(x, fw, ptr, shape, strides, dtype, max(device, 0), s, readonly)


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
