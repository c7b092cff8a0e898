"""spillway.stream: Fortran-ordered arrays, resident operands and the per-device report. The checks
(which axis is chunked, what is refused and how) run everywhere; the jobs need a GPU."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import spillway
from spillway import _stream
from conftest import need, need_gpus

stream = lambda *a, **k: spillway.stream(*a, progress=False, **k)  # noqa: E731


def noop(c):
    pass


class CAI:
    """A device array as __cuda_array_interface__ describes it (pointer 0: no GPU needed to read it)."""

    def __init__(self, shape, typestr="<f8", strides=None):
        self.__cuda_array_interface__ = {"data": (0, False), "shape": shape, "typestr": typestr,
                                         "strides": strides, "version": 3, "stream": None}


# ---- which axis is chunked --------------------------------------------------------------------------


def test_chunk_axes_follow_each_arrays_order():
    n = 7
    c2 = np.zeros((n, 3))
    f2 = np.zeros((3, n), order="F")
    f3 = np.zeros((2, 3, n), order="F")
    one = np.zeros(n)
    axes, units = _stream._chunk_axes((("inputs", [f2, c2, one]), ("outputs", [f3])))
    assert units == n and axes == [-1, 0, 0, -1]
    # An array both C- and F-contiguous takes the axis whose length matches the others'.
    row = np.zeros((1, n))  # C and F contiguous
    axes, units = _stream._chunk_axes((("inputs", [f2, row]), ("outputs", [])))
    assert units == n and axes == [-1, -1]
    axes, units = _stream._chunk_axes((("inputs", [row]), ("outputs", [])))
    assert units == 1 and axes == [0]


def test_fortran_arrays_are_accepted_up_to_the_gpu():
    """F-ordered inputs and outputs pass every check (no copy is made: their last axis is chunked);
    with no GPU (a child process that sees none, on any machine) the job itself says it needs one."""
    code = textwrap.dedent(
        """
        import numpy as np, spillway
        for ins, outs in (([np.zeros((3, 10), order="F")], [np.zeros((2, 10), order="F"), np.zeros(10)]),
                          ([np.zeros((3, 10), order="F")], [np.zeros((10, 2))])):  # F and C mixed: 10 units each
            try:
                spillway.stream(lambda c: None, ins, outs, progress=False)
            except RuntimeError as e:
                print("refused:", e)
        """
    )
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env).stdout
    assert out.count("refused: spillway.stream needs a GPU") == 2, out


@pytest.mark.parametrize("ins, outs, message", [
    ([np.zeros((3, 10), order="F")], [np.zeros((2, 10))], r"outputs\[0\] \(shape \(2, 10\)\) has 2 units along its "
                                                           r"first axis \(C order\), the others 10; all arrays share "
                                                           r"their first axis \(the last, for an F-ordered array\)"),
    ([np.zeros((10, 3))], [np.zeros((2, 9), order="F")], r"outputs\[0\] \(shape \(2, 9\)\) has 9 units along its last "
                                                          r"axis \(F order\), the others 10"),
    ([np.zeros((10, 4))[:, ::2]], [], r"inputs\[0\] \(shape \(10, 2\), strides \(32, 16\)\) is not C-contiguous nor "
                                      r"F-contiguous.*np.ascontiguousarray.*mmap_mode='r'"),
    ([np.zeros((4, 10), order="F")[::2]], [], r"is not C-contiguous nor F-contiguous"),
])
def test_layouts_refused_clearly(ins, outs, message):
    with pytest.raises(ValueError, match=message):
        stream(noop, ins, outs)


def test_fortran_units_mismatch_with_one_dimensional():
    with pytest.raises(ValueError, match=r"inputs\[1\] \(shape \(5,\)\) has 5 units"):
        stream(noop, [np.zeros((3, 10), order="F"), np.zeros(5)], [])


def test_inputs_must_be_a_list():
    with pytest.raises(TypeError, match="inputs must be a list or tuple of NumPy arrays, got ndarray"):
        stream(noop, np.zeros((4, 3)), [])


# ---- resident operands: what is refused -------------------------------------------------------------


@pytest.mark.parametrize("resident, err, message", [
    (np.ones(3), TypeError, "resident must be a list or tuple of arrays .*got ndarray; wrap one array as resident=\\[w\\]"),
    (CAI((3,)), TypeError, "resident must be a list or tuple.*got CAI"),
    ("w", TypeError, "resident must be a list or tuple.*got str"),
    ([[1.0, 2.0]], TypeError, r"resident\[0\] must be a NumPy array or a device array .*got list"),
    ([np.ones(2), 3.0], TypeError, r"resident\[1\] must be a NumPy array or a device array .*got float"),
    ([np.zeros(3, object)], spillway.DTypeError, r"resident\[0\] has dtype object"),
    ([np.zeros(3, ">f4")], spillway.DTypeError, r"resident\[0\] has dtype >f4"),
    ([CAI((4, 3), strides=(16, 64))], ValueError, r"resident\[0\] is a device array with strides \(2, 8\) .*not "
                                                  r"contiguous; pass a contiguous copy"),
    ([CAI((3,), typestr="<x4")], spillway.DTypeError, r"resident\[0\] has dtype"),
])
def test_resident_refused_clearly(resident, err, message):
    with pytest.raises(err, match=message):
        stream(noop, [np.zeros(4)], [], resident=resident)


def test_resident_checked_even_for_an_empty_job():
    rep = stream(noop, [np.zeros(0)], [], resident=[np.ones(3), CAI((2, 2)), CAI((2, 2), strides=(8, 16))])
    assert rep["tasks_total"] == 0 and rep["seconds_per_device"] == []
    with pytest.raises(TypeError, match="resident"):
        stream(noop, [np.zeros(0)], [], resident=[None])


def test_non_contiguous_host_resident_is_accepted():
    """A host resident goes whole to every device, so it is small: a strided one is copied (not refused)."""
    out = _stream._residents([np.arange(12.0).reshape(3, 4)[:, ::2], np.zeros((3, 2), order="F")])
    assert out[0].host.flags.c_contiguous and out[0].strides is None
    assert out[1].strides == (8, 24)  # F-ordered: handed to fn F-ordered (bytes copied as they are)


def test_report_has_per_device_seconds():
    r = spillway.Report()
    assert r.seconds_per_device == [] and "seconds_per_device" in r.to_dict()
    filled = {}
    _, obj = stream(noop, [np.zeros(0)], [np.zeros(0)], report=filled, return_report=True)
    assert filled == obj.to_dict() and obj.seconds_per_device == []


# ---- on a GPU ---------------------------------------------------------------------------------------


def _cupy():
    need(importlib.util.find_spec("cupy") is not None, "cupy is not installed")
    import cupy

    return cupy


def test_stream_fortran_order(gpu):
    """F-ordered host arrays chunked along their last axis, handed to fn F-ordered, no copy."""
    cp = _cupy()
    rng = np.random.default_rng(3)
    n = 100_003
    a = np.asfortranarray(rng.standard_normal((3, n)))
    w = rng.standard_normal(3)
    out_f = np.asfortranarray(np.full((2, n), np.nan))
    out_c = np.full(n, np.nan)
    shapes = []

    def fn(c):
        x, = c.inputs
        yf, yc = c.outputs
        shapes.append((x.shape, yf.shape, yc.shape))
        assert x.flags.f_contiguous and yf.flags.f_contiguous
        s = (x * cp.asarray(w)[:, None]).sum(axis=0)
        yf[0] = s
        yf[1] = x[0]
        yc[...] = s * 2

    rep = stream(fn, [a], [out_f, out_c], budget="1MiB")
    assert rep["tasks_total"] > 3 and sum(s[0][1] for s in shapes) == n
    assert all(s[0][0] == 3 and s[1][0] == 2 for s in shapes)
    ref = (a * w[:, None]).sum(axis=0)
    np.testing.assert_allclose(out_f[0], ref, rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(out_f[1], a[0])
    np.testing.assert_allclose(out_c, ref * 2, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("kind", ["cupy", "torch"])
def test_stream_resident_host_and_device(gpu, kind):
    """A host weight vector, an F-ordered host matrix and a device array, whole in every chunk; the
    device one used where it lies (its pointer), not copied."""
    cp = _cupy()
    rng = np.random.default_rng(4)
    n = 50_000
    a = rng.standard_normal((n, 3))
    w = rng.standard_normal(3)
    m = np.asfortranarray(rng.standard_normal((3, 3)))
    bias_h = rng.standard_normal(3)
    bias = cp.asarray(bias_h)
    out = np.empty((n, 3))

    home = bias.device.id

    def fn(c):
        wv, mv, bv = c.resident
        x, = c.inputs
        ptr = bv.data.ptr if kind == "cupy" else bv.data_ptr()
        # On its own GPU the device resident is the caller's memory; other GPUs get a copy.
        assert (ptr == bias.data.ptr) == (c.device == home)
        if kind == "cupy":
            assert mv.flags.f_contiguous
        else:
            assert mv.stride() == (1, 3)
        c.outputs[0][...] = (x * wv) @ mv + bv

    if kind == "torch":
        need(importlib.util.find_spec("torch") is not None, "torch is not installed")
    rep = stream(fn, [a], [out], resident=[w, m, bias], arrays=kind, budget="1MiB")
    assert rep["tasks_total"] > 3
    np.testing.assert_allclose(out, (a * w) @ m + bias_h, rtol=1e-10, atol=1e-10)


def test_stream_device_resident_on_two_gpus(gpu):
    """A device resident on GPU 0 in a job over GPUs 0 and 1: GPU 1's chunks get a copy."""
    cp = _cupy()
    need_gpus(2)
    rng = np.random.default_rng(5)
    n = 400_000
    a = rng.standard_normal(n)
    with cp.cuda.Device(0):
        w = cp.asarray(rng.standard_normal(1))
    w_h = cp.asnumpy(w)
    out = np.empty(n)
    where = {}

    def fn(c):
        (wv,) = c.resident
        where.setdefault(c.device, int(wv.data.ptr))
        c.outputs[0][...] = c.inputs[0] * wv[0]

    rep = stream(fn, [a], [out], resident=[w], devices=[0, 1], chunk=20_000)
    assert set(where) == {0, 1} and where[0] == w.data.ptr and where[1] != w.data.ptr
    np.testing.assert_array_equal(out, a * w_h[0])
    assert len(rep["seconds_per_device"]) == 2


def test_stream_per_device_report(gpu):
    """Per GPU: chunks, bytes and seconds, lined up with devices; the sums are the job's."""
    cp = _cupy()
    n = 1_000_000
    a = np.random.default_rng(6).standard_normal(n)
    out = np.empty(n)
    devs = list(range(min(spillway.device_count(), 2)))

    def fn(c):
        c.outputs[0][...] = cp.sqrt(cp.abs(c.inputs[0]))

    filled = {}
    _, rep = stream(fn, [a], [out], chunk=50_000, devices=devs, report=filled, return_report=True)
    assert sorted(rep.devices) == devs
    assert len(rep.tasks_per_device) == len(rep.bytes_per_device) == len(rep.seconds_per_device) == len(devs)
    assert sum(rep.tasks_per_device) == rep.tasks_completed == rep.tasks_total
    assert sum(rep.bytes_per_device) == rep.bytes_moved == 2 * a.nbytes
    assert all(0 < s <= rep.elapsed_seconds for s in rep.seconds_per_device)
    assert filled == rep.to_dict()
    np.testing.assert_array_equal(out, np.sqrt(np.abs(a)))
