"""spillway.rk4: RK4 whose state stays on the device, for the systems the C++ side ships.

- :func:`lorenz_ensemble` -- many independent Lorenz systems (rho spread over a range), one per
  GPU thread with its state in registers; saved states every ``save_every`` steps.
- :func:`mean_field` -- the mean-field coupled two-field system (complex64 F and G), with
  delta <- scale * sum(F) recomputed on the device after every step; the delta history comes
  back as an array.

Device arrays (CuPy, PyTorch, Numba) are advanced in place on ``stream`` (default: the
framework's current stream) without waiting, and new outputs are arrays of the same framework;
NumPy arrays are copied to the GPU and back into new arrays (the call blocks). With no GPU the
host implementation runs (spillway.HostFallbackWarning, once).

Both take ``report=`` (a dict to fill) and ``return_report=True`` (returns ``(result,
spillway.Report)``): one task, on which device or the host, the bytes copied, and the host
seconds of the call (for device arrays, the time to enqueue the steps, not to run them: time
those with :class:`spillway.timer`).
"""

from __future__ import annotations

import time
import warnings
from typing import Optional, Union

import numpy as np

from . import _arrays, _core
from ._checks import integer, real, same_place
from ._errors import ArgumentTypeError, DTypeError, warn_host_fallback
from ._report import deliver, one_launch

__all__ = ["lorenz_ensemble", "mean_field"]


def _check_time(dt, steps, t0):
    if integer("rk4", "steps", steps, "a non-negative integer") < 0:
        raise ValueError(f"rk4: steps must be a non-negative integer, got {steps!r}")
    # dt and t0 of a wrong kind were TypeErrors before (np.isfinite's): plain TypeErrors still.
    if not np.isfinite(real("rk4", "dt", dt, compat=False)) or not np.isfinite(real("rk4", "t0", t0, compat=False)):
        raise ValueError(f"rk4: t0 and dt must be finite, got t0={t0!r}, dt={dt!r}")


def _on_host(host_fallback: Optional[bool], who: str) -> bool:
    if _core.device_count() > 0:
        return False
    if host_fallback is False:
        raise RuntimeError(f"{who} needs a GPU, and there is none: {_core.no_gpu_reason()}; "
                           "host_fallback=None (the default) runs the host implementation instead")
    warn_host_fallback(who, _core.no_gpu_reason())
    return True


def _device(x, stream, who, shape, dtypes):
    d = _arrays.device_array(x, stream, writable=True)  # advanced in place
    if d.dtype not in dtypes:
        raise DTypeError(f"{who}: expected {' or '.join(dtypes)} data, got {d.dtype}")
    if tuple(d.shape) != tuple(shape):
        raise ValueError(f"{who}: expected shape {tuple(shape)}, got {tuple(d.shape)}")
    want, acc = [], 1
    for n in reversed(shape):
        want.append(acc)
        acc *= max(int(n), 1)
    want = tuple(reversed(want))
    if any(s != w for s, w, n in zip(d.strides, want, shape) if n > 1):
        raise ValueError(f"{who}: the device array must be C-contiguous; strides {d.strides} (elements), "
                         f"expected {want}")
    return d


def _lorenz_state(state, stream, who):
    """A Lorenz ensemble's state, checked: (3, n) float32 or float64. Returns (device array or
    None, host array or None, dtype, n); a device array is checked writable and C-contiguous."""
    if _arrays.is_device_array(state):
        sh = tuple(_arrays.device_array(state, stream).shape)
        if len(sh) != 2 or sh[0] != 3:
            raise ValueError(f"{who}: state must have shape (3, n), got {sh}")
        d = _device(state, stream, who, sh, ("float32", "float64"))
        return d, None, np.dtype(d.dtype), sh[1]
    a = np.asarray(state)
    if a.ndim != 2 or a.shape[0] != 3:
        raise ValueError(f"{who}: state must have shape (3, n), got {a.shape}")
    if a.dtype not in (np.float32, np.float64):
        raise DTypeError(f"{who}: state must be float32 or float64, got {a.dtype}")
    return None, a, a.dtype, a.shape[1]


def lorenz_ensemble(
    state,
    *,
    steps: int,
    dt: float,
    t0: float = 0.0,
    save_every: int = 0,
    sigma: float = 10.0,
    beta: float = 8.0 / 3.0,
    rho=(20.0, 30.0),
    stream=None,
    host_fallback: Optional[bool] = None,
    report: Optional[dict] = None,
    return_report: bool = False,
):
    """``steps`` RK4 steps of n Lorenz systems: x' = sigma (y - x), y' = x (rho - z) - y,
    z' = x y - beta z, with rho = rho[0] for system 0 up to rho[1] for system n - 1 (linearly).

    ``state``: (3, n) float32 or float64, component-major (row d holds component d of every
    system). Returns ``(state, saved)``: the final state (the same device array, advanced in
    place; or a new NumPy array) and, when ``save_every`` > 0, the states after every
    ``save_every``-th step as (steps // save_every, 3, n) (else None).

    Device arrays: asynchronous, on ``stream`` (default: the framework's current stream); the
    state and ``saved`` are ready when that stream reaches the end of the call's work. NumPy
    arrays: blocks until the results are on the host.
    """
    start = time.perf_counter()
    _check_time(dt, steps, t0)
    if integer("lorenz_ensemble", "save_every", save_every, "a non-negative integer") < 0:
        raise ValueError(f"lorenz_ensemble: save_every must be a non-negative integer, got {save_every!r}")
    rho_lo, rho_hi = (float(rho), float(rho)) if np.isscalar(rho) else (float(rho[0]), float(rho[1]))
    saves = steps // save_every if save_every else 0
    d, a, _, n = _lorenz_state(state, stream, "lorenz_ensemble")
    if d is not None:
        saved, sp = (None, 0)
        if saves:
            saved, sp = _arrays.empty_like_framework(d, (saves, 3, n), d.dtype)
        _core._lorenz(n, t0, dt, steps, save_every if saves else 0, sigma, beta, rho_lo, rho_hi, d.dtype == "float64",
                      d.ptr, sp, True, False, d.device, d.stream)
        return deliver((state, saved), one_launch(start, d.device), report, return_report)
    y = np.array(a, dtype=a.dtype, order="C", copy=True)
    saved = np.empty((saves, 3, n), dtype=y.dtype) if saves else None
    on_host = _on_host(host_fallback, "spillway.rk4.lorenz_ensemble")
    _core._lorenz(n, t0, dt, steps, save_every if saves else 0, sigma, beta, rho_lo, rho_hi, y.dtype == np.float64,
                  y.ctypes.data, saved.ctypes.data if saved is not None else 0, False, on_host, 0, 0)
    moved = 0 if on_host else 2 * y.nbytes + (saved.nbytes if saved is not None else 0)
    return deliver((y, saved), one_launch(start, 0, on_host, moved), report, return_report)


def _mean_field_fields(who, F, G, stream):
    """F and G of the mean-field system: both device arrays (complex64, same shape, same GPU) or
    both host arrays. Returns (df, dg, f, g, n): the device views or the host arrays, and n."""
    same_place(who, _arrays.is_device_array(F), _arrays.is_device_array(G), ("F", "G"))
    df = dg = f = g = None
    if _arrays.is_device_array(F):
        df = _arrays.device_array(F, stream)
        n = int(np.prod(df.shape)) if df.shape else 1
        df = _device(F, stream, who, df.shape, ("complex64",))
        dg = _device(G, df.stream if stream is None else stream, who, df.shape, ("complex64",))
        if dg.device != df.device:
            raise ValueError(f"{who}: F is on GPU {df.device} but G on GPU {dg.device}")
    else:
        f = np.asarray(F)
        g = np.asarray(G)
        if f.dtype != np.complex64 or g.dtype != np.complex64:
            raise DTypeError(f"{who}: F and G must be complex64, got {f.dtype} and {g.dtype}")
        if f.shape != g.shape:
            raise ValueError(f"{who}: F has shape {f.shape} but G {g.shape}")
        n = f.size
    if n == 0:
        raise ValueError(f"{who}: F and G are empty")
    return df, dg, f, g, n


def _mean_field_scale(who, coupling, n) -> float:
    """delta <- scale * sum(F): "mean" (1/n), "sum" (1) or a finite number; None gives 1/n (the
    caller decides whether None is allowed)."""
    if isinstance(coupling, str):
        if coupling not in ("mean", "sum"):
            raise ValueError(f"{who}: coupling must be 'mean', 'sum' or a number, got {coupling!r}")
        return 1.0 / n if coupling == "mean" else 1.0
    if coupling is None:
        return 1.0 / n
    if isinstance(coupling, (int, float, np.floating, np.integer)) and not isinstance(coupling, (bool, np.bool_)):
        scale = float(coupling)
        if not np.isfinite(scale):
            raise ValueError(f"{who}: coupling must be finite, got {coupling!r}")
        return scale
    raise ArgumentTypeError(f"{who}: coupling must be 'mean', 'sum' or a number, got {type(coupling).__name__}")


def _mean_field_delta0(who, delta0) -> complex:
    if isinstance(delta0, (str, bytes, bool, np.bool_)) or not isinstance(delta0, (complex, float, int, np.number)):
        raise ArgumentTypeError(f"{who}: delta0 must be a number, got {type(delta0).__name__}")
    return complex(delta0)


def mean_field(
    F,
    G,
    *,
    steps: int,
    dt: float,
    t0: float = 0.0,
    delta0: complex = 1.0,
    coupling: Union[str, float, None] = None,
    stream=None,
    host_fallback: Optional[bool] = None,
    report: Optional[dict] = None,
    return_report: bool = False,
):
    """``steps`` RK4 steps of dF/dt = -2i F - i delta (2G - 1), dG/dt = -i (conj(delta) F -
    delta conj(F)) per element, delta <- scale * sum(F) after every step, summed in complex128 on
    the device. ``coupling`` (required): "sum" for scale 1 (the seed's system), "mean" for 1/n, or
    a number. Omitting it is deprecated: a DeprecationWarning, and "mean" as before, for the 0.1
    series; from 0.2 it is an error (the C++ side has no default either).

    ``F``, ``G``: complex64 arrays of n elements. Returns ``(F, G, delta)``: the final fields (the
    same device arrays, advanced in place; or new NumPy arrays) and the steps + 1 deltas
    (delta[0] = delta0) as a complex64 array.

    Device arrays: asynchronous, on ``stream`` (default: the framework's current stream); F, G and
    the deltas are ready when that stream reaches the end of the call's work. NumPy arrays: blocks
    until the results are on the host.
    """
    start = time.perf_counter()
    _check_time(dt, steps, t0)
    df, dg, f, g, n = _mean_field_fields("mean_field", F, G, stream)
    scale = _mean_field_scale("mean_field", coupling, n)
    d0 = _mean_field_delta0("mean_field", delta0)
    if coupling is None:
        warnings.warn(
            "spillway.rk4.mean_field: coupling is required; omitting it gives 'mean' (delta = sum(F) / n) for the "
            "0.1 series and is an error from 0.2. Pass coupling='sum' for delta = sum(F) (seed 003's system) or "
            "coupling='mean' to keep this result",
            DeprecationWarning,
            stacklevel=2,
        )
    if _arrays.is_device_array(F):
        traj, tp = _arrays.empty_like_framework(df, (steps + 1,), "complex64")
        _core._mean_field(n, t0, dt, steps, scale, d0.real, d0.imag, df.ptr, dg.ptr, tp, True, False, df.device,
                          df.stream)
        return deliver((F, G, traj), one_launch(start, df.device), report, return_report)
    fo = np.array(f, order="C", copy=True)
    go = np.array(g, order="C", copy=True)
    traj = np.empty(steps + 1, np.complex64)
    on_host = _on_host(host_fallback, "spillway.rk4.mean_field")
    _core._mean_field(n, t0, dt, steps, scale, d0.real, d0.imag, fo.ctypes.data, go.ctypes.data, traj.ctypes.data,
                      False, on_host, 0, 0)
    moved = 0 if on_host else 2 * (fo.nbytes + go.nbytes) + traj.nbytes
    return deliver((fo, go, traj), one_launch(start, 0, on_host, moved), report, return_report)
