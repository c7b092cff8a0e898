"""spillway.ode: ODE ensembles whose state stays on the device, for the systems the C++ side ships.

Fixed steps (RK4, the same functions as :mod:`spillway.rk4`, which keeps working):

- :func:`lorenz_ensemble` -- many independent Lorenz systems, one per GPU thread.
- :func:`mean_field` -- the mean-field coupled two-field system (complex64 F and G).

Adaptive steps:

- :func:`lorenz_dopri5` -- the Lorenz ensemble by Dormand--Prince 5(4) with per-system step
  control (mixed absolute / relative tolerances, a PI controller, step bounds, a cap on attempted
  steps with a per-system status) and dense output at requested times; float32 or float64. The
  C++ ``spillway::ode::dopri5_ensemble`` (docs/ode.md, "Adaptive Dormand--Prince 5(4)").
- :func:`mean_field_dopri5` -- the mean-field coupled system by Dormand--Prince 5(4), one step
  size for the whole state, accepted or rejected on the device with no host round trip between
  t0 and t1; delta and the time after every accepted step come back. The C++
  ``spillway::ode::dopri5_integrate_coupled`` (docs/ode.md, "Adaptive coupled systems").

Device arrays (CuPy, PyTorch, Numba) are advanced in place on ``stream`` (default: the
framework's current stream) without waiting (with ``save_times`` the call waits for the stream
once, to check the times), and new outputs are arrays of the same framework; NumPy arrays are
copied to the GPU and back into new arrays (the call blocks). With no GPU the host
implementation runs (spillway.HostFallbackWarning, once).
"""

from __future__ import annotations

import time
from typing import Any, NamedTuple, Optional, Sequence, Union

import numpy as np

from . import _arrays, _core
from ._checks import integer, real
from ._report import deliver, one_launch
from .rk4 import (
    _lorenz_state,
    _mean_field_delta0,
    _mean_field_fields,
    _mean_field_scale,
    _on_host,
    lorenz_ensemble,
    mean_field,
)

__all__ = [
    "lorenz_ensemble",
    "mean_field",
    "lorenz_dopri5",
    "mean_field_dopri5",
    "AdaptiveResult",
    "CoupledResult",
    "STATUS",
    "ESTIMATES",
]

#: A system's status code (``AdaptiveResult.status``) by name, as ``spillway::ode::solve_status``.
STATUS = {"success": 0, "max_steps": 1, "step_too_small": 2, "not_finite": 3}


class AdaptiveResult(NamedTuple):
    """What :func:`lorenz_dopri5` returns (arrays of the input's framework, or NumPy)."""

    state: Any  #: (3, n): the states reached (at t1 where the status is success)
    saved: Any  #: (m, 3, n) dense output at the m save times, or None
    accepted: Any  #: (n,) uint32: accepted steps per system
    rejected: Any  #: (n,) uint32: rejected steps per system
    status: Any  #: (n,) uint8: each system's code of STATUS


class CoupledResult(NamedTuple):
    """What :func:`mean_field_dopri5` returns."""

    F: Any  #: the final F (the same device array, advanced in place; or a new NumPy array)
    G: Any  #: the final G
    times: Any  #: (k,) float64: entry 0 is t0, entry j the time after accepted step j
    delta: Any  #: (k,) complex64: delta at those times (k = min(accepted + 1, max_records))
    accepted: int  #: accepted steps
    rejected: int  #: rejected steps
    status: int  #: the integration's code of STATUS
    t: float  #: the time reached (t1 on success)
    h: float  #: the step the controller would take next (signed)


def _span(who, t0, t1):
    """t0 and t1 as floats: real numbers (TypeError), finite (ValueError naming both)."""
    t0f, t1f = real(who, "t0", t0, compat=False), real(who, "t1", t1, compat=False)
    if not (np.isfinite(t0f) and np.isfinite(t1f)):
        raise ValueError(f"{who}: t0 and t1 must be finite, got t0={t0!r}, t1={t1!r}")
    return t0f, t1f


#: The error estimates of ``estimate=`` (spillway::ode::dp5_error_estimate).
ESTIMATES = {"dormand_prince": 0, "shampine": 1}
_ESTIMATE_NAMES = " or ".join(repr(k) for k in ESTIMATES)  # for messages


def _options(who, rtol, atol, h0, h_min, h_max, max_steps, fixed_dt, safety, fac_min, fac_max, pi_beta,
             estimate="dormand_prince") -> dict:
    if not isinstance(estimate, str):
        raise TypeError(f"{who}: estimate must be {_ESTIMATE_NAMES}, got {estimate!r}")
    if estimate not in ESTIMATES:
        raise ValueError(f"{who}: estimate must be {_ESTIMATE_NAMES}, got {estimate!r}")
    o = {k: real(who, k, v, compat=False) for k, v in (
        ("rtol", rtol), ("atol", atol), ("h0", h0), ("h_min", h_min), ("h_max", h_max), ("fixed_dt", fixed_dt),
        ("safety", safety), ("fac_min", fac_min), ("fac_max", fac_max), ("pi_beta", pi_beta))}
    o["estimate"] = ESTIMATES[estimate]
    o["max_steps"] = integer(who, "max_steps", max_steps, "a positive integer", compat=False)
    if o["max_steps"] < 1:
        raise ValueError(f"{who}: max_steps must be a positive integer, got {max_steps!r}")
    # The ranges of the other options are the C++ side's (spillway::ode::detail::check_adaptive):
    # a ValueError naming the value.
    return o


def lorenz_dopri5(
    state,
    *,
    t1: float,
    t0: float = 0.0,
    rtol: float = 1e-6,
    atol: float = 1e-6,
    save_times: Optional[Sequence[float]] = None,
    h0: float = 0.0,
    h_min: float = 0.0,
    h_max: float = 0.0,
    max_steps: int = 100_000,
    fixed_dt: float = 0.0,
    safety: float = 0.9,
    fac_min: float = 0.2,
    fac_max: float = 10.0,
    pi_beta: float = 0.04,
    estimate: str = "dormand_prince",
    sigma: float = 10.0,
    beta: float = 8.0 / 3.0,
    rho: Union[float, Sequence[float]] = (20.0, 30.0),
    stream=None,
    host_fallback: Optional[bool] = None,
    report: Optional[dict] = None,
    return_report: bool = False,
):
    """n Lorenz systems (x' = sigma (y - x), y' = x (rho - z) - y, z' = x y - beta z; rho from
    rho[0] for system 0 to rho[1] for system n - 1, linearly) integrated from t0 to t1 (either
    direction) by adaptive Dormand--Prince 5(4), each system with its own step size.

    ``state``: (3, n) float32 or float64, component-major. Step control as the C++
    ``adaptive_options``: a step is accepted when the RMS over components of the error estimate
    divided by ``atol + rtol * max(|y|, |y_new|)`` is at most 1; ``rtol`` below 4 epsilon of the
    state's type is raised to it; ``h0`` (0: Hairer's starting step), ``h_min``, ``h_max`` (0: no
    bound), ``max_steps`` attempted steps per system; ``safety``, ``fac_min``, ``fac_max`` and
    ``pi_beta`` (the PI controller's beta; 0: the plain controller); ``estimate``: which embedded
    4th-order solution the error compares with, ``"dormand_prince"`` (Hairer's DOPRI5, SciPy's
    RK45) or ``"shampine"`` (diffrax's Dopri5, torchdiffeq's dopri5: 2/3 of the former, so it
    steps as the classic pair at 1.5 times the tolerances; with ``pi_beta=0`` a job takes diffrax's
    steps at the same tolerances); ``fixed_dt`` > 0: fixed steps
    of the tableau with no error control. ``save_times``: m times in the direction of integration
    within [t0, t1] (host values), where the method's dense output is saved.

    Returns :class:`AdaptiveResult` ``(state, saved, accepted, rejected, status)``: the state (the
    same device array, advanced in place; or a new NumPy array), the saves (m, 3, n) or None, the
    steps and statuses per system. A system that ran out of steps or whose step fell below the
    floor stops there with its status (``STATUS``); the others are unaffected.
    """
    start = time.perf_counter()
    who = "lorenz_dopri5"
    t0f, t1f = _span(who, t0, t1)
    opt = _options(who, rtol, atol, h0, h_min, h_max, max_steps, fixed_dt, safety, fac_min, fac_max, pi_beta, estimate)
    params = [real(who, k, v, compat=False) for k, v in (("sigma", sigma), ("beta", beta))]
    if np.isscalar(rho):
        rho_lo = rho_hi = real(who, "rho", rho, compat=False)
    else:
        if len(rho) != 2:
            raise ValueError(f"{who}: rho must be a number or a (low, high) pair, got {rho!r}")
        rho_lo, rho_hi = real(who, "rho[0]", rho[0], compat=False), real(who, "rho[1]", rho[1], compat=False)
    d, a, dtype, n = _lorenz_state(state, stream, who)
    times = None
    if save_times is not None:
        if _arrays.is_device_array(save_times):
            raise TypeError(f"{who}: save_times must be host values (a sequence or a NumPy array), got a device array")
        times = np.ascontiguousarray(np.asarray(save_times, dtype=np.float64).reshape(-1).astype(dtype))
        if times.size == 0:
            times = None
    m = 0 if times is None else times.size
    tp = 0 if times is None else times.ctypes.data
    dbl = dtype == np.float64
    if d is not None:
        saved, sp = _arrays.empty_like_framework(d, (m, 3, n), d.dtype) if m else (None, 0)
        acc, ap = _arrays.empty_like_framework(d, (n,), "uint32")
        rej, rp = _arrays.empty_like_framework(d, (n,), "uint32")
        st, stp = _arrays.empty_like_framework(d, (n,), "uint8")
        _core._dopri5_lorenz(n, t0f, t1f, opt, *params, rho_lo, rho_hi, dbl, d.ptr, tp, m, sp, ap, rp, stp, True, False,
                             d.device, d.stream)
        return deliver(AdaptiveResult(state, saved, acc, rej, st), one_launch(start, d.device), report, return_report)
    y = np.array(a, dtype=dtype, order="C", copy=True)
    saved = np.empty((m, 3, n), dtype=dtype) if m else None
    acc = np.empty(n, np.uint32)
    rej = np.empty(n, np.uint32)
    st = np.empty(n, np.uint8)
    on_host = _on_host(host_fallback, "spillway.ode.lorenz_dopri5")
    _core._dopri5_lorenz(n, t0f, t1f, opt, *params, rho_lo, rho_hi, dbl, y.ctypes.data, tp, m,
                         saved.ctypes.data if saved is not None else 0, acc.ctypes.data, rej.ctypes.data, st.ctypes.data,
                         False, on_host, 0, 0)
    moved = 0 if on_host else 2 * y.nbytes + (saved.nbytes if saved is not None else 0) + acc.nbytes * 2 + st.nbytes
    return deliver(AdaptiveResult(y, saved, acc, rej, st), one_launch(start, 0, on_host, moved), report, return_report)


def mean_field_dopri5(
    F,
    G,
    *,
    t1: float,
    coupling: Union[str, float],
    t0: float = 0.0,
    delta0: complex = 1.0,
    rtol: float = 1e-6,
    atol: float = 1e-6,
    h0: float = 0.0,
    h_min: float = 0.0,
    h_max: float = 0.0,
    max_steps: int = 100_000,
    safety: float = 0.9,
    fac_min: float = 0.2,
    fac_max: float = 10.0,
    pi_beta: float = 0.04,
    estimate: str = "dormand_prince",
    max_records: int = 100_000,
    stream=None,
    host_fallback: Optional[bool] = None,
    report: Optional[dict] = None,
    return_report: bool = False,
):
    """The mean-field system of :func:`mean_field` (dF/dt = -2i F - i delta (2G - 1), dG/dt =
    -i (conj(delta) F - delta conj(F)) per element, delta <- scale * sum(F)) integrated from t0 to
    t1 (either direction) by adaptive Dormand--Prince 5(4): one step size for the whole state, each
    attempt one fused kernel, accepted or rejected on the device. delta is held over a step and
    recomputed after every accepted one (as the RK4 call does after every step), so its lag is
    first order in the step: bound the step with ``h_max`` where delta moves fast.

    ``F``, ``G``: complex64 arrays of n elements. ``coupling`` (required): "sum" (scale 1), "mean"
    (1/n) or a number. Step control as :func:`lorenz_dopri5` (the error norm runs over every element
    of F and G, a complex value counting once by its modulus). ``max_records``: how many (t, delta)
    entries to keep (entry 0 is (t0, delta0)); later ones are dropped, ``accepted`` still counts them.

    Returns :class:`CoupledResult` ``(F, G, times, delta, accepted, rejected, status, t, h)``.
    Device arrays: advanced in place on ``stream``; the call waits for ``stream`` once at the end
    (the step counts decide how many records come back); ``times`` and ``delta`` are new device
    arrays. NumPy arrays: new arrays, the call blocks. An integration that ran out of steps
    (``max_steps``) or whose step fell below the floor stops there with its status (``STATUS``).
    """
    start = time.perf_counter()
    who = "mean_field_dopri5"
    t0f, t1f = _span(who, t0, t1)
    opt = _options(who, rtol, atol, h0, h_min, h_max, max_steps, 0.0, safety, fac_min, fac_max, pi_beta, estimate)
    cap = integer(who, "max_records", max_records, "a positive integer", compat=False)
    if cap < 1:
        raise ValueError(f"{who}: max_records must be a positive integer, got {max_records!r}")
    if coupling is None:
        raise TypeError(f"{who}: coupling is required: 'mean', 'sum' or a number")
    df, dg, f, g, n = _mean_field_fields(who, F, G, stream)
    scale = _mean_field_scale(who, coupling, n)
    d0 = _mean_field_delta0(who, delta0)
    if df is not None:
        times, tp = _arrays.empty_like_framework(df, (cap,), "float64")
        delta, dp = _arrays.empty_like_framework(df, (cap,), "complex64")
        acc, rej, st, tr, hn = _core._mean_field_dopri5(n, t0f, t1f, opt, scale, d0.real, d0.imag, df.ptr, dg.ptr, tp, dp,
                                                        cap, True, False, df.device, df.stream)
        k = min(cap, acc + 1)
        out = CoupledResult(F, G, times[:k], delta[:k], acc, rej, st, tr, hn)
        return deliver(out, one_launch(start, df.device), report, return_report)
    fo = np.array(f, order="C", copy=True)
    go = np.array(g, order="C", copy=True)
    times = np.empty(cap, np.float64)
    delta = np.empty(cap, np.complex64)
    on_host = _on_host(host_fallback, "spillway.ode.mean_field_dopri5")
    acc, rej, st, tr, hn = _core._mean_field_dopri5(n, t0f, t1f, opt, scale, d0.real, d0.imag, fo.ctypes.data,
                                                    go.ctypes.data, times.ctypes.data, delta.ctypes.data, cap, False,
                                                    on_host, 0, 0)
    k = min(cap, acc + 1)
    moved = 0 if on_host else 2 * (fo.nbytes + go.nbytes) + k * (times.itemsize + delta.itemsize)
    out = CoupledResult(fo, go, times[:k].copy(), delta[:k].copy(), acc, rej, st, tr, hn)
    return deliver(out, one_launch(start, 0, on_host, moved), report, return_report)
