"""spillway.ode: the adaptive Dormand-Prince Lorenz ensemble (host implementation where no GPU is
usable, the GPU otherwise) against a float64 NumPy reference, its statuses and step counts, its
bad inputs, and device arrays advanced in place (GPU only)."""

from __future__ import annotations

import importlib.util
import warnings

import numpy as np
import pytest

import spillway
from conftest import need
from test_host import lorenz_reference

SO = spillway.ode


def dopri5(*args, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", spillway.HostFallbackWarning)
        return SO.lorenz_dopri5(*args, **kw)


def start(n, dtype):
    """The ensemble benchmark's start: u0 = (1, 0, 0) for every system."""
    s0 = np.zeros((3, n), dtype)
    s0[0] = 1.0
    return s0


def mixed_error(got, want, tol):
    """Per system: RMS over components of (got - want) / (tol + tol max(|got|, |want|))."""
    g, w = got.astype(np.float64), want.astype(np.float64)
    q = (g - w) / (tol + tol * np.maximum(np.abs(g), np.abs(w)))
    return np.sqrt(np.mean(q * q, axis=0))


@pytest.mark.parametrize("dtype, tol", [(np.float64, 1e-8), (np.float32, 1e-6)])
def test_end_and_saved_states_within_ten_tolerances(dtype, tol):
    # The DiffEqGPU problem at 64 systems: rho over [0, 21], t in [0, 1]. Reference: RK4 at
    # dt = 1e-4 in float64 (error ~1e-12 relative here, far below the tolerances).
    n = 64
    s0 = start(n, dtype)
    times = [0.25, 0.5, 0.7, 1.0]
    r = dopri5(s0, t1=1.0, rtol=tol, atol=tol, save_times=times, rho=(0.0, 21.0))
    assert isinstance(r, SO.AdaptiveResult)
    assert r.state.dtype == dtype and r.state.shape == (3, n) and not np.shares_memory(r.state, s0)
    assert r.saved.shape == (len(times), 3, n) and r.saved.dtype == dtype
    assert r.accepted.dtype == np.uint32 and r.rejected.dtype == np.uint32 and r.status.dtype == np.uint8
    assert (r.status == SO.STATUS["success"]).all()
    assert (r.accepted > 10).all() and (r.accepted < 1000).all()
    want = lorenz_reference(s0, 0.0, 21.0, 10_000, 1e-4)
    err = mixed_error(r.state, want, tol)
    assert err.max() < 10.0, f"end states: worst {err.max():.2f} tolerances"
    for k, t in enumerate(times):
        ref_t = lorenz_reference(s0, 0.0, 21.0, int(round(t / 1e-4)), 1e-4)
        e = mixed_error(r.saved[k], ref_t, tol)
        assert e.max() < 10.0, f"saved state at t = {t}: worst {e.max():.2f} tolerances"
    np.testing.assert_array_equal(r.saved[-1], r.state)  # the last save time is t1: the state itself


def test_shampine_estimate_steps_as_the_classic_at_one_and_a_half_tolerances():
    # diffrax's convention (estimate="shampine", pi_beta=0): Shampine's error estimate is 2/3 of
    # the classic one, so at tol it steps as the classic pair at 1.5 tol; fewer steps than the
    # default at the same tolerance, the end states within 15 tolerances (10 at 1.5 tol).
    n, tol = 64, 1e-8
    s0 = start(n, np.float64)
    sh = dopri5(s0, t1=1.0, rtol=tol, atol=tol, rho=(0.0, 21.0), estimate="shampine")
    dp = dopri5(s0, t1=1.0, rtol=1.5 * tol, atol=1.5 * tol, rho=(0.0, 21.0))
    default = dopri5(s0, t1=1.0, rtol=tol, atol=tol, rho=(0.0, 21.0))
    plain = dopri5(s0, t1=1.0, rtol=tol, atol=tol, rho=(0.0, 21.0), estimate="shampine", pi_beta=0.0)
    assert (sh.status == 0).all() and (plain.status == 0).all()
    assert abs(int(sh.accepted.sum()) - int(dp.accepted.sum())) <= 0.005 * dp.accepted.sum()
    assert sh.accepted.sum() < default.accepted.sum()
    assert plain.accepted.sum() < sh.accepted.sum()
    want = lorenz_reference(s0, 0.0, 21.0, 10_000, 1e-4)
    assert mixed_error(plain.state, want, tol).max() < 15.0


def test_statuses_fixed_steps_and_direction():
    s0 = start(8, np.float64)
    # Out of steps: each system stops after max_steps attempted steps with that status.
    r = dopri5(s0, t1=1.0, rtol=1e-10, atol=1e-10, max_steps=5, rho=(0.0, 21.0))
    assert (r.status == SO.STATUS["max_steps"]).all()
    assert ((r.accepted + r.rejected) == 5).all()
    # Fixed steps: the tableau at dt = 0.01, no error control.
    f = dopri5(s0, t1=1.0, fixed_dt=0.01, rho=(0.0, 21.0))
    assert (f.accepted == 100).all() and (f.rejected == 0).all() and (f.status == 0).all()
    a = dopri5(s0, t1=1.0, rtol=1e-10, atol=1e-10, rho=(0.0, 21.0))
    assert mixed_error(f.state, a.state, 1e-6).max() < 10.0
    # Backwards: t from 0 to -0.1 against the reference's negative steps (the flow expands volume
    # backwards by e^(13.7 t), so the span is short).
    b = dopri5(s0, t0=0.0, t1=-0.1, rtol=1e-8, atol=1e-8, save_times=[-0.05], rho=(0.0, 21.0))
    assert (b.status == 0).all() and (b.accepted > 1).all()
    assert mixed_error(b.state, lorenz_reference(s0, 0.0, 21.0, 1000, -1e-4), 1e-8).max() < 10.0
    assert mixed_error(b.saved[0], lorenz_reference(s0, 0.0, 21.0, 500, -1e-4), 1e-8).max() < 10.0


def test_same_functions_under_ode_and_rk4():
    assert SO.lorenz_ensemble is spillway.rk4.lorenz_ensemble
    assert SO.mean_field is spillway.rk4.mean_field
    assert "ode" in spillway.__all__ and SO.STATUS == {"success": 0, "max_steps": 1, "step_too_small": 2,
                                                      "not_finite": 3}


@pytest.mark.parametrize("kw, exc, match", [
    ({"t1": float("nan")}, ValueError, "t0 and t1 must be finite"),
    ({"t1": "1"}, TypeError, "t1 must be a real number"),
    ({"t1": 1.0, "rtol": -1.0}, ValueError, "rtol must be finite and >= 0"),
    ({"t1": 1.0, "rtol": 0.0, "atol": 0.0}, ValueError, "both 0"),
    ({"t1": 1.0, "max_steps": 0}, ValueError, "max_steps must be a positive integer"),
    ({"t1": 1.0, "max_steps": 2.5}, TypeError, "max_steps must be a positive integer"),
    ({"t1": 1.0, "pi_beta": 0.3}, ValueError, "beta must be in"),
    ({"t1": 1.0, "safety": 1.5}, ValueError, "safety must be in"),
    ({"t1": 1.0, "estimate": "rk45"}, ValueError, "estimate must be 'dormand_prince' or 'shampine', got 'rk45'"),
    ({"t1": 1.0, "estimate": 1}, TypeError, "estimate must be 'dormand_prince' or 'shampine', got 1"),
    ({"t1": 1.0, "save_times": [0.5, 2.0]}, ValueError, "save time 1 is 2"),
    ({"t1": 1.0, "save_times": [0.5, 0.25]}, ValueError, "direction of integration"),
    ({"t1": 1.0, "rho": (1.0, 2.0, 3.0)}, ValueError, "rho must be a number or a"),
])
def test_bad_inputs_name_the_value(kw, exc, match):
    with pytest.raises(exc, match=match):
        dopri5(start(4, np.float64), **kw)


def test_bad_states():
    with pytest.raises(ValueError, match=r"shape \(3, n\)"):
        dopri5(np.zeros((2, 5)), t1=1.0)
    with pytest.raises(TypeError, match="float32 or float64"):
        dopri5(np.zeros((3, 5), np.int32), t1=1.0)


# ---- device arrays (GPU) --------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["cupy", "torch", "numba"])
def test_device_arrays_advance_in_place_and_equal_the_numpy_call(gpu, kind):
    need(importlib.util.find_spec(kind) is not None, f"{kind} is not installed")
    n, times = 1000, [0.5, 1.0]
    s0 = start(n, np.float64)
    want = dopri5(s0, t1=1.0, rtol=1e-8, atol=1e-8, save_times=times, rho=(0.0, 21.0))  # NumPy in: same GPU kernel
    if kind == "cupy":
        cp = pytest.importorskip("cupy")
        x, back = cp.asarray(s0), cp.asnumpy
    elif kind == "torch":
        torch = pytest.importorskip("torch")
        x, back = torch.from_numpy(s0).to("cuda"), lambda t: t.cpu().numpy()
    else:
        from numba import cuda

        need(cuda.is_available(), "numba.cuda sees no GPU")
        x, back = cuda.to_device(s0), lambda a: a.copy_to_host()
    r = SO.lorenz_dopri5(x, t1=1.0, rtol=1e-8, atol=1e-8, save_times=times, rho=(0.0, 21.0))
    assert r.state is x
    if kind == "numba":
        from numba import cuda

        cuda.synchronize()
    np.testing.assert_array_equal(back(r.state), want.state)
    np.testing.assert_array_equal(back(r.saved), want.saved)
    np.testing.assert_array_equal(back(r.accepted), want.accepted)
    np.testing.assert_array_equal(back(r.rejected), want.rejected)
    np.testing.assert_array_equal(back(r.status), want.status)


# ---- the mean-field system, adaptive --------------------------------------------------------------


def mf_dopri5(*args, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", spillway.HostFallbackWarning)
        return SO.mean_field_dopri5(*args, **kw)


def mf_fields(n, seed=20261129):
    rng = np.random.default_rng(seed)
    f = (rng.uniform(-7e-4, 7e-4, n) + 1j * rng.uniform(-7e-4, 7e-4, n)).astype(np.complex64)
    g = (rng.uniform(-7e-4, 7e-4, n) + 1j * rng.uniform(-7e-4, 7e-4, n)).astype(np.complex64)
    return f, g


def test_mean_field_dopri5_pinned_steps_follow_the_rk4_call():
    # h0 = h_max = dt with tolerances every step meets: delta is held over each step and updated
    # after it, as spillway.rk4.mean_field does, so both histories agree to their step errors.
    f, g = mf_fields(512)
    d0 = complex(f.mean())
    dt = 1.0 / 256
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", spillway.HostFallbackWarning)
        _, _, traj = spillway.rk4.mean_field(f, g, steps=256, dt=dt, delta0=d0, coupling="mean")
    r = mf_dopri5(f, g, t1=1.0, coupling="mean", delta0=d0, rtol=1e-2, atol=1e-2, h0=dt, h_max=dt)
    assert isinstance(r, SO.CoupledResult)
    assert (r.accepted, r.rejected, r.status, r.t) == (256, 0, SO.STATUS["success"], 1.0)
    assert r.times.dtype == np.float64 and r.delta.dtype == np.complex64 and r.times.shape == (257,)
    np.testing.assert_allclose(r.times, np.arange(257) * dt, rtol=0, atol=1e-13)
    scale = np.abs(traj).max()
    assert np.abs(r.delta - traj).max() <= 1e-5 * scale
    assert r.F.dtype == np.complex64 and not np.shares_memory(r.F, f)


def test_mean_field_dopri5_records_statuses_and_direction():
    f, g = mf_fields(300)
    # A free step: far fewer steps than the pinned one; records trimmed to max_records.
    free = mf_dopri5(f, g, t1=2.0, coupling="mean", delta0=0.5, rtol=1e-6, atol=1e-6)
    assert free.status == 0 and 3 < free.accepted < 200 and free.times.shape == (free.accepted + 1,)
    assert free.times[0] == 0.0 and free.times[-1] == 2.0 and np.all(np.diff(free.times) > 0)
    few = mf_dopri5(f, g, t1=2.0, coupling="mean", delta0=0.5, rtol=1e-6, atol=1e-6, max_records=3)
    assert few.accepted == free.accepted and few.times.shape == (3,)
    np.testing.assert_array_equal(few.delta, free.delta[:3])
    np.testing.assert_array_equal(few.F, free.F)
    # Out of steps: stops with the status after max_steps attempts.
    stop = mf_dopri5(f, g, t1=2.0, coupling="mean", delta0=0.5, rtol=1e-6, atol=1e-6, max_steps=2)
    assert stop.status == SO.STATUS["max_steps"] and stop.accepted + stop.rejected == 2 and stop.t < 2.0
    # Backwards: t from 1 to 0 ends at 0 with negative steps.
    back = mf_dopri5(f, g, t0=1.0, t1=0.0, coupling="mean", delta0=0.5)
    assert back.status == 0 and back.t == 0.0 and back.h < 0 and np.all(np.diff(back.times) < 0)


@pytest.mark.parametrize("kw, exc, match", [
    ({"t1": 1.0, "coupling": None}, TypeError, "coupling is required"),
    ({"t1": 1.0, "coupling": "avg"}, ValueError, "coupling must be 'mean', 'sum' or a number"),
    ({"t1": 1.0, "coupling": "mean", "rtol": -1.0}, ValueError, "rtol must be finite and >= 0, got -1"),
    ({"t1": 1.0, "coupling": "mean", "max_records": 0}, ValueError, "max_records must be a positive integer"),
    ({"t1": float("inf"), "coupling": "mean"}, ValueError, "t0 and t1 must be finite"),
    ({"t1": 1.0, "coupling": "mean", "delta0": "1"}, TypeError, "delta0 must be a number"),
    ({"t1": 1.0, "coupling": "mean", "estimate": "bs32"}, ValueError, "estimate must be 'dormand_prince' or"),
])
def test_mean_field_dopri5_bad_inputs_name_the_value(kw, exc, match):
    f, g = mf_fields(8)
    with pytest.raises(exc, match=match):
        mf_dopri5(f, g, **kw)
    with pytest.raises(TypeError, match="complex64"):
        mf_dopri5(f.astype(np.complex128), g, t1=1.0, coupling="mean")


def test_mean_field_dopri5_device_equals_host_implementation(gpu):
    f, g = mf_fields(4096)
    dev = SO.mean_field_dopri5(f, g, t1=3.0, coupling="mean", delta0=0.3 - 0.2j, rtol=1e-5, atol=1e-5,
                               host_fallback=False)
    host = mf_dopri5(f, g, t1=3.0, coupling="mean", delta0=0.3 - 0.2j, rtol=1e-5, atol=1e-5, host_fallback=True)
    assert dev.status == host.status == 0
    assert abs(dev.accepted - host.accepted) <= 1  # float error norms round differently on the two sides
    assert abs(complex(dev.delta[-1]) - complex(host.delta[-1])) <= 1e-4 * np.abs(host.delta).max()
    err = np.abs(dev.F - host.F) / (1e-5 + 1e-5 * np.abs(host.F))
    assert err.max() < 0.1, f"F: worst {err.max():.3f} tolerances between device and host"


@pytest.mark.parametrize("kind", ["cupy", "torch"])
def test_mean_field_dopri5_device_arrays_in_place(gpu, kind):
    need(importlib.util.find_spec(kind) is not None, f"{kind} is not installed")
    f, g = mf_fields(2000)
    want = SO.mean_field_dopri5(f, g, t1=1.0, coupling="mean", delta0=0.3, host_fallback=False)
    if kind == "cupy":
        cp = pytest.importorskip("cupy")
        F, G, back = cp.asarray(f), cp.asarray(g), cp.asnumpy
    else:
        torch = pytest.importorskip("torch")
        F, G, back = torch.from_numpy(f).to("cuda"), torch.from_numpy(g).to("cuda"), lambda t: t.cpu().numpy()
    r = SO.mean_field_dopri5(F, G, t1=1.0, coupling="mean", delta0=0.3)
    assert r.F is F and r.G is G and (r.accepted, r.rejected, r.status) == (want.accepted, want.rejected, 0)
    np.testing.assert_array_equal(back(r.F), want.F)
    np.testing.assert_array_equal(back(r.G), want.G)
    np.testing.assert_array_equal(back(r.times), want.times)
    np.testing.assert_array_equal(back(r.delta), want.delta)
