"""Wall-clock timing shared by the Python benchmarks (run as scripts: this folder is on sys.path)."""

from __future__ import annotations

import statistics
import time


def timed(fn, reps):
    """Runs fn once as a warm-up, then reps times; returns (median seconds, every run's seconds).
    fn must return only when its work is done (spillway's calls are synchronous)."""
    fn()
    secs = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        secs.append(time.perf_counter() - t0)
    return statistics.median(secs), secs
