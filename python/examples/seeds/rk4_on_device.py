"""Seed 003: RK4 of N x N coupled complex ODEs whose state never leaves the device.

The seed program advanced F and G with RK4 and copied both to the host after every step to compute
delta = sum(F). spillway.rk4.mean_field keeps F, G and delta(t) on the device for all steps:

    dF/dt = -2i F - i delta (2G - 1),   dG/dt = -i (conj(delta) F - delta conj(F)),
    delta <- scale * sum(F) after every step (coupling "sum": scale 1, the seed's; "mean": 1/n)

Device arrays (CuPy, else Numba) advance in place, asynchronously on a stream, timed with CUDA
events (spillway.timer); F, G and the delta history are copied to the host once, at the end. The
C++ version is examples/seeds/rk4_on_device.cu (coupling "mean", as here by default: the seed's sum
over 1.7e7 elements makes dt = 1e-4 unstable, see examples/rk4_coupled.cu).

    python rk4_on_device.py [--n SIDE] [--steps STEPS] [--coupling mean|sum] [--seed S]

Checked against NumPy (exit status 1 on a mismatch), each bound stated where it is checked:
every element's trajectory for n <= 65536 (a complex128 NumPy RK4 of the whole system), else 1000
sampled elements integrated in NumPy under spillway's own delta(t); the last delta against NumPy's
sum of the final F; Im G unchanged (dG/dt is real). With no GPU the host implementation runs a
smaller grid (side 128).
"""

import argparse
import importlib.util
import sys
import time
import warnings

import numpy as np

import spillway


def rk4_numpy(F, G, deltas, dt):
    """F, G (complex128) after len(deltas) RK4 steps, delta held at deltas[s] during step s."""
    for d in deltas:
        def rhs(f, g, d=d):
            return -2j * f - 1j * d * (2 * g - 1), -1j * (np.conj(d) * f - d * np.conj(f))

        k1 = rhs(F, G)
        k2 = rhs(F + dt / 2 * k1[0], G + dt / 2 * k1[1])
        k3 = rhs(F + dt / 2 * k2[0], G + dt / 2 * k2[1])
        k4 = rhs(F + dt * k3[0], G + dt * k3[1])
        F = F + dt / 6 * (k1[0] + 2 * k2[0] + 2 * k3[0] + k4[0])
        G = G + dt / 6 * (k1[1] + 2 * k2[1] + 2 * k3[1] + k4[1])
    return F, G


def rk4_numpy_coupled(F, G, delta0, scale, dt, steps):
    """The whole system in NumPy complex128: (F, G, deltas), delta <- scale * sum(F) after each step."""
    deltas = [complex(delta0)]
    for _ in range(steps):
        F, G = rk4_numpy(F, G, deltas[-1:], dt)
        deltas.append(complex(scale * F.sum()))
    return F, G, np.array(deltas)


def on_device(F, G, kind):
    """(F, G, stream, to_host) for the device framework `kind` ("cupy" or "numba")."""
    if kind == "cupy":
        import cupy

        s = cupy.cuda.Stream(non_blocking=True)
        with s:
            return cupy.asarray(F), cupy.asarray(G), s, lambda x: cupy.asnumpy(x, stream=s)
    from numba import cuda

    s = cuda.stream()
    return cuda.to_device(F, stream=s), cuda.to_device(G, stream=s), s, lambda x: x.copy_to_host(stream=s)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 epilog="e.g. python rk4_on_device.py --n 2048 --steps 1000")
    ap.add_argument("--n", type=int, default=None, help="grid side (default 4096 on a GPU, 128 without)")
    ap.add_argument("--steps", type=int, default=200, help="steps of dt (default 200)")
    ap.add_argument("--dt", type=float, default=1e-4)
    ap.add_argument("--coupling", choices=["mean", "sum"], default="mean")
    ap.add_argument("--arrays", choices=["auto", "cupy", "numba", "numpy"], default="auto",
                    help="device arrays from CuPy or Numba (auto: the first installed), or NumPy arrays")
    ap.add_argument("--seed", type=int, default=None, help="random seed (default: a fresh one, printed)")
    args = ap.parse_args()
    seed = args.seed if args.seed is not None else int(np.random.SeedSequence().entropy % (1 << 31))
    print(f"seed: {seed} (rerun with --seed {seed})")
    gpu = spillway.gpu_available()
    side = args.n if args.n is not None else (4096 if gpu else 128)
    n = side * side
    rng = np.random.default_rng(seed)
    F0 = (rng.uniform(-7e-4, 7e-4, n) + 1j * rng.uniform(-7e-4, 7e-4, n)).astype(np.complex64)
    G0 = (rng.uniform(-7e-4, 7e-4, n) + 1j * rng.uniform(-7e-4, 7e-4, n)).astype(np.complex64)
    delta0 = 1.0 + 0.0j
    scale = 1.0 if args.coupling == "sum" else 1.0 / n

    kind = args.arrays
    if kind == "auto":
        kind = next((k for k in ("cupy", "numba") if importlib.util.find_spec(k) is not None), "numpy")
    if not gpu:
        print(f"GPU part skipped (device arrays, CUDA-event timing): no GPU here: {spillway.no_gpu_reason()}; "
              f"the host implementation runs N = {side}")
        kind = "numpy"
    t0 = time.perf_counter()
    if kind == "numpy":
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", spillway.HostFallbackWarning)   # said above already
            F, G, delta = spillway.rk4.mean_field(F0, G0, steps=args.steps, dt=args.dt, delta0=delta0,
                                                  coupling=args.coupling)
        dt = time.perf_counter() - t0
        print(f"N = {side} ({n:,} elements), {args.steps} steps from NumPy arrays on "
              f"{'the GPU (copied there and back once)' if gpu else 'the host'}: {dt:.3f} s")
    else:
        dF, dG, s, to_host = on_device(F0, G0, kind)
        t0 = time.perf_counter()
        with spillway.timer(s) as t:     # the call only enqueues on s: a host clock would time the launch
            _, _, d_delta = spillway.rk4.mean_field(dF, dG, steps=args.steps, dt=args.dt, delta0=delta0,
                                                    coupling=args.coupling, stream=s)
        enqueue = time.perf_counter() - t0
        print(f"N = {side} ({n:,} elements), {args.steps} steps on the GPU ({kind} arrays, in place): "
              f"{t.ms / args.steps:.4f} ms per step (CUDA events), the call returned after {enqueue * 1e3:.1f} ms")
        F, G, delta = to_host(dF), to_host(dG), to_host(d_delta)   # the one copy, at the end
        s.synchronize()
        print(f"copied to the host once: {(F.nbytes + G.nbytes + delta.nbytes) / 2**20:.1f} MiB "
              f"(the seed copied {2 * F.nbytes / 2**20:.1f} MiB every step)")

    if not (np.all(np.isfinite(F)) and np.all(np.isfinite(delta))):
        print(f"numpy check: not comparable: the system blew up (non-finite F or delta). The coupled mode turns "
              f"about scale * n * dt = {scale * n * args.dt:.3g} rad per step, and RK4 is stable only below ~2.8: "
              "the seed's coupling 'sum' at large n (use --coupling mean, or a smaller --dt)\nFAILED")
        return 1
    ok = True
    # 1. The trajectories against NumPy (complex128; the state is complex64: rtol/atol 1e-4).
    if n <= 65536:
        Fr, Gr, dr = rk4_numpy_coupled(F0.astype(np.complex128), G0.astype(np.complex128), delta0, scale,
                                       args.dt, args.steps)
        what = f"all {n} elements and every delta, NumPy RK4 of the whole system"
        Fs, Gs = F, G
        ok_t = bool(np.allclose(delta, dr, rtol=1e-4, atol=1e-5 * max(1.0, abs(scale) * n)))
    else:
        idx = rng.choice(n, size=1000, replace=False)
        Fr, Gr = rk4_numpy(F0[idx].astype(np.complex128), G0[idx].astype(np.complex128),
                           delta[:-1].astype(np.complex128), args.dt)
        what = "1000 sampled elements, NumPy RK4 under spillway's delta(t)"
        Fs, Gs = F[idx], G[idx]
        ok_t = True
    # complex64 state against complex128: rtol 1e-4, atol 1e-5 of the largest value (F and G start ~7e-4).
    atol = 1e-5 * float(max(np.max(np.abs(Fr)), np.max(np.abs(Gr))))
    ok_t = ok_t and bool(np.allclose(Fs, Fr, rtol=1e-4, atol=atol) and np.allclose(Gs, Gr, rtol=1e-4, atol=atol))
    err = float(max(np.max(np.abs(Fs - Fr)), np.max(np.abs(Gs - Gr))))
    print(f"numpy check: trajectories ({what}; rtol 1e-4, atol {atol:.1e}): {'OK' if ok_t else 'MISMATCH'} "
          f"(max |difference| {err:.1e})")
    ok &= ok_t
    # 2. The last delta is scale * sum(final F) (summed in double on both sides, rounded to complex64 once).
    want = scale * F.astype(np.complex128).sum()
    rel = abs(complex(delta[-1]) - want) / max(abs(want), 1e-30)
    ok_d = len(delta) == args.steps + 1 and rel <= 1e-5
    print(f"numpy check: delta(end) = {complex(delta[-1]):.6e}, NumPy scale * sum(F) = {want:.6e}, relative "
          f"difference {rel:.1e} (<= 1e-5): {'OK' if ok_d else 'MISMATCH'}")
    ok &= ok_d
    # 3. Im G never moves: dG/dt is real.
    ok_g = bool(np.array_equal(G.imag, G0.imag))
    print(f"numpy check: Im G unchanged: {'OK' if ok_g else 'MISMATCH'}")
    ok &= ok_g
    print("OK" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
