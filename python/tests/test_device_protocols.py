"""Device inputs through DLPack (>= 1.0 and before), the CUDA Array Interface v3 and the CUDA stream
protocol, checked with fake producers: no GPU is needed for what spillway reads and refuses (the
fakes hand over host memory or null pointers, which spillway either refuses by the rule or reads
without touching). What needs real device memory and streams is in the GPU tests at the end."""

from __future__ import annotations

import ctypes
import importlib.util

import numpy as np
import pytest

import spillway
from spillway import _arrays, _gufunc
from conftest import need

# ---- fakes ------------------------------------------------------------------------------------------


class NewProducer:
    """DLPack >= 1.0: takes max_version; hands NumPy's capsule (host memory) while claiming CUDA."""

    def __init__(self, a, device=(2, 0)):
        self._a, self._device, self.calls = a, device, []

    def __dlpack_device__(self):
        return self._device

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        self.calls.append({"stream": stream, "max_version": max_version})
        return self._a.__dlpack__(max_version=max_version) if max_version else self._a.__dlpack__()


class OldProducer:
    """Before DLPack 1.0: no max_version keyword (Python raises TypeError for it)."""

    def __init__(self, a):
        self._a, self.calls = a, []

    def __dlpack_device__(self):
        return (2, 0)

    def __dlpack__(self, stream=None):
        self.calls.append({"stream": stream})
        return self._a.__dlpack__()


class Refusing:
    def __dlpack_device__(self):
        return (2, 0)

    def __dlpack__(self, **kw):
        raise TypeError("no keywords here")


class Returns:
    def __init__(self, what):
        self._what = what

    def __dlpack_device__(self):
        return (2, 0)

    def __dlpack__(self, **kw):
        return self._what


class CAI:
    """A __cuda_array_interface__ producer; ptr 0 (an empty array, or one spillway only describes)
    needs no GPU."""

    def __init__(self, **entries):
        base = {"data": (0, False), "shape": (0,), "typestr": "<f4", "strides": None, "version": 3}
        base.update(entries)
        self.__cuda_array_interface__ = {k: v for k, v in base.items() if v is not _DROP}


_DROP = object()


class ProtocolStream:
    def __init__(self, got, as_attribute=False):
        if as_attribute:
            self.__cuda_stream__ = got
        else:
            self._got = got

    def __cuda_stream__(self):  # shadowed by the instance attribute in the attribute form
        return self._got


class AttrStream:
    """The early draft of the CUDA stream protocol: an attribute holding (version, handle)."""

    __cuda_stream__ = (0, 4321)


def _capsule(name: bytes, head=None):
    """A capsule with no destructor over a fake DLManagedTensorVersioned head (kept alive by the caller)."""
    new = ctypes.pythonapi.PyCapsule_New
    new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
    new.restype = ctypes.py_object
    if head is None:
        head = ctypes.c_int(0)
    return new(ctypes.addressof(head), name, None), head


# ---- the CUDA stream protocol and stream= ---------------------------------------------------------


@pytest.mark.parametrize("given, handle", [
    (None, None), (0, 0), (1, 1), (np.int64(77), 77), (ProtocolStream((0, 1234)), 1234),
    (ProtocolStream((0, 1234), as_attribute=True), 1234), (AttrStream(), 4321),
    (ProtocolStream((np.int64(0), np.uint64(99))), 99),
])
def test_stream_handles(given, handle):
    assert _arrays.stream_handle(given) == handle
    assert _gufunc._stream_handle(given) == handle  # gufunc reads stream= the same way


@pytest.mark.parametrize("given, err, message", [
    (True, TypeError, "got bool"),
    (-3, ValueError, "must be >= 0, got -3"),
    (ProtocolStream((1, 5)), ValueError, r"protocol version 1;.*got \(1, 5\)"),
    (ProtocolStream("5"), TypeError, r"must give \(version, handle\), two ints; got '5'"),
    (ProtocolStream((0, 1.5)), TypeError, r"two ints; got \(0, 1.5\)"),
    (ProtocolStream((0, -2)), ValueError, "negative stream handle -2"),
    (object(), TypeError, "__cuda_stream__, got object"),
    ("0", TypeError, "got str"),
])
def test_stream_handles_refused(given, err, message):
    with pytest.raises(err, match=message):
        _arrays.stream_handle(given)
    with pytest.raises(err, match=message):
        _gufunc._stream_handle(given)


def test_timer_reads_stream_protocol_objects_before_any_gpu_check():
    with pytest.raises(ValueError, match="protocol version 7"):
        spillway.timer(ProtocolStream((7, 1)))


# ---- DLPack ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("given, passed", [(None, 1), (0, 1), (2, 2), (ProtocolStream((0, 777)), 777)])
def test_dlpack_asks_for_version_1_with_the_stream(given, passed):
    """max_version=(1, 0) and the stream in DLPack's naming (the legacy default stream 0 as 1); the
    versioned capsule is read (up to the device check: NumPy's capsule describes host memory)."""
    x = NewProducer(np.arange(6, dtype=np.float32))
    with pytest.raises(ValueError, match=r"describes memory on DLPack device \(1, 0\) though NewProducer"):
        _arrays.device_array(x, given)
    assert x.calls == [{"stream": passed, "max_version": (1, 0)}]


def test_dlpack_falls_back_to_the_old_signature():
    x = OldProducer(np.arange(6, dtype=np.float32))
    with pytest.raises(ValueError, match=r"DLPack device \(1, 0\)"):  # the 'dltensor' capsule was read
        _arrays.device_array(x)
    assert x.calls == [{"stream": 1}]


def test_dlpack_capsule_names_and_versions():
    a = np.arange(3.0)
    assert _arrays.capsule_header(a.__dlpack__(max_version=(1, 0))) == (True, (1, 0), 0)
    assert _arrays.capsule_header(a.__dlpack__()) == (False, (0, 0), 0)
    ro = a.copy()
    ro.setflags(write=False)
    versioned, _, flags = _arrays.capsule_header(ro.__dlpack__(max_version=(1, 0)))
    assert versioned and flags & 1  # DLPack 1.0's read-only flag

    class Head(ctypes.Structure):
        _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32), ("ctx", ctypes.c_void_p),
                    ("deleter", ctypes.c_void_p), ("flags", ctypes.c_uint64)]

    cap, keep = _capsule(b"dltensor_versioned", Head(2, 1, None, None, 0))
    with pytest.raises(ValueError, match=r"version 2\.1; spillway reads major version 1"):
        _arrays.capsule_header(cap)
    cap, keep = _capsule(b"used_dltensor")
    with pytest.raises(TypeError, match="capsule named 'used_dltensor'"):
        _arrays.capsule_header(cap)
    with pytest.raises(TypeError, match="must return a DLPack capsule, got int"):
        _arrays.capsule_header(5)
    del keep


def test_dlpack_producers_refused_clearly():
    with pytest.raises(TypeError, match=r"Refusing.__dlpack__ refused both .*max_version=\(1, 0\), stream=1"):
        _arrays.device_array(Refusing())
    with pytest.raises(TypeError, match="must return a DLPack capsule, got str"):
        _arrays.device_array(Returns("not a capsule"))
    cap, keep = _capsule(b"used_dltensor")
    with pytest.raises(TypeError, match="'used_dltensor'"):
        _arrays.device_array(Returns(cap))
    with pytest.raises(ValueError, match="DLPack device type 3 is not CUDA device memory"):
        _arrays.device_array(NewProducer(np.zeros(2), device=(3, 0)))  # kDLCUDAHost: pinned host memory
    del keep


def test_dlpack_read_only_refused_where_spillway_writes():
    ro = np.zeros(4, np.float32)
    ro.setflags(write=False)
    with pytest.raises(ValueError, match="NewProducer spillway writes into is read-only"):
        _arrays.device_array(NewProducer(ro), writable=True)
    with pytest.raises(ValueError, match="DLPack device"):  # read, not written: the flag is no obstacle
        _arrays.device_array(NewProducer(ro))


def test_dlpack_device_report():
    assert _arrays.is_device_array(NewProducer(np.zeros(1)))
    assert not _arrays.is_device_array(NewProducer(np.zeros(1), device=(1, 0)))
    assert not _arrays.is_device_array(np.zeros(1))


# ---- __cuda_array_interface__ v3 ----------------------------------------------------------------


@pytest.mark.parametrize("entries, given, stream", [
    ({}, None, 0),  # no stream entry: ready; the legacy default stream
    ({"stream": None}, None, 0),
    ({"stream": 1}, None, 0),  # 1: the legacy default stream
    ({"stream": 2}, None, 2),  # 2: the per-thread default stream
    ({"stream": 0xABC0}, None, 0xABC0),  # the producer's stream is the default
    ({"stream": 0xABC0}, 0xDEF0, 0xDEF0),  # stream= wins (and waits on the producer's: needs a pointer)
    ({"stream": 0xABC0, "version": 2}, None, 0),  # version 2 has no stream entry: ignored
])
def test_cai_stream_rule(entries, given, stream):
    d = _arrays.device_array(CAI(**entries), given)
    assert d.stream == stream and d.ptr == 0 and d.shape == (0,) and d.dtype == "float32"
    if given is None:
        assert _arrays.default_stream(CAI(**entries)) == stream


def test_cai_description():
    d = _arrays.device_array(CAI(shape=(4, 3), typestr="<f8", strides=(8, 32), data=(0, True)))
    assert d.shape == (4, 3) and d.strides == (1, 4) and d.dtype == "float64" and d.readonly
    d = _arrays.device_array(CAI(shape=(2, 5), typestr="|u1", version=_DROP))
    assert d.strides == (5, 1) and d.dtype == "uint8" and d.stream == 0
    # A v3 stream of 0 (disallowed by the interface, but what numba-cuda's DeviceNDArray gives for
    # the default stream) is read as the legacy default stream.
    d = _arrays.device_array(CAI(shape=(3,), stream=0))
    assert d.stream == 0 and d.shape == (3,)


@pytest.mark.parametrize("entries, kw, err, message", [
    ({"stream": -4}, {}, ValueError, r"\['stream'\] is -4"),
    ({"stream": 1.0}, {}, TypeError, r"\['stream'\] must be an int or None, got 1.0"),
    ({"mask": (0, False)}, {}, ValueError, "masked device array"),
    ({"data": (0, True)}, {"writable": True}, ValueError, r"CAI spillway writes into is read-only .*\(0, True\)"),
    ({"data": [0, False]}, {}, TypeError, r"must be \(pointer, read_only\), got \[0, False\]"),
    ({"typestr": ">f4"}, {}, spillway.DTypeError, "big-endian data \\(typestr '>f4'\\)"),
    ({"typestr": 4}, {}, TypeError, "must be a type string such as '<f4', got 4"),
    ({"typestr": _DROP}, {}, ValueError, "has no 'typestr' entry"),
    ({"shape": (2, 3), "strides": (12,)}, {}, ValueError, "gives 1 strides for 2 dimensions"),
    ({"shape": (2, 3), "strides": (12, 6)}, {}, ValueError, r"strides \(12, 6\) are not multiples of the item size 4"),
    ({"version": "3"}, {}, TypeError, r"\['version'\] must be an int, got '3'"),
])
def test_cai_refused_clearly(entries, kw, err, message):
    with pytest.raises(err, match=message):
        _arrays.device_array(CAI(**entries), **kw)


def test_cai_host_pointer_refused():
    a = np.zeros(4, np.float32)
    with pytest.raises(ValueError, match="points to host memory"):
        _arrays.device_array(CAI(data=(a.ctypes.data, False), shape=(4,)))


def test_gufunc_reads_the_cai_stream_by_the_rule():
    d = _gufunc._read_device(CAI(shape=(3,), stream=0x5000), 0, "x")
    assert d.stream == 0x5000 and d.shape == (3,)
    assert _gufunc._read_device(CAI(shape=(3,), stream=1), 0, "x").stream == 0
    assert _gufunc._read_device(CAI(shape=(3,)), 0, "x").stream is None
    assert _gufunc._read_device(CAI(shape=(3,), stream=0), 0, "x").stream == 0  # numba's 0: the legacy default
    with pytest.raises(ValueError, match=r"output 0 is read-only"):
        _gufunc._read_device(CAI(shape=(3,), data=(0, True)), 0, "output 0", writable=True)


def test_calls_refuse_read_only_device_outputs():
    """matmul's out and rk4's state are written in place: a producer that says read-only is refused
    (checked before any GPU work, so no GPU is needed to see it)."""
    with pytest.raises(ValueError, match="read-only"):
        spillway.rk4.mean_field(CAI(shape=(4,), typestr="<c8", data=(0, True)),
                                CAI(shape=(4,), typestr="<c8"), steps=1, dt=0.1, coupling="sum")


# ---- on a GPU -------------------------------------------------------------------------------------


def _fw(name):
    need(importlib.util.find_spec(name) is not None, f"{name} is not installed")
    return __import__(name)


class _Wrap:
    """Hides a CuPy array behind its __cuda_array_interface__ with a chosen stream entry."""

    def __init__(self, x, stream):
        cai = dict(x.__cuda_array_interface__)
        cai["stream"] = stream
        cai["version"] = 3
        self.__cuda_array_interface__ = cai
        self._keep = x


def test_cai_v3_producer_stream_is_waited_for(gpu):
    """A producer's pending writes on its own stream come before spillway's work on another."""
    cp = _fw("cupy")
    rng = np.random.default_rng(11)
    a_h, b_h = rng.standard_normal((512, 256)).astype(np.float32), rng.standard_normal((256, 128)).astype(np.float32)
    producer = cp.cuda.Stream(non_blocking=True)
    consumer = cp.cuda.Stream(non_blocking=True)
    with producer:
        a = cp.zeros((512, 256), cp.float32)
        for _ in range(50):  # a queue of work before the last write, so the race would show
            a += 0
        a[...] = cp.asarray(a_h)
        b = cp.asarray(b_h)
    out = spillway.matmul(_Wrap(a, producer.ptr), _Wrap(b, producer.ptr), stream=consumer)
    consumer.synchronize()
    np.testing.assert_allclose(cp.asnumpy(out), a_h @ b_h, rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("kind", ["cupy", "torch"])
def test_dlpack_real_producers_and_stream_protocol(gpu, kind):
    """CuPy and PyTorch arrays through DLPack (versioned where the framework has it), with stream=
    an object of the CUDA stream protocol."""
    mod = _fw(kind)
    if kind == "cupy":
        x = mod.arange(12, dtype=mod.float32).reshape(3, 4)
        s = mod.cuda.Stream(non_blocking=True)
        handle = s.ptr
    else:
        x = mod.arange(12, dtype=mod.float32, device="cuda").reshape(3, 4)
        s = mod.cuda.Stream()
        handle = s.cuda_stream
    versioned, _, _ = _arrays.capsule_header(_arrays.dlpack_capsule(x, handle))
    d = _arrays.device_array(x, ProtocolStream((0, handle)))
    assert d.stream == handle and d.shape == (3, 4) and d.strides == (4, 1) and d.dtype == "float32"
    print(f"{kind}: DLPack capsule versioned={versioned}")
    out = spillway.matmul(x, x.T, stream=ProtocolStream((0, handle)))
    s.synchronize()
    ref = np.arange(12, dtype=np.float32).reshape(3, 4)
    got = mod.asnumpy(out) if kind == "cupy" else out.cpu().numpy()
    np.testing.assert_allclose(got, ref @ ref.T, rtol=1e-6)
