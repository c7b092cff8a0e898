#!/usr/bin/env python3
"""Steps against accuracy for the adaptive Dormand-Prince settings (issue 36, docs/ode.md "Steps
against diffrax"): the error estimate (classic Dormand-Prince or Shampine's, diffrax's), the
controller (PI with beta 0.04, or the plain one) and the tolerance's scale, on the ensemble
benchmark's Lorenz family (rho over [0, 21], u0 = (1, 0, 0), t in [0, 1]).

Per setting and precision (float32 at 1e-6, float64 at 1e-8): the mean accepted and rejected steps
per system, the worst end-state error in tolerances by component, |y - ref| / (tol + tol |ref|),
against a float64 solve at 1e-13, and how many systems pass 10 tolerances (issue 36's rule).
With --diffrax A32,A64 (diffrax's mean accepted steps from benchmarks/ode_diffrax_baseline.py) it
also prints each setting's steps against diffrax's. Runs spillway.ode.lorenz_dopri5: on the GPU
where one is usable, else the host implementation (the same code; the counts may differ in a few
borderline systems).
"""
import argparse
import warnings

import numpy as np

import spillway

SETTINGS = [  # (label, estimate, pi_beta, tolerance scale)
    ("classic + PI (default)", "dormand_prince", 0.04, 1.0),
    ("classic + plain", "dormand_prince", 0.0, 1.0),
    ("shampine + PI", "shampine", 0.04, 1.0),
    ("shampine + plain (diffrax's)", "shampine", 0.0, 1.0),
    ("classic + plain at 1.2 tol", "dormand_prince", 0.0, 1.2),
    ("classic + plain at 1.3 tol", "dormand_prince", 0.0, 1.3),
]


def start(n, dtype):
    s = np.zeros((3, n), dtype)
    s[0] = 1.0
    return s


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--systems", type=int, default=2000)
    ap.add_argument("--diffrax", default="30.54,71.25",
                    help="diffrax's mean accepted steps, float32,float64 (its GPU run, 2026-12-01)")
    a = ap.parse_args()
    dx = [float(x) for x in a.diffrax.split(",")] if a.diffrax else None
    n = a.systems
    rho = (0.0, 21.0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", spillway.HostFallbackWarning)
        ref = spillway.ode.lorenz_dopri5(start(n, np.float64), t1=1.0, rtol=1e-13, atol=1e-13, rho=rho).state
        for p, (dtype, tol) in enumerate([(np.float32, 1e-6), (np.float64, 1e-8)]):
            for label, est, beta, scale in SETTINGS:
                r = spillway.ode.lorenz_dopri5(start(n, dtype), t1=1.0, rtol=tol * scale, atol=tol * scale, rho=rho,
                                               estimate=est, pi_beta=beta)
                assert (r.status == 0).all(), f"{label}: {int((r.status != 0).sum())} systems did not succeed"
                got = np.asarray(r.state, np.float64)
                err = (np.abs(got - ref) / (tol + tol * np.abs(ref))).max(axis=0)
                acc = float(np.mean(r.accepted))
                vs = f" ({100 * (acc / dx[p] - 1):+.1f}% vs diffrax)" if dx else ""
                print(f"{np.dtype(dtype).name} tol {tol:g} {label}: accepted {acc:.2f}{vs}, rejected "
                      f"{float(np.mean(r.rejected)):.2f}; worst {err.max():.2f} tol, {int((err > 10).sum())} of {n} "
                      f"systems past 10")


if __name__ == "__main__":
    main()
