"""spillway.gufunc on seed 002's shapes, against the ceilings and the baselines measured in the
same run. Needs a GPU and numba-cuda (CuPy not needed).

    python benchmarks/gufunc_bench.py [--reps 20] [--json out.json] [--cxx-map-bench PATH] [--cxx-seed PATH]

Rows (each result is checked against NumPy; the script exits 1 on a mismatch):

- ``pricer``: ``cv = multBy * discount`` as ``"(m,o),(m,o)->(m,o)"``, multBy (4000,5), discount
  (1000,4000,5) float64, the cooperative body of seed 002 (a 256-thread block per date); and the
  same at (100,4000,5), the C++ seed program's shape.
- ``dot``: ``"(n),(n)->()"`` over (1e6, 64) float32, the cooperative body with team_sum (8 lanes a
  row), the shape of the C++ ``BM_gufunc_dot``.

For device arrays: GPU time per call from CUDA events recorded around the call while a hold kernel
keeps the stream busy (so the host's enqueue time is not in the sample; the C++ benchmarks sample
the same way), after a warm-up, median of ``--reps``; GB/s = bytes read + written / time, against a
device-to-device copy of the same bytes (read + write) timed the same way in this run (target >=
0.8x). Beside it: ``numba.cuda``'s own ``guvectorize(target="cuda")`` of the same body in its plain
form (one thread per instance, what the seed's author had), the per-call wall-clock overhead
(the host time of one asynchronous call, and call + synchronize), and the C++ gufunc where its
binaries are found (target: Python <= 1.1x the C++ time). For host arrays (streamed through
spillway.stream): wall-clock time per call against the pageable copy floor measured in this run
(host->device of the inputs + device->host of the outputs from/to the same pageable NumPy
arrays: target <= 1.2x).
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import statistics
import subprocess
import sys

import numpy as np
from _timing import timed

import spillway
from spillway import _gufunc

_gufunc._numba()  # numba imported through spillway: the np.row_stack shim, where needed, comes first
from numba import cuda, guvectorize  # noqa: E402


# ---- the bodies ---------------------------------------------------------------------------------------

def pricer(rank, size, mult_by, discount, cv):  # seed 002's body (examples/seeds/gufunc_discount.cu)
    cols = mult_by.shape[1]
    n = mult_by.shape[0] * cols
    for i in range(rank, n, size):
        cv[i // cols, i % cols] = mult_by[i // cols, i % cols] * discount[i // cols, i % cols]


def seed_pricer():
    """Seed 002's Python program's body (python/examples/seeds/gufunc_discount.py: the row and
    column walked, no division per element), a cooperative spillway.gufunc loaded from the program
    itself, so that the bench times the very body the program ships."""
    import importlib.util

    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples", "seeds", "gufunc_discount.py")
    spec = importlib.util.spec_from_file_location("spillway_seed_gufunc_discount", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.pricer


def numba_cuda_gufunc(sigs, layout, fn):
    """numba's own CUDA gufunc of fn: numba-cuda's cuda.guvectorize where it has one, else
    numba.guvectorize(target="cuda") (older split). Returns (gufunc, which)."""
    errs = []
    for name, make in (("numba.cuda.guvectorize", lambda: cuda.guvectorize(sigs, layout)(fn)),
                       ("numba.guvectorize(target='cuda')", lambda: guvectorize(sigs, layout, target="cuda")(fn))):
        if name.startswith("numba.cuda") and not hasattr(cuda, "guvectorize"):
            continue
        try:
            return make(), name
        except Exception as e:  # noqa: BLE001 - try the other form, report both
            errs.append(f"{name}: {type(e).__name__}: {e}")
    raise RuntimeError("; ".join(errs))


def call_numba_gufunc(g, ins, out, stream):
    """Calls a numba CUDA gufunc with the output given (positionally, as numba-cuda documents;
    else out=)."""
    try:
        return g(*ins, out, stream=stream)
    except TypeError:
        return g(*ins, out=out, stream=stream)


def pricer_plain(mult_by, discount, cv):  # the same for one thread per instance (numba's guvectorize)
    for j in range(mult_by.shape[0]):
        for k in range(mult_by.shape[1]):
            cv[j, k] = mult_by[j, k] * discount[j, k]


def dot(rank, size, a, b, out):
    s = a.dtype.type(0)  # accumulate in the rows' type, as the C++ BM_gufunc_dot (a[0] * 0 is float64)
    for i in range(rank, a.shape[0], size):
        s += a[i] * b[i]
    s = spillway.team_sum(s, rank, size)
    if rank == 0:
        out[0] = s


def dot_plain(a, b, out):
    s = a.dtype.type(0)  # accumulate in the rows' type, as the C++ BM_gufunc_dot (a[0] * 0 is float64)
    for i in range(a.shape[0]):
        s += a[i] * b[i]
    out[0] = s


# ---- timing -------------------------------------------------------------------------------------------------

@cuda.jit
def _hold(us):
    """Keeps the stream busy for about ``us`` microseconds (one thread sleeping in 1 us steps)."""
    if cuda.grid(1) == 0:
        for _ in range(us):
            cuda.nanosleep(1000)


def gpu_samples(fn, stream, reps, warmup=3, hold_us=3000):
    """GPU seconds of ``fn()`` (which enqueues on ``stream``), each sample behind a hold kernel."""
    for _ in range(warmup):
        fn()
    stream.synchronize()
    out = []
    for _ in range(reps):
        a, b = cuda.event(), cuda.event()
        _hold[1, 32, stream](hold_us)
        a.record(stream)
        fn()
        b.record(stream)
        b.synchronize()
        out.append(cuda.event_elapsed_time(a, b) / 1e3)
    return out


def med(xs):
    return statistics.median(xs)


# ---- the C++ figures -----------------------------------------------------------------------------------------

def find_binary(given, names):
    if given:
        return given if os.path.exists(given) else None
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
    for n in names:
        for p in sorted(glob.glob(os.path.join(root, "*", "**", n), recursive=True)):
            if os.access(p, os.X_OK) and os.path.isfile(p):
                return p
    return None


def cxx_dot(path):
    """BM_gufunc_dot/0 (the C++ gufunc's default path on the same (1e6,64) float32 dot) and the
    D2D copy before it: {name: ms}."""
    # The runs are named with their settings ("BM_gufunc_dot/0/iterations:30/manual_time"): the
    # filter matches the argument's own path segment, and the names are read without the settings.
    r = subprocess.run([path, "--benchmark_filter=^BM_gufunc_dot/0/|^BM_d2d_copy_roofline_before_dot",
                        "--benchmark_format=json"], capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        return {"error": r.stderr[-500:]}
    start = r.stdout.find("{")
    # raw_decode: the benchmark binary prints its own summary lines after the JSON document
    data, _ = json.JSONDecoder().raw_decode(r.stdout[start:])
    out = {re.sub(r"/(iterations:\d+|manual_time|real_time|repeats:\d+)", "", b["name"]): b["real_time"]
           for b in data["benchmarks"] if b.get("time_unit") == "ms"}
    return out if "BM_gufunc_dot/0" in out else {"error": "no BM_gufunc_dot/0 in the map bench's output", **out}


def cxx_seed(path):
    """The C++ seed program's own timing of its gufunc at (100,4000,5) (CUDA events, median of 20)."""
    r = subprocess.run([path], capture_output=True, text=True, timeout=600)
    m = re.search(r"gufunc on the GPU: ([0-9.]+) ms", r.stdout)
    return {"ms": float(m.group(1))} if m and r.returncode == 0 else {"error": (r.stdout + r.stderr)[-500:]}


# ---- the rows --------------------------------------------------------------------------------------------------

def check(name, got, want, exact):
    ok = np.array_equal(got, want) if exact else np.allclose(got, want, rtol=1e-4, atol=1e-4)
    if not ok:
        bad = np.argwhere(~np.isclose(got, want, rtol=1e-4, atol=1e-4, equal_nan=False))[:5]
        print(f"MISMATCH in {name}: first bad indices {bad.tolist()}", file=sys.stderr)
    return ok


def device_rows(res, reps, rng, dates, label):
    s = cuda.stream()
    mb = rng.uniform(0.5, 1.5, (4000, 5))
    disc = rng.uniform(0.5, 1.5, (dates, 4000, 5))
    want = mb * disc
    d_mb, d_disc = cuda.to_device(mb, stream=s), cuda.to_device(disc, stream=s)
    d_out = cuda.to_device(np.full(disc.shape, np.nan), stream=s)
    nbytes = disc.nbytes * 2 + mb.nbytes
    f = spillway.gufunc("(m,o),(m,o)->(m,o)", pricer, cooperative=True)
    t = med(gpu_samples(lambda: f(d_mb, d_disc, out=d_out, stream=s), s, reps))
    ok = check(f"{label} gufunc", d_out.copy_to_host(stream=s), want, True)
    # D2D copy of the same traffic: read disc.nbytes + mb.nbytes/2, write as much
    src = cuda.device_array(nbytes // 2 // 8, dtype=np.float64, stream=s)
    dst = cuda.device_array_like(src, stream=s)
    t_copy = med(gpu_samples(lambda: dst.copy_to_device(src, stream=s), s, reps))
    row = {"shape": list(disc.shape), "bytes": nbytes, "ms": t * 1e3, "GBps": nbytes / t / 1e9,
           "d2d_ms": t_copy * 1e3, "d2d_GBps": nbytes / t_copy / 1e9, "x_d2d": t_copy / t, "ok": ok,
           "kernel": f.last_kernel}
    # the same products with the row and column walked instead of divided out (seed 002's program)
    fw = seed_pricer()
    d_out.copy_to_device(np.full(disc.shape, np.nan), stream=s)
    tw = med(gpu_samples(lambda: fw(d_mb, d_disc, out=d_out, stream=s), s, reps))
    okw = check(f"{label} gufunc (walk body)", d_out.copy_to_host(stream=s), want, True)
    ok = ok and okw
    row["walk"] = {"ms": tw * 1e3, "GBps": nbytes / tw / 1e9, "x_d2d": t_copy / tw, "ok": okw, "kernel": fw.last_kernel}
    # per-call overhead: the host time of one asynchronous call (the GPU held), and call + sync
    _hold[1, 32, s](200000)
    host, _ = timed(lambda: f(d_mb, d_disc, out=d_out, stream=s), reps)
    s.synchronize()
    e2e, _ = timed(lambda: (f(d_mb, d_disc, out=d_out, stream=s), s.synchronize()), reps)
    row.update(call_host_us=host * 1e6, call_e2e_ms=e2e * 1e3)
    # numba's guvectorize of the plain body: one thread per date
    try:
        g, which = numba_cuda_gufunc(["void(float64[:,:], float64[:,:], float64[:,:])"], "(m,o),(m,o)->(m,o)",
                                     pricer_plain)
        d_out2 = cuda.to_device(np.full(disc.shape, np.nan), stream=s)
        try:
            run = (lambda: call_numba_gufunc(g, (d_mb, d_disc), d_out2, s))
            run()
            note = f"{which}, multBy broadcast by numba"
        except Exception:  # noqa: BLE001 - older numba: no broadcasting of the loop dims in CUDA gufuncs
            d_mb_full = cuda.to_device(np.ascontiguousarray(np.broadcast_to(mb, disc.shape)), stream=s)
            run = (lambda: call_numba_gufunc(g, (d_mb_full, d_disc), d_out2, s))
            note = f"{which}, multBy materialized to (dates,4000,5): numba's CUDA gufunc did not broadcast it"
        tn = med(gpu_samples(run, s, max(3, reps // 4), warmup=1))
        row["numba_guvectorize"] = {"ms": tn * 1e3, "GBps": nbytes / tn / 1e9, "x_spillway_time": tn / t,
                                    "note": note, "ok": check(f"{label} numba", d_out2.copy_to_host(stream=s), want,
                                                              True)}
        ok = ok and row["numba_guvectorize"]["ok"]
    except Exception as e:  # noqa: BLE001 - reported, not fatal
        row["numba_guvectorize"] = {"error": f"{type(e).__name__}: {e}"}
    res[label] = row
    return ok


def dot_rows(res, reps, rng, rows):
    s = cuda.stream()
    a = rng.standard_normal((rows, 64)).astype(np.float32)
    b = rng.standard_normal((rows, 64)).astype(np.float32)
    want = np.einsum("ij,ij->i", a.astype(np.float64), b.astype(np.float64))
    da, db = cuda.to_device(a, stream=s), cuda.to_device(b, stream=s)
    d_out = cuda.to_device(np.full(rows, np.nan, np.float32), stream=s)
    nbytes = a.nbytes + b.nbytes + rows * 4
    f = spillway.gufunc("(n),(n)->()", dot, cooperative=True)
    row = {"shape": [rows, 64], "bytes": nbytes, "teams": {}}
    ok = True
    for team in (None, 4, 16, 32):
        t = med(gpu_samples(lambda: f(da, db, out=d_out, stream=s, team=team), s, reps))
        good = check(f"dot team {team}", d_out.copy_to_host(stream=s), want, False)
        ok = ok and good
        row["teams"][str(team or "auto(8)")] = {"ms": t * 1e3, "GBps": nbytes / t / 1e9, "ok": good,
                                                "kernel": f.last_kernel}
    t = row["teams"]["auto(8)"]["ms"] / 1e3
    src = cuda.device_array(nbytes // 2 // 4, dtype=np.float32, stream=s)
    dst = cuda.device_array_like(src, stream=s)
    t_copy = med(gpu_samples(lambda: dst.copy_to_device(src, stream=s), s, reps))
    row.update(ms=t * 1e3, GBps=nbytes / t / 1e9, d2d_ms=t_copy * 1e3, d2d_GBps=nbytes / t_copy / 1e9,
               x_d2d=t_copy / t)
    _hold[1, 32, s](200000)
    host, _ = timed(lambda: f(da, db, out=d_out, stream=s), reps)
    s.synchronize()
    e2e, _ = timed(lambda: (f(da, db, out=d_out, stream=s), s.synchronize()), reps)
    row.update(call_host_us=host * 1e6, call_e2e_ms=e2e * 1e3)
    try:
        g, which = numba_cuda_gufunc(["void(float32[:], float32[:], float32[:])"], "(n),(n)->()", dot_plain)
        d_out2 = cuda.to_device(np.full(rows, np.nan, np.float32), stream=s)
        tn = med(gpu_samples(lambda: call_numba_gufunc(g, (da, db), d_out2, s), s, reps))
        good = check("dot numba", d_out2.copy_to_host(stream=s), want, False)
        ok = ok and good
        row["numba_guvectorize"] = {"ms": tn * 1e3, "GBps": nbytes / tn / 1e9, "x_spillway_time": tn / t, "ok": good,
                                    "note": which}
    except Exception as e:  # noqa: BLE001
        row["numba_guvectorize"] = {"error": f"{type(e).__name__}: {e}"}
    res["dot"] = row
    return ok


def pageable_floor(inputs, outputs, reps):
    """Seconds to copy the inputs host->device and the outputs device->host from/to the same
    pageable NumPy arrays (numba's copies, one stream, median of reps)."""
    s = cuda.stream()
    d_in = [cuda.device_array(a.shape, a.dtype, stream=s) for a in inputs]
    d_out = [cuda.device_array(o.shape, o.dtype, stream=s) for o in outputs]

    def run():
        for h, d in zip(inputs, d_in):
            d.copy_to_device(h, stream=s)
        for h, d in zip(outputs, d_out):
            d.copy_to_host(h, stream=s)
        s.synchronize()

    return timed(run, reps)[0]


def host_rows(res, reps, rng, dates, dot_rows_n, budget):
    ok = True
    mb = rng.uniform(0.5, 1.5, (4000, 5))
    disc = rng.uniform(0.5, 1.5, (dates, 4000, 5))
    out = np.full(disc.shape, np.nan)
    f = spillway.gufunc("(m,o),(m,o)->(m,o)", pricer, cooperative=True)
    t = timed(lambda: f(mb, disc, out=out, budget=budget), max(3, reps // 4))[0]
    ok = check("host pricer", out, mb * disc, True) and f.last_path == "host-streamed"
    floor = pageable_floor([disc], [out], max(3, reps // 4))  # multBy (160 KB) is resident, copied once
    res["host_pricer"] = {"shape": list(disc.shape), "path": f.last_path, "s": t, "floor_s": floor,
                          "x_floor": t / floor, "ok": ok}
    a = rng.standard_normal((dot_rows_n, 64)).astype(np.float32)
    b = rng.standard_normal((dot_rows_n, 64)).astype(np.float32)
    o = np.full(dot_rows_n, np.nan, np.float32)
    g = spillway.gufunc("(n),(n)->()", dot, cooperative=True)
    t = timed(lambda: g(a, b, out=o, budget=budget), max(3, reps // 4))[0]
    good = check("host dot", o, np.einsum("ij,ij->i", a.astype(np.float64), b.astype(np.float64)), False)
    floor = pageable_floor([a, b], [o], max(3, reps // 4))
    res["host_dot"] = {"shape": [dot_rows_n, 64], "path": g.last_path, "s": t, "floor_s": floor, "x_floor": t / floor,
                       "ok": good and g.last_path == "host-streamed"}
    return ok and res["host_dot"]["ok"]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--dates", type=int, default=1000)
    ap.add_argument("--dot-rows", type=int, default=1_000_000)
    ap.add_argument("--budget", default=None, help="device budget of the streamed host rows (default: spillway's)")
    ap.add_argument("--no-host", action="store_true", help="skip the streamed host-array rows")
    ap.add_argument("--cxx-map-bench", default=None, help="spillway_map_bench (default: searched under the repo)")
    ap.add_argument("--cxx-seed", default=None, help="spillway-seed-gufunc-discount (default: searched)")
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    if not cuda.is_available():
        print("no GPU visible to numba.cuda: nothing to measure")
        return 0
    seed = args.seed if args.seed is not None else int.from_bytes(os.urandom(4), "little") >> 1
    print(f"[seed] gufunc_bench: --seed {seed}")
    rng = np.random.default_rng(seed)
    dev = cuda.get_current_device()
    res = {"device": dev.name.decode() if isinstance(dev.name, bytes) else str(dev.name), "seed": seed,
           "numpy": np.__version__, "numpy_row_stack_shim": _gufunc.NUMPY_ROW_STACK_SHIM}
    ok = device_rows(res, args.reps, rng, args.dates, "pricer")
    ok = device_rows(res, args.reps, rng, 100, "pricer_100") and ok
    ok = dot_rows(res, args.reps, rng, args.dot_rows) and ok
    if not args.no_host:
        ok = host_rows(res, args.reps, rng, args.dates, args.dot_rows, args.budget) and ok
    mb = find_binary(args.cxx_map_bench, ["spillway_map_bench"])
    res["cxx_map_bench"] = {"path": mb, **(cxx_dot(mb) if mb else {"error": "not found (--cxx-map-bench PATH)"})}
    sb = find_binary(args.cxx_seed, ["spillway-seed-gufunc-discount"])
    res["cxx_seed"] = {"path": sb, **(cxx_seed(sb) if sb else {"error": "not found (--cxx-seed PATH)"})}

    p = res["pricer"]
    print(f"\ndevice {res['device']}, numpy {res['numpy']} (row_stack shim: {res['numpy_row_stack_shim']})")
    for k in ("pricer", "pricer_100"):
        r = res[k]
        nb = r["numba_guvectorize"]
        nbs = (f"numba guvectorize {nb['ms']:.3f} ms ({nb['GBps']:.0f} GB/s, {nb['x_spillway_time']:.1f}x spillway's "
               f"time; {nb['note']})") if "ms" in nb else f"numba guvectorize: {nb.get('error')}"
        print(f"{k:11s} {tuple(r['shape'])} float64: {r['ms']:.3f} ms  {r['GBps']:.0f} GB/s = {r['x_d2d']:.3f}x "
              f"D2D ({r['d2d_GBps']:.0f} GB/s; target >= 0.8)  call {r['call_host_us']:.0f} us host, "
              f"{r['call_e2e_ms']:.3f} ms e2e, kernel {r['kernel']}\n            walk body (no division per element): "
              f"{r['walk']['ms']:.3f} ms  {r['walk']['GBps']:.0f} GB/s = {r['walk']['x_d2d']:.3f}x D2D\n            {nbs}")
    d = res["dot"]
    teams = ", ".join(f"team {k}: {v['GBps']:.0f} GB/s ({v['kernel']})" for k, v in d["teams"].items())
    nb = d["numba_guvectorize"]
    print(f"dot         {tuple(d['shape'])} float32: {d['ms']:.3f} ms  {d['GBps']:.0f} GB/s = {d['x_d2d']:.3f}x D2D "
          f"({d['d2d_GBps']:.0f} GB/s; target >= 0.8)  [{teams}]  call {d['call_host_us']:.0f} us host, "
          f"{d['call_e2e_ms']:.3f} ms e2e")
    if "ms" in nb:
        print(f"            numba guvectorize {nb['ms']:.3f} ms ({nb['GBps']:.0f} GB/s, {nb['x_spillway_time']:.2f}x "
              "spillway's time)")
    else:
        print(f"            numba guvectorize: {nb.get('error')}")
    c = res["cxx_map_bench"]
    if "BM_gufunc_dot/0" in c:
        cx = c["BM_gufunc_dot/0"]
        print(f"C++ gufunc  BM_gufunc_dot/0 {cx:.3f} ms ({d['bytes'] / cx / 1e6:.0f} GB/s): Python/C++ time = "
              f"{d['ms'] / cx:.3f} (target <= 1.1); C++ D2D before it "
              f"{c.get('BM_d2d_copy_roofline_before_dot', float('nan')):.3f} ms (1 GiB)")
    else:
        print(f"C++ gufunc  map bench: {c.get('error')}")
    c = res["cxx_seed"]
    if "ms" in c:
        print(f"C++ seed    spillway-seed-gufunc-discount (100,4000,5): {c['ms']:.3f} ms; Python at that shape "
              f"{res['pricer_100']['ms']:.3f} ms: Python/C++ time = {res['pricer_100']['ms'] / c['ms']:.3f} "
              "(target <= 1.1)")
    else:
        print(f"C++ seed    {c.get('error')}")
    if not args.no_host:
        for k in ("host_pricer", "host_dot"):
            h = res[k]
            print(f"{k:11s} {tuple(h['shape'])} host arrays ({h['path']}): {h['s'] * 1e3:.1f} ms; pageable copy floor "
                  f"{h['floor_s'] * 1e3:.1f} ms: {h['x_floor']:.3f}x (target <= 1.2)")
    print("status: " + ("OK (every result matched NumPy)" if ok else "FAILED (a result differed from NumPy)"))
    res["ok"] = ok
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(res, fh, indent=1)
    del p
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
