"""GPU tests: skip with the reason where no GPU is usable, fail instead under
SPILLWAY_REQUIRE_GPU=1 (scripts/gpu-check.sh python). Device inputs come from CuPy, PyTorch and
Numba; each is checked to be read where it lies (pointer equality), never copied."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import spillway
from spillway import _arrays
from conftest import need, need_gpus, random01, reference, reference_threshold, reference_topk, run_measuring_rss

METRICS = ["counts", "jaccard", "cosine", "hamming"]


def framework(name):
    need(importlib.util.find_spec(name) is not None, f"{name} is not installed")
    mod = pytest.importorskip(name)
    if name == "numba":
        from numba import cuda

        need(cuda.is_available(), "numba.cuda sees no GPU")
        return cuda
    return mod


def g(*args, **kw):
    kw.setdefault("progress", False)
    return spillway.gram(*args, **kw)


# ---- host input on the GPU ------------------------------------------------------------------------


@pytest.mark.parametrize("metric", METRICS)
@pytest.mark.parametrize("n, cols", [(1, 3), (129, 1025), (700, 3000)])
def test_dense_on_gpu_matches_numpy(gpu, rng, metric, n, cols):
    a = random01(rng, n, cols, float(rng.uniform(0.05, 0.5)))
    ref = reference(a, None, metric)
    rep = {}
    # max_panel_rows=128: several strips, so the out-of-core path (not one tile) is what runs.
    full = g(a, metric=metric, max_panel_rows=128, report=rep)
    assert not rep["on_host"] and rep["devices"]
    np.testing.assert_array_equal(full, ref)  # bit-identical: same double formula, one rounding
    np.testing.assert_array_equal(g(a, metric=metric, sink="triangle", max_panel_rows=96), ref[np.triu_indices(n)])
    np.testing.assert_array_equal(g(a, metric=metric, sink="condensed", budget="64MiB"), ref[np.triu_indices(n, 1)])


@pytest.mark.parametrize("metric", METRICS)
def test_topk_and_threshold_on_gpu(gpu, rng, metric):
    a = random01(rng, 500, 333, 0.2)
    ref = reference(a, None, metric)
    larger = metric != "hamming"
    vals, idx = g(a, metric=metric, sink="topk", k=32, max_panel_rows=64)
    rv, ri = reference_topk(ref, 32, larger, True)
    np.testing.assert_array_equal(idx, ri)
    np.testing.assert_array_equal(vals, rv)
    t = {"counts": 30, "jaccard": 0.2, "cosine": 0.35, "hamming": 110}[metric]
    m = g(a, metric=metric, sink="threshold", threshold=t, both_halves=True, max_panel_rows=64)
    r, c, v = reference_threshold(ref, t, larger, True, True, False)
    np.testing.assert_array_equal(m.row, r)
    np.testing.assert_array_equal(m.col, c)
    np.testing.assert_array_equal(m.data, v)
    # As CSR straight from the job (gram_threshold_csr): the same entries.
    s = g(a, metric=metric, sink="threshold", threshold=t, both_halves=True, max_panel_rows=64, format="csr")
    assert s.format == "csr" and s.shape == (500, 500)
    np.testing.assert_array_equal(s.indptr, np.searchsorted(r, np.arange(501)))
    np.testing.assert_array_equal(s.indices, c)
    np.testing.assert_array_equal(s.data, v)


def test_a_times_b_on_gpu(gpu, rng):
    a = random01(rng, 300, 2000)
    b = random01(rng, 170, 2000, 0.5)
    np.testing.assert_array_equal(g(a, b, metric="jaccard", max_panel_rows=64), reference(a, b, "jaccard"))
    vals, idx = g(a, b, sink="topk", k=8)
    rv, ri = reference_topk(reference(a, b, "counts"), 8, True, False)
    np.testing.assert_array_equal(idx, ri)
    np.testing.assert_array_equal(vals, rv)


def test_bits_are_pinned_where_a_gpu_is(gpu, rng):
    assert spillway.pack_bits(random01(rng, 10, 10)).pinned


def test_two_gpus(gpu, rng):
    need_gpus(2)
    a = random01(rng, 2000, 1500)
    rep = {}
    full = g(a, devices=[0, 1], max_panel_rows=128, report=rep)
    assert sorted(rep["devices"]) == [0, 1]
    # How the strips and their bytes were split over the two devices' copy links.
    assert len(rep["tasks_per_device"]) == 2 and sum(rep["tasks_per_device"]) == rep["tasks_completed"]
    assert len(rep["bytes_per_device"]) == 2 and sum(rep["bytes_per_device"]) == rep["bytes_moved"]
    assert min(rep["bytes_per_device"]) > 0
    np.testing.assert_array_equal(full, reference(a, None, "counts"))


def test_budget_too_small_is_a_value_error(gpu, rng):
    with pytest.raises(ValueError, match="budget"):
        g(random01(rng, 5000, 5000), budget=4096)


def test_ctrl_c_cancels_a_gpu_job(gpu, rng, sigint_handled):
    import _thread

    def interrupt(done, total):
        if total > 0:  # as the job starts: spillway's first progress report (0 done)
            _thread.interrupt_main()

    a = random01(rng, 20000, 4096)
    with pytest.raises(spillway.Cancelled) as info:
        g(a, sink="triangle", progress=interrupt, max_panel_rows=64)
    rep = info.value.report
    # Cancelled at the first report: only the strips already in flight (3 slots per GPU) finish.
    assert rep["cancelled"] and rep["tasks_completed"] < rep["tasks_total"] == 313
    # The drained job left the GPU usable.
    np.testing.assert_array_equal(g(a[:50]), reference(a[:50], None, "counts"))


def test_mmap_larger_than_the_budget_and_the_rss_cap(gpu, tmp_path):
    """A 2 GiB .npy, 10x the 192 MiB budget and 4x the 512 MiB cap on the job's RSS: packed block by
    block into 256 MiB of pinned bits (themselves more than the budget, so the column operand is
    streamed), top-32 per row out of core.

    The cap bounds the child's peak RSS above its baseline, taken after a small GPU job has made
    the CUDA context and spillway's pools (their host memory depends on the driver, not on the
    file). Over the baseline the job holds the 256 MiB of pinned bits, one 32 MiB block of the file
    and a few MiB of results; without the per-block release the whole 2 GiB would be resident."""
    rows, cols = 16384, 131072
    path = tmp_path / "big.npy"
    writer = textwrap.dedent(
        f"""
        import numpy as np
        m = np.lib.format.open_memmap({str(path)!r}, mode="w+", dtype=np.uint8, shape=({rows}, {cols}))
        rng = np.random.default_rng(7)
        pattern = (rng.random((64, {cols})) < 0.05).astype(np.uint8)
        for r in range(0, {rows}, 64):
            m[r:r + 64] = pattern
        m.flush()
        """
    )
    subprocess.run([sys.executable, "-c", writer], check=True)
    res = run_measuring_rss(
        f"""
        import numpy as np, spillway
        spillway.gram(np.eye(8, 64, dtype=np.uint8), progress=False)  # CUDA context and pools: the baseline
        _result["baseline"] = _rss_now()
        m = np.load({str(path)!r}, mmap_mode="r")
        rep = {{}}
        vals, idx = spillway.gram(m, sink="topk", k=32, budget="192MiB", progress=False, report=rep)
        # Row r equals every row r + 64 t: its best partners are those copies (count = its popcount).
        pc = (np.load({str(path)!r}, mmap_mode="r")[:64].astype(np.int64)).sum(axis=1)
        assert (vals[:, 0] == pc[np.arange({rows}) % 64]).all(), "wrong top-1"
        assert ((idx[:, 0] % 64) == (np.arange({rows}) % 64)).all(), "wrong partner"
        _result["tasks"] = rep["tasks_total"]
        """
    )
    assert res["baseline"] is not None, "no /proc/self/status VmRSS: this check needs Linux"
    peak = max(res["ru_maxrss"], res["vm_hwm"] or 0)
    grew = peak - res["baseline"]
    cap = 512 << 20
    size = path.stat().st_size
    print(f"file {size >> 20} MiB, peak RSS {peak >> 20} MiB = baseline {res['baseline'] >> 20} MiB (CUDA context) "
          f"+ {grew >> 20} MiB for the job (cap {cap >> 20}), {res['tasks']} strips")
    assert size >= 4 * cap and size >= 10 * (192 << 20)
    assert grew < cap and res["tasks"] > 1


# ---- device input: CuPy, PyTorch (DLPack), Numba (__cuda_array_interface__) -----------------------


def _check_device_result(out, host_ref, to_numpy):
    np.testing.assert_array_equal(to_numpy(out), host_ref)


@pytest.mark.parametrize("metric, sink", [("counts", "full"), ("jaccard", "triangle"), ("hamming", "condensed")])
def test_cupy_input_zero_copy(gpu, rng, metric, sink):
    cp = framework("cupy")
    a = random01(rng, 300, 1000)
    x = cp.asarray(a)
    s = cp.cuda.Stream(non_blocking=True)
    d = _arrays.device_array(x, s)
    assert d.ptr == x.data.ptr and d.framework == "cupy"  # read where it lies
    out = g(x, metric=metric, sink=sink, stream=s)
    assert isinstance(out, cp.ndarray)
    s.synchronize()
    ref = reference(a, None, metric)
    want = ref if sink == "full" else ref[np.triu_indices(300, 0 if sink == "triangle" else 1)]
    _check_device_result(out, want, cp.asnumpy)


def test_cupy_a_times_b_and_topk(gpu, rng):
    cp = framework("cupy")
    a, b = random01(rng, 200, 700), random01(rng, 90, 700)
    xa, xb = cp.asarray(a), cp.asarray(b)
    out = g(xa, xb, metric="cosine")
    np.testing.assert_array_equal(cp.asnumpy(out), reference(a, b, "cosine"))
    vals, idx = g(xa, sink="topk", k=5)
    assert isinstance(vals, cp.ndarray)
    rv, ri = reference_topk(reference(a, None, "counts"), 5, True, True)
    np.testing.assert_array_equal(cp.asnumpy(idx), ri)
    np.testing.assert_array_equal(cp.asnumpy(vals), rv)


@pytest.mark.parametrize("dtype", ["uint8", "int8", "bool"])
def test_torch_input_zero_copy(gpu, rng, dtype):
    torch = framework("torch")
    need(torch.cuda.is_available(), "torch.cuda sees no GPU")
    a = random01(rng, 257, 1100)
    x = torch.from_numpy(a).to("cuda").to(getattr(torch, dtype))
    s = torch.cuda.Stream()
    d = _arrays.device_array(x, s)
    assert d.ptr == x.data_ptr() and d.framework == "torch" and d.dtype == dtype
    with torch.cuda.stream(s):
        out = g(x, metric="jaccard", stream=s)
    assert isinstance(out, torch.Tensor) and out.dtype == torch.float32
    s.synchronize()
    np.testing.assert_array_equal(out.cpu().numpy(), reference(a, None, "jaccard"))


def test_numba_input_zero_copy_through_cai(gpu, rng):
    cuda = framework("numba")
    a = random01(rng, 150, 999)
    x = cuda.to_device(a)
    assert not hasattr(x, "__dlpack__") or True  # whichever: numba arrays take the CAI path
    d = _arrays.device_array(x)
    assert d.ptr == x.__cuda_array_interface__["data"][0] and d.framework == "numba"
    out = g(x, metric="counts")
    cuda.synchronize()
    np.testing.assert_array_equal(out.copy_to_host(), reference(a, None, "counts"))


def test_cai_stream_is_waited_on(gpu, rng):
    """A __cuda_array_interface__ v3 producer with a stream: spillway's stream waits on it."""
    cp = framework("cupy")
    a = random01(rng, 64, 256)
    x = cp.asarray(a)
    s = cp.cuda.Stream(non_blocking=True)

    class Producer:  # CAI only, with its stream
        def __init__(self, arr, stream):
            self._a, self._s = arr, stream

        @property
        def __cuda_array_interface__(self):
            d = dict(self._a.__cuda_array_interface__)
            d["version"] = 3
            d["stream"] = self._s.ptr
            return d

    with s:
        x[:] = cp.asarray(a)  # the producer's pending write
    p = Producer(x, s)
    d = _arrays.device_array(p)
    assert d.ptr == x.data.ptr and d.stream == s.ptr
    out = g(p)  # the result is a CuPy array (CuPy is installed): see empty_like_framework
    cp.cuda.Device().synchronize()
    np.testing.assert_array_equal(cp.asnumpy(out), reference(a, None, "counts"))


def test_device_refusals(gpu, rng):
    cp = framework("cupy")
    x = cp.asarray(random01(rng, 10, 64))
    with pytest.raises(ValueError, match="both be device arrays or both host"):
        g(x, random01(rng, 10, 64))
    with pytest.raises(ValueError, match="contiguous"):
        g(x[:, ::2])
    with pytest.raises(ValueError, match="bool, uint8 or int8"):
        g(x.astype(cp.float32))
    bad = x.copy()
    bad[3, 5] = 7
    with pytest.raises(ValueError, match=r"value 7 at \(row 3, column 5\)"):
        g(bad)


# ---- spillway.stream ------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["cupy", "torch", "numba"])
def test_stream_each_framework(gpu, rng, kind):
    """c = a * 2 + b (rows of 3 float64) through a 1 MiB budget: many chunks, each computed by the
    framework's own code on the chunk's stream; pageable inputs staged by spillway."""
    mod = framework(kind)
    n = 200_003
    a = rng.standard_normal((n, 3))
    b = rng.standard_normal((n, 3))
    c = np.full((n, 3), np.nan)
    seen = []

    def fn(ch):
        seen.append((ch.begin, ch.count, ch.device))
        x, y = ch.inputs
        (z,) = ch.outputs
        assert tuple(x.shape) == (ch.count, 3)
        if kind == "numba":
            _axpb_on_numba_arrays(x, y, z, ch)
        else:
            z[...] = x * 2 + y  # the current stream is the chunk's: CuPy/PyTorch enqueue there

    if kind == "numba":
        need(importlib.util.find_spec("cupy") is not None, "cupy is not installed (it computes on the Numba arrays)")
    rep = spillway.stream(fn, [a, b], [c], budget="1MiB", arrays=kind, progress=False)
    assert rep["tasks_completed"] == rep["tasks_total"] == len(seen) > 5
    assert sum(cnt for _, cnt, _ in seen) == n
    np.testing.assert_array_equal(c, a * 2 + b)  # one multiply-add, the same IEEE rounding


def _axpb_on_numba_arrays(x, y, z, ch):
    """z = x * 2 + y on the chunk's Numba device arrays without compiling a Numba kernel: numba-cuda's
    JIT breaks when it is older than the NumPy beside it (numba-cuda touching np.row_stack, gone in
    NumPy 2.4), which says nothing about spillway. What is under test is the Numba side of the
    chunk -- its arrays are Numba DeviceNDArrays over the slot's memory and its stream is a Numba
    stream -- so CuPy computes on the same pointers through __cuda_array_interface__ (pointer
    equality proves no copy; the result reaching the host proves the writes landed in the slot)."""
    import cupy as cp
    from numba import cuda

    for v in (x, y, z):
        assert cuda.is_cuda_array(v) and _arrays.framework_of(v) == "numba", type(v)
    handle = int(ch.stream)  # a Numba stream's int() is its CUstream handle
    assert _arrays.stream_handle(ch.stream) == handle  # what stream= makes of a Numba stream object
    with cp.cuda.Device(ch.device), _arrays.cupy_stream(handle, ch.device):
        xs, ys, zs = (cp.asarray(v) for v in (x, y, z))
        for v, c in zip((x, y, z), (xs, ys, zs)):
            assert c.data.ptr == v.__cuda_array_interface__["data"][0], "CuPy copied the Numba array"
        zs[...] = xs * 2 + ys


def test_stream_chunk_cap_and_two_gpus(gpu, rng):
    cp = framework("cupy")
    need_gpus(2)
    n = 1_000_000
    a = rng.standard_normal(n).astype(np.float32)
    out = np.empty(n, np.float32)
    devs = set()

    def fn(ch):
        devs.add(ch.device)
        assert ch.count <= 50_000
        ch.outputs[0][...] = cp.sqrt(cp.abs(ch.inputs[0]))

    rep = spillway.stream(fn, [a], [out], chunk=50_000, devices=[0, 1], progress=False)
    assert devs == {0, 1} and sorted(rep["devices"]) == [0, 1]
    np.testing.assert_array_equal(out, np.sqrt(np.abs(a)))


def test_stream_fn_exception_is_raised_as_it_was(gpu, rng):
    framework("cupy")

    def fn(ch):
        if ch.index == 3:
            raise KeyError("chunk three")
        ch.outputs[0][...] = ch.inputs[0]

    with pytest.raises(KeyError, match="chunk three"):
        spillway.stream(fn, [np.zeros(100_000)], [np.zeros(100_000)], chunk=1000, progress=False)


def test_stream_ctrl_c(gpu, rng, sigint_handled):
    import _thread

    cp = framework("cupy")

    def interrupt(done, total):
        if total > 0:
            _thread.interrupt_main()

    counts = []

    def fn(ch):
        counts.append(ch.count)
        ch.outputs[0][...] = ch.inputs[0] + 1

    n, cap = 2_000_000, 1000
    with pytest.raises(spillway.Cancelled) as info:
        spillway.stream(fn, [np.zeros(n)], [np.zeros(n)], chunk=cap, progress=interrupt)
    rep = info.value.report
    # The plan's promise (pipeline/plan.hpp): chunk= caps a slot at cap rows' bytes (2 x 8000 here);
    # each buffer of a slot is padded to a 256-byte boundary, so a chunk is the largest row count
    # whose padded slot fits (992 rows: 2 x 7936 bytes), and every chunk but the last has it.
    rows = max(u for u in range(1, cap + 1) if 2 * (-(-8 * u // 256) * 256) <= 2 * 8 * cap)
    assert rows == 992
    assert rep["cancelled"] and rep["tasks_completed"] < rep["tasks_total"] == -(-n // rows)  # 2017
    assert set(counts) <= {rows, n - (rep["tasks_total"] - 1) * rows}  # full chunks, and the short last one
    del cp


# ---- spillway.rk4 on the device -------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["cupy", "torch", "numba"])
def test_lorenz_ensemble_in_place_on_device(gpu, rng, kind):
    from test_host import lorenz_reference

    mod = framework(kind)
    n = 10_000
    s0 = rng.standard_normal((3, n)) * 5 + np.array([[1.0], [1.0], [20.0]])
    if kind == "cupy":
        x = mod.asarray(s0)
        ptr, back = x.data.ptr, mod.asnumpy
    elif kind == "torch":
        x = mod.from_numpy(s0).to("cuda")
        ptr, back = x.data_ptr(), lambda t: t.cpu().numpy()
    else:
        x = mod.to_device(s0)
        ptr, back = x.__cuda_array_interface__["data"][0], lambda a: a.copy_to_host()
    y, saved = spillway.rk4.lorenz_ensemble(x, steps=300, dt=1e-3, save_every=100, rho=(20.0, 30.0))
    assert y is x and _arrays.device_array(y).ptr == ptr  # advanced where it lies
    if kind == "numba":
        mod.synchronize()  # numba's copy_to_host runs on its default stream; the kernel on 0 too
    ref = lorenz_reference(s0, 20.0, 30.0, 300, 1e-3)
    np.testing.assert_allclose(back(y), ref, rtol=1e-11, atol=1e-10)  # float64 bound as in test_host
    np.testing.assert_array_equal(back(saved)[-1], back(y))


def test_lorenz_numpy_on_gpu_matches_host(gpu, rng):
    from test_host import lorenz_reference

    s0 = (rng.standard_normal((3, 1000)) * 5 + np.array([[1.0], [1.0], [20.0]])).astype(np.float32)
    y, _ = spillway.rk4.lorenz_ensemble(s0, steps=200, dt=1e-3)
    np.testing.assert_allclose(y, lorenz_reference(s0, 20.0, 30.0, 200, 1e-3), rtol=2e-4, atol=2e-3)


def test_mean_field_on_device(gpu, rng):
    cp = framework("cupy")
    n, steps = 1 << 16, 100
    F = (rng.standard_normal(n) + 1j * rng.standard_normal(n)).astype(np.complex64)
    G = (rng.standard_normal(n) + 1j * rng.standard_normal(n)).astype(np.complex64)
    f_host, g_host, d_host = spillway.rk4.mean_field(F, G, steps=steps, dt=1e-3, coupling="mean")  # NumPy in: GPU too
    xf, xg = cp.asarray(F), cp.asarray(G)
    f, g, delta = spillway.rk4.mean_field(xf, xg, steps=steps, dt=1e-3, coupling="mean")
    assert f is xf and g is xg and isinstance(delta, cp.ndarray)
    # Same kernels, same order of summation: bitwise reproducible (docs/ode.md).
    np.testing.assert_array_equal(cp.asnumpy(delta), d_host)
    np.testing.assert_array_equal(cp.asnumpy(f), f_host)
    np.testing.assert_allclose(cp.asnumpy(g).imag, G.imag, rtol=0, atol=1e-5)  # Im(G) invariant


# ---- the examples on the GPU ----------------------------------------------------------------------


def _example(script, *args):
    import pathlib

    root = pathlib.Path(__file__).resolve().parents[2]
    out = subprocess.run([sys.executable, str(root / "python/examples" / script), *args], capture_output=True,
                         text=True, timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr
    print(out.stdout)
    return out.stdout


@pytest.mark.parametrize("kind", ["cupy", "torch"])
def test_stream_transform_example(gpu, kind):
    framework(kind)
    text = _example("stream_transform.py", "--rows", "5000000", "--budget", "64MiB", "--arrays", kind)
    assert "check: max relative error" in text and "ok" in text


def test_knn_example_on_the_gpu(gpu):
    text = _example("knn.py", "--rows", "30000", "--dim", "256", "--bf16", "--k", "16", "--budget", "64MiB")
    assert "check: ok" in text and "devices [" in text


def test_rk4_ensemble_example_plots(gpu, tmp_path):
    framework("cupy")
    need(importlib.util.find_spec("matplotlib") is not None, "matplotlib is not installed")
    text = _example("rk4_ensemble.py", "--systems", "20000", "--steps", "5000", "--png", str(tmp_path / "l.png"))
    assert "(GPU)" in text and (tmp_path / "l.png").stat().st_size > 10_000


def test_cooccurrence_example_on_gpu(gpu):
    text = _example("cooccurrence.py", "--rows", "10000", "--cols", "20000", "--budget", "256MiB")
    assert "devices" in text and "check: ok" in text
