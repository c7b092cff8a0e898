"""One behaviour across every call (issue 33, part 4) and spillway.timer (part 2).

The exception rule (docs/python.md, "Exceptions"): TypeError for a wrong kind of object or dtype,
ValueError for a wrong value, shape or size, MemoryError for a budget too small, RuntimeError for
CUDA errors and a missing GPU. Where a call raised another type before, it raises a class deriving
from both for the 0.1 series (DTypeError, ArgumentTypeError, BudgetError), and these tests check
both bases. Almost every check runs before any GPU work, so most of this file runs on a machine
with no GPU; the budget, device-array and timer-on-a-GPU cases need one (the ``gpu`` fixture: a
skip here, a failure under SPILLWAY_REQUIRE_GPU=1).
"""

from __future__ import annotations

import importlib.util
import time as host_time
import warnings

import numpy as np
import pytest

import spillway
from spillway import _core
from conftest import need, need_gpus, random01, reference

pytestmark = pytest.mark.filterwarnings("ignore::spillway.HostFallbackWarning")

E01 = np.eye(4, dtype=np.uint8)
F32 = np.ones((6, 8), np.float32)
C64 = np.ones(4, np.complex64)


class FakeDeviceArray:
    """Says it is device memory (``__cuda_array_interface__``) without being any: the checks that
    refuse device arrays, or a device array beside a host one, look no further than that."""

    __cuda_array_interface__ = {"data": (0, False), "shape": (4, 4), "typestr": "|u1", "version": 3}


def noop(chunk):
    pass


gram = lambda *a, **k: spillway.gram(*a, progress=False, **k)  # noqa: E731
sim = lambda *a, **k: spillway.similarity(*a, progress=False, **k)  # noqa: E731
mm = lambda *a, **k: spillway.matmul(*a, progress=False, **k)  # noqa: E731
stream = lambda *a, **k: spillway.stream(*a, progress=False, **k)  # noqa: E731
lorenz = spillway.rk4.lorenz_ensemble
mean_field = spillway.rk4.mean_field
dopri5 = spillway.ode.lorenz_dopri5
mf5 = spillway.ode.mean_field_dopri5

# (id, call, the rule's type, the other base its class has for the 0.1 series or None, message). A
# second base is there where the call raised that type before, and for every wrong dtype:
# spillway.DTypeError is one class to catch in every call (also a ValueError, which gram, pack_bits
# and rk4 raised for dtypes, for the 0.1 series).
CASES = [
    # -- gram / pack_bits / from_packed_bytes
    ("gram-dtype", lambda: gram(np.zeros((4, 4), np.float64)), TypeError, ValueError, "bool or integer"),
    ("gram-metric-kind", lambda: gram(E01, metric=5), TypeError, ValueError, "metric must be a string"),
    ("gram-metric-value", lambda: gram(E01, metric="dice"), ValueError, None, "metric must be one of"),
    ("gram-sink-value", lambda: gram(E01, sink="dense"), ValueError, None, "sink must be one of"),
    ("gram-k-kind", lambda: gram(E01, sink="topk", k="3"), TypeError, ValueError, "k must be an integer"),
    ("gram-k-bool", lambda: gram(E01, sink="topk", k=True), TypeError, ValueError, "k must be an integer"),
    ("gram-k-value", lambda: gram(E01, sink="topk", k=129), ValueError, None, r"k must be an integer in \[1, 128\]"),
    ("gram-threshold-kind", lambda: gram(E01, sink="threshold", threshold="0.5"), TypeError, ValueError,
     "threshold must be a real number"),
    ("gram-threshold-value", lambda: gram(E01, sink="threshold", threshold=float("inf")), ValueError, None, "finite"),
    ("gram-budget-kind", lambda: gram(E01, budget=1.5), TypeError, None, "budget must be"),
    ("gram-budget-value", lambda: gram(E01, budget=0), ValueError, None, "positive byte count"),
    ("gram-budget-text", lambda: gram(E01, budget="eight gigs"), ValueError, None, "byte size"),
    ("gram-1d", lambda: gram(np.zeros(4, np.uint8)), ValueError, None, "must be 2-D"),
    ("gram-cols", lambda: gram(E01, np.eye(5, dtype=np.uint8)), ValueError, None, "equal column counts"),
    ("gram-value-2", lambda: gram(E01 * 2), ValueError, None, "is not 0 or 1"),
    ("gram-mixed", lambda: gram(E01, FakeDeviceArray()), TypeError, ValueError, "both be device arrays or both host"),
    ("gram-stream-host", lambda: gram(E01, stream=5), ValueError, None, "stream= orders device input"),
    ("pack_bits-dtype", lambda: spillway.pack_bits(np.zeros((2, 3), np.float32)), TypeError, ValueError,
     "bool or integer"),
    ("pack_bits-3d", lambda: spillway.pack_bits(np.zeros((2, 3, 4), np.uint8)), ValueError, None, "2-D"),
    ("from_packed_bytes-dtype", lambda: spillway.from_packed_bytes(np.zeros((2, 2), np.int16), 16), TypeError,
     ValueError, "uint8"),
    ("from_packed_bytes-1d", lambda: spillway.from_packed_bytes(np.zeros(2, np.uint8), 16), ValueError, None, "2-D"),
    ("from_packed_bytes-cols-kind", lambda: spillway.from_packed_bytes(np.zeros((2, 2), np.uint8), "16"), TypeError,
     ValueError, "cols must be"),
    ("from_packed_bytes-cols-value", lambda: spillway.from_packed_bytes(np.zeros((2, 2), np.uint8), 17), ValueError,
     None, "bytes per row"),
    ("from_packed_bytes-bitorder", lambda: spillway.from_packed_bytes(np.zeros((2, 2), np.uint8), 16, bitorder="mid"),
     ValueError, None, "bitorder must be one of"),
    # -- similarity
    ("similarity-dtype", lambda: sim(np.ones((6, 8), np.float64)), TypeError, ValueError, "float64"),
    ("similarity-ab-dtype", lambda: sim(F32, np.ones((6, 8), np.float16)), TypeError, ValueError, "same dtype"),
    ("similarity-metric-kind", lambda: sim(F32, metric=None), TypeError, ValueError, "metric must be a string"),
    ("similarity-metric-value", lambda: sim(F32, metric="jaccard"), ValueError, None, "metric must be one of"),
    ("similarity-k-kind", lambda: sim(F32, sink="topk", k=2.0), TypeError, ValueError, "k must be an integer"),
    ("similarity-cols", lambda: sim(F32, np.ones((3, 9), np.float32)), ValueError, None, "8 columns but b has 9"),
    ("similarity-1d", lambda: sim(np.ones(8, np.float32)), ValueError, None, "must be 2-D"),
    ("similarity-nan", lambda: sim(np.full((3, 4), np.nan, np.float32)), ValueError, None, "NaN"),
    ("similarity-budget", lambda: sim(F32, budget=-1), ValueError, None, "positive byte count"),
    ("similarity-mixed", lambda: sim(FakeDeviceArray(), F32), TypeError, ValueError, "both be device arrays"),
    # -- matmul / pinned_empty
    ("matmul-dtype", lambda: mm(np.zeros((3, 4), np.int32), np.zeros((4, 2), np.int32)), TypeError, ValueError,
     "int32"),
    ("matmul-ab-dtype", lambda: mm(np.zeros((3, 4), np.float32), np.zeros((4, 2), np.float64)), TypeError, ValueError,
     "same dtype"),
    ("matmul-out-dtype", lambda: mm(np.zeros((3, 4), np.float32), np.zeros((4, 2), np.float32),
                                    out=np.zeros((3, 2), np.float64)), TypeError, ValueError, "out has dtype"),
    ("matmul-out-kind", lambda: mm(np.zeros((3, 4), np.float32), np.zeros((4, 2), np.float32), out=[[0, 0]] * 3),
     TypeError, None, "NumPy array"),
    ("matmul-device", lambda: mm(FakeDeviceArray(), np.zeros((4, 2), np.float32)), TypeError, None,
     "device array"),
    ("matmul-shapes", lambda: mm(np.zeros((3, 4), np.float32), np.zeros((5, 2), np.float32)), ValueError, None,
     "do not chain"),
    ("matmul-out-shape", lambda: mm(np.zeros((3, 4), np.float32), np.zeros((4, 2), np.float32),
                                    out=np.zeros((2, 3), np.float32)), ValueError, None, "out has shape"),
    ("matmul-beta", lambda: mm(np.zeros((3, 4), np.float32), np.zeros((4, 2), np.float32), beta=1.0), ValueError,
     None, "pass out="),
    ("pinned_empty-order-kind", lambda: spillway.pinned_empty((2, 2), order=1), TypeError, ValueError,
     "order must be a string"),
    ("pinned_empty-order-value", lambda: spillway.pinned_empty((2, 2), order="K"), ValueError, None, "order must be"),
    ("pinned_empty-shape-kind", lambda: spillway.pinned_empty((2.5, 2)), TypeError, ValueError, "shape must be"),
    ("pinned_empty-shape-value", lambda: spillway.pinned_empty((-1, 2)), ValueError, None, "negative"),
    # -- stream (every check is made before it looks for a GPU)
    ("stream-fn", lambda: stream(3, [np.zeros(4)], []), TypeError, None, "callable"),
    ("stream-input-kind", lambda: stream(noop, [[1, 2]], []), TypeError, None, "NumPy array"),
    ("stream-dtype", lambda: stream(noop, [np.zeros(4, object)], []), TypeError, ValueError, "dtype object"),
    ("stream-order", lambda: stream(noop, [np.zeros((4, 3))[:, ::2]], []), ValueError, None, "C-contiguous"),
    ("stream-rows", lambda: stream(noop, [np.zeros(4)], [np.zeros(5)]), ValueError, None, "share their first axis"),
    ("stream-chunk-kind", lambda: stream(noop, [np.zeros(4)], [], chunk=1.5), TypeError, ValueError, "chunk must be"),
    ("stream-chunk-value", lambda: stream(noop, [np.zeros(4)], [], chunk=0), ValueError, None, "chunk must be"),
    ("stream-slots-kind", lambda: stream(noop, [np.zeros(4)], [], slots="4"), TypeError, ValueError, "slots must be"),
    ("stream-arrays-kind", lambda: stream(noop, [np.zeros(4)], [], arrays=None), TypeError, ValueError,
     "arrays must be a string"),
    ("stream-arrays-value", lambda: stream(noop, [np.zeros(4)], [], arrays="jax"), ValueError, None,
     "arrays must be one of"),
    ("stream-budget-kind", lambda: stream(noop, [np.zeros(0)], [], budget=[1]), TypeError, None, "budget must be"),
    # -- rk4
    ("lorenz-dtype", lambda: lorenz(np.zeros((3, 5), np.int32), steps=1, dt=0.1), TypeError, ValueError,
     "float32 or float64"),
    ("lorenz-shape", lambda: lorenz(np.zeros((2, 5)), steps=1, dt=0.1), ValueError, None, r"shape \(3, n\)"),
    ("lorenz-steps-kind", lambda: lorenz(np.zeros((3, 5)), steps=2.0, dt=0.1), TypeError, ValueError,
     "steps must be"),
    ("lorenz-steps-value", lambda: lorenz(np.zeros((3, 5)), steps=-1, dt=0.1), ValueError, None, "steps must be"),
    ("lorenz-dt-kind", lambda: lorenz(np.zeros((3, 5)), steps=1, dt="0.1"), TypeError, None, "dt must be a real"),
    ("lorenz-dt-value", lambda: lorenz(np.zeros((3, 5)), steps=1, dt=float("nan")), ValueError, None, "finite"),
    ("lorenz-save_every-kind", lambda: lorenz(np.zeros((3, 5)), steps=1, dt=0.1, save_every=0.5), TypeError,
     ValueError, "save_every must be"),
    ("mean_field-dtype", lambda: mean_field(np.zeros(4, np.complex128), np.zeros(4, np.complex128), steps=1, dt=0.1,
                                            coupling="sum"), TypeError, ValueError, "complex64"),
    ("mean_field-shape", lambda: mean_field(C64, np.ones(5, np.complex64), steps=1, dt=0.1, coupling="sum"),
     ValueError, None, "shape"),
    ("mean_field-empty", lambda: mean_field(C64[:0], C64[:0], steps=1, dt=0.1, coupling="sum"), ValueError, None,
     "empty"),
    ("mean_field-coupling-value", lambda: mean_field(C64, C64, steps=1, dt=0.1, coupling="median"), ValueError, None,
     "coupling must be"),
    ("mean_field-coupling-kind", lambda: mean_field(C64, C64, steps=1, dt=0.1, coupling=[1.0]), TypeError, ValueError,
     "coupling must be"),
    ("mean_field-delta0-kind", lambda: mean_field(C64, C64, steps=1, dt=0.1, coupling="sum", delta0="1"), TypeError,
     ValueError, "delta0 must be a number"),
    ("mean_field-mixed", lambda: mean_field(FakeDeviceArray(), C64, steps=1, dt=0.1, coupling="sum"), TypeError,
     ValueError, "both be device arrays"),
    # -- ode (lorenz_dopri5 is new: plain TypeErrors for kinds; a dtype is a DTypeError as everywhere)
    ("lorenz_dopri5-dtype", lambda: dopri5(np.zeros((3, 5), np.int32), t1=1.0), TypeError, ValueError,
     "float32 or float64"),
    ("lorenz_dopri5-shape", lambda: dopri5(np.zeros((2, 5)), t1=1.0), ValueError, None, r"shape \(3, n\)"),
    ("lorenz_dopri5-t1-kind", lambda: dopri5(np.zeros((3, 5)), t1="1"), TypeError, None, "t1 must be a real"),
    ("lorenz_dopri5-t1-value", lambda: dopri5(np.zeros((3, 5)), t1=float("inf")), ValueError, None, "finite"),
    ("lorenz_dopri5-rtol-value", lambda: dopri5(np.zeros((3, 5)), t1=1.0, rtol=-1.0), ValueError, None,
     "rtol must be finite and >= 0"),
    ("lorenz_dopri5-max_steps-kind", lambda: dopri5(np.zeros((3, 5)), t1=1.0, max_steps=10.0), TypeError, None,
     "max_steps must be"),
    ("lorenz_dopri5-save_times-value", lambda: dopri5(np.zeros((3, 5)), t1=1.0, save_times=[2.0]), ValueError, None,
     "save time 0 is 2"),
    # -- ode.mean_field_dopri5: its fields, coupling and delta0 go through mean_field's checks (the
    # same mistake, the same exception), its step control through lorenz_dopri5's
    ("mean_field_dopri5-dtype", lambda: mf5(C64.astype(np.complex128), C64, t1=1.0, coupling="mean"), TypeError,
     ValueError, "complex64"),
    ("mean_field_dopri5-mixed", lambda: mf5(FakeDeviceArray(), C64, t1=1.0, coupling="mean"), TypeError, ValueError,
     "both be device arrays"),
    ("mean_field_dopri5-coupling-kind", lambda: mf5(C64, C64, t1=1.0, coupling=[1]), TypeError, ValueError,
     "coupling must be"),
    ("mean_field_dopri5-coupling-value", lambda: mf5(C64, C64, t1=1.0, coupling="avg"), ValueError, None,
     "coupling must be"),
    ("mean_field_dopri5-delta0-kind", lambda: mf5(C64, C64, t1=1.0, coupling="mean", delta0="1"), TypeError,
     ValueError, "delta0 must be a number"),
    ("mean_field_dopri5-t1-kind", lambda: mf5(C64, C64, t1="1", coupling="mean"), TypeError, None,
     "t1 must be a real"),
    ("mean_field_dopri5-rtol-value", lambda: mf5(C64, C64, t1=1.0, coupling="mean", rtol=-1.0), ValueError, None,
     "rtol must be finite and >= 0"),
    ("mean_field_dopri5-max_records-kind", lambda: mf5(C64, C64, t1=1.0, coupling="mean", max_records=2.0), TypeError,
     None, "max_records must be"),
    # -- timer / time (kinds and values are checked before the GPU is looked for)
    ("time-fn", lambda: spillway.time(5), TypeError, None, "callable"),
    ("time-repeats-kind", lambda: spillway.time(lambda: None, repeats=2.0), TypeError, None, "repeats must be"),
    ("time-repeats-value", lambda: spillway.time(lambda: None, repeats=0), ValueError, None, "repeats must be"),
    ("time-warmup-value", lambda: spillway.time(lambda: None, warmup=-1), ValueError, None, "warmup must be"),
    ("timer-stream-kind", lambda: spillway.timer("default"), TypeError, None, "stream must be"),
    ("timer-stream-bool", lambda: spillway.timer(True), TypeError, None, "stream must be"),
    ("timer-device-kind", lambda: spillway.timer(device="0"), TypeError, None, "device must be"),
]


@pytest.mark.parametrize("call, rule, before, message", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_the_exception_rule(call, rule, before, message):
    """Every call, each kind of bad input: the rule's type, and only that (or, for the 0.1
    series, that and the type it had before, through one of spillway's classes of both)."""
    with pytest.raises(rule, match=message) as info:
        call()
    e = info.value
    others = {TypeError, ValueError, MemoryError} - {rule}
    if before is None:
        # Exactly the rule's type: no other of the three (a ValueError is never also a TypeError).
        assert not any(isinstance(e, t) for t in others), f"{type(e).__mro__} is more than {rule.__name__}"
    else:
        # Changed by the rule: still the type it was, for the 0.1 series, through a class of both.
        assert isinstance(e, before), f"{type(e).__name__} lost its old type {before.__name__}"
        assert type(e) in (spillway.DTypeError, spillway.ArgumentTypeError, spillway.BudgetError)


def test_the_compatibility_classes_derive_from_both():
    assert issubclass(spillway.DTypeError, TypeError) and issubclass(spillway.DTypeError, ValueError)
    assert issubclass(spillway.ArgumentTypeError, TypeError) and issubclass(spillway.ArgumentTypeError, ValueError)
    assert issubclass(spillway.BudgetError, MemoryError) and issubclass(spillway.BudgetError, ValueError)


def test_every_dtype_error_is_a_dtype_error():
    """A wrong dtype raises spillway.DTypeError in every call (one class to catch)."""
    calls = [
        lambda: gram(np.zeros((4, 4), np.float32)),
        lambda: spillway.pack_bits(np.zeros((2, 3), np.float32)),
        lambda: spillway.from_packed_bytes(np.zeros((2, 2), np.int16), 16),
        lambda: sim(np.ones((6, 8), np.int8)),
        lambda: mm(np.zeros((3, 4), np.uint8), np.zeros((4, 2), np.uint8)),
        lambda: stream(noop, [np.zeros(4, ">f8")], []),
        lambda: dopri5(np.zeros((3, 4), np.float16), t1=1.0),
        lambda: lorenz(np.zeros((3, 5), np.complex64), steps=1, dt=0.1),
        lambda: mean_field(np.zeros(4, np.float32), np.zeros(4, np.float32), steps=1, dt=0.1, coupling="sum"),
        lambda: mf5(np.zeros(4, np.float32), np.zeros(4, np.float32), t1=1.0, coupling="sum"),
    ]
    for call in calls:
        with pytest.raises(spillway.DTypeError):
            call()


def test_the_extension_translates_by_the_same_rule():
    """C++ errors reach Python by the rule: a dtype the binding refuses is a DTypeError, other bad
    arguments ValueError (spillway::logic_error); these are the binding's own checks, reached
    here past the Python ones."""
    bm = spillway.BitMatrix(2, 3)
    with pytest.raises(spillway.DTypeError, match="not bool or an integer"):
        _core._pack_rows(bm, np.zeros((2, 3), np.float32), 0, False)
    with pytest.raises(spillway.DTypeError,
                       match="float32, float64, float16, bfloat16, int8, complex64, float8_e4m3fn or float8_e5m2"):
        _core._matmul(np.zeros((2, 2), np.int32), np.zeros((2, 2), np.int32), np.zeros((2, 2), np.int32), 1.0, 0.0,
                      False, 0, [], True, 0, None)
    with pytest.raises(ValueError, match="not a byte size") as info:
        _core._parse_byte_size("lots")
    assert not isinstance(info.value, TypeError)
    with pytest.raises(ValueError, match="outside the bit matrix") as info:
        _core._pack_rows(bm, np.zeros((2, 3), np.uint8), 1, False)
    assert not isinstance(info.value, TypeError)


def test_the_docs_state_the_rule():
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "docs" / "python.md"
    if not path.exists():  # the tests run from an unpacked sdist, which carries no docs/
        pytest.skip("docs/python.md is not beside these tests (not a repository checkout)")
    doc = path.read_text()
    for name in ("DTypeError", "ArgumentTypeError", "BudgetError", "TypeError", "ValueError", "MemoryError",
                 "RuntimeError", "DeprecationWarning"):
        assert name in doc, f"docs/python.md does not mention {name}"


# ---- coupling required (a DeprecationWarning for the 0.1 series) ------------------------------------


def test_mean_field_without_coupling_warns_and_keeps_the_mean():
    rng = np.random.default_rng(3)
    F = (rng.standard_normal(16) + 1j * rng.standard_normal(16)).astype(np.complex64)
    G = (rng.standard_normal(16) + 1j * rng.standard_normal(16)).astype(np.complex64)
    with pytest.warns(DeprecationWarning, match="coupling is required"):
        f0, g0, d0 = mean_field(F, G, steps=5, dt=1e-3)
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)  # given: no warning
        f1, g1, d1 = mean_field(F, G, steps=5, dt=1e-3, coupling="mean")
        f2, g2, d2 = mean_field(F, G, steps=5, dt=1e-3, coupling="sum")
    np.testing.assert_array_equal(d0, d1)
    np.testing.assert_array_equal(f0, f1)
    np.testing.assert_array_equal(g0, g1)
    assert not np.allclose(d1[1:], d2[1:])  # "sum" is not "mean" (n = 16)
    # delta <- scale * sum(F) after every step: the last delta is that of the final F.
    np.testing.assert_allclose(d2[-1], f2.astype(np.complex128).sum(), rtol=1e-5)
    np.testing.assert_allclose(d1[-1], f1.astype(np.complex128).mean(), rtol=1e-5)


def test_mean_field_refuses_before_warning():
    """A call that is refused does not also warn about coupling."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        with pytest.raises(spillway.DTypeError):
            mean_field(np.zeros(4, np.complex128), np.zeros(4, np.complex128), steps=1, dt=0.1)


# ---- reports as objects -----------------------------------------------------------------------------


def test_report_round_trips():
    d = {"on_host": True, "cancelled": False, "tasks_total": 3, "tasks_completed": 2, "completed_tasks": [0, 2],
         "devices": [0], "tasks_per_device": [2], "bytes_per_device": [10], "seconds_per_device": [0.25],
         "elapsed_seconds": 0.5, "bytes_moved": 10}
    r = spillway.Report.from_dict(dict(d, unknown_key=1))
    assert r.tasks_completed == 2 and r.completed_tasks == [0, 2] and r.on_host
    assert r.to_dict() == d


def _check_report(obj, filled):
    assert isinstance(obj, spillway.Report)
    assert obj.to_dict() == filled
    assert obj.tasks_total >= 1 and obj.tasks_completed == obj.tasks_total and not obj.cancelled
    assert obj.on_host == (not spillway.gpu_available())
    assert obj.elapsed_seconds >= 0
    assert len(obj.tasks_per_device) == len(obj.bytes_per_device) == len(obj.devices)


def test_return_report_gram_similarity_matmul():
    rng = np.random.default_rng(5)
    a = random01(rng, 70, 130)
    filled = {}
    plain = gram(a)
    out, rep = gram(a, report=filled, return_report=True)
    np.testing.assert_array_equal(out, plain)
    np.testing.assert_array_equal(out, reference(a, None, "counts"))
    _check_report(rep, filled)

    (vals, idx), rep = gram(a, sink="topk", k=3, return_report=True)
    assert vals.shape == idx.shape == (70, 3) and isinstance(rep, spillway.Report)

    e = rng.standard_normal((40, 16)).astype(np.float32)
    filled = {}
    out, rep = sim(e, metric="ip", report=filled, return_report=True)
    np.testing.assert_allclose(out, e.astype(np.float64) @ e.T.astype(np.float64), rtol=1e-4, atol=1e-4)
    _check_report(rep, filled)

    x, y = rng.standard_normal((30, 20)), rng.standard_normal((20, 10))
    filled = {}
    out, rep = mm(x, y, report=filled, return_report=True)
    np.testing.assert_allclose(out, x @ y, rtol=1e-12, atol=1e-12)
    _check_report(rep, filled)


def test_return_report_rk4():
    s0 = np.ones((3, 4)) * np.array([[1.0], [2.0], [20.0]])
    filled = {}
    (y, saved), rep = lorenz(s0, steps=3, dt=1e-3, report=filled, return_report=True)
    y_plain, _ = lorenz(s0, steps=3, dt=1e-3)
    np.testing.assert_array_equal(y, y_plain)
    assert saved is None
    _check_report(rep, filled)
    if not rep.on_host:
        assert rep.bytes_moved == 2 * y.nbytes and rep.devices == [0]

    filled = {}
    (f, g, d), rep = mean_field(C64, C64, steps=2, dt=1e-3, coupling="sum", report=filled, return_report=True)
    assert d.shape == (3,) and f.shape == g.shape == (4,)
    _check_report(rep, filled)
    if not rep.on_host:
        assert rep.bytes_moved == 2 * (f.nbytes + g.nbytes) + d.nbytes


def test_stream_report_forms_when_empty():
    """spillway.stream of zero rows returns at once (no GPU needed): the dict, report= and return_report agree."""
    filled = {}
    rep = stream(noop, [np.zeros(0)], [], report=filled)
    assert rep == filled and rep["tasks_total"] == 0
    outs, obj = stream(noop, [np.zeros(0)], [np.zeros(0)], return_report=True)
    assert isinstance(obj, spillway.Report) and obj.tasks_total == 0 and len(outs) == 1


# ---- spillway.timer without a GPU --------------------------------------------------------------------


def test_timer_without_a_gpu_names_the_reason(monkeypatch):
    monkeypatch.setattr(_core, "device_count", lambda: 0)
    monkeypatch.setattr(_core, "no_gpu_reason", lambda: "no CUDA device (test)")
    for call in (spillway.timer, lambda: spillway.time(lambda: None), lambda: spillway.timer(0)):
        with pytest.raises(RuntimeError, match=r"needs a GPU .*no CUDA device \(test\)"):
            call()


def test_timer_here_works_or_says_why():
    """On this machine: with no GPU, the error names no_gpu_reason(); with one, a timer runs."""
    if not spillway.gpu_available():
        with pytest.raises(RuntimeError) as info:
            spillway.timer()
        assert spillway.no_gpu_reason() in str(info.value)
    else:
        with spillway.timer() as t:
            pass
        assert t.ms >= 0.0 and t.ready()


# ---- GPU: budgets are MemoryErrors ---------------------------------------------------------------------


BUDGET_CALLS = {
    "gram": lambda rng: gram(random01(rng, 3000, 3000), budget=4096),
    "similarity": lambda rng: sim(rng.standard_normal((3000, 64)).astype(np.float32), budget=4096),
    "matmul": lambda rng: mm(np.ones((2048, 2048), np.float32), np.ones((2048, 2048), np.float32), budget=4096),
    # One row of the two arrays is 128 KiB: no chunk fits 4 KiB.
    "stream": lambda rng: stream(noop, [np.zeros((16, 8192))], [np.zeros((16, 8192))], budget=4096,
                                 arrays=_any_framework()),
}


@pytest.mark.parametrize("name", sorted(BUDGET_CALLS))
def test_a_budget_too_small_is_a_memory_error(gpu, name):
    with pytest.raises(MemoryError, match="budget") as info:
        BUDGET_CALLS[name](np.random.default_rng(7))
    assert isinstance(info.value, spillway.BudgetError) and isinstance(info.value, ValueError)


def _any_framework():
    for name in ("cupy", "torch", "numba"):
        if importlib.util.find_spec(name) is not None:
            return name
    need(False, "spillway.stream needs CuPy, PyTorch or Numba")


def test_device_dtypes_are_dtype_errors(gpu):
    need(importlib.util.find_spec("cupy") is not None, "cupy is not installed")
    import cupy as cp

    with pytest.raises(spillway.DTypeError, match="bool, uint8 or int8"):
        gram(cp.zeros((4, 4), cp.float32))
    with pytest.raises(spillway.DTypeError, match="int8"):
        sim(cp.zeros((4, 4), cp.int8))
    with pytest.raises(spillway.DTypeError, match="float32 or float64"):
        lorenz(cp.zeros((3, 4), cp.float16), steps=1, dt=0.1)
    with pytest.raises(spillway.DTypeError, match="complex64"):
        mean_field(cp.zeros(4, cp.complex128), cp.zeros(4, cp.complex128), steps=1, dt=0.1, coupling="sum")


def test_return_report_of_asynchronous_calls(gpu):
    need(importlib.util.find_spec("cupy") is not None, "cupy is not installed")
    import cupy as cp

    rng = np.random.default_rng(11)
    a = random01(rng, 50, 70)
    filled = {}
    out, rep = gram(cp.asarray(a), report=filled, return_report=True)
    np.testing.assert_array_equal(cp.asnumpy(out), reference(a, None, "counts"))
    assert rep.to_dict() == filled and rep.devices == [int(cp.cuda.Device().id)] and rep.tasks_completed == 1
    (y, _), rep = lorenz(cp.ones((3, 8)), steps=2, dt=1e-3, return_report=True)
    assert rep.bytes_moved == 0 and rep.devices == [int(cp.cuda.Device().id)] and not rep.on_host
    x = np.zeros((1000, 4), np.float32)
    outs, rep = stream(lambda c: c.outputs[0].__setitem__(Ellipsis, c.inputs[0] + 1), [x], [np.empty_like(x)],
                       arrays="cupy", return_report=True)
    np.testing.assert_array_equal(outs[0], x + 1)
    assert rep.tasks_completed == rep.tasks_total >= 1 and rep.bytes_moved == 2 * x.nbytes and not rep.on_host


# ---- GPU: spillway.timer and spillway.time (seed 004) ----------------------------------------------------


def test_timer_on_the_default_stream_needs_no_framework(gpu):
    """No CuPy/PyTorch needed: events on the legacy default stream (nothing enqueued between them)."""
    t = spillway.timer()
    with pytest.raises(RuntimeError, match="before the timer was started"):
        t.ms
    t.start()
    with pytest.raises(RuntimeError, match="before the timer was stopped"):
        t.ms
    t.stop()
    assert 0.0 <= t.ms < 50.0 and t.ready() and t.seconds == t.ms / 1e3
    timing = spillway.time(lambda: None, repeats=5, warmup=2)
    assert len(timing.samples) == len(timing.host) == 5 and timing.warmup == 2
    assert all(s >= 0 for s in timing.samples) and timing.median == float(timing)
    assert timing.min <= timing.median <= max(timing.samples)


# Spins for `ns` nanoseconds of the GPU's global timer (no clock-rate guess).
SPIN = r"""
__device__ unsigned long long now_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
extern "C" __global__ void spin(long long ns) {
  const unsigned long long start = now_ns();
  while (now_ns() - start < (unsigned long long)ns) { }
}
"""


def test_timer_measures_the_kernel_not_the_launch(gpu):
    """Seed 004: a host clock around a launch sees the launch; the events see the kernel."""
    need(importlib.util.find_spec("cupy") is not None, "cupy is not installed")
    import cupy as cp

    kernel = cp.RawKernel(SPIN, "spin")
    target_ms = 20.0
    ns = np.int64(target_ms * 1e6)
    s = cp.cuda.Stream(non_blocking=True)
    kernel((1,), (1,), (ns,), stream=s)  # compile and load outside the timing
    s.synchronize()
    with spillway.timer(s) as t:
        h0 = host_time.perf_counter()
        kernel((1,), (1,), (ns,), stream=s)
        host_ms = (host_time.perf_counter() - h0) * 1e3
    gpu_ms = t.ms
    print(f"[timer] launch {host_ms:.3f} ms on the host clock, kernel {gpu_ms:.3f} ms on the events")
    assert gpu_ms >= 0.9 * target_ms, gpu_ms
    assert host_ms < 0.5 * target_ms, host_ms
    # The same stream given as an int handle, as __cuda_stream__, and spillway.time over it.
    for handle in (s.ptr, spillway._arrays._StreamHandle(s.ptr)):
        with spillway.timer(handle) as t2:
            kernel((1,), (1,), (ns,), stream=s)
        assert t2.ms >= 0.9 * target_ms and t2.device == cp.cuda.Device().id
    timing = spillway.time(lambda: kernel((1,), (1,), (np.int64(ns // 4),), stream=s), repeats=5, stream=s)
    print(f"[time] {timing}")
    assert 0.9 * target_ms / 4 <= timing.median and timing.host_median < timing.median


def test_timer_takes_torch_and_numba_streams(gpu):
    done = 0
    if importlib.util.find_spec("torch") is not None:
        import torch

        if torch.cuda.is_available():
            s = torch.cuda.Stream()
            x = torch.ones(1 << 22, device="cuda")
            with spillway.timer(s) as t:
                with torch.cuda.stream(s):
                    for _ in range(20):
                        x = x * 1.0001
            assert t.ms > 0.0 and t.stream == s.cuda_stream
            done += 1
    if importlib.util.find_spec("numba") is not None:
        from numba import cuda

        if cuda.is_available():
            s = cuda.stream()
            t = spillway.timer(s).start().stop()
            h = s.handle  # a ctypes c_void_p (older Numba) or a cuda.bindings CUstream (numba-cuda)
            expected = int(h.value or 0) if hasattr(h, "value") else int(h)
            assert t.ms >= 0.0 and t.stream == expected
            done += 1
    need(done > 0, "neither PyTorch nor Numba CUDA is installed")


def test_timer_on_a_second_device(gpu):
    need_gpus(2)
    need(importlib.util.find_spec("cupy") is not None, "cupy is not installed")
    import cupy as cp

    with cp.cuda.Device(1):
        s = cp.cuda.Stream(non_blocking=True)
    t = spillway.timer(s)
    assert t.device == 1
    with t:
        pass
    assert t.ms >= 0.0
