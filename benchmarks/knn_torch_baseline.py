"""The blocked baseline a PyTorch user writes for all-pairs top-k cosine similarity (issue 11's pinned
baseline), timed on the GPU, and the embeddings file that `spillway-knn` reads for the same job.

    python3 benchmarks/knn_torch_baseline.py --rows 1000000 --dim 768 --k 32 --out emb.npy
    build/bin/spillway-knn --input emb.npy --bf16 --k 32 --budget 8GiB --check 4

The baseline: rows normalised once (float32, stored bf16), then for each block of 16,384 rows
`torch.mm` of the bf16 block against the whole matrix (non-symmetric: every pair is computed twice)
with float32 scores, the diagonal masked, and `torch.topk` per block; the indices and scores stay on
the GPU. Timed with CUDA events from the bf16 rows on the GPU to the last block's top-k, after one
warm-up block; the file (random normal rows, bf16 bits as uint16, seed printed) is written first,
so both programs read the same rows.
"""
import argparse
import time

import numpy as np
import torch


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--dim", type=int, default=768)
    ap.add_argument("--k", type=int, default=32)
    ap.add_argument("--block", type=int, default=16384)
    ap.add_argument("--seed", type=int, default=20261123)
    ap.add_argument("--out", default="", help="write the rows as an .npy of bf16 bits (uint16) for spillway-knn")
    a = ap.parse_args()

    g = torch.Generator(device="cuda").manual_seed(a.seed)
    x = torch.randn(a.rows, a.dim, device="cuda", generator=g).to(torch.bfloat16)
    print(f"rows {a.rows} x {a.dim} bf16, seed {a.seed}, block {a.block}, k {a.k}")
    if a.out:
        t0 = time.perf_counter()
        np.save(a.out, x.view(torch.int16).cpu().numpy().view(np.uint16))
        print(f"wrote {a.out} in {time.perf_counter() - t0:.1f} s")

    def run(limit=None):
        xn = torch.nn.functional.normalize(x.float(), dim=1).to(torch.bfloat16)
        vals, idx = [], []
        last = a.rows if limit is None else min(a.rows, limit)
        for r0 in range(0, last, a.block):
            r1 = min(r0 + a.block, a.rows)
            try:
                s = torch.mm(xn[r0:r1], xn.t(), out_dtype=torch.float32)
            except (TypeError, RuntimeError):  # torch without out_dtype: bf16 product, then float32
                s = torch.mm(xn[r0:r1], xn.t()).float()
            ar = torch.arange(r0, r1, device="cuda")
            s[ar - r0, ar] = float("-inf")
            v, i = torch.topk(s, a.k, dim=1)
            vals.append(v)
            idx.append(i)
            del s
        return vals, idx

    run(limit=a.block)  # warm-up (cuBLAS handles, the caching allocator)
    torch.cuda.synchronize()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    vals, idx = run()
    stop.record()
    torch.cuda.synchronize()
    sec = start.elapsed_time(stop) / 1e3
    flops = 2.0 * a.rows * a.rows * a.dim
    print(f"torch blocked mm + topk: {sec:.3f} s ({flops / sec / 1e12:.1f} TFLOP/s of the full product), "
          f"row 0's nearest {int(idx[0][0, 0])} ({float(vals[0][0, 0]):.4f})")


if __name__ == "__main__":
    main()
