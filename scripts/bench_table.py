#!/usr/bin/env python3
"""Prints a short table of Google Benchmark JSON results: the median of each benchmark's
repetitions, its time and its rate counters."""
import json
import sys


def main(paths):
    rows = []
    for path in paths:
        try:
            with open(path) as f:
                data = json.load(f)
        except (OSError, ValueError):
            continue
        for b in data.get("benchmarks", []):
            if b.get("run_type") == "aggregate" and b.get("aggregate_name") != "median":
                continue
            if b.get("error_occurred"):
                rows.append((b["name"], "ERROR", b.get("error_message", "")))
                continue
            t = b.get("real_time", 0.0)
            unit = b.get("time_unit", "ns")
            skip = {"name", "run_name", "run_type", "repetitions", "repetition_index", "threads", "iterations",
                    "real_time", "cpu_time", "time_unit", "aggregate_name", "aggregate_unit", "family_index",
                    "per_family_instance_index", "bytes_per_second"}
            counters = [f"{k}={v:.4g}" for k, v in b.items() if k not in skip and isinstance(v, (int, float))]
            if "bytes_per_second" in b and not any(c.startswith("GB/s=") for c in counters):
                counters.insert(0, f"GB/s={b['bytes_per_second'] / 1e9:.4g}")
            rows.append((b["name"].replace("_median", ""), f"{t:.4g} {unit}", " ".join(counters)))
    width = max((len(r[0]) for r in rows), default=10)
    print(f"{'benchmark (median)':<{width}}  {'time':>12}  counters")
    for name, t, c in rows:
        print(f"{name:<{width}}  {t:>12}  {c}")


if __name__ == "__main__":
    main(sys.argv[1:])
