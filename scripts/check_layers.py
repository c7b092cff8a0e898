#!/usr/bin/env python3
"""Include-boundary check: no header under include/spillway/ includes a layer above its own, and
none includes another module's detail/ (a module's detail/ headers are its own; what other
modules use lives beside its public headers).

The layers (docs/DESIGN order, bottom up): core; io and pipeline on core; map on pipeline; the
tile engine on core only (gram and gemm instantiate it, it never includes them); the pairwise
sinks on core, pipeline and tile (bit Gram and float similarity both feed them strips of scores;
they never include gram or gemm); the algorithm modules gram, gemm and ode on the layers below,
never on one another; float similarity above gemm and pairwise (each strip a GEMM into the
pairwise sinks; it reaches the Hopper GEMM's fragment sink through gemm/fragment_sink.cuh, never
gemm/detail/), and nothing below includes it. The umbrella headers
directly in include/spillway/ may include anything. A forwarding header (FORWARDING: an old public
path kept for one version after its module moved) includes only the module it forwards to, and no
header of a module includes one (the umbrella headers may). No tool reads `.cuh` includes, so this
script does: it exits 1 naming every `file:line` that crosses a boundary, or a module it does not
know (a new folder must be given its place here).

  check_layers.py [--root DIR]   check DIR (default: include/ next to this script's folder)
  check_layers.py --self-test    check that a tree with violations is refused, one without passes
"""
import argparse
import os
import re
import sys
import tempfile

# What each module's headers may include besides itself.
ALLOWED = {
    "core": set(),
    "io": {"core"},
    "pipeline": {"core"},
    "map": {"core", "pipeline"},
    "tile": {"core"},
    "pairwise": {"core", "pipeline", "tile"},
    "gram": {"core", "io", "pipeline", "map", "tile", "pairwise"},
    "gemm": {"core", "io", "pipeline", "map", "tile", "pairwise"},
    "ode": {"core", "io", "pipeline", "map"},
    # float similarity: GEMMs of rows into the pairwise sinks
    "similarity": {"core", "pipeline", "tile", "pairwise", "gemm"},
    # the optional MPI component (spillway::mpi): the jobs above split across ranks
    "dist": {"core", "io", "pipeline", "pairwise", "gram", "similarity"},
}
# Old public paths kept for one version after their concept moved to another module: path -> the
# module they forward to.
FORWARDING = {
    "gemm/similarity.cuh": "similarity",
    "gemm/host_similarity.hpp": "similarity",
}
INCLUDE = re.compile(r'^\s*#\s*include\s*[<"]spillway/([^>"]+)[>"]')
HEADER_EXT = (".hpp", ".cuh", ".h", ".cu")


def target_module(path):
    """'core/error.hpp' -> 'core'; 'version.hpp' (top level) -> None."""
    parts = path.split("/")
    return parts[0] if len(parts) > 1 else None


def is_detail(inc):
    """'pairwise/detail/x.cuh' -> True (a module's detail/ folder at any depth below it)."""
    return "detail" in inc.split("/")[1:-1]


def detail_includes(path, module):
    """The lines of `path` that include a detail/ header of a module other than `module`."""
    found = []
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            m = INCLUDE.match(line)
            if m and is_detail(m.group(1)) and target_module(m.group(1)) != module:
                found.append(f"{path}:{lineno}: includes <spillway/{m.group(1)}>, a module's detail/ header")
    return found


def check(root):
    base = os.path.join(root, "spillway")
    if not os.path.isdir(base):
        return [f"{base}: no such folder"]
    problems = []
    for dirpath, _, files in os.walk(base):
        rel_dir = os.path.relpath(dirpath, base)
        if rel_dir == ".":
            # umbrella headers: any layer, but no module's detail/
            for name in sorted(files):
                if name.endswith(HEADER_EXT):
                    problems += detail_includes(os.path.join(dirpath, name), None)
            continue
        module = rel_dir.split(os.sep)[0]
        if module not in ALLOWED:
            problems.append(f"{os.path.join(dirpath)}: module '{module}' has no place in the layer table")
            continue
        for name in sorted(files):
            if not name.endswith(HEADER_EXT):
                continue
            path = os.path.join(dirpath, name)
            rel = os.path.relpath(path, base).replace(os.sep, "/")
            forwards_to = FORWARDING.get(rel)
            with open(path, encoding="utf-8") as f:
                for lineno, line in enumerate(f, 1):
                    m = INCLUDE.match(line)
                    if not m:
                        continue
                    inc = m.group(1)
                    tgt = target_module(inc)
                    if inc in FORWARDING:
                        if forwards_to is None:
                            problems.append(f"{path}:{lineno}: '{module}' includes <spillway/{inc}>, a forwarding "
                                            f"header kept for one version; include "
                                            f"<spillway/{FORWARDING[inc]}/...> instead")
                        continue  # one forwarder may include another
                    if forwards_to is not None:
                        if tgt != forwards_to or is_detail(inc):
                            problems.append(f"{path}:{lineno}: forwarding header includes <spillway/{inc}>; it "
                                            f"may include only <spillway/{forwards_to}/...>'s public headers")
                        continue
                    if tgt is None and inc == "version.hpp":
                        continue  # generated, below every layer
                    if tgt == module:
                        continue
                    if is_detail(inc):
                        problems.append(f"{path}:{lineno}: '{module}' includes <spillway/{inc}>, another "
                                        f"module's detail/ header; move what '{module}' needs beside "
                                        f"'{tgt}''s public headers")
                        continue
                    if tgt is None or tgt not in ALLOWED[module]:
                        where = "an umbrella header" if tgt is None else f"layer '{tgt}'"
                        problems.append(f"{path}:{lineno}: '{module}' includes <spillway/{inc}> ({where}); "
                                        f"'{module}' may include only {sorted(ALLOWED[module]) or 'itself'}")
    return problems


def self_test():
    with tempfile.TemporaryDirectory() as d:
        def write(rel, text):
            p = os.path.join(d, "spillway", rel)
            os.makedirs(os.path.dirname(p), exist_ok=True)
            with open(p, "w", encoding="utf-8") as f:
                f.write(text)
        write("core/a.hpp", "#include <spillway/core/b.hpp>\n")
        write("tile/t.cuh", "#include <spillway/core/a.hpp>\n")
        write("pairwise/p.cuh", "#include <spillway/tile/t.cuh>\n#include <spillway/core/a.hpp>\n")
        write("gram/g.cuh", "#include <spillway/tile/t.cuh>\n#include <spillway/gram/h.cuh>\n#include <spillway/pairwise/p.cuh>\n")
        write("gemm/s.cuh", "#include <spillway/pairwise/p.cuh>\n")
        write("gram.cuh", "#include <spillway/gram/g.cuh>\n")
        write("similarity/s.cuh", "#include <spillway/gemm/s.cuh>\n#include <spillway/pairwise/p.cuh>\n")
        write("gemm/similarity.cuh", "#include <spillway/gemm/host_similarity.hpp>\n#include <spillway/similarity/s.cuh>\n")
        write("gemm/host_similarity.hpp", "#include <spillway/similarity/s.cuh>\n")
        write("gemm.cuh", "#include <spillway/gemm/s.cuh>\n#include <spillway/gemm/similarity.cuh>\n")
        if check(d):
            print("self-test: a clean tree was refused:", *check(d), sep="\n  ")
            return 1
        write("tile/bad.cuh", "#include <spillway/core/a.hpp>\n  #  include \"spillway/gram/g.cuh\"\n")
        write("core/bad.hpp", "#include <spillway/map/x.hpp>\n")
        write("gemm/bad.cuh", "#include <spillway/gram/g.cuh>\n")
        write("pairwise/bad_gram.cuh", "#include <spillway/gram/g.cuh>\n")
        write("pairwise/bad_gemm.hpp", "#include <spillway/core/a.hpp>\n#include <spillway/gemm/s.cuh>\n")
        write("tile/bad2.cuh", "#include <spillway/pairwise/p.cuh>\n")
        # another module's detail/ (even a layer below), from a module and from an umbrella header;
        # a module's own detail/ stays fine
        write("core/detail/d.hpp", "#include <spillway/core/a.hpp>\n")
        write("pairwise/own.cuh", "#include <spillway/pairwise/p.cuh>\n")
        write("pairwise/detail/k.cuh", "#include <spillway/core/a.hpp>\n")
        write("pairwise/uses_own_detail.cuh", "#include <spillway/pairwise/detail/k.cuh>\n")
        write("gram/bad_detail.cuh", "#include <spillway/core/a.hpp>\n#include <spillway/pairwise/detail/k.cuh>\n")
        write("pipeline/bad_detail.hpp", "#include <spillway/core/detail/d.hpp>\n")
        write("bad_umbrella.cuh", "#include <spillway/gram/g.cuh>\n#include <spillway/pairwise/detail/k.cuh>\n")
        # similarity sits above gemm and pairwise: neither includes it, nor a forwarding header;
        # similarity reaches gemm's public headers only
        write("gemm/bad_up.cuh", "#include <spillway/similarity/s.cuh>\n")
        write("pairwise/bad_up.cuh", "#include <spillway/core/a.hpp>\n#include <spillway/similarity/s.cuh>\n")
        write("gemm/bad_forwarder_use.cuh", "#include <spillway/gemm/similarity.cuh>\n")
        write("gemm/detail/w.cuh", "#include <spillway/core/a.hpp>\n")
        write("similarity/bad_detail.cuh", "#include <spillway/gemm/detail/w.cuh>\n")
        # a forwarding header forwards, nothing more
        write("gemm/host_similarity.hpp", "#include <spillway/similarity/s.cuh>\n#include <spillway/gram/g.cuh>\n")
        found = check(d)
        want = ["tile/bad.cuh:2", "core/bad.hpp:1", "gemm/bad.cuh:1", "pairwise/bad_gram.cuh:1",
                "pairwise/bad_gemm.hpp:2", "tile/bad2.cuh:1", "gram/bad_detail.cuh:2",
                "pipeline/bad_detail.hpp:1", "bad_umbrella.cuh:2", "gemm/bad_up.cuh:1", "pairwise/bad_up.cuh:2",
                "gemm/bad_forwarder_use.cuh:1", "similarity/bad_detail.cuh:1",
                "gemm/host_similarity.hpp:2"]
        missing = [w for w in want if not any(w in p for p in found)]
        if missing or len(found) != len(want):
            print("self-test: expected exactly", want, "got:", *found, sep="\n  ")
            return 1
    print(f"self-test passed: a clean tree passes, {len(want)} planted violations are named")
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--root", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "include"))
    ap.add_argument("--self-test", action="store_true")
    args = ap.parse_args()
    if args.self_test:
        return self_test()
    problems = check(os.path.normpath(args.root))
    for p in problems:
        print(p)
    if problems:
        print(f"{len(problems)} include(s) cross a layer boundary")
        return 1
    print("1 passed, 0 failed: no header includes a layer above its own or another module's detail/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
