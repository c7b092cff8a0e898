"""Host tests: everything that runs without a GPU (CI has none). On a GPU machine the same calls
run on the GPU unless a test forces the host path, so these also check the GPU path there."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
import threading
import warnings
from pathlib import Path

import numpy as np
import pytest

import spillway
from conftest import random01, reference, reference_threshold, reference_topk, run_measuring_rss

ROOT = Path(__file__).resolve().parents[2]
METRICS = ["counts", "jaccard", "cosine", "hamming"]


def quiet_gram(*args, **kw):
    kw.setdefault("progress", False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", spillway.HostFallbackWarning)
        return spillway.gram(*args, **kw)


# ---- the package --------------------------------------------------------------------------------


def test_version_is_the_cpp_version():
    text = (ROOT / "include/spillway/version.hpp").read_text()
    want = re.search(r'#define SPILLWAY_VERSION_STRING "([^"]+)"', text).group(1)
    assert spillway.__version__ == want


def test_gpu_query_says_why():
    n = spillway.device_count()
    assert spillway.gpu_available() == (n > 0)
    if n == 0:
        assert spillway.no_gpu_reason() != ""
    else:
        assert spillway.no_gpu_reason() == ""


def no_gpu_env():
    """The environment of a child process that sees no GPU (the no-GPU behaviour on any machine)."""
    env = dict(os.environ)
    env["CUDA_VISIBLE_DEVICES"] = ""
    return env


def test_host_fallback_is_announced_once():
    code = textwrap.dedent(
        """
        import warnings, numpy as np, spillway
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            spillway.gram(np.eye(3, dtype=np.uint8), progress=False)
            spillway.gram(np.eye(3, dtype=np.uint8), progress=False)
        hits = [x for x in w if issubclass(x.category, spillway.HostFallbackWarning)]
        print(len(hits), str(hits[0].message))
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env=no_gpu_env()).stdout
    count, message = out.split(" ", 1)
    assert count == "1"
    assert "no usable GPU" in message and "host implementation" in message


def test_no_gpu_without_fallback_is_a_runtime_error():
    code = textwrap.dedent(
        """
        import numpy as np, spillway
        assert not spillway.gpu_available() and spillway.no_gpu_reason()
        try:
            spillway.gram(np.eye(4, dtype=np.uint8), host_fallback=False, progress=False)
        except RuntimeError as e:
            print(e)
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env=no_gpu_env()).stdout
    assert "needs a GPU, and there is none" in out and "host_fallback" in out


# ---- pack_bits ----------------------------------------------------------------------------------


@pytest.mark.parametrize("cols", [0, 1, 31, 32, 33, 1023, 1024, 1025, 3001])
@pytest.mark.parametrize("dtype", [np.bool_, np.uint8, np.int8, np.int64, np.uint16])
def test_pack_bits_round_trips(rng, cols, dtype):
    rows = int(rng.integers(0, 40))
    a = random01(rng, rows, cols, 0.4, dtype)
    bm = spillway.pack_bits(a, pinned=False)
    assert bm.shape == (rows, cols)
    assert bm.ld_words % 32 == 0 and bm.ld_words * 32 >= cols
    np.testing.assert_array_equal(bm.unpack(), a.astype(np.uint8))
    np.testing.assert_array_equal(bm.row_popcounts(), a.astype(np.int64).sum(axis=1))
    # The layout: column c is bit c % 32 of word c // 32, np.packbits' little bit order, padding zero.
    if rows and cols:
        raw = bm.words.view(np.uint8).reshape(rows, -1)
        want = np.packbits(a.astype(np.uint8), axis=1, bitorder="little")
        np.testing.assert_array_equal(raw[:, : want.shape[1]], want)
        assert not raw[:, want.shape[1]:].any()


def test_pack_bits_reads_strided_rows_and_read_only_arrays(rng):
    big = random01(rng, 30, 200)
    view = big[::3, 5:150]  # row stride 600 bytes, columns contiguous
    np.testing.assert_array_equal(spillway.pack_bits(view).unpack(), view)
    ro = big.copy()
    ro.setflags(write=False)
    np.testing.assert_array_equal(spillway.pack_bits(ro).unpack(), ro)


def test_pack_bits_names_the_bad_value(rng):
    a = random01(rng, 300, 77)
    a[211, 40] = 2
    with pytest.raises(ValueError, match=r"value 2 at \(row 211, column 40\) is not 0 or 1"):
        spillway.pack_bits(a)
    np.testing.assert_array_equal(spillway.pack_bits(a, nonzero_as_one=True).unpack(), (a != 0).astype(np.uint8))


def test_pack_bits_names_the_bad_value_past_the_first_block(rng, monkeypatch):
    from spillway import _gram

    monkeypatch.setattr(_gram, "_PACK_BLOCK_BYTES", 1000)  # many row blocks
    a = random01(rng, 500, 100, dtype=np.int32)
    a[377, 3] = -1
    with pytest.raises(ValueError, match=r"value -1 at \(row 377, column 3\)"):
        spillway.pack_bits(a)


@pytest.mark.parametrize(
    "bad, message",
    [
        (np.zeros(10, np.uint8), "must be 2-D"),
        (np.zeros((3, 4, 5), np.uint8), "must be 2-D"),
        (np.zeros((4, 4), np.float32), "dtype float32"),
        (np.zeros((4, 8), np.uint8)[:, ::2], "contiguous"),
        (np.zeros((4, 8), np.uint8).T, "contiguous"),
    ],
)
def test_pack_bits_refuses_clearly(bad, message):
    with pytest.raises(ValueError, match=message):
        spillway.pack_bits(bad)


def test_from_packed_bytes_both_orders(rng):
    a = random01(rng, 17, 45)
    for order in ("big", "little"):
        packed = np.packbits(a, axis=1, bitorder=order)
        np.testing.assert_array_equal(spillway.from_packed_bytes(packed, 45, bitorder=order).unpack(), a)
    with pytest.raises(ValueError, match="bitorder"):
        spillway.from_packed_bytes(np.packbits(a, axis=1), 45, bitorder="middle")


def test_pack_bits_of_a_memory_mapped_file(rng, tmp_path, monkeypatch):
    from spillway import _gram

    monkeypatch.setattr(_gram, "_PACK_BLOCK_BYTES", 4096 * 3 + 100)  # blocks that straddle pages
    a = random01(rng, 700, 1000, dtype=np.bool_)
    np.save(tmp_path / "a.npy", a)
    m = np.load(tmp_path / "a.npy", mmap_mode="r")
    assert not m.flags.writeable
    np.testing.assert_array_equal(spillway.pack_bits(m).unpack(), a)


def test_mmap_larger_than_the_rss_cap_is_streamed(tmp_path):
    """A 1 GiB .npy packs with peak RSS under 256 MiB (a quarter of the file; the bits alone are
    128 MiB, an eighth): rows are read in 32 MiB blocks and each block's pages are released after
    packing. The peak is the child's own (run_measuring_rss: not the pytest process's)."""
    rows, cols = 8192, 131072  # 1 GiB of uint8
    path = tmp_path / "big.npy"
    # open_memmap makes a sparse file: only the rows given ones are written; the reader still maps
    # (and, unless released, keeps) every page it reads, holes included.
    writer = textwrap.dedent(
        f"""
        import numpy as np
        m = np.lib.format.open_memmap({str(path)!r}, mode="w+", dtype=np.uint8, shape=({rows}, {cols}))
        for r in range(0, {rows}, 97):
            m[r, (r * 31) % {cols}] = 1
            m[r, -1] = 1
        m.flush()
        """
    )
    subprocess.run([sys.executable, "-c", writer], check=True)
    res = run_measuring_rss(
        f"""
        import numpy as np, spillway
        m = np.load({str(path)!r}, mmap_mode="r")
        bm = spillway.pack_bits(m, pinned=False)
        pc = bm.row_popcounts()
        want = np.zeros({rows}, np.int64)
        want[::97] = 2
        assert (pc == want).all(), "wrong popcounts"
        """
    )
    peak = res["ru_maxrss"]
    cap = 256 << 20
    hwm = "n/a" if res["vm_hwm"] is None else f"{res['vm_hwm'] / 2**20:.0f} MiB"
    print(f"file {path.stat().st_size / 2**20:.0f} MiB, peak RSS {peak / 2**20:.0f} MiB (VmHWM {hwm}), "
          f"cap {cap / 2**20:.0f} MiB")
    assert path.stat().st_size >= 4 * cap
    assert peak < cap
    if res["vm_hwm"] is not None:
        assert res["vm_hwm"] < cap


def test_pack_bits_keeps_the_edits_of_a_copy_on_write_mapping(tmp_path, monkeypatch):
    """mmap_mode="c" is MAP_PRIVATE: its edited pages exist only in this process, so pack_bits must
    not release them (MADV_DONTNEED would bring back the file's bytes)."""
    from spillway import _gram

    monkeypatch.setattr(_gram, "_PACK_BLOCK_BYTES", 3 * 4096)  # several blocks, each of whole pages
    np.save(tmp_path / "z.npy", np.zeros((64, 4096), np.uint8))
    m = np.load(tmp_path / "z.npy", mmap_mode="c")
    m[5, 7] = m[40, 4095] = 1
    want = np.zeros((64, 4096), np.uint8)
    want[5, 7] = want[40, 4095] = 1
    np.testing.assert_array_equal(spillway.pack_bits(m, pinned=False).unpack(), want)
    np.testing.assert_array_equal(m, want)  # still the edited array after packing
    assert _gram._file_mapping(m) is None and _gram._file_mapping(np.asarray(m[3:9])) is None
    assert _gram._file_mapping(np.load(tmp_path / "z.npy", mmap_mode="r")[3:9]) is not None


# ---- gram against NumPy -------------------------------------------------------------------------


@pytest.mark.parametrize("metric", METRICS)
@pytest.mark.parametrize("shape", [(1, 5), (2, 1), (37, 65), (130, 1500), (64, 0)])
def test_dense_layouts(rng, metric, shape):
    a = random01(rng, *shape, density=float(rng.uniform(0.05, 0.6)))
    if shape[0] > 2:
        a[1] = 0  # an empty row: jaccard 0/0 and cosine with a zero norm
    ref = reference(a, None, metric)
    n = shape[0]
    # Floating metrics are bit-identical: both sides compute c/u or c/sqrt(na*nb) in float64 with
    # IEEE division and sqrt, then round once to float32.
    full = quiet_gram(a, metric=metric, _host_block_rows=7)
    assert full.dtype == ref.dtype and full.shape == (n, n)
    np.testing.assert_array_equal(full, ref)
    iu = np.triu_indices(n)
    np.testing.assert_array_equal(quiet_gram(a, metric=metric, sink="triangle", _host_block_rows=5), ref[iu])
    iu1 = np.triu_indices(n, 1)
    np.testing.assert_array_equal(quiet_gram(a, metric=metric, sink="condensed"), ref[iu1])


def test_condensed_matches_scipy_pdist(rng):
    from scipy.spatial.distance import pdist

    a = random01(rng, 60, 333).astype(bool)
    d = quiet_gram(a, metric="jaccard", sink="condensed")
    np.testing.assert_allclose(1.0 - d, pdist(a, "jaccard"), rtol=0, atol=1e-6)  # float32 rounding of c/u


@pytest.mark.parametrize("metric", METRICS)
def test_a_times_b_transposed(rng, metric):
    a = random01(rng, 45, 700)
    b = random01(rng, 81, 700, 0.5)
    np.testing.assert_array_equal(quiet_gram(a, b, metric=metric, _host_block_rows=8), reference(a, b, metric))


@pytest.mark.parametrize("metric", METRICS)
@pytest.mark.parametrize("k, include_diagonal", [(1, False), (5, True), (16, False), (64, False), (64, True)])
def test_topk(rng, metric, k, include_diagonal):
    n = 90
    a = random01(rng, n, 40, 0.2)  # few columns: many ties, broken by the smaller index
    vals, idx = quiet_gram(a, metric=metric, sink="topk", k=k, include_diagonal=include_diagonal, _host_block_rows=13)
    rv, ri = reference_topk(reference(a, None, metric), k, metric != "hamming", not include_diagonal)
    assert vals.shape == (n, k) and idx.shape == (n, k) and idx.dtype == np.int64
    np.testing.assert_array_equal(idx, ri)
    np.testing.assert_array_equal(vals, rv)


def test_topk_of_a_times_b_and_short_rows(rng):
    a = random01(rng, 20, 100)
    b = random01(rng, 6, 100)
    vals, idx = quiet_gram(a, b, metric="cosine", sink="topk", k=10)
    rv, ri = reference_topk(reference(a, b, "cosine"), 10, True, False)
    np.testing.assert_array_equal(idx, ri)
    np.testing.assert_array_equal(vals, rv)
    assert (idx[:, 6:] == -1).all()


@pytest.mark.parametrize("metric, t", [("counts", 12), ("jaccard", 0.25), ("cosine", 0.4), ("hamming", 40)])
@pytest.mark.parametrize("both_halves, include_diagonal", [(False, False), (True, False), (True, True), (False, True)])
def test_threshold(rng, metric, t, both_halves, include_diagonal):
    a = random01(rng, 70, 90)
    m = quiet_gram(a, metric=metric, sink="threshold", threshold=t, both_halves=both_halves,
                   include_diagonal=include_diagonal, _host_block_rows=9)
    from scipy.sparse import coo_array

    assert isinstance(m, coo_array) and m.shape == (70, 70)
    r, c, v = reference_threshold(reference(a, None, metric), t, metric != "hamming", True, both_halves,
                                  include_diagonal)
    np.testing.assert_array_equal(m.row, r)
    np.testing.assert_array_equal(m.col, c)
    np.testing.assert_array_equal(m.data, v)


@pytest.mark.parametrize("both_halves", [False, True])
def test_threshold_as_csr(rng, both_halves):
    # format="csr": the same entries as the COO, as SciPy's CSR (indptr over every row, columns
    # ascending); A·Bᵀ over rows(A) x rows(B).
    from scipy.sparse import csr_array

    a = random01(rng, 70, 90)
    coo = quiet_gram(a, metric="jaccard", sink="threshold", threshold=0.25, both_halves=both_halves,
                     _host_block_rows=9)
    m = quiet_gram(a, metric="jaccard", sink="threshold", threshold=0.25, both_halves=both_halves,
                   format="csr", _host_block_rows=9)
    assert isinstance(m, csr_array) and m.shape == (70, 70) and m.has_sorted_indices
    want = coo.tocsr()
    np.testing.assert_array_equal(m.indptr, want.indptr)
    np.testing.assert_array_equal(m.indices, want.indices)
    np.testing.assert_array_equal(m.data, want.data)
    assert m.nnz > 50
    b = random01(rng, 12, 90)
    mb = quiet_gram(a, b, sink="threshold", threshold=12, format="csr")
    r, c, v = reference_threshold(reference(a, b, "counts"), 12, True, False, False, False)
    assert isinstance(mb, csr_array) and mb.shape == (70, 12) and mb.nnz == len(r) > 0
    np.testing.assert_array_equal(mb.tocoo().row, r)
    np.testing.assert_array_equal(mb.indices, c)
    np.testing.assert_array_equal(mb.data, v)


def test_threshold_of_a_times_b(rng):
    a = random01(rng, 33, 64)
    b = random01(rng, 12, 64)
    m = quiet_gram(a, b, sink="threshold", threshold=6)
    r, c, v = reference_threshold(reference(a, b, "counts"), 6, True, False, False, False)
    assert m.shape == (33, 12)
    np.testing.assert_array_equal(m.row, r)
    np.testing.assert_array_equal(m.col, c)
    np.testing.assert_array_equal(m.data, v)


def test_bitmatrix_input_and_score_options(rng):
    a = random01(rng, 10, 50)
    a[3] = 0
    bm = spillway.pack_bits(a)
    j = quiet_gram(bm, metric="jaccard", jaccard_empty=0.5)
    assert j[3, 3] == np.float32(0.5)
    c = quiet_gram(bm, metric="cosine", cosine_zero=-1.0)
    assert (c[3] == -1.0).all()


def test_report_is_filled(rng):
    rep = {}
    quiet_gram(random01(rng, 50, 50), report=rep, _host_block_rows=10)
    assert rep["tasks_completed"] == rep["tasks_total"] > 0
    assert rep["on_host"] == (not spillway.gpu_available())
    # The split over the devices: one entry per device, summing to the job's totals (none on the host).
    assert len(rep["tasks_per_device"]) == len(rep["bytes_per_device"]) == len(rep["devices"])
    if rep["devices"]:
        assert sum(rep["tasks_per_device"]) == rep["tasks_completed"]
        assert sum(rep["bytes_per_device"]) == rep["bytes_moved"] > 0


# ---- errors -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kw, message",
    [
        (dict(metric="dice"), "metric must be one of"),
        (dict(sink="dense"), "sink must be one of"),
        (dict(sink="topk"), "needs k"),
        (dict(sink="topk", k=0), r"k must be an integer in \[1, 128\]"),
        (dict(sink="topk", k=129), r"k must be an integer in \[1, 128\]"),
        (dict(k=3), "k is for sink='topk'"),
        (dict(sink="threshold"), "needs threshold"),
        (dict(threshold=0.5), "threshold is for sink='threshold'"),
        (dict(sink="threshold", threshold=1, format="csc"), "format must be one of 'coo', 'csr'; got 'csc'"),
        (dict(sink="topk", k=2, format="csr"), "format is for sink='threshold'"),
        (dict(budget="eight gigs"), "is not a byte size"),
        (dict(budget=0), "positive byte count"),
        (dict(stream=5), "stream= orders device input"),
    ],
)
def test_bad_arguments_are_value_errors(kw, message):
    with pytest.raises(ValueError, match=message):
        quiet_gram(np.eye(4, dtype=np.uint8), **kw)


def test_bad_shapes_are_value_errors():
    with pytest.raises(ValueError, match="equal column counts"):
        quiet_gram(np.eye(4, dtype=np.uint8), np.eye(5, dtype=np.uint8))
    with pytest.raises(ValueError, match="layout of the symmetric"):
        quiet_gram(np.eye(4, dtype=np.uint8), np.eye(4, dtype=np.uint8), sink="triangle")
    with pytest.raises(TypeError, match="budget must be"):
        quiet_gram(np.eye(4, dtype=np.uint8), budget=1.5)


# ---- progress, Ctrl-C, the GIL ------------------------------------------------------------------


def test_progress_callable_sees_every_task(rng):
    seen = []
    quiet_gram(random01(rng, 100, 200), progress=lambda d, t: seen.append((d, t)), _host_block_rows=10,
               max_panel_rows=32)
    # Reports are coalesced (the caller's thread shows the latest count when it wakes), so only
    # the order and the final call are certain.
    assert seen[-1][0] == seen[-1][1] > 0
    assert [d for d, _ in seen] == sorted(d for d, _ in seen)


def test_tqdm_bar_when_installed(rng):
    pytest.importorskip("tqdm", reason="tqdm is optional; without it progress=True shows nothing")
    g = quiet_gram(random01(rng, 40, 40), progress=True, _host_block_rows=4)
    assert g.shape == (40, 40)


# The host implementation's Ctrl-C, checked in a child process that sees no GPU (so on every
# machine); the GPU form is in test_gpu.py.
CTRL_C_CHILD = textwrap.dedent(
    """
    import os, signal, threading, _thread, warnings, numpy as np, spillway
    # Python's SIGINT handler even when this child inherits SIGINT ignored (a background job of a
    # non-interactive shell, as a CI script may run us): else Ctrl-C does nothing at all.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    warnings.simplefilter("ignore")
    assert not spillway.gpu_available()
    a = (np.random.default_rng(int(os.environ["SEED"])).random((4000, 3000)) < 0.3).astype(np.uint8)
    how = os.environ["HOW"]
    started = threading.Event()

    def progress(done, total):
        if total > 0 and how == "callback":
            _thread.interrupt_main()  # a SIGINT seen while the callback runs
        if done >= 1:
            started.set()

    def kill():  # a real SIGINT from another thread while the main thread waits in C++
        if started.wait(60):
            os.kill(os.getpid(), signal.SIGINT)

    if how == "signal":
        threading.Thread(target=kill, daemon=True).start()
    try:
        spillway.gram(a, sink="condensed", progress=progress, _host_block_rows=8)
        print("not interrupted")
    except spillway.Cancelled as e:
        r = e.report
        assert isinstance(e, KeyboardInterrupt)
        assert r["cancelled"] and r["tasks_completed"] < r["tasks_total"], r
        assert len(r["completed_tasks"]) == r["tasks_completed"] and e.partial is not None
        print("cancelled", r["tasks_completed"], "of", r["tasks_total"])
    """
)


@pytest.mark.parametrize("how", ["callback", "signal"])
def test_ctrl_c_cancels_and_reports(rng, how):
    """Ctrl-C stops the job: spillway.Cancelled, a KeyboardInterrupt, with the partial report."""
    env = no_gpu_env()
    env["HOW"] = how
    env["SEED"] = str(int(rng.integers(1 << 30)))
    out = subprocess.run([sys.executable, "-c", CTRL_C_CHILD], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("cancelled"), out.stdout
    print(out.stdout)


def test_progress_exception_cancels_and_propagates(rng):
    def boom(done, total):
        if done >= 1:
            raise ZeroDivisionError("from the callback")

    with pytest.raises(ZeroDivisionError, match="from the callback"):
        quiet_gram(random01(rng, 400, 300), progress=boom, _host_block_rows=8, max_panel_rows=64)


def test_gil_is_released_while_the_job_runs(rng):
    a = random01(rng, 1500, 4000)
    ticks = 0
    stop = threading.Event()

    def ticker():
        nonlocal ticks
        while not stop.is_set():
            ticks += 1

    t = threading.Thread(target=ticker)
    t.start()
    try:
        quiet_gram(a, sink="condensed")
    finally:
        stop.set()
        t.join()
    assert ticks > 100


# ---- the README's example -----------------------------------------------------------------------


def test_readme_python_example_runs():
    text = (ROOT / "README.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    assert blocks, "README.md has no ```python block"
    env = dict(os.environ)
    env["PYTHONWARNINGS"] = "ignore::UserWarning"
    for code in blocks:
        subprocess.run([sys.executable, "-c", code], check=True, env=env, cwd=ROOT)



# ---- spillway.stream: argument checks (the GPU runs are in test_gpu.py) ---------------------------


def _noop(c):
    pass


@pytest.mark.parametrize(
    "ins, outs, kw, err, message",
    [
        ([np.zeros((10, 3))[:, ::2]], [], {}, ValueError, "not C-contiguous"),
        ([np.zeros((10, 3))], [np.zeros((9, 3))], {}, ValueError, "share their first axis"),
        ([np.zeros(())], [], {}, ValueError, "0-d"),
        ([[1, 2, 3]], [], {}, TypeError, "must be a NumPy array"),
        ([np.zeros(4, dtype=object)], [], {}, ValueError, "dtype object"),
        ([np.zeros(4, dtype=">f8")], [], {}, ValueError, "native-endian"),
        ([np.zeros(4)], [], dict(arrays="jax"), ValueError, "arrays must be one of"),
        ([np.zeros(4)], [], dict(chunk=0), ValueError, "chunk must be a positive row count"),
        ([np.zeros(4)], [], dict(slots=0), ValueError, "slots must be a positive integer"),
        ([], [], {}, ValueError, "at least one input or output"),
    ],
)
def test_stream_refuses_clearly(ins, outs, kw, err, message):
    with pytest.raises(err, match=message):
        spillway.stream(_noop, ins, outs, progress=False, **kw)


def test_stream_read_only_output_refused():
    out = np.zeros(4)
    out.setflags(write=False)
    with pytest.raises(ValueError, match="read-only"):
        spillway.stream(_noop, [np.zeros(4)], [out], progress=False)


def test_stream_without_a_gpu_says_so():
    code = textwrap.dedent(
        """
        import numpy as np, spillway
        try:
            spillway.stream(lambda c: None, [np.zeros(100)], [np.zeros(100)], progress=False)
        except RuntimeError as e:
            print(e)
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env=no_gpu_env()).stdout
    assert "needs a GPU, and there is none" in out


# ---- spillway.rk4 (host implementation here; the GPU form in test_gpu.py) -------------------------


def rk4_reference(f, y, t0, dt, steps):
    t = t0
    for _ in range(steps):
        k1 = f(t, y)
        k2 = f(t + dt / 2, y + dt / 2 * k1)
        k3 = f(t + dt / 2, y + dt / 2 * k2)
        k4 = f(t + dt, y + dt * k3)
        y = y + dt / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
        t += dt
    return y


def lorenz_reference(state, rho_lo, rho_hi, steps, dt, sigma=10.0, beta=8.0 / 3.0):
    n = state.shape[1]
    rho = rho_lo + (rho_hi - rho_lo) * (np.arange(n) / (n - 1) if n > 1 else np.zeros(n))

    def f(t, s):
        x, y, z = s
        return np.stack([sigma * (y - x), x * (rho - z) - y, x * y - beta * z])

    return rk4_reference(f, state.astype(np.float64), 0.0, dt, steps)


@pytest.mark.parametrize("dtype, rtol", [(np.float64, 1e-11), (np.float32, 2e-4)])
def test_lorenz_ensemble(rng, dtype, rtol):
    # Bounds: 200 steps to t = 0.2, where nearby Lorenz trajectories separate by ~e^(0.9 * 0.2);
    # float64 rounding (~1e-16 per operation, ~50 per step) stays far below 1e-11, float32's
    # (~6e-8 per operation) below 2e-4.
    n = 257
    s0 = (rng.standard_normal((3, n)) * 5 + np.array([[1.0], [1.0], [20.0]])).astype(dtype)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", spillway.HostFallbackWarning)
        y, saved = spillway.rk4.lorenz_ensemble(s0, steps=200, dt=1e-3, save_every=50, rho=(20.0, 30.0))
    assert y.dtype == dtype and y.shape == (3, n) and saved.shape == (4, 3, n)
    ref = lorenz_reference(s0, 20.0, 30.0, 200, 1e-3)
    np.testing.assert_allclose(y, ref, rtol=rtol, atol=rtol * 10)
    np.testing.assert_array_equal(saved[-1], y)
    np.testing.assert_allclose(saved[0], lorenz_reference(s0, 20.0, 30.0, 50, 1e-3), rtol=rtol, atol=rtol * 10)
    assert not np.shares_memory(y, s0)


def test_mean_field_coupled(rng):
    n, steps, dt = 64, 40, 1e-3
    F = (rng.standard_normal(n) + 1j * rng.standard_normal(n)).astype(np.complex64)
    G = (rng.standard_normal(n) + 1j * rng.standard_normal(n)).astype(np.complex64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", spillway.HostFallbackWarning)
        f1, g1, delta = spillway.rk4.mean_field(F, G, steps=steps, dt=dt, delta0=0.5 + 0.25j, coupling="mean")
    assert delta.shape == (steps + 1,) and delta.dtype == np.complex64 and delta[0] == np.complex64(0.5 + 0.25j)
    # Reference in complex128 with delta held fixed within a step; float32 state: rtol 1e-4.
    f, g, d = F.astype(np.complex128), G.astype(np.complex128), 0.5 + 0.25j
    ds = [d]
    for s in range(steps):
        def rhs(t, y, d=d):
            ff, gg = y
            return np.stack([-2j * ff - 1j * d * (2 * gg - 1), -1j * (np.conj(d) * ff - d * np.conj(ff))])

        f, g = rk4_reference(rhs, np.stack([f, g]), s * dt, dt, 1)
        d = f.mean()
        ds.append(d)
    np.testing.assert_allclose(f1, f, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(g1, g, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(delta, np.array(ds), rtol=1e-4, atol=1e-5)
    # Im(G) is invariant (dG/dt is real).
    np.testing.assert_allclose(g1.imag, G.imag, rtol=0, atol=1e-6)


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: spillway.rk4.lorenz_ensemble(np.zeros((2, 5)), steps=1, dt=0.1), r"shape \(3, n\)"),
        (lambda: spillway.rk4.lorenz_ensemble(np.zeros((3, 5), np.int32), steps=1, dt=0.1), "float32 or float64"),
        (lambda: spillway.rk4.lorenz_ensemble(np.zeros((3, 5)), steps=-1, dt=0.1), "steps must be"),
        (lambda: spillway.rk4.lorenz_ensemble(np.zeros((3, 5)), steps=1, dt=float("nan")), "finite"),
        (lambda: spillway.rk4.mean_field(np.zeros(4, np.complex128), np.zeros(4, np.complex128), steps=1, dt=0.1),
         "complex64"),
        (lambda: spillway.rk4.mean_field(np.zeros(4, np.complex64), np.zeros(5, np.complex64), steps=1, dt=0.1),
         "shape"),
        (lambda: spillway.rk4.mean_field(np.zeros(4, np.complex64), np.zeros(4, np.complex64), steps=1, dt=0.1,
                                         coupling="median"), "coupling must be"),
    ],
)
def test_rk4_refusals(call, message):
    with pytest.raises(ValueError, match=message):
        call()


# ---- the examples (python/examples/) --------------------------------------------------------------


@pytest.mark.parametrize(
    "script, args",
    [
        ("cooccurrence.py", ["--rows", "400", "--cols", "700", "--k", "5"]),
        ("rk4_ensemble.py", ["--systems", "50", "--steps", "500", "--png", "{tmp}/lorenz.png"]),
        ("stream_transform.py", ["--rows", "100000", "--budget", "8MiB"]),  # GPU: test_gpu.py checks it ran
        ("knn.py", ["--rows", "1500", "--dim", "48", "--k", "8", "--metric", "euclidean"]),
        ("knn.py", ["--rows", "1200", "--dim", "40", "--bf16", "--out", "{tmp}/nn"]),
    ],
)
def test_examples_run(tmp_path, script, args):
    env = dict(os.environ)
    env["PYTHONWARNINGS"] = "ignore"
    cmd = [sys.executable, str(ROOT / "python/examples" / script)] + [a.format(tmp=tmp_path) for a in args]
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr
    print(out.stdout)


def test_knn_example_reads_a_npy_and_writes_the_lists(tmp_path, rng):
    import ml_dtypes

    emb = rng.standard_normal((700, 33)).astype(ml_dtypes.bfloat16)
    np.save(tmp_path / "emb.npy", emb)
    env = dict(os.environ)
    env["PYTHONWARNINGS"] = "ignore"
    out = subprocess.run([sys.executable, str(ROOT / "python/examples/knn.py"), str(tmp_path / "emb.npy"), "--k", "5",
                          "--metric", "ip", "--out", str(tmp_path / "nn")], capture_output=True, text=True, env=env,
                         timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "memory-mapped" in out.stdout and "check: ok" in out.stdout
    idx, sc = np.load(tmp_path / "nn_indices.npy"), np.load(tmp_path / "nn_scores.npy")
    assert idx.shape == sc.shape == (700, 5) and idx.dtype == np.int64 and sc.dtype == np.float32
    e64 = emb.astype(np.float64)
    np.testing.assert_allclose(sc[:, 0], (e64 * e64[idx[:, 0]]).sum(1), rtol=1e-5, atol=1e-4)


def test_cooccurrence_example_reads_a_npy(tmp_path, rng):
    np.save(tmp_path / "a.npy", random01(rng, 300, 400, dtype=np.bool_))
    env = dict(os.environ)
    env["PYTHONWARNINGS"] = "ignore"
    out = subprocess.run([sys.executable, str(ROOT / "python/examples/cooccurrence.py"), str(tmp_path / "a.npy")],
                         capture_output=True, text=True, env=env, timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "memory-mapped" in out.stdout and "check: ok" in out.stdout
