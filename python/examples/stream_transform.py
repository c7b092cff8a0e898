"""A streamed transform of arrays larger than the card: c = a * b + sin(a) over float64 host
arrays, computed by your own CuPy (or PyTorch) code chunk by chunk while spillway copies the next
chunk in and the last one out, on every GPU.

    python stream_transform.py --rows 50000000 --budget 1GiB      # 3 x 400 MB through 1 GiB
    python stream_transform.py --arrays torch

A --budget far below the arrays' size shows the out-of-core path on any card. The result is
checked against NumPy on a sample; the exit status is 1 if it is wrong. Needs a GPU and CuPy (or
PyTorch with --arrays torch).
"""

import argparse
import sys
import time

import numpy as np

import spillway


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog="e.g. python stream_transform.py --rows 10000000")
    ap.add_argument("--rows", type=int, default=20_000_000)
    ap.add_argument("--budget", default="1GiB")
    ap.add_argument("--arrays", choices=["cupy", "torch"], default="cupy")
    args = ap.parse_args()
    if not spillway.gpu_available():
        print(f"no GPU ({spillway.no_gpu_reason()}): spillway.stream runs your GPU code, so there is nothing to run")
        return 0
    rng = np.random.default_rng(0)
    a = rng.standard_normal(args.rows)
    b = rng.standard_normal(args.rows)
    c = np.empty_like(a)

    if args.arrays == "cupy":
        import cupy as xp

        def fn(ch):
            x, y = ch.inputs
            ch.outputs[0][...] = x * y + xp.sin(x)  # runs on ch.stream (the current stream)
    else:
        import torch

        def fn(ch):
            x, y = ch.inputs
            torch.add(x * y, torch.sin(x), out=ch.outputs[0])

    t = time.perf_counter()
    rep = spillway.stream(fn, [a, b], [c], budget=args.budget, arrays=args.arrays)
    dt = time.perf_counter() - t
    gb = 3 * a.nbytes / 1e9
    print(f"{args.rows:,} rows ({gb:.2f} GB moved) in {dt:.3f} s = {gb / dt:.1f} GB/s, "
          f"{rep['tasks_total']} chunks on devices {rep['devices']}")
    idx = rng.choice(args.rows, size=100_000, replace=False)
    ref = a[idx] * b[idx] + np.sin(a[idx])
    err = float(np.max(np.abs(c[idx] - ref) / (1 + np.abs(ref))))
    ok = err < 1e-14  # sin differs by at most an ulp or two between libm and the GPU
    print(f"check: max relative error {err:.2e}:", "ok" if ok else "WRONG")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
