"""spillway.similarity: all-pairs similarity of float32 / float16 / bf16 rows.

Tests without the `gpu` fixture run everywhere: with no GPU on the host implementation (CI), on
a GPU machine on the GPU. Every score is checked against float64 NumPy within the bound the C++
suite states (tests/pairwise/similarity_test.cu): |gpu - exact| <= e for cosine, e·|a|·|b| for
the inner product and sqrt(e·(|a|² + |b|²)) for the Euclidean distance, e = 4(d + 8)·2^-24
(+ 2·2^-10 + 2^-20 for TF32). A top-k entry is correct when its exact score is within 2e of the
exact k-th score or better.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import spillway
from conftest import need, need_gpus

ml_dtypes = pytest.importorskip("ml_dtypes")

DTYPES = ["float32", "float16", "bfloat16"]
METRICS = ["cosine", "ip", "euclidean"]


def sim(*args, **kw):
    kw.setdefault("progress", False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", spillway.HostFallbackWarning)
        return spillway.similarity(*args, **kw)


def rows(rng, n, d, dtype, zero_rows=()):
    x = rng.standard_normal((n, d))
    for z in zero_rows:
        x[z] = 0.0
    return x.astype(ml_dtypes.bfloat16 if dtype == "bfloat16" else dtype)


def exact(a, b, metric, cosine_zero=0.0):
    """Scores in float64 from the rows as stored, with the squared norms."""
    a64 = np.asarray(a).astype(np.float64)
    b64 = a64 if b is None else np.asarray(b).astype(np.float64)
    dot = a64 @ b64.T
    na, nb = (a64 * a64).sum(1), (b64 * b64).sum(1)
    if metric == "ip":
        s = dot
    elif metric == "cosine":
        den = np.sqrt(np.outer(na, nb))
        with np.errstate(divide="ignore", invalid="ignore"):
            s = np.where(den > 0, dot / np.where(den > 0, den, 1), cosine_zero)
    else:
        s = np.sqrt(np.maximum(na[:, None] + nb[None, :] - 2 * dot, 0))
    return s, na, nb


def bound(d, metric, na, nb, tf32=False):
    e = 4.0 * (d + 8) * 2.0**-24 + (2 * 2.0**-10 + 2.0**-20 if tf32 else 0.0)
    if metric == "cosine":
        return np.full((len(na), len(nb)), e)
    if metric == "ip":
        return e * np.sqrt(np.outer(na, nb)) + 1e-30
    return np.sqrt(e * (na[:, None] + nb[None, :])) + 1e-30


def assert_close(got, want, eps, what):
    err = np.abs(np.asarray(got, dtype=np.float64) - want)
    worst = np.unravel_index(np.argmax(err / eps), err.shape) if err.size else None
    assert np.all(err <= eps), f"{what}: worst err/bound {np.max(err / eps):.3g} at {worst}"


def check_topk(values, indices, s, eps, k, larger, symmetric, include_diagonal, what):
    n, m = s.shape
    assert values.shape == (n, k) and indices.shape == (n, k)
    assert values.dtype == np.float32 and indices.dtype == np.int64
    for i in range(n):
        cand = [j for j in range(m) if not (symmetric and j == i and not include_diagonal)]
        order = sorted(cand, key=lambda j: (-s[i, j] if larger else s[i, j], j))
        kk = min(k, len(cand))
        kth = s[i, order[kk - 1]]
        row_eps = eps[i].max()
        seen = set()
        for t in range(k):
            j = int(indices[i, t])
            if t >= kk:
                assert j == -1, f"{what}: row {i} place {t} pads with -1"
                continue
            assert 0 <= j < m and j not in seen, f"{what}: row {i} place {t} lists {j}"
            assert not (symmetric and not include_diagonal and j == i), f"{what}: row {i} lists itself"
            seen.add(j)
            assert abs(values[i, t] - s[i, j]) <= eps[i, j], f"{what}: row {i} place {t} value"
            if larger:
                assert s[i, j] >= kth - 2 * row_eps, f"{what}: row {i} column {j} is not in the top {k}"
            else:
                assert s[i, j] <= kth + 2 * row_eps, f"{what}: row {i} column {j} is not in the top {k}"
            if t > 0:
                pv, cv = values[i, t - 1], values[i, t]
                assert (pv >= cv) if larger else (pv <= cv), f"{what}: row {i} not sorted at {t}"
                if pv == cv:
                    assert indices[i, t - 1] < j, f"{what}: row {i}: a tie goes to the smaller column"


# ---- dense layouts ------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("metric", METRICS)
def test_dense_layouts_match_float64(rng, dtype, metric):
    a = rows(rng, 131, 77, dtype, zero_rows=(5,))
    s, na, nb = exact(a, None, metric)
    eps = bound(a.shape[1], metric, na, nb)
    full = sim(a, metric=metric, sink="full", max_panel_rows=32)
    assert full.shape == (131, 131) and full.dtype == np.float32
    assert_close(full, s, eps, "full")
    np.testing.assert_array_equal(full, full.T)  # mirrored, not recomputed
    iu = np.triu_indices(131)
    assert_close(sim(a, metric=metric, sink="triangle", max_panel_rows=32), s[iu], eps[iu], "triangle")
    iu1 = np.triu_indices(131, 1)
    assert_close(sim(a, metric=metric, sink="condensed", max_panel_rows=32), s[iu1], eps[iu1], "condensed")
    if metric == "cosine":  # the zero row scores cosine_zero against everything, itself included
        z = sim(a, metric="cosine", sink="full", cosine_zero=-2.0)
        assert np.all(z[5] == -2.0) and np.all(z[:, 5] == -2.0)


@pytest.mark.parametrize("metric", METRICS)
def test_a_times_b_transposed(rng, metric):
    a, b = rows(rng, 70, 33, "float32"), rows(rng, 45, 33, "float32")
    s, na, nb = exact(a, b, metric)
    got = sim(a, b, metric=metric, max_panel_rows=16)
    assert got.shape == (70, 45)
    assert_close(got, s, bound(33, metric, na, nb), "A·Bᵀ")


def test_row_strides_and_read_only_rows(rng):
    """Rows are read in place: every other row of a larger array, read-only."""
    big = rows(rng, 120, 40, "float32")
    a = big[::2, 3:35]
    a.flags.writeable = False
    s, na, nb = exact(a, None, "ip")
    assert_close(sim(a, metric="ip"), s, bound(32, "ip", na, nb), "strided rows")


def test_tf32(rng):
    a = rows(rng, 90, 64, "float32")
    s, na, nb = exact(a, None, "cosine")
    assert_close(sim(a, tf32=True), s, bound(64, "cosine", na, nb, tf32=True), "tf32")


def test_bf16_bit_patterns_as_uint16(rng):
    a = rows(rng, 60, 24, "bfloat16")
    bits = a.view(np.uint16)
    np.testing.assert_array_equal(sim(bits, bf16=True, metric="ip"), sim(a, metric="ip"))


# ---- top-k and threshold ------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("metric", METRICS)
@pytest.mark.parametrize("include_diagonal", [False, True])
def test_topk_against_float64(rng, dtype, metric, include_diagonal):
    a = rows(rng, 150, 48, dtype, zero_rows=(7,))
    s, na, nb = exact(a, None, metric)
    v, i = sim(a, metric=metric, sink="topk", k=9, include_diagonal=include_diagonal, max_panel_rows=32)
    check_topk(v, i, s, bound(48, metric, na, nb), 9, metric != "euclidean", True, include_diagonal, "A·Aᵀ")


@pytest.mark.parametrize("metric", METRICS)
def test_topk_a_times_b_transposed_and_short_lists(rng, metric):
    a, b = rows(rng, 40, 20, "float16"), rows(rng, 11, 20, "float16")
    s, na, nb = exact(a, b, metric)
    v, i = sim(a, b, metric=metric, sink="topk", k=16)  # 16 > 11 columns: -1 pads each list
    check_topk(v, i, s, bound(20, metric, na, nb), 16, metric != "euclidean", False, False, "A·Bᵀ")


def test_topk_ties_go_to_the_smaller_column(rng):
    """Small integer rows: every score is exact in float, and repeated rows tie exactly."""
    base = rng.integers(-2, 3, size=(12, 16)).astype(np.float32)
    a = base[rng.integers(0, 12, size=90)]  # 90 rows drawn from 12: many exact ties
    s, na, nb = exact(a, None, "ip")
    v, i = sim(a, metric="ip", sink="topk", k=20, max_panel_rows=16)
    check_topk(v, i, s, bound(16, "ip", na, nb), 20, True, True, False, "ties")
    assert np.all(v == s[np.arange(90)[:, None], i])  # exact scores


@pytest.mark.parametrize("metric", METRICS)
@pytest.mark.parametrize("both_halves", [False, True])
def test_threshold_against_float64(rng, metric, both_halves):
    a = rows(rng, 120, 30, "bfloat16")
    s, na, nb = exact(a, None, metric)
    eps = bound(30, metric, na, nb)
    t = {"cosine": 0.3, "ip": 6.0, "euclidean": 6.5}[metric]
    m = sim(a, metric=metric, sink="threshold", threshold=t, both_halves=both_halves, max_panel_rows=32)
    assert m.shape == (120, 120)
    r, c, val = m.row, m.col, m.data
    assert np.all(np.lexsort((c, r)) == np.arange(len(r))), "sorted by row, then column"
    assert np.all(r != c), "the diagonal is excluded by default"
    if not both_halves:
        assert np.all(r < c), "the upper triangle only"
    keep = set(zip(r.tolist(), c.tolist()))
    larger = metric != "euclidean"
    for x in range(120):
        for y in range(120):
            if x == y or (not both_halves and y < x):
                continue
            clearly_in = s[x, y] >= t + eps[x, y] if larger else s[x, y] <= t - eps[x, y]
            clearly_out = s[x, y] < t - eps[x, y] if larger else s[x, y] > t + eps[x, y]
            if clearly_in:
                assert (x, y) in keep, f"({x}, {y}) scores {s[x, y]} past {t} but is missing"
            if clearly_out:
                assert (x, y) not in keep, f"({x}, {y}) scores {s[x, y]}, not past {t}, but is kept"
    assert np.all(np.abs(val - s[r, c]) <= eps[r, c])
    if both_halves:
        assert keep == {(y, x) for x, y in keep}


def test_threshold_as_csr(rng):
    # format="csr": the entries of the COO, as SciPy's CSR (host and GPU alike).
    a = rows(rng, 150, 24, "float32")
    coo = sim(a, sink="threshold", threshold=0.3, both_halves=True, max_panel_rows=32)
    m = sim(a, sink="threshold", threshold=0.3, both_halves=True, max_panel_rows=32, format="csr")
    assert m.format == "csr" and m.shape == (150, 150) and m.has_sorted_indices and m.nnz > 100
    want = coo.tocsr()
    np.testing.assert_array_equal(m.indptr, want.indptr)
    np.testing.assert_array_equal(m.indices, want.indices)
    np.testing.assert_array_equal(m.data, want.data)


# ---- refusals -----------------------------------------------------------------------------------


def test_nan_and_infinite_rows_are_refused_by_row(rng):
    a = rows(rng, 30, 8, "float32")
    a[17, 3] = np.nan
    with pytest.raises(ValueError, match="row 17 of A holds a NaN or an infinity"):
        sim(a, sink="topk", k=3)
    b = rows(rng, 9, 8, "float16")
    b[4, 0] = np.inf
    with pytest.raises(ValueError, match="row 4 of B"):
        sim(rows(rng, 5, 8, "float16"), b)
    a[17, 3] = 0  # check_finite=False skips the scan
    a[2, 2] = np.inf
    out = sim(a, metric="ip", check_finite=False)
    assert not np.isfinite(out[2, 2])


@pytest.mark.parametrize(
    "kw, exc, msg",
    [
        (dict(metric="jaccard"), ValueError, "metric must be one of"),
        (dict(sink="dense"), ValueError, "sink must be one of"),
        (dict(sink="topk"), ValueError, "needs k"),
        (dict(sink="topk", k=129), ValueError, r"k must be an integer in \[1, 128\]"),
        (dict(sink="topk", k=True), ValueError, "k must be an integer"),
        (dict(k=3), ValueError, "k is for sink='topk'"),
        (dict(sink="threshold"), ValueError, "needs threshold"),
        (dict(sink="threshold", threshold=float("nan")), ValueError, "finite"),
        (dict(sink="threshold", threshold=0.5, format="dense"), ValueError, "format must be one of"),
        (dict(sink="full", format="csr"), ValueError, "format is for sink='threshold'"),
        (dict(tf32=True, _dtype="float16"), ValueError, "tf32=True is for float32"),
        (dict(budget=-1), ValueError, "positive byte count"),
        (dict(stream=0), ValueError, "stream= orders device input"),
        (dict(sink="full", binary=64), ValueError, "binary= is a mode of sink='topk'"),
        (dict(sink="topk", k=8, binary=64, metric="ip"), ValueError, "metric must be 'cosine'"),
        (dict(sink="topk", k=8, binary=4), ValueError, r"binary must be an integer in \[k = 8, 128\]; got 4"),
        (dict(sink="topk", k=8, binary=129), ValueError, r"got 129"),
        (dict(sink="topk", k=8, binary=64.0), TypeError, "binary must be an integer"),
        (dict(sink="topk", k=8, binary=64, include_diagonal=True), ValueError, "excludes the diagonal"),
        (dict(sink="topk", k=8, binary=64, devices=[0, 1]), ValueError, "runs on one GPU"),
    ],
)
def test_bad_arguments_are_refused(rng, kw, exc, msg):
    a = rows(rng, 10, 8, kw.pop("_dtype", "float32"))
    with pytest.raises(exc, match=msg):
        sim(a, **kw)


def test_bad_rows_are_refused(rng):
    a = rows(rng, 10, 8, "float32")
    with pytest.raises(TypeError, match=r"float64; .*astype\(np.float32\)"):
        sim(a.astype(np.float64))
    with pytest.raises(TypeError, match="pass bf16=True"):
        sim(a.view(np.uint16))
    with pytest.raises(TypeError, match="bf16=True reads uint16"):
        sim(a, bf16=True)
    with pytest.raises(TypeError, match="int32"):
        sim(a.astype(np.int32))
    with pytest.raises(TypeError, match=r"2-byte void dtype .* a.view\(ml_dtypes.bfloat16\)"):
        sim(a.astype(ml_dtypes.bfloat16).view("V2"))
    with pytest.raises(ValueError, match=r"must be 2-D .* a\[None, :\]"):
        sim(a[0])
    with pytest.raises(ValueError, match="must be contiguous"):
        sim(np.asfortranarray(a))
    with pytest.raises(ValueError, match="a has 8 columns but b has 9"):
        sim(a, rows(rng, 4, 9, "float32"))
    with pytest.raises(TypeError, match="same dtype"):
        sim(a, a.astype(np.float16))
    with pytest.raises(ValueError, match="layout of the symmetric"):
        sim(a, a, sink="triangle")


def test_empty_inputs(rng):
    e = np.zeros((0, 8), np.float32)
    assert sim(e).shape == (0, 0)
    assert sim(e, sink="condensed").shape == (0,)
    v, i = sim(e, sink="topk", k=4)
    assert v.shape == (0, 4) and i.shape == (0, 4)
    one = rows(rng, 1, 8, "float32")
    v, i = sim(one, sink="topk", k=2)  # no other row: the list is all padding
    assert np.all(i == -1)


def test_report_and_progress(rng):
    calls = []
    rep = {}
    a = rows(rng, 200, 16, "float32")
    sim(a, sink="topk", k=4, progress=lambda d, t: calls.append((d, t)), report=rep, max_panel_rows=32,
        _host_block_rows=16)
    assert calls and calls[-1][0] == calls[-1][1] == rep["tasks_total"] > 1
    assert rep["tasks_completed"] == rep["tasks_total"] and not rep["cancelled"]
    assert rep["on_host"] == (spillway.device_count() == 0)


# ---- GPU: device arrays, budgets, cancellation --------------------------------------------------


def test_cupy_rows_in_place(gpu, rng):
    need(_has("cupy"), "CuPy is not installed")
    import cupy as cp

    a = rows(rng, 300, 64, "float16")
    da = cp.asarray(a)
    ptr = da.data.ptr
    v, i = spillway.similarity(da, sink="topk", k=8, progress=False)
    assert isinstance(v, cp.ndarray) and isinstance(i, cp.ndarray) and int(da.data.ptr) == ptr
    s, na, nb = exact(a, None, "cosine")
    check_topk(cp.asnumpy(v), cp.asnumpy(i), s, bound(64, "cosine", na, nb), 8, True, True, False, "cupy")
    full = spillway.similarity(da, cp.asarray(a[:50]), metric="euclidean", progress=False)
    s2, na2, nb2 = exact(a, a[:50], "euclidean")
    assert isinstance(full, cp.ndarray)
    assert_close(cp.asnumpy(full), s2, bound(64, "euclidean", na2, nb2), "cupy A·Bᵀ")


def test_torch_bf16_rows_in_place(gpu, rng):
    need(_has("torch"), "PyTorch is not installed")
    import torch

    a = rows(rng, 257, 96, "bfloat16")
    t = torch.from_numpy(a.view(np.int16)).view(torch.bfloat16).cuda()
    v, i = spillway.similarity(t, metric="ip", sink="topk", k=5, progress=False)
    assert isinstance(v, torch.Tensor) and v.is_cuda
    s, na, nb = exact(a, None, "ip")
    check_topk(v.cpu().numpy(), i.cpu().numpy(), s, bound(96, "ip", na, nb), 5, True, True, False, "torch bf16")


def test_budget_forces_streamed_strips(gpu, rng):
    """Rows beyond a small budget: the job streams them in strips, several times (report), and
    still matches."""
    a = rows(rng, 30000, 512, "float32")
    rep = {}
    v, i = sim(a, sink="topk", k=4, budget="48MiB", report=rep)
    assert rep["tasks_total"] > 9 and not rep["on_host"]
    assert rep["bytes_moved"] > 2 * a.nbytes, rep
    sub = a[:40]
    s, na, nb = exact(sub, a, "cosine")
    eps = bound(512, "cosine", na, nb)
    for r in range(40):
        s[r, r] = -np.inf  # the diagonal is excluded
        kth = np.sort(s[r])[::-1][3]
        for t in range(4):
            j = i[r, t]
            assert j != r and abs(v[r, t] - s[r, j]) <= eps[r, j] and s[r, j] >= kth - 2 * eps[r].max()


def test_pinned_and_pageable_rows_agree(gpu, rng):
    a = rows(rng, 3000, 128, "float16")
    p = spillway.pinned_empty(a.shape, a.dtype)
    p[...] = a
    pageable = sim(a, sink="topk", k=6, budget="16MiB")
    unregistered = sim(a, sink="topk", k=6, budget="16MiB", _register=False)
    pinned = sim(p, sink="topk", k=6, budget="16MiB")
    for x in (unregistered, pinned):
        np.testing.assert_array_equal(x[1], pageable[1])
        np.testing.assert_array_equal(x[0], pageable[0])


def test_cancel_from_progress(gpu, rng, sigint_handled):
    import _thread

    def interrupt(done, total):
        if total > 0:
            _thread.interrupt_main()

    a = rows(rng, 20000, 64, "float32")
    with pytest.raises(spillway.Cancelled) as info:
        spillway.similarity(a, sink="topk", k=4, progress=interrupt, max_panel_rows=64)
    rep = info.value.report
    assert rep["cancelled"] and rep["tasks_completed"] < rep["tasks_total"]
    small = a[:64]
    s, na, nb = exact(small, None, "cosine")
    assert_close(sim(small), s, bound(64, "cosine", na, nb), "after a cancel")


def _has(name):
    import importlib.util

    return importlib.util.find_spec(name) is not None


def test_topk_on_two_gpus_equals_one(gpu, rng):
    # bf16 rows take the fused top-k (Hopper); 20,000 rows make two seed blocks of 8,192+ rows,
    # one seeded on each GPU. The lists must equal the one-GPU job's (same scores, same tie rule)
    # and hold the exact top-k on sampled rows.
    need_gpus(2)
    a = rows(rng, 20_000, 64, "bfloat16")
    rep = {}
    v2, i2 = sim(a, metric="cosine", sink="topk", k=16, devices=[0, 1], report=rep)
    assert sorted(rep["devices"]) == [0, 1] and min(rep["tasks_per_device"]) > 0
    v1, i1 = sim(a, metric="cosine", sink="topk", k=16, devices=[0])
    np.testing.assert_array_equal(i2, i1)
    np.testing.assert_array_equal(v2, v1)
    a64 = np.asarray(a).astype(np.float64)
    nrm = np.sqrt((a64 * a64).sum(1))
    e = 4.0 * (64 + 8) * 2.0**-24
    for r in rng.choice(len(a), 8, replace=False):
        sc = a64 @ a64[r] / (nrm * nrm[r])
        sc[r] = -np.inf
        kth = np.sort(sc)[-16]
        assert np.all(np.abs(v2[r] - sc[i2[r]]) <= e), f"row {r}: listed values"
        assert np.all(sc[i2[r]] >= kth - 2 * e), f"row {r}: a listed column is not in the top 16"



def test_binary_mode_lists_exact_scores_of_sign_bit_candidates(gpu, rng):
    # The approximate mode: every listed column one of the row's 64 nearest by the Hamming distance
    # of the sign bits (ties to the smaller column), its score the exact cosine, and the list the
    # best 8 of those candidates; on clustered rows it finds most of the exact top-8.
    n, d, k, c = 3000, 96, 8, 64
    centres = rng.standard_normal((30, d)).astype(np.float32)
    a = (centres[rng.integers(0, 30, n)] + rng.standard_normal((n, d)).astype(np.float32)).astype(np.float32)
    v, i = sim(a, sink="topk", k=k, binary=c)
    ve, ie = sim(a, sink="topk", k=k)
    a64 = a.astype(np.float64)
    nrm = np.sqrt((a64 * a64).sum(1))
    bits = a > 0
    e = 4.0 * (d + 8) * 2.0**-24
    for r in rng.choice(n, 64, replace=False):
        ham = (bits != bits[r]).sum(1).astype(np.int64)
        ham[r] = 10 * d
        cand = np.lexsort((np.arange(n), ham))[:c]
        sc = a64[cand] @ a64[r] / (nrm[cand] * nrm[r])
        kth = np.sort(sc)[-k]
        assert set(i[r].tolist()) <= set(cand.tolist()), f"row {r}: a listed column is not a candidate"
        assert len(set(i[r].tolist())) == k and r not in i[r]
        exact = a64[i[r]] @ a64[r] / (nrm[i[r]] * nrm[r])
        assert np.all(np.abs(v[r] - exact) <= e), f"row {r}: listed values"
        assert np.all(exact >= kth - 2 * e), f"row {r}: not the best {k} candidates"
        assert np.all(np.diff(v[r]) <= 0)
    recall = np.mean([len(set(i[r]) & set(ie[r])) / k for r in range(n)])
    assert recall > 0.8, f"recall@{k} {recall:.3f} against the exact job"



def test_binary_mode_on_any_machine_equals_its_definition(rng):
    # Small enough for the host implementation (the no-GPU fallback in CI; the GPU where there is
    # one): the best 5 of each row's 40 sign-bit candidates, against NumPy's evaluation of that
    # definition (Hamming order, ties to the smaller column; cosines; the best 5, ties likewise).
    n, d, k, c = 300, 40, 5, 40
    a = rng.standard_normal((n, d)).astype(np.float32)
    a[4] = a[3]
    v, i = sim(a, sink="topk", k=k, binary=c)
    a64 = a.astype(np.float64)
    nrm = np.sqrt((a64 * a64).sum(1))
    bits = a > 0
    e = 4.0 * (d + 8) * 2.0**-24
    for r in range(n):
        ham = (bits != bits[r]).sum(1).astype(np.int64)
        ham[r] = 10 * d
        cand = np.lexsort((np.arange(n), ham))[:c]
        sc = a64[cand] @ a64[r] / (nrm[cand] * nrm[r])
        best = cand[np.lexsort((cand, -sc.astype(np.float32)))][:k]
        kth = np.sort(sc)[-k]
        assert set(i[r].tolist()) <= set(cand.tolist()), f"row {r}: a listed column is not a candidate"
        exact = a64[i[r]] @ a64[r] / (nrm[i[r]] * nrm[r])
        assert np.all(np.abs(v[r] - exact) <= e) and np.all(exact >= kth - 2 * e), f"row {r}"
        if not spillway.gpu_available():
            np.testing.assert_array_equal(i[r], best)  # the host form in double: the same order
