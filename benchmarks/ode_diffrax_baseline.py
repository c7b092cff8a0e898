#!/usr/bin/env python3
"""The ODE ensemble benchmark's baseline: JAX/diffrax on the problem of benchmarks/ode_bench.cu.

The DiffEqGPU paper's Lorenz ensemble: n systems (sigma 10, beta 8/3, rho spread over [0, 21] by
index, first system rho = 0, last rho = 21), u0 = (1, 0, 0), t in [0, 1]. diffrax's Dopri5 (the
same Dormand-Prince 5(4) pair as spillway's dopri5_ensemble) under jax.vmap over the ensemble,
states resident on the device, `max_steps` set and `throw=False`:

  adaptive  PIDController(rtol = atol = 1e-6) in float32, 1e-8 in float64 (jax_enable_x64)
  fixed     ConstantStepSize, dt0 = 0.001 (1,000 steps), float32

The timed region is one jitted call from the initial states to the final ones, `block_until_ready`
after it, after a warm-up call (compilation); the figure is the median of --reps. Per mode it
prints the time, the mean accepted and rejected steps per system, the systems that did not succeed,
and the error of the end states on a sample of --check systems against a float64 diffrax solve at
rtol = atol = 1e-12, in units of the tolerance: the largest RMS-norm error (diffrax's own norm) and
the largest component error |y - ref| / (tol + tol |ref|) as spillway's tests measure theirs, with
the count of systems whose component error exceeds 10 (issue 36's rule). Run on the GPU machine beside spillway_ode_bench (scripts/gpu-check.sh
ode-baseline).
"""
import argparse
import statistics
import sys
import time


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--systems", type=int, default=1 << 23)
    ap.add_argument("--modes", default="adaptive32,adaptive64,fixed32",
                    help="comma-separated: adaptive32, adaptive64, fixed32")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--check", type=int, default=256, help="systems checked against the float64 reference")
    ap.add_argument("--max-steps", type=int, default=100_000)
    a = ap.parse_args()
    if a.systems < 2 or a.reps < 1 or a.check < 1:
        sys.exit("ode_diffrax_baseline: --systems >= 2, --reps >= 1 and --check >= 1 are required")

    import jax

    jax.config.update("jax_enable_x64", True)  # float64 available; each mode picks its dtype
    import jax.numpy as jnp
    import numpy as np
    import diffrax as dfx

    def lorenz(t, y, rho):
        x, yy, z = y[0], y[1], y[2]
        return jnp.stack([10.0 * (yy - x), x * (rho - z) - yy, x * yy - (8.0 / 3.0) * z])

    def solver_fn(dtype, rtol, fixed_dt, max_steps):
        term = dfx.ODETerm(lorenz)
        if fixed_dt > 0:
            ctrl, dt0 = dfx.ConstantStepSize(), fixed_dt
        else:
            ctrl, dt0 = dfx.PIDController(rtol=rtol, atol=rtol), None

        def one(y0, rho):
            sol = dfx.diffeqsolve(term, dfx.Dopri5(), 0.0, 1.0, dt0, y0, args=rho, stepsize_controller=ctrl,
                                  saveat=dfx.SaveAt(t1=True), max_steps=max_steps, throw=False)
            return (sol.ys[-1], sol.stats["num_accepted_steps"], sol.stats["num_rejected_steps"],
                    sol.result == dfx.RESULTS.successful)

        return jax.jit(jax.vmap(one))

    def problem(n, dtype):
        rho = jnp.linspace(0.0, 21.0, n, dtype=dtype)
        y0 = jnp.zeros((n, 3), dtype=dtype).at[:, 0].set(1.0)
        return y0, rho

    n = a.systems
    sample = np.unique(np.linspace(0, n - 1, min(a.check, n)).astype(np.int64))
    ref_fn = solver_fn(jnp.float64, 1e-12, 0.0, 1_000_000)
    y0_64, rho_64 = problem(n, jnp.float64)
    ref = np.asarray(ref_fn(y0_64[sample], rho_64[sample])[0])
    print(f"diffrax {dfx.__version__ if hasattr(dfx, '__version__') else ''} jax {jax.__version__} on "
          f"{jax.devices()[0].device_kind}; {n} Lorenz systems, rho over [0, 21], t in [0, 1]")
    for mode in [m.strip() for m in a.modes.split(",") if m.strip()]:
        if mode not in ("adaptive32", "adaptive64", "fixed32"):
            sys.exit(f"ode_diffrax_baseline: unknown mode {mode!r} (adaptive32, adaptive64, fixed32)")
        dtype = jnp.float64 if mode.endswith("64") else jnp.float32
        tol = 1e-8 if mode == "adaptive64" else 1e-6
        fixed = 1e-3 if mode == "fixed32" else 0.0
        fn = solver_fn(dtype, tol, fixed, a.max_steps)
        y0, rho = problem(n, dtype)
        out = fn(y0, rho)  # warm-up: compilation
        jax.block_until_ready(out)
        times = []
        for _ in range(a.reps):
            t0 = time.perf_counter()
            out = fn(y0, rho)
            jax.block_until_ready(out)
            times.append(time.perf_counter() - t0)
        ys, acc, rej, ok = (np.asarray(x) for x in out)
        got = ys[sample].astype(np.float64)
        scale = tol + tol * np.maximum(np.abs(got), np.abs(ref))
        err = np.sqrt(np.mean(((got - ref) / scale) ** 2, axis=1)).max()
        comp = (np.abs(got - ref) / (tol + tol * np.abs(ref))).max(axis=1)
        label = {"adaptive32": "adaptive float32 rtol=atol=1e-6", "adaptive64": "adaptive float64 rtol=atol=1e-8",
                 "fixed32": "fixed dt=0.001 float32"}[mode]
        print(f"{mode}: {label}: {statistics.median(times) * 1e3:.2f} ms median of {a.reps} "
              f"({', '.join(f'{x * 1e3:.2f}' for x in times)}); accepted {acc.mean():.2f}, rejected {rej.mean():.2f} "
              f"per system; not successful {int((~ok).sum())}; end-state error on {sample.size} systems "
              f"{err:.2f} x tol RMS, {comp.max():.2f} x tol by component, {int((comp > 10).sum())} over 10 "
              f"(vs float64 at 1e-12)")


if __name__ == "__main__":
    main()
