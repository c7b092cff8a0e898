"""spillway.rk4: RK4 whose state stays on the device, for the systems the C++ side ships.

- :func:`lorenz_ensemble` -- many independent Lorenz systems (rho spread over a range), one per
  GPU thread with its state in registers; saved states every ``save_every`` steps.
- :func:`mean_field` -- the mean-field coupled two-field system (complex64 F and G), with
  delta <- scale * sum(F) recomputed on the device after every step; the delta history comes
  back as an array.

Device arrays (CuPy, PyTorch, Numba) are advanced in place on ``stream`` (default: the
framework's current stream) without waiting, and new outputs are arrays of the same framework;
NumPy arrays are copied to the GPU and back into new arrays. With no GPU the host
implementation runs (spillway.HostFallbackWarning, once).
"""

from __future__ import annotations

from typing import Optional, Union

import numpy as np

from . import _arrays, _core
from ._errors import warn_host_fallback

__all__ = ["lorenz_ensemble", "mean_field"]


def _check_time(dt, steps, t0):
    if isinstance(steps, bool) or not isinstance(steps, (int, np.integer)) or steps < 0:
        raise ValueError(f"rk4: steps must be a non-negative integer, got {steps!r}")
    if not np.isfinite(dt) or not np.isfinite(t0):
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
    d = _arrays.device_array(x, stream)
    if d.dtype not in dtypes:
        raise ValueError(f"{who}: expected {' or '.join(dtypes)} data, got {d.dtype}")
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
):
    """``steps`` RK4 steps of n Lorenz systems: x' = sigma (y - x), y' = x (rho - z) - y,
    z' = x y - beta z, with rho = rho[0] for system 0 up to rho[1] for system n - 1 (linearly).

    ``state``: (3, n) float32 or float64, component-major (row d holds component d of every
    system). Returns ``(state, saved)``: the final state (the same device array, advanced in
    place; or a new NumPy array) and, when ``save_every`` > 0, the states after every
    ``save_every``-th step as (steps // save_every, 3, n) (else None).
    """
    _check_time(dt, steps, t0)
    if isinstance(save_every, bool) or not isinstance(save_every, (int, np.integer)) or save_every < 0:
        raise ValueError(f"lorenz_ensemble: save_every must be a non-negative integer, got {save_every!r}")
    rho_lo, rho_hi = (float(rho), float(rho)) if np.isscalar(rho) else (float(rho[0]), float(rho[1]))
    saves = steps // save_every if save_every else 0
    if _arrays.is_device_array(state):
        sh = tuple(_arrays.device_array(state, stream).shape)
        if len(sh) != 2 or sh[0] != 3:
            raise ValueError(f"lorenz_ensemble: state must have shape (3, n), got {sh}")
        d = _device(state, stream, "lorenz_ensemble", sh, ("float32", "float64"))
        n = sh[1]
        saved, sp = (None, 0)
        if saves:
            saved, sp = _arrays.empty_like_framework(d, (saves, 3, n), d.dtype)
        _core._lorenz(n, t0, dt, steps, save_every if saves else 0, sigma, beta, rho_lo, rho_hi, d.dtype == "float64",
                      d.ptr, sp, True, False, d.device, d.stream)
        return state, saved
    a = np.asarray(state)
    if a.ndim != 2 or a.shape[0] != 3:
        raise ValueError(f"lorenz_ensemble: state must have shape (3, n), got {a.shape}")
    if a.dtype not in (np.float32, np.float64):
        raise ValueError(f"lorenz_ensemble: state must be float32 or float64, got {a.dtype}")
    y = np.array(a, dtype=a.dtype, order="C", copy=True)
    n = y.shape[1]
    saved = np.empty((saves, 3, n), dtype=y.dtype) if saves else None
    on_host = _on_host(host_fallback, "spillway.rk4.lorenz_ensemble")
    _core._lorenz(n, t0, dt, steps, save_every if saves else 0, sigma, beta, rho_lo, rho_hi, y.dtype == np.float64,
                  y.ctypes.data, saved.ctypes.data if saved is not None else 0, False, on_host, 0, 0)
    return y, saved


def mean_field(
    F,
    G,
    *,
    steps: int,
    dt: float,
    t0: float = 0.0,
    delta0: complex = 1.0,
    coupling: Union[str, float] = "mean",
    stream=None,
    host_fallback: Optional[bool] = None,
):
    """``steps`` RK4 steps of dF/dt = -2i F - i delta (2G - 1), dG/dt = -i (conj(delta) F -
    delta conj(F)) per element, delta <- scale * sum(F) after every step (``coupling``: "mean"
    for scale 1/n, "sum" for 1, or a number), summed in complex128 on the device.

    ``F``, ``G``: complex64 arrays of n elements. Returns ``(F, G, delta)``: the final fields (the
    same device arrays, advanced in place; or new NumPy arrays) and the steps + 1 deltas
    (delta[0] = delta0) as a complex64 array.
    """
    _check_time(dt, steps, t0)
    if _arrays.is_device_array(F) != _arrays.is_device_array(G):
        raise ValueError("mean_field: F and G must both be device arrays or both host arrays")
    if _arrays.is_device_array(F):
        df = _arrays.device_array(F, stream)
        n = int(np.prod(df.shape)) if df.shape else 1
        df = _device(F, stream, "mean_field", df.shape, ("complex64",))
        dg = _device(G, df.stream if stream is None else stream, "mean_field", df.shape, ("complex64",))
        if dg.device != df.device:
            raise ValueError(f"mean_field: F is on GPU {df.device} but G on GPU {dg.device}")
    else:
        f = np.asarray(F)
        g = np.asarray(G)
        if f.dtype != np.complex64 or g.dtype != np.complex64:
            raise ValueError(f"mean_field: F and G must be complex64, got {f.dtype} and {g.dtype}")
        if f.shape != g.shape:
            raise ValueError(f"mean_field: F has shape {f.shape} but G {g.shape}")
        n = f.size
    if n == 0:
        raise ValueError("mean_field: F and G are empty")
    if coupling == "mean":
        scale = 1.0 / n
    elif coupling == "sum":
        scale = 1.0
    elif isinstance(coupling, (int, float, np.floating)) and not isinstance(coupling, bool):
        scale = float(coupling)
    else:
        raise ValueError(f"mean_field: coupling must be 'mean', 'sum' or a number, got {coupling!r}")
    d0 = complex(delta0)
    if _arrays.is_device_array(F):
        traj, tp = _arrays.empty_like_framework(df, (steps + 1,), "complex64")
        _core._mean_field(n, t0, dt, steps, scale, d0.real, d0.imag, df.ptr, dg.ptr, tp, True, False, df.device,
                          df.stream)
        return F, G, traj
    fo = np.array(f, order="C", copy=True)
    go = np.array(g, order="C", copy=True)
    traj = np.empty(steps + 1, np.complex64)
    on_host = _on_host(host_fallback, "spillway.rk4.mean_field")
    _core._mean_field(n, t0, dt, steps, scale, d0.real, d0.imag, fo.ctypes.data, go.ctypes.data, traj.ctypes.data,
                      False, on_host, 0, 0)
    return fo, go, traj
