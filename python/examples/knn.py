"""Every row's k nearest rows of an embeddings .npy (cosine, inner product or Euclidean distance),
written as two .npy files -- without the n x n scores ever existing.

    python knn.py emb.npy --k 32 --metric cosine --budget 8GiB --out nn    # nn_indices.npy, nn_scores.npy
    python knn.py --rows 20000 --dim 768 --bf16                            # random rows instead

The file (float32, float16, bfloat16 from ml_dtypes -- saved as a 2-byte void dtype --, or uint16
bf16 bits with --bf16) is opened
with np.load(mmap_mode="r"); its rows go through the GPU's tensor cores strip by strip under
--budget (the symmetric half of A·Aᵀ only), keeping each row's k best. A sample of rows is checked
against float64 NumPy: each listed row's exact score within the stated bound of the exact k-th
(docs/similarity.md); the exit status is 1 if one is wrong. With no GPU it runs spillway's host
implementation (and says so).
"""

import argparse
import sys
import time

import numpy as np

import spillway


def widen(x, bf16):
    """Rows as float64 (bf16 bit patterns widened first)."""
    x = np.asarray(x)
    if bf16:
        x = (x.view(np.uint16).astype(np.uint32) << 16).view(np.float32)
    return x.astype(np.float64)


def exact_scores(a, rows, metric, bf16):
    """Float64 scores of the sampled rows against every row, and every row's squared norm (one
    pass over the rows, a block at a time: a memory-mapped file is never read whole)."""
    q = widen(a[rows], bf16)
    nq = (q * q).sum(1)[:, None]
    out, norms = np.empty((len(rows), a.shape[0])), np.empty(a.shape[0])
    for c0 in range(0, a.shape[0], 65536):
        blk = widen(a[c0:c0 + 65536], bf16)
        dot = q @ blk.T
        nb = (blk * blk).sum(1)
        norms[c0:c0 + len(blk)] = nb
        if metric == "ip":
            s = dot
        elif metric == "cosine":
            den = np.sqrt(nq * nb[None, :])
            s = np.where(den > 0, dot / np.where(den > 0, den, 1), 0.0)
        else:
            s = np.sqrt(np.maximum(nq + nb[None, :] - 2 * dot, 0))
        out[:, c0:c0 + len(blk)] = s
    return out, norms


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog="e.g. python knn.py --rows 5000 --dim 128")
    ap.add_argument("path", nargs="?", help=".npy of n x d rows (default: random normal rows)")
    ap.add_argument("--rows", type=int, default=5000)
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--bf16", action="store_true", help="uint16 input holds bf16 bits (random rows: bf16)")
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--metric", choices=["cosine", "ip", "euclidean"], default="cosine")
    ap.add_argument("--budget", default="8GiB")
    ap.add_argument("--out", default="", help="write OUT_indices.npy (int64) and OUT_scores.npy (float32)")
    ap.add_argument("--check", type=int, default=8, help="rows checked against NumPy")
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args()

    if args.path:
        a = np.load(args.path, mmap_mode="r")
        print(f"{args.path}: {a.shape[0]:,} x {a.shape[1]:,} {a.dtype}, memory-mapped")
        if a.dtype.kind == "V" and a.dtype.itemsize == 2:  # how np.save stores ml_dtypes.bfloat16
            a, args.bf16 = a.view(np.uint16), True
            print("a 2-byte void dtype: read as bf16 bit patterns")
    else:
        a = np.random.default_rng(args.seed).standard_normal((args.rows, args.dim), dtype=np.float32)
        if args.bf16:
            a = ((a.view(np.uint32) + 0x8000) >> 16).astype(np.uint16)  # bf16 bits (rounded)
        print(f"random {args.rows:,} x {args.dim} {'bf16' if args.bf16 else 'float32'} rows, seed {args.seed}")
    print("GPU:", "yes" if spillway.gpu_available() else f"none ({spillway.no_gpu_reason()})")

    t = time.perf_counter()
    report = {}
    scores, nn = spillway.similarity(a, metric=args.metric, sink="topk", k=args.k, budget=args.budget, bf16=args.bf16,
                                     report=report)
    print(f"top-{args.k} {args.metric} of {a.shape[0]:,} rows in {time.perf_counter() - t:.2f} s "
          f"({report['tasks_total']} strips, {'host' if report['on_host'] else 'devices ' + str(report['devices'])})")
    if args.out:
        np.save(args.out + "_indices.npy", nn)
        np.save(args.out + "_scores.npy", scores)
        print(f"wrote {args.out}_indices.npy and {args.out}_scores.npy")

    # The check: each listed row's exact score within e of spillway's, and within 2e of the exact k-th.
    rng = np.random.default_rng(args.seed + 1)
    sample = np.sort(rng.choice(a.shape[0], size=min(args.check, a.shape[0]), replace=False))
    exact, norms = exact_scores(a, sample, args.metric, args.bf16)
    larger = args.metric != "euclidean"
    e = 4.0 * (a.shape[1] + 8) * 2.0**-24
    kk = min(args.k, a.shape[0] - 1)
    bad = 0
    for row, s in zip(sample, exact):
        if args.metric == "cosine":
            eps = np.full(s.shape, e)
        elif args.metric == "ip":
            eps = e * np.sqrt(norms[row] * norms) + 1e-30
        else:
            eps = np.sqrt(e * (norms[row] + norms)) + 1e-30
        s[row] = -np.inf if larger else np.inf  # the row itself is not its own neighbour
        kth = (np.sort(s)[::-1] if larger else np.sort(s))[kk - 1]
        for t in range(kk):
            j = int(nn[row, t])
            ok = j >= 0 and j != row and abs(float(scores[row, t]) - s[j]) <= eps[j]
            ok = ok and (s[j] >= kth - 2 * eps.max() if larger else s[j] <= kth + 2 * eps.max())
            if not ok:
                bad += 1
                print(f"row {row} place {t}: lists {j} scoring {scores[row, t]}, exact {s[j]}, exact k-th {kth}")
                break
    print(f"row {sample[0]}'s nearest: row {nn[sample[0], 0]} ({scores[sample[0], 0]:.4f})")
    print("check:", "ok" if bad == 0 else f"{bad} rows WRONG", f"({len(sample)} rows against float64 NumPy)")
    return 0 if bad == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
