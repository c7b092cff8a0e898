"""An RK4 ensemble whose state never leaves the GPU: 100,000 Lorenz systems with rho from 20 to
30, integrated to t = 20; the final z of each system against rho, and one trajectory, plotted to
a PNG (matplotlib, when installed).

    python rk4_ensemble.py --systems 100000 --steps 20000 --png lorenz.png

The state is a (3, n) device array (CuPy when installed; else NumPy, copied to the GPU and back
once), advanced in place; saved states come back as one array. Checked: the first system against
a NumPy RK4 of the same system (exit status 1 if it disagrees). With no GPU the host
implementation runs (use fewer --systems).
"""

import argparse
import sys
import time

import numpy as np

import spillway


def lorenz_numpy(y, rho, steps, dt, sigma=10.0, beta=8.0 / 3.0):
    def f(s):
        x, y_, z = s
        return np.array([sigma * (y_ - x), x * (rho - z) - y_, x * y_ - beta * z])

    for _ in range(steps):
        k1 = f(y)
        k2 = f(y + dt / 2 * k1)
        k3 = f(y + dt / 2 * k2)
        k4 = f(y + dt * k3)
        y = y + dt / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
    return y


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog="e.g. python rk4_ensemble.py --systems 10000 --steps 5000")
    ap.add_argument("--systems", type=int, default=100_000)
    ap.add_argument("--steps", type=int, default=20_000)
    ap.add_argument("--dt", type=float, default=1e-3)
    ap.add_argument("--save-every", type=int, default=100)
    ap.add_argument("--png", default="lorenz_ensemble.png")
    args = ap.parse_args()
    n = args.systems
    s0 = np.tile(np.array([[1.0], [1.0], [1.0]]), (1, n))
    state = s0
    try:
        import cupy

        if spillway.gpu_available():
            state = cupy.asarray(s0)
    except ImportError:
        pass
    t = time.perf_counter()
    y, saved = spillway.rk4.lorenz_ensemble(state, steps=args.steps, dt=args.dt, save_every=args.save_every,
                                            rho=(20.0, 30.0))
    to_np = (lambda v: v.get()) if hasattr(y, "get") else np.asarray
    y, saved = to_np(y), to_np(saved)
    dt = time.perf_counter() - t
    print(f"{n:,} Lorenz systems x {args.steps:,} steps in {dt:.3f} s = {n * args.steps / dt:.3g} system-steps/s "
          f"({'GPU' if spillway.gpu_available() else 'host'})")

    check_steps = min(args.steps, 2000)
    first, _ = spillway.rk4.lorenz_ensemble(s0[:, :2], steps=check_steps, dt=args.dt, rho=(20.0, 30.0))
    ref = lorenz_numpy(s0[:, 0], 20.0, check_steps, args.dt)
    err = float(np.max(np.abs(first[:, 0] - ref) / (1 + np.abs(ref))))
    ok = err < 1e-8  # t <= 2: float64 rounding grows at most ~e^(0.9 t) from 1e-16
    print(f"check (system 0, {check_steps} steps vs NumPy): max relative error {err:.2e}:", "ok" if ok else "WRONG")

    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no plot")
        return 0 if ok else 1
    rho = 20.0 + 10.0 * np.arange(n) / max(n - 1, 1)
    fig, (l, r) = plt.subplots(1, 2, figsize=(12, 4.5))
    l.plot(rho, y[2], ",", alpha=0.5)
    l.set(xlabel="rho", ylabel=f"z at t = {args.steps * args.dt:g}", title="final z across the ensemble")
    j = n - 1
    r.plot(saved[:, 0, j], saved[:, 2, j], lw=0.6)
    r.set(xlabel="x", ylabel="z", title=f"system {j} (rho = {rho[j]:.1f}), every {args.save_every} steps")
    fig.tight_layout()
    fig.savefig(args.png, dpi=120)
    print("wrote", args.png)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
