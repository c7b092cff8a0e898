"""Seed 002: the discount pricer whose Numba @guvectorize ran one thread per date.

cv[d] = multBy * discount[d] for every date d, core (m, o) = (4000, 5). numba's
guvectorize(target="cuda") gives each instance (date) ONE thread, so 1000 dates are 1000 threads
walking 20,000 products each. spillway.gufunc takes the same kind of body, the code for one date,
and in its cooperative form lets a team of threads share each date (here a 256-thread block per
date, as the C++ gufunc plans it). The C++ version is examples/seeds/gufunc_discount.cu; the API is
in docs/python-gufunc.md.

    python gufunc_discount.py [--dates D] [--m M] [--o O] [--budget SIZE] [--seed S]

On a GPU: host arrays in -> NumPy out (copied whole, or streamed through spillway.stream when large,
multBy resident on each GPU), then device arrays in -> device arrays out, timed with CUDA events
(spillway.time) in the cooperative form and in the seed's one-thread-per-date form. Every result
is checked against NumPy's multBy * discount bit for bit (exit status 1 on a mismatch).

With no GPU the same generated kernels run in Numba's CUDA simulator (NUMBA_ENABLE_CUDASIM=1, set
here before numba is imported) at a tiny size (default 3 dates of (40, 5)): the results are
checked, nothing is timed. Needs numba-cuda (pip install "numba-cuda[cu13]").
"""

import argparse
import importlib.util
import os
import sys
import time

import numpy as np

import spillway

GPU = spillway.gpu_available()
if not GPU:
    # Must precede numba's import (spillway imports numba on the first gufunc call).
    os.environ.setdefault("NUMBA_ENABLE_CUDASIM", "1")


# The body for ONE date, cooperative form: `size` threads share the date's m*o products, thread
# `rank` taking products rank, rank + size, ... in row-major order. The row and column are walked,
# not divided out of the flat index: a 64-bit division per product cost more than its three memory
# accesses (H200, (1000, 4000, 5): 0.116 ms walked against 0.134 ms with `i // cols, i % cols`).
@spillway.gufunc("(m,o),(m,o)->(m,o)", cooperative=True)
def pricer(rank, size, mult_by, discount, cv):
    rows, cols = mult_by.shape[0], mult_by.shape[1]
    if cols == 0:
        return
    r, c = rank // cols, rank % cols
    dr, dc = size // cols, size % cols
    while r < rows:
        cv[r, c] = mult_by[r, c] * discount[r, c]
        r += dr
        c += dc
        if c >= cols:
            c -= cols
            r += 1


# The seed's body as it was: one thread walks the whole date (what guvectorize(target="cuda") does).
@spillway.gufunc("(m,o),(m,o)->(m,o)")
def pricer_one_thread(mult_by, discount, cv):
    for i in range(mult_by.shape[0]):
        for j in range(mult_by.shape[1]):
            cv[i, j] = mult_by[i, j] * discount[i, j]


def check(name: str, got, want) -> bool:
    bad = int(np.count_nonzero(got != want)) if got.shape == want.shape else -1
    what = f"shape {got.shape}, NumPy {want.shape}" if bad < 0 else f"{bad} of {want.size} elements differ"
    print(f"numpy check: {name}: " + ("OK (bit for bit)" if bad == 0 else f"MISMATCH ({what})"))
    return bad == 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 epilog="e.g. python gufunc_discount.py --dates 1000 --budget 256MiB")
    ap.add_argument("--dates", type=int, default=None, help="instances (default 1000 on a GPU, 3 in the simulator)")
    ap.add_argument("--m", type=int, default=None, help="core rows (default 4000 on a GPU, 40 in the simulator)")
    ap.add_argument("--o", type=int, default=5, help="core columns (default 5)")
    ap.add_argument("--budget", default="256MiB", help="device memory per GPU for streamed host arrays")
    ap.add_argument("--repeats", type=int, default=20, help="timed repetitions on the GPU")
    ap.add_argument("--seed", type=int, default=None, help="random seed (default: a fresh one, printed)")
    args = ap.parse_args()
    seed = args.seed if args.seed is not None else int(np.random.SeedSequence().entropy % (1 << 31))
    print(f"seed: {seed} (rerun with --seed {seed})")
    if importlib.util.find_spec("numba") is None or importlib.util.find_spec("numba.cuda") is None:
        print("skipped: spillway.gufunc compiles the body with numba-cuda, which is not installed "
              "(pip install \"numba-cuda[cu13]\")")
        return 0
    dates = args.dates if args.dates is not None else (1000 if GPU else 3)
    m = args.m if args.m is not None else (4000 if GPU else 40)
    rng = np.random.default_rng(seed)
    mult_by = rng.uniform(0.5, 1.5, (m, args.o))
    discount = rng.uniform(0.5, 1.5, (dates, m, args.o))
    want = mult_by * discount                      # NumPy broadcasts multBy over the dates
    ok = True

    # Host arrays in, NumPy out (blocking: a host clock is right here).
    t0 = time.perf_counter()
    cv = pricer(mult_by, discount, budget=args.budget)
    dt = time.perf_counter() - t0
    print(f"host arrays, {dates} dates of ({m}, {args.o}) float64: {dt * 1e3:.1f} ms, path {pricer.last_path!r}")
    ok &= check("cooperative body, host arrays", cv, want)

    if not GPU:
        cv1 = pricer_one_thread(mult_by, discount)
        ok &= check("one-thread body, host arrays", cv1, want)
        print(f"GPU part skipped (device arrays, CUDA-event timing): no GPU here: {spillway.no_gpu_reason()}; "
              "the kernels ran in Numba's CUDA simulator")
        print("OK" if ok else "FAILED")
        return 0 if ok else 1

    # Device arrays in, device arrays out: each call only enqueues on stream s.
    from numba import cuda

    s = cuda.stream()
    d_m, d_d = cuda.to_device(mult_by, stream=s), cuda.to_device(discount, stream=s)
    moved = 2 * discount.nbytes + mult_by.nbytes   # discount read, cv written, multBy read
    times = {}
    for name, g in (("cooperative", pricer), ("one thread per date", pricer_one_thread)):
        d_cv = cuda.to_device(np.full_like(discount, np.nan), stream=s)   # poisoned: the check sees only its writes
        r = spillway.time(lambda: g(d_m, d_d, out=d_cv, stream=s), repeats=args.repeats, warmup=2, stream=s)
        times[name] = r.median
        print(f"device arrays, {name}: {r} -> {moved / (r.median / 1e3) / 1e9:.1f} GB/s")
        got = d_cv.copy_to_host(stream=s)
        s.synchronize()                                # the host reads only after the stream is done
        ok &= check(f"{name} body, device arrays", got, want)
    print(f"the cooperative form is {times['one thread per date'] / times['cooperative']:.1f}x the seed's one thread "
          "per date")
    print("OK" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
