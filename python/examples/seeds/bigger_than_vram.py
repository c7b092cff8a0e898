"""Seed 001: an elementwise job over host arrays larger than device memory.

The seed program (PyCUDA / Numba) copied whole arrays to the GPU and ran out of memory. Here
spillway.stream cuts the host arrays into chunks that fit a per-GPU budget, copies chunk i+1 in and
chunk i-1 out while your code computes chunk i, on every GPU; your code (CuPy, PyTorch or a Numba
kernel) sees one chunk's device arrays at a time. The C++ version is
examples/seeds/bigger_than_vram.cu.

    python bigger_than_vram.py [--n N] [--budget SIZE] [--arrays auto|cupy|torch|numba] [--seed S]
    python bigger_than_vram.py --n 1500000000 --budget 8GiB      # the seed's 36 GB

c = a * b + 1 over three float64 host arrays, checked element by element against NumPy (exit status
1 on a mismatch). a holds multiples of 0.25 below 250 and b small integers, so every product is
exact and the GPU's fused multiply-add gives NumPy's result bit for bit.

Needs a GPU: spillway.stream runs your GPU code and has no host form. With no GPU the program says
so and exits 0 without running anything.
"""

import argparse
import importlib.util
import sys
import time

import numpy as np

import spillway


def chunk_function(kind: str):
    """fn(chunk) for spillway.stream: c = a * b + 1 on one chunk's device arrays, enqueued on the
    chunk's stream (the current stream while fn runs); fn must not wait for the GPU."""
    if kind == "cupy":
        import cupy

        def fn(ch):
            x, y = ch.inputs
            c = ch.outputs[0]
            cupy.multiply(x, y, out=c)      # on the current stream: the chunk's
            c += 1.0
        return fn
    if kind == "torch":
        import torch

        def fn(ch):
            x, y = ch.inputs
            c = ch.outputs[0]
            torch.mul(x, y, out=c)          # on the current stream: the chunk's
            c.add_(1.0)
        return fn
    if not hasattr(np, "row_stack"):   # numba-cuda's JIT registers np.row_stack, which newer NumPy dropped
        np.row_stack = np.vstack        # (docs/python-gufunc.md: "numba-cuda and NumPy's row_stack")
    from numba import cuda

    @cuda.jit
    def fma1(x, y, c):
        i = cuda.grid(1)
        if i < c.size:
            c[i] = x[i] * y[i] + 1.0

    def fn(ch):
        x, y = ch.inputs
        c = ch.outputs[0]
        fma1[(c.size + 255) // 256, 256, ch.stream](x, y, c)   # a Numba launch names its stream
    return fn


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 epilog="e.g. python bigger_than_vram.py --n 1500000000 --budget 8GiB")
    ap.add_argument("--n", type=int, default=50_000_000, help="elements per array (default 5e7: 1.2 GB in all)")
    ap.add_argument("--budget", default="256MiB", help="device memory per GPU (default 256MiB)")
    ap.add_argument("--arrays", choices=["auto", "cupy", "torch", "numba"], default="auto",
                    help="what fn computes with (auto: the first of CuPy, PyTorch, Numba installed)")
    ap.add_argument("--seed", type=int, default=None, help="random seed (default: a fresh one, printed)")
    args = ap.parse_args()
    seed = args.seed if args.seed is not None else int(np.random.SeedSequence().entropy % (1 << 31))
    print(f"seed: {seed} (rerun with --seed {seed})")
    if not spillway.gpu_available():
        print(f"GPU part skipped: spillway.stream runs your GPU code on device arrays and has no host form; "
              f"no GPU here: {spillway.no_gpu_reason()}")
        return 0
    kind = args.arrays
    if kind == "auto":
        kind = next((k for k in ("cupy", "torch", "numba") if importlib.util.find_spec(k) is not None), None)
        if kind is None:
            print("GPU part skipped: fn needs CuPy, PyTorch or Numba for its device arrays; none is installed")
            return 0

    rng = np.random.default_rng(seed)
    a = rng.integers(0, 1000, args.n).astype(np.float64) * 0.25
    b = rng.integers(-3, 4, args.n).astype(np.float64)
    c = np.full(args.n, np.nan)
    fn = chunk_function(kind)

    t0 = time.perf_counter()
    (c,), rep = spillway.stream(fn, [a, b], [c], budget=args.budget, arrays=kind, progress=False,
                                return_report=True)
    dt = time.perf_counter() - t0
    gb = 3 * a.nbytes / 1e9
    print(f"{args.n:,} elements ({gb:.2f} GB through a {args.budget} budget) with {kind}: {rep.tasks_total} chunks "
          f"on GPU(s) {rep.devices}, {dt:.3f} s = {gb / dt:.1f} GB/s host memory streamed")

    ref = a * b + 1.0
    bad = np.flatnonzero(c != ref)
    for i in bad[:5]:
        print(f"  c[{i}] = {c[i]!r}, NumPy {ref[i]!r}")
    print(f"numpy check: {args.n:,} elements of a * b + 1: {'MISMATCH' if bad.size else 'OK'}"
          + (f" ({bad.size} differ)" if bad.size else " (bit for bit)"))
    print("FAILED" if bad.size else "OK")
    return 1 if bad.size else 0


if __name__ == "__main__":
    sys.exit(main())
