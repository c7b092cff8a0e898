#!/usr/bin/env python3
"""Prints a short table of Google Benchmark JSON results: the median of each benchmark's
repetitions, its time and its rate counters. GEMM rows (gemm_bench: gemm/<type>/<route>/<m>x<n>x<k>)
get a table of their own: per shape and type, each route's median time, TFLOP/s, the ratio to the
cuBLAS(Lt) baseline of the same type and shape from the same run, and the acceptance target of
issue 10 where one applies."""
import json
import re
import sys

GEMM_NAME = re.compile(r"^gemm/(?P<type>[^/]+)/(?P<route>[^/]+)/(?P<shape>\d+x\d+x\d+)")


def gemm_target(dtype, route, shape):
    """Issue 10's acceptance ratio to cuBLAS for this row, or None."""
    if not route.startswith("spillway_"):
        return None
    path = route[len("spillway_"):]
    if dtype == "f32" and path in ("auto", "simt"):
        return {"8192x8192x8192": 0.90, "4096x4096x4096": 0.85, "8192x8192x256": 0.90,
                "64x8192x8192": 0.90}.get(shape)
    if shape != "8192x8192x8192":
        return None
    if dtype == "c32" and path in ("auto", "simt"):
        return 0.85
    if dtype == "f64" and path in ("auto", "mma_sync"):
        return 0.85
    if dtype in ("tf32", "bf16", "f16", "s8"):
        return {"auto": 0.80, "wgmma": 0.80, "mma_sync": 0.55}.get(path)
    return None


def shape_key(shape):
    m, n, k = (int(x) for x in shape.split("x"))
    return (0 if m == n == k else 1, m * n * k, shape)


TYPE_ORDER = ["f32", "tf32", "bf16", "f16", "s8", "f64", "c32"]


def print_gemm(rows):
    print()
    print("GEMM (median of repetitions; TFLOP/s counts 2mnk, 8mnk for complex, int8 in TOP/s;")
    print("      vs_cublas = cuBLAS(Lt) time of the same type and shape in the same run / this time)")
    header = f"{'shape':<16} {'type':<5} {'route':<18} {'ms':>9} {'TFLOP/s':>8} {'vs_cublas':>9}  target"
    print(header)
    print("-" * len(header))
    seen = set()
    ordered = sorted(rows, key=lambda r: (shape_key(r["shape"]),
                                          TYPE_ORDER.index(r["type"]) if r["type"] in TYPE_ORDER else 99,
                                          0 if r["route"].startswith("cublas") else 1))
    last = None
    for r in ordered:
        key = (r["shape"], r["type"], r["route"])
        if key in seen:
            continue
        seen.add(key)
        group = (r["shape"], r["type"])
        shape = r["shape"] if last is None or last[0] != r["shape"] else ""
        dtype = r["type"] if group != last else ""
        last = group
        if r["error"] is not None:
            print(f"{shape:<16} {dtype:<5} {r['route']:<18} ERROR: {r['error']}")
            continue
        ratio = r.get("vs_cublas")
        ratio_s = f"{ratio:9.3f}" if ratio is not None else f"{'-':>9}"
        target = gemm_target(r["type"], r["route"], r["shape"])
        verdict = ""
        if target is not None and ratio is not None:
            verdict = f">= {target:.2f} {'met' if ratio >= target else 'MISSED'}"
        print(f"{shape:<16} {dtype:<5} {r['route']:<18} {r['ms']:9.3f} {r['tflops']:8.2f} {ratio_s}  {verdict}".rstrip())


def main(paths):
    rows = []
    gemm_rows = []
    for path in paths:
        try:
            with open(path) as f:
                data = json.load(f)
        except (OSError, ValueError):
            continue
        for b in data.get("benchmarks", []):
            if b.get("run_type") == "aggregate" and b.get("aggregate_name") != "median":
                continue
            g = GEMM_NAME.match(b["name"])
            if g:
                gemm_rows.append({**g.groupdict(),
                                  "error": b.get("error_message", "") if b.get("error_occurred") else None,
                                  "ms": b.get("median_ms", 0.0), "tflops": b.get("TFLOP/s", 0.0),
                                  "vs_cublas": b.get("vs_cublas")})
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
    if rows:
        width = max(len(r[0]) for r in rows)
        print(f"{'benchmark (median)':<{width}}  {'time':>12}  counters")
        for name, t, c in rows:
            print(f"{name:<{width}}  {t:>12}  {c}")
    if gemm_rows:
        print_gemm(gemm_rows)


if __name__ == "__main__":
    main(sys.argv[1:])
