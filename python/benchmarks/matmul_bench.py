"""spillway.matmul of NumPy arrays (32768² by default) against the route a Python user takes today.

Rows, in one process on the same arrays (pageable NumPy memory, as a user has it; then the same in
page-locked arrays from spillway.pinned_empty, for both):
1. spillway.matmul(a, b, tf32=True, budget="8GiB") (float32 in and out, TF32 tensor cores), and
   float16 in, float32 out; NumPy arrays page-locked for the call (the default), and with
   some or none of them page-locked (the others staged through pinned buffers by host threads);
2. PyTorch: torch.from_numpy(x).cuda() for A and B, torch.mm on the GPU (TF32 allowed; float16 in,
   float16 out), .cpu() of C — the whole route timed, and its torch.mm alone (CUDA events);
3. spillway.matmul told nothing but the budget runs the plan it estimates for the device (see
   docs/gemm.md); its report's bytes moved is printed.

Wall clock around each synchronous call, median of --reps after one warm-up; 64 sampled entries of
every result checked against float64 sums (bound as in docs/gemm.md). Prints a table; --json PATH
writes the figures. On the GPU machine: PY_BENCH=matmul_bench.py scripts/gpu-check.sh python-bench.
"""

from __future__ import annotations

import argparse
import json
import statistics

import numpy as np

import spillway
from _timing import timed


# The other ways for NumPy memory (the default: B page-locked for float32, all three for float16;
# the rest staged through pinned buffers by host threads).
MASKS = {
    np.float32: ((0, "staged"), (3, "A, B page-locked"), (7, "A, B, C page-locked")),
    np.float16: ((0, "staged"), (3, "A, B page-locked"), (2, "B page-locked")),
}


def check(c, a, b, tf32, rng, what):
    k = a.shape[1]
    rows = rng.integers(0, a.shape[0], 64)
    cols = rng.integers(0, b.shape[1], 64)
    a64 = a[rows].astype(np.float64)
    b64 = b[:, cols].astype(np.float64)
    want = np.einsum("ik,ki->i", a64, b64)
    s = np.einsum("ik,ki->i", np.abs(a64), np.abs(b64))
    eps = 2.0**-23
    u = 2.0**-10 if tf32 else 0.0
    bound = 1.25 * ((k + 2) * eps + 2 * u) * s + 16 * eps * s
    err = np.abs(c[rows, cols].astype(np.float64) - want)
    worst = float(np.max(err / bound))
    if worst > 1.0:
        raise SystemExit(f"{what}: sampled entry off by {worst:.3g} of its bound")
    return worst


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=32768)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--budget", default="8GiB")
    ap.add_argument("--json")
    args = ap.parse_args()
    n = args.n
    rng = np.random.default_rng(20261124)
    print(f"spillway {spillway.__version__}, n = {n}, budget {args.budget}, reps {args.reps}", flush=True)
    a = rng.uniform(-1, 1, size=(n, n)).astype(np.float32)
    b = rng.uniform(-1, 1, size=(n, n)).astype(np.float32)
    c = np.empty((n, n), np.float32)
    flops = 2.0 * n * n * n
    res = {}

    def row(name, sec, extra=""):
        res[name] = sec
        print(f"{name:44s} {sec * 1e3:10.1f} ms {flops / sec / 1e12:8.1f} TFLOP/s {extra}", flush=True)

    rep = {}
    med, _ = timed(lambda: spillway.matmul(a, b, out=c, tf32=True, budget=args.budget, progress=False, report=rep),
                   args.reps)
    w = check(c, a, b, True, rng, "spillway tf32")
    row("spillway.matmul float32 (tf32=True)", med, f"moved {rep['bytes_moved'] / 1e9:.2f} GB, check {w:.3f}")
    for mask, what in MASKS[np.float32]:
        med, _ = timed(lambda: spillway.matmul(a, b, out=c, tf32=True, budget=args.budget, progress=False,
                                               _register=mask), args.reps)
        w = check(c, a, b, True, rng, "spillway tf32 " + what)
        row(f"spillway.matmul float32 (tf32), NumPy {what}", med, f"check {w:.3f}")

    import torch

    torch.backends.cuda.matmul.allow_tf32 = True

    def torch_route(x, y, dtype):
        gx = torch.from_numpy(x).cuda()
        gy = torch.from_numpy(y).cuda()
        gz = gx @ gy
        out = gz.cpu()
        torch.cuda.synchronize()
        return out

    med, _ = timed(lambda: torch_route(a, b, torch.float32), args.reps)
    ct = torch_route(a, b, torch.float32).numpy()
    w = check(ct, a, b, True, rng, "torch tf32")
    row("torch: .cuda(), mm (tf32), .cpu()", med, f"check {w:.3f}")
    ga, gb = torch.from_numpy(a).cuda(), torch.from_numpy(b).cuda()
    ev0, ev1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    mm = []
    for _ in range(args.reps + 1):
        ev0.record()
        gz = ga @ gb
        ev1.record()
        torch.cuda.synchronize()
        mm.append(ev0.elapsed_time(ev1) / 1e3)
    row("torch.mm alone (tf32, operands on the GPU)", statistics.median(mm[1:]))
    del ga, gb, gz, ct
    torch.cuda.empty_cache()

    a16, b16 = a.astype(np.float16), b.astype(np.float16)
    med, _ = timed(lambda: spillway.matmul(a16, b16, out=c, budget=args.budget, progress=False, report=rep), args.reps)
    w = check(c, a16, b16, False, rng, "spillway float16")
    row("spillway.matmul float16 -> float32", med, f"moved {rep['bytes_moved'] / 1e9:.2f} GB, check {w:.3f}")
    for mask, what in MASKS[np.float16]:
        med, _ = timed(lambda: spillway.matmul(a16, b16, out=c, budget=args.budget, progress=False, _register=mask),
                       args.reps)
        w = check(c, a16, b16, False, rng, "spillway float16 " + what)
        row(f"spillway.matmul float16 -> float32, NumPy {what}", med, f"check {w:.3f}")
    med, _ = timed(lambda: torch_route(a16, b16, torch.float16), args.reps)
    row("torch: .cuda(), mm (float16 out), .cpu()", med)
    # Page-locked arrays (spillway.pinned_empty): spillway's copies by DMA, torch's .cuda() too.
    ap, bp, cp = (spillway.pinned_empty((n, n), np.float32) for _ in range(3))
    ap[...] = a
    bp[...] = b
    med, _ = timed(lambda: spillway.matmul(ap, bp, out=cp, tf32=True, budget=args.budget, progress=False, report=rep),
                   args.reps)
    w = check(cp, a, b, True, rng, "spillway tf32 pinned")
    row("spillway.matmul float32 (tf32), pinned arrays", med, f"moved {rep['bytes_moved'] / 1e9:.2f} GB, check {w:.3f}")
    med, _ = timed(lambda: torch_route(ap, bp, torch.float32), args.reps)
    row("torch route (tf32), pinned arrays", med)
    del ap, bp
    a16p, b16p = spillway.pinned_empty((n, n), np.float16), spillway.pinned_empty((n, n), np.float16)
    a16p[...] = a16
    b16p[...] = b16
    med, _ = timed(lambda: spillway.matmul(a16p, b16p, out=cp, budget=args.budget, progress=False, report=rep),
                   args.reps)
    w = check(cp, a16, b16, False, rng, "spillway float16 pinned")
    row("spillway.matmul float16 -> float32, pinned", med, f"moved {rep['bytes_moved'] / 1e9:.2f} GB, check {w:.3f}")
    med, _ = timed(lambda: torch_route(a16p, b16p, torch.float16), args.reps)
    row("torch route (float16 out), pinned arrays", med)
    res["spillway_vs_torch_route_tf32"] = res["torch: .cuda(), mm (tf32), .cpu()"] / res["spillway.matmul float32 (tf32=True)"]
    res["spillway_vs_torch_route_f16"] = res["torch: .cuda(), mm (float16 out), .cpu()"] / res["spillway.matmul float16 -> float32"]
    res["spillway_vs_torch_route_tf32_pinned"] = (res["torch route (tf32), pinned arrays"] /
                                                  res["spillway.matmul float32 (tf32), pinned arrays"])
    res["spillway_vs_torch_route_f16_pinned"] = (res["torch route (float16 out), pinned arrays"] /
                                                 res["spillway.matmul float16 -> float32, pinned"])
    print(f"torch route / spillway: tf32 {res['spillway_vs_torch_route_tf32']:.2f}x, "
          f"float16 {res['spillway_vs_torch_route_f16']:.2f}x; pinned arrays: tf32 "
          f"{res['spillway_vs_torch_route_tf32_pinned']:.2f}x, float16 {res['spillway_vs_torch_route_f16_pinned']:.2f}x",
          flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
