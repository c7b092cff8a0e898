"""Seed 000: A·Aᵀ of a 0/1 matrix whose product does not fit in device memory.

The seed program (Numba) built the whole rows x rows Jaccard matrix on the GPU and died with
CUDA_ERROR_OUT_OF_MEMORY. Here spillway.gram streams row strips through a device-memory budget and
keeps only each row's best partner (sink="topk", k=1): the rows x rows matrix never exists, on the
device or on the host. The C++ version is examples/seeds/gram_beyond_memory.cu.

    python gram_beyond_memory.py [--rows R] [--cols C] [--budget SIZE] [--seed S]
    python gram_beyond_memory.py --rows 100000 --cols 20000 --budget 4GiB

Checked against NumPy: the best partner (and its Jaccard) of 40 sampled rows, counted directly with
integer matrix products; exit status 1 on a mismatch. With no GPU spillway runs its host
implementation (and says so); the check is the same.
"""

import argparse
import sys
import time
import warnings

import numpy as np

import spillway


def numpy_best_partner(a: np.ndarray, i: int):
    """Row i's most Jaccard-similar other row, counted in NumPy: (value as float32, index); ties go
    to the smaller index, as spillway's top-k orders them."""
    a64 = a.astype(np.int64)
    both = a64 @ a64[i]                        # |a_i ∧ a_j| for every j
    ones = a64.sum(axis=1)
    either = ones + ones[i] - both             # |a_i ∨ a_j|
    with np.errstate(divide="ignore", invalid="ignore"):
        jac = np.where(either == 0, 1.0, both / np.where(either == 0, 1, either)).astype(np.float32)
    jac[i] = -np.inf                           # a row is not its own partner
    j = int(np.argmax(jac))                    # argmax returns the first (smallest) index of ties
    return jac[j], j


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 epilog="e.g. python gram_beyond_memory.py --rows 100000 --cols 20000 --budget 4GiB")
    ap.add_argument("--rows", type=int, default=None, help="rows (default 6000 on a GPU, 2000 without)")
    ap.add_argument("--cols", type=int, default=3000)
    ap.add_argument("--density", type=float, default=0.3)
    ap.add_argument("--budget", default="64MiB", help="device memory per GPU (default 64MiB)")
    ap.add_argument("--samples", type=int, default=40, help="rows checked against NumPy")
    ap.add_argument("--seed", type=int, default=None, help="random seed (default: a fresh one, printed)")
    args = ap.parse_args()
    seed = args.seed if args.seed is not None else int(np.random.SeedSequence().entropy % (1 << 31))
    print(f"seed: {seed} (rerun with --seed {seed})")
    rng = np.random.default_rng(seed)
    if args.rows is None:
        args.rows = 6000 if spillway.gpu_available() else 2000

    # The user's data: one byte per entry, 0 or 1.
    a = (rng.random((args.rows, args.cols)) < args.density).astype(np.uint8)
    where = f"{spillway.device_count()} GPU(s)" if spillway.gpu_available() else \
        f"the host implementation (no GPU: {spillway.no_gpu_reason()})"
    full_bytes = 4 * args.rows * args.rows
    print(f"{args.rows} x {args.cols} 0/1 matrix; the full Jaccard matrix would be {full_bytes / 2**20:.1f} MiB, "
          f"budget {args.budget}; running on {where}")

    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", spillway.HostFallbackWarning)   # said above already
        (best, partner), rep = spillway.gram(a, metric="jaccard", sink="topk", k=1, budget=args.budget,
                                             progress=False, return_report=True)
    dt = time.perf_counter() - t0
    pairs = args.rows * (args.rows - 1) / 2
    print(f"best partner of every row: {rep.tasks_total} strips on {'the host' if rep.on_host else rep.devices}, "
          f"{dt:.3f} s ({pairs / dt / 1e6:.1f} M pairs/s, {rep.bytes_moved / 2**20:.1f} MiB copied)")

    # The NumPy check: sampled rows' best partners, counted directly.
    bad = 0
    rows = rng.choice(args.rows, size=min(args.samples, args.rows), replace=False) if args.rows > 1 else []
    for i in rows:
        want, want_j = numpy_best_partner(a, int(i))
        got, got_j = best[i, 0], int(partner[i, 0])
        if got != want or got_j != want_j:
            bad += 1
            if bad <= 5:
                print(f"  row {i}: spillway {got} (row {got_j}), NumPy {want} (row {want_j})")
    print(f"numpy check: best partners of {len(rows)} sampled rows: {'MISMATCH' if bad else 'OK'}"
          + (f" ({bad} differ)" if bad else ""))
    print("FAILED" if bad else "OK")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
