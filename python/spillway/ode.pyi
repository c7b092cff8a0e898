# Type stubs for spillway.ode (see __init__.pyi; python/tests/test_stubs.py keeps them in step).
from typing import Any, Dict, List, NamedTuple, Optional, Sequence, Union

from .rk4 import lorenz_ensemble as lorenz_ensemble, mean_field as mean_field

__all__: List[str]

STATUS: Dict[str, int]
ESTIMATES: Dict[str, int]

class AdaptiveResult(NamedTuple):
    state: Any
    saved: Any
    accepted: Any
    rejected: Any
    status: Any

def lorenz_dopri5(
    state: Any,
    *,
    t1: float,
    t0: float = 0.0,
    rtol: float = 1e-6,
    atol: float = 1e-6,
    save_times: Optional[Sequence[float]] = None,
    h0: float = 0.0,
    h_min: float = 0.0,
    h_max: float = 0.0,
    max_steps: int = 100000,
    fixed_dt: float = 0.0,
    safety: float = 0.9,
    fac_min: float = 0.2,
    fac_max: float = 10.0,
    pi_beta: float = 0.04,
    estimate: str = "dormand_prince",
    sigma: float = 10.0,
    beta: float = ...,
    rho: Union[float, Sequence[float]] = (20.0, 30.0),
    stream: Any = None,
    host_fallback: Optional[bool] = None,
    report: Optional[Dict[str, Any]] = None,
    return_report: bool = False,
) -> Any:
    """AdaptiveResult(state, saved, accepted, rejected, status): device arrays advance in place
    (asynchronously, on stream); NumPy in -> new NumPy arrays. With return_report=True:
    (AdaptiveResult, Report)."""

class CoupledResult(NamedTuple):
    F: Any
    G: Any
    times: Any
    delta: Any
    accepted: int
    rejected: int
    status: int
    t: float
    h: float

def mean_field_dopri5(
    F: Any,
    G: Any,
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
    max_steps: int = 100000,
    safety: float = 0.9,
    fac_min: float = 0.2,
    fac_max: float = 10.0,
    pi_beta: float = 0.04,
    estimate: str = "dormand_prince",
    max_records: int = 100000,
    stream: Any = None,
    host_fallback: Optional[bool] = None,
    report: Optional[Dict[str, Any]] = None,
    return_report: bool = False,
) -> Any:
    """CoupledResult(F, G, times, delta, accepted, rejected, status, t, h): device arrays advance
    in place on stream (the call waits for it once, at the end); NumPy in -> new NumPy arrays.
    With return_report=True: (CoupledResult, Report)."""
