"""spillway.similarity top-32 cosine of 10⁶ x 768 bf16 rows from Python, against the same job called
from C++ and against the route a PyTorch user takes today, in one process on the same rows.

Rows (wall clock around each synchronous call, median of --reps after one warm-up):
1. C++: spillway::similarity::similarity_topk on the page-locked rows, called straight from C++ (the
   binding-overhead reference, as `spillway-knn` runs it);
2. spillway.similarity(rows, sink="topk", k=32, budget="8GiB") on the same page-locked rows
   (spillway.pinned_empty);
3. the same on the rows in NumPy's own (pageable) memory, page-locked for each call
   (cudaHostRegister, the default), and copied from pageable memory (_register=False);
4. PyTorch (--torch): torch.from_numpy(rows).cuda(), rows normalised, torch.mm of bf16 blocks of
   16,384 rows against all rows (fp32 scores), diagonal masked, torch.topk per block, lists
   .cpu() — one timed run after a warm-up block (benchmarks/knn_torch_baseline.py's route).

Every result is checked on --check sampled rows against float64 NumPy: each listed index's exact
score within 2e of the exact 32nd score (e = 4(d + 8)·2^-24, the C++ suite's bound; PyTorch's route,
which rounds its normalised rows to bf16, e + 2^-8). Prints a
table; --json PATH writes the figures. On the GPU machine:
PY_BENCH=similarity_bench.py scripts/gpu-check.sh python-bench.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import ml_dtypes
import numpy as np

import spillway
from _timing import timed
from spillway import _core


def exact_scores(a, sample):
    """Float64 cosine of each sampled row against every row (one pass over the rows), self -inf."""
    q = np.asarray(a[sample]).astype(np.float64)
    q /= np.sqrt((q * q).sum(1))[:, None]
    out = np.empty((len(sample), a.shape[0]))
    for c0 in range(0, a.shape[0], 65536):
        blk = np.asarray(a[c0:c0 + 65536]).astype(np.float64)
        out[:, c0:c0 + len(blk)] = (q @ blk.T) / np.sqrt((blk * blk).sum(1))[None, :]
    out[np.arange(len(sample)), sample] = -np.inf
    return out


def check(values, indices, exact, sample, k, dim, what, extra=0.0):
    e = 4.0 * (dim + 8) * 2.0**-24 + extra
    for row, full in zip(sample, exact):
        kth = np.sort(full)[::-1][k - 1]
        for t in range(k):
            j = int(indices[row, t])
            if j < 0 or j == row or full[j] < kth - 2 * e or abs(float(values[row, t]) - full[j]) > e:
                raise SystemExit(f"{what}: row {row} place {t} lists {j} ({values[row, t]}), exact {full[j]}, "
                                 f"k-th {kth}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--dim", type=int, default=768)
    ap.add_argument("--k", type=int, default=32)
    ap.add_argument("--budget", default="8GiB")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--check", type=int, default=3)
    ap.add_argument("--seed", type=int, default=20261124)
    ap.add_argument("--torch", action="store_true")
    ap.add_argument("--json", default="")
    args = ap.parse_args()

    rng = np.random.default_rng(args.seed)
    t0 = time.perf_counter()
    rows = rng.standard_normal((args.rows, args.dim), dtype=np.float32).astype(ml_dtypes.bfloat16)
    pinned = spillway.pinned_empty(rows.shape, rows.dtype)
    pinned[...] = rows
    print(f"{args.rows} x {args.dim} bf16 rows, seed {args.seed}, made in {time.perf_counter() - t0:.1f} s")
    sample = sorted(int(r) for r in rng.choice(args.rows, args.check, replace=False))
    exact = exact_scores(rows, sample)
    budget = int(_core._parse_byte_size(args.budget))
    k = args.k
    out = {"rows": args.rows, "dim": args.dim, "k": k, "budget": args.budget}
    table = []

    cpp_secs = _core._bench_cpp_similarity_topk(int(pinned.ctypes.data), args.rows, args.dim, args.dim, "b", k,
                                                budget, 0, args.reps)
    cpp = statistics.median(cpp_secs)
    table.append(("C++ similarity_topk, page-locked rows", cpp, cpp_secs))

    def job(x, **kw):
        return spillway.similarity(x, sink="topk", k=k, budget=args.budget, progress=False, **kw)

    for name, x, kw in (("spillway.similarity, page-locked rows", pinned, {}),
                        ("spillway.similarity, NumPy rows (page-locked per call)", rows, {}),
                        ("spillway.similarity, NumPy rows (pageable copies)", rows, {"_register": False})):
        med, secs = timed(lambda: job(x, **kw), args.reps)
        v, i = job(x, **kw)
        check(v, i, exact, sample, k, args.dim, name)
        table.append((name, med, secs))

    if args.torch:
        import torch

        def torch_route():
            x = torch.from_numpy(rows.view(np.int16)).view(torch.bfloat16).cuda()
            xn = torch.nn.functional.normalize(x.float(), dim=1).to(torch.bfloat16)
            del x
            vals, idx = [], []
            for r0 in range(0, args.rows, 16384):
                r1 = min(r0 + 16384, args.rows)
                s = torch.mm(xn[r0:r1], xn.t(), out_dtype=torch.float32)
                ar = torch.arange(r0, r1, device="cuda")
                s[ar - r0, ar] = float("-inf")
                v, i = torch.topk(s, k, dim=1)
                vals.append(v)
                idx.append(i)
                del s
            return torch.cat(vals).cpu().numpy(), torch.cat(idx).cpu().numpy()

        small = torch.from_numpy(rows[:16384].view(np.int16)).view(torch.bfloat16).cuda()
        torch.mm(small, small.t(), out_dtype=torch.float32)  # warm-up: cuBLAS handles, the allocator
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        v, i = torch_route()
        sec = time.perf_counter() - t0
        # The route rounds the normalised rows to bf16 before its product: each score is off by up to
        # ~2·2^-9 more (two unit vectors' roundings), so its check allows that.
        check(v, i, exact, sample, k, args.dim, "torch", extra=2.0**-8)
        table.append(("PyTorch: .cuda(), blocked torch.mm + torch.topk, .cpu()", sec, [sec]))

    print(f"\n| row | median s | runs | vs C++ |")
    print("| --- | --- | --- | --- |")
    for name, med, secs in table:
        print(f"| {name} | {med:.3f} | {', '.join(f'{s:.3f}' for s in secs)} | {med / cpp:.3f}x |")
        out[name] = {"median_s": med, "runs": secs}
    print(f"\n{args.check} sampled rows of every result checked against float64 NumPy")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
