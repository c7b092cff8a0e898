"""The 0/1 co-occurrence matrix of a .npy file: which rows (e.g. documents, users, samples) share
the most ones, and the Jaccard similarity of the closest pairs -- without the matrix product
running the card (or the host) out of memory.

    python cooccurrence.py data.npy --k 10 --budget 4GiB     # rows x cols of 0/1 (bool/uint8/...)
    python cooccurrence.py --rows 20000 --cols 50000         # a random matrix instead

The file is opened with np.load(mmap_mode="r") and packed in row blocks (never read whole into
memory); A·Aᵀ is computed on the GPU's b1 tensor cores strip by strip under --budget, keeping only
each row's top-k. A sample of rows is checked against NumPy; the exit status is 1 if one is
wrong. With no GPU it runs spillway's host implementation (and says so).
"""

import argparse
import sys
import time

import numpy as np

import spillway


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog="e.g. python cooccurrence.py --rows 3000 --cols 5000")
    ap.add_argument("path", nargs="?", help=".npy file of 0/1 values, rows x cols (default: random)")
    ap.add_argument("--rows", type=int, default=3000)
    ap.add_argument("--cols", type=int, default=5000)
    ap.add_argument("--density", type=float, default=0.05)
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--budget", default="8GiB")
    ap.add_argument("--seed", type=int, default=12345)
    args = ap.parse_args()

    if args.path:
        a = np.load(args.path, mmap_mode="r")
        print(f"{args.path}: {a.shape[0]:,} x {a.shape[1]:,} {a.dtype}, memory-mapped")
    else:
        print(f"random {args.rows:,} x {args.cols:,} 0/1 matrix, density {args.density}, seed {args.seed}")
        a = np.random.default_rng(args.seed).random((args.rows, args.cols)) < args.density
    print("GPU:", "yes" if spillway.gpu_available() else f"none ({spillway.no_gpu_reason()})")

    t = time.perf_counter()
    bits = spillway.pack_bits(a)
    print(f"packed in {time.perf_counter() - t:.2f} s ({bits.nbytes / 2**20:.1f} MiB of bits)")
    t = time.perf_counter()
    report = {}
    counts, partners = spillway.gram(bits, sink="topk", k=args.k, budget=args.budget, report=report)
    sims, _ = spillway.gram(bits, metric="jaccard", sink="topk", k=1, budget=args.budget)
    print(f"top-{args.k} co-occurrence per row in {time.perf_counter() - t:.2f} s "
          f"({report['tasks_total']} strips, {'host' if report['on_host'] else 'devices ' + str(report['devices'])})")

    # Check a sample of rows against NumPy: their counts with every other row, best k.
    rng = np.random.default_rng(args.seed + 1)
    sample = rng.choice(bits.rows, size=min(20, bits.rows), replace=False)
    full = np.asarray(a, dtype=np.int32)
    bad = 0
    for i in sample:
        c = full @ full[i]
        c[i] = np.iinfo(np.int32).min
        best = np.sort(c)[::-1][: args.k]
        if not np.array_equal(np.sort(counts[i])[::-1], best[: counts.shape[1]]):
            bad += 1
            print(f"row {i}: spillway {counts[i]} vs NumPy {best}")
    i = int(np.argmax(sims[:, 0]))
    print(f"most similar pair: rows {i} and {partners[i, 0] if args.k else '?'} share "
          f"{counts[i, 0]} ones; best Jaccard overall {sims[i, 0]:.3f}")
    print("check:", "ok" if bad == 0 else f"{bad} rows WRONG")
    return 0 if bad == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
