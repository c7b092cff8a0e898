"""Seed 004: timing asynchronous launches.

The seed program timed a loop of Numba kernel launches with a host clock and got a few
milliseconds; the copy that followed then "took" as long as all the kernels. A launch returns once
the GPU has queued it, so a host clock around launches measures the launch queue. spillway.timer
and spillway.time read CUDA events that the GPU stamps as it reaches them. The C++ version is
examples/seeds/timing_async.cu; the API is in docs/python.md ("Timing GPU work").

    python timing_async.py [--iterations N] [--work REPS] [--n N]

Times one launch with spillway.time (warm-up, then the median of 21 event pairs) and a loop of
launches with one spillway.timer, next to the host clock's readings. Checked: y (the recurrence
y <- y/2 + x, x = 1) equals NumPy's float32 run of the same recurrence at every element, and the
loop's event time is 0.5x to 1.5x `iterations` x one launch (exit status 1 otherwise).

Needs a GPU (the events are stamped by the GPU) and numba-cuda for the kernel: with no GPU the
program says so and exits 0 without timing anything.
"""

import argparse
import importlib.util
import sys
import time

import numpy as np

import spillway

HALF = np.float32(0.5)   # a float32 constant: 0.5 alone would make the recurrence float64 in Numba


def numpy_recurrence(x: np.float32, sweeps: int) -> np.float32:
    """y after `sweeps` steps of y <- y/2 + x from 0, in float32 (it stops changing after ~25)."""
    y = np.float32(0)
    for _ in range(sweeps):
        nxt = np.float32(HALF * y + x)
        if nxt == y:
            break
        y = nxt
    return y


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 epilog="e.g. python timing_async.py --iterations 1000")
    ap.add_argument("--iterations", type=int, default=200, help="launches in the timed loop (default 200)")
    ap.add_argument("--work", type=int, default=2048,
                    help="recurrence steps per element per launch (default 2048: ~0.3 ms a launch on an H200, "
                         "longer than a Numba launch's host cost)")
    ap.add_argument("--n", type=int, default=1 << 22, help="elements (default 2^22)")
    args = ap.parse_args()
    if args.iterations < 1 or args.work < 1 or args.n < 1:
        ap.error("--iterations, --work and --n must be positive")
    print("data: x = 1, y = 0 (no random input, so no seed)")
    if not spillway.gpu_available():
        print(f"GPU part skipped: timing needs a GPU (CUDA events are stamped by the GPU); no GPU here: "
              f"{spillway.no_gpu_reason()}")
        return 0
    if importlib.util.find_spec("numba") is None or importlib.util.find_spec("numba.cuda") is None:
        print("GPU part skipped: the kernel is a Numba kernel and numba-cuda is not installed "
              "(pip install \"numba-cuda[cu13]\")")
        return 0
    if not hasattr(np, "row_stack"):   # numba-cuda's JIT registers np.row_stack, which newer NumPy dropped
        np.row_stack = np.vstack        # (docs/python-gufunc.md: "numba-cuda and NumPy's row_stack")
    from numba import cuda

    @cuda.jit
    def saxpy_repeat(y, x, reps):
        i = cuda.grid(1)
        if i < y.size:
            v = y[i]
            for _ in range(reps):
                v = HALF * v + x[i]
            y[i] = v

    n, reps = args.n, args.work
    x = cuda.to_device(np.ones(n, np.float32))
    y = cuda.to_device(np.zeros(n, np.float32))
    grid = (n + 255) // 256

    def launch():
        saxpy_repeat[grid, 256](y, x, reps)   # the legacy default stream: spillway.timer's default too

    # One launch: 3 warm-ups (the first compiles), then 21 launches each between two events.
    one = spillway.time(launch, repeats=21, warmup=3)
    print(f"one launch: {one}")

    # The loop, the seed's way (host clock, no wait) and with one pair of events around it.
    t0 = time.perf_counter()
    with spillway.timer() as t:
        for _ in range(args.iterations):
            launch()
        host_loop = (time.perf_counter() - t0) * 1e3
    t1 = time.perf_counter()
    out = y.copy_to_host()                    # waits for every queued kernel, then copies
    host_copy = (time.perf_counter() - t1) * 1e3
    loop = t.ms
    print(f"{args.iterations} launches: host clock {host_loop:.3f} ms (the launch queue), then the 16 MiB copy "
          f"'took' {host_copy:.3f} ms on the host clock; CUDA events: {loop:.3f} ms = {loop / args.iterations:.4f} ms "
          "per launch")

    ok = True
    sweeps = (3 + 21 + args.iterations) * reps
    want = numpy_recurrence(np.float32(1), sweeps)
    bad = int(np.count_nonzero(out != want))
    print(f"numpy check: y at all {n} elements against NumPy's float32 recurrence ({want}): "
          + ("OK" if bad == 0 else f"MISMATCH ({bad} differ)"))
    ok &= bad == 0
    ratio = loop / (args.iterations * one.median)
    in_range = 0.5 < ratio < 1.5
    print(f"timing check: loop / (iterations x one launch) = {ratio:.2f} (0.5..1.5): {'OK' if in_range else 'OFF'}")
    ok &= in_range
    print("OK" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
