"""Recall of binary-quantized candidates for all-pairs top-k cosine (issue 34, part 4's design): each
row's sign bits, its k' nearest rows by Hamming distance over them (ties by the smaller column, as
spillway's lists order them) as candidates, those rescored exactly, the best k kept; recall@k
against the exact top-k (float64 cosine, the diagonal excluded).

    python3 benchmarks/binary_recall.py --rows 20000 --clusters 200 --spread 1.25

Rows as `spillway-knn --clusters C --spread S` draws them (C random normal centres, each row a
random centre plus S times standard normal noise; --clusters 0: standard normal rows), here with
NumPy's generator (seed printed), so the same structure, not the same rows. Run on the host in
row blocks; a clustered set of ~100 rows a cluster (issue 34's 10^6 rows around 10,000 centres)
is what decides k': a row's top-32 are members of its own cluster, ranked among ~99 of them.
"""
import argparse
import time

import numpy as np


def rows_of(n, d, clusters, spread, rng):
    if clusters == 0:
        return rng.standard_normal((n, d), dtype=np.float32)
    centres = rng.standard_normal((clusters, d), dtype=np.float32)
    x = centres[rng.integers(0, clusters, n)]
    x += spread * rng.standard_normal((n, d), dtype=np.float32)
    return x


def smallest_keys(keys, m):
    """Per row, the columns of the m smallest int64 keys (a full sort of those m is not needed)."""
    part = np.argpartition(keys, m - 1, axis=1)[:, :m]
    return part


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=20000)
    ap.add_argument("--dim", type=int, default=768)
    ap.add_argument("--clusters", type=int, default=200, help="0: standard normal rows")
    ap.add_argument("--spread", type=float, default=1.25)
    ap.add_argument("--k", type=int, default=32)
    ap.add_argument("--oversample", default="32,48,64,96,128", help="the k' to try, comma separated")
    ap.add_argument("--block", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=20261130)
    a = ap.parse_args()
    kps = [int(v) for v in a.oversample.split(",")]
    if a.k < 1 or a.rows <= max(kps) or min(kps) < a.k:
        raise SystemExit(f"need 1 <= k <= every k' < rows; got k={a.k}, k'={kps}, rows={a.rows}")
    rng = np.random.default_rng(a.seed)
    t0 = time.perf_counter()
    x = rows_of(a.rows, a.dim, a.clusters, a.spread, rng)
    xn = (x / np.linalg.norm(x.astype(np.float64), axis=1, keepdims=True)).astype(np.float64)
    signs = (x > 0).astype(np.float32) * 2 - 1  # +-1: dot = d - 2 * Hamming
    n = a.rows
    hits = {kp: 0 for kp in kps}
    mean_cos = 0.0
    for r0 in range(0, n, a.block):
        r1 = min(n, r0 + a.block)
        s = xn[r0:r1] @ xn.T
        s[np.arange(r1 - r0), np.arange(r0, r1)] = -np.inf
        exact = np.argpartition(-s, a.k - 1, axis=1)[:, : a.k]
        mean_cos += float(np.take_along_axis(s, exact, 1).sum())
        ham = ((a.dim - signs[r0:r1] @ signs.T) / 2).astype(np.int64)  # exact in float32: |values| <= d
        ham[np.arange(r1 - r0), np.arange(r0, r1)] = 4 * a.dim  # never a candidate of itself
        key = ham * n + np.arange(n, dtype=np.int64)[None, :]  # ties by the smaller column
        for kp in kps:
            cand = smallest_keys(key, kp)
            sc = np.take_along_axis(s, cand, 1)
            best = np.take_along_axis(cand, np.argpartition(-sc, a.k - 1, axis=1)[:, : a.k], 1)
            hits[kp] += sum(len(np.intersect1d(best[i], exact[i], assume_unique=True)) for i in range(r1 - r0))
    what = f"{a.clusters} centres, spread {a.spread}" if a.clusters else "standard normal"
    print(f"{n} rows x {a.dim} ({what}), seed {a.seed}; mean cosine of the exact top-{a.k}: "
          f"{mean_cos / (n * a.k):.3f}; {time.perf_counter() - t0:.1f} s")
    for kp in kps:
        print(f"  sign bits, k' = {kp:4d}: recall@{a.k} = {hits[kp] / (n * a.k):.4f}")


if __name__ == "__main__":
    main()
