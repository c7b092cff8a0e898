"""The type stubs ship with the installed package and describe what it really has.

spillway is typed by PEP 561 stubs: ``py.typed``, ``__init__.pyi`` and ``rk4.pyi`` (written by
hand) and ``_core.pyi`` (nanobind's stubgen over the extension). These tests read the stubs of the
INSTALLED package (next to ``spillway.__file__``), parse them with ``ast`` and hold them to the
runtime: every public name has a stub entry; every public function's parameters (names, kinds,
which have defaults) match its runtime signature; every public method and property of a public
class is declared; ``_core.pyi`` declares what a fresh stubgen run of the installed module
declares. No GPU is needed.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import subprocess
import sys
from pathlib import Path

import pytest

import spillway
import spillway.ode
import spillway.rk4

PKG = Path(spillway.__file__).resolve().parent
STUBS = ("__init__.pyi", "rk4.pyi", "ode.pyi", "_core.pyi")
KIND = {"posonly": inspect.Parameter.POSITIONAL_ONLY, "arg": inspect.Parameter.POSITIONAL_OR_KEYWORD,
        "kwonly": inspect.Parameter.KEYWORD_ONLY, "vararg": inspect.Parameter.VAR_POSITIONAL,
        "kwarg": inspect.Parameter.VAR_KEYWORD}


def parse(name: str) -> ast.Module:
    path = PKG / name
    if not path.is_file():   # one failure says so (test_stub_files_installed), not one per name
        pytest.skip(f"{path} is not installed: see test_stub_files_installed")
    return ast.parse(path.read_text(), filename=str(path))


def top_level(tree: ast.Module) -> dict:
    """name -> [nodes] for what a stub declares at module level (overloads give several nodes)."""
    out: dict = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            out.setdefault(node.name, []).append(node)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            out.setdefault(node.target.id, []).append(node)
        elif isinstance(node, ast.Assign):
            for t in node.targets:
                if isinstance(t, ast.Name):
                    out.setdefault(t.id, []).append(node)
        elif isinstance(node, (ast.ImportFrom, ast.Import)):
            for a in node.names:
                if a.asname is not None and a.asname == a.name.rsplit(".", 1)[-1]:   # "import x as x": a re-export
                    out.setdefault(a.asname, []).append(node)
    return out


def stub_params(fn: ast.FunctionDef, drop_self: bool) -> list:
    """[(name, kind, has_default)] of a stub function."""
    a = fn.args
    params = []
    pos = a.posonlyargs + a.args
    defaults = [False] * (len(pos) - len(a.defaults)) + [True] * len(a.defaults)
    for i, (p, d) in enumerate(zip(pos, defaults)):
        params.append((p.arg, KIND["posonly" if i < len(a.posonlyargs) else "arg"], d))
    if a.vararg:
        params.append((a.vararg.arg, KIND["vararg"], False))
    for p, d in zip(a.kwonlyargs, a.kw_defaults):
        params.append((p.arg, KIND["kwonly"], d is not None))
    if a.kwarg:
        params.append((a.kwarg.arg, KIND["kwarg"], False))
    return params[1:] if drop_self else params


def runtime_params(obj, drop_self: bool = False) -> list:
    """[(name, kind, has_default)] of a runtime callable, private (underscored) parameters left out:
    they are not part of the public API."""
    ps = list(inspect.signature(obj).parameters.values())
    if drop_self:
        ps = ps[1:]
    return [(p.name, p.kind, p.default is not inspect.Parameter.empty) for p in ps if not p.name.startswith("_")]


def check_function(where: str, nodes: list, runtime, drop_self: bool = False) -> None:
    fns = [n for n in nodes if isinstance(n, ast.FunctionDef)]
    assert fns, f"{where}: the stub declares it, but not as a function"
    want = runtime_params(runtime, drop_self)
    overloads = [f for f in fns if any(isinstance(d, ast.Name) and d.id == "overload" for d in f.decorator_list)]
    if overloads:
        # Each overload takes every runtime parameter, of the same kind (which have defaults may
        # differ: an overload on return_report=True has no default for it).
        for f in overloads:
            got = [(n, k) for n, k, _ in stub_params(f, drop_self)]
            assert got == [(n, k) for n, k, _ in want], \
                f"{where} (overload at line {f.lineno}): stub parameters {got}, runtime {want}"
        return
    got = stub_params(fns[-1], drop_self)
    assert got == want, (f"{where}: stub parameters (name, kind, has default)\n  {got}\nruntime\n  {want}\n"
                         "update the stub in python/spillway/")


def public_members(cls) -> set:
    names = {n for n in vars(cls) if not n.startswith("_")}
    if dataclasses.is_dataclass(cls):
        names |= {f.name for f in dataclasses.fields(cls)}
    return names


def class_members(node: ast.ClassDef) -> dict:
    out: dict = {}
    for n in node.body:
        if isinstance(n, ast.FunctionDef):
            out.setdefault(n.name, []).append(n)
        elif isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name):
            out.setdefault(n.target.id, []).append(n)
    return out


@pytest.mark.parametrize("name", STUBS + ("py.typed",))
def test_stub_files_installed(name):
    path = PKG / name
    assert path.is_file(), (f"{path} missing: the package must ship it (PEP 561). It is installed from "
                            f"python/spillway/{name} by wheel.packages: an install older than the stubs lacks it "
                            "(reinstall: pip install ./python)")
    if name.endswith(".pyi"):
        parse(name)   # and it parses


def test_every_public_name_has_a_stub_entry():
    declared = top_level(parse("__init__.pyi"))
    missing = [n for n in spillway.__all__ if n not in declared]
    assert not missing, f"spillway.__all__ names with no entry in {PKG / '__init__.pyi'}: {missing}"
    # ... and the stub offers nothing public that the package lacks.
    extra = [n for n in declared if not n.startswith("_") and not hasattr(spillway, n)]
    assert not extra, f"__init__.pyi declares names spillway does not have: {extra}"


@pytest.mark.parametrize("name", [n for n in spillway.__all__ if inspect.isfunction(getattr(spillway, n))])
def test_function_stub_matches_runtime(name):
    declared = top_level(parse("__init__.pyi"))
    assert name in declared, f"spillway.{name} has no entry in __init__.pyi"
    check_function(f"spillway.{name}", declared[name], getattr(spillway, name))


@pytest.mark.parametrize("name", spillway.rk4.__all__)
def test_rk4_stub_matches_runtime(name):
    declared = top_level(parse("rk4.pyi"))
    assert name in declared, f"spillway.rk4.{name} has no entry in rk4.pyi"
    check_function(f"spillway.rk4.{name}", declared[name], getattr(spillway.rk4, name))


@pytest.mark.parametrize("name", spillway.ode.__all__)
def test_ode_stub_matches_runtime(name):
    declared = top_level(parse("ode.pyi"))
    assert name in declared, f"spillway.ode.{name} has no entry in ode.pyi"
    obj = getattr(spillway.ode, name)
    imports = [n for n in declared[name] if isinstance(n, ast.ImportFrom)]
    if imports:
        # A re-export of spillway.rk4's function (its parameters are held by the rk4 stub's test).
        assert imports[0].module == "rk4" and imports[0].level == 1, f"spillway.ode.{name}: not re-exported from .rk4"
        assert obj is getattr(spillway.rk4, name), f"spillway.ode.{name} is not spillway.rk4.{name}"
    elif inspect.isfunction(obj):
        check_function(f"spillway.ode.{name}", declared[name], obj)
    elif inspect.isclass(obj):
        nodes = [n for n in declared[name] if isinstance(n, ast.ClassDef)]
        assert nodes, f"spillway.ode.{name}: the stub declares it, but not as a class"
        assert sorted(class_members(nodes[0])) == sorted(obj._fields), f"spillway.ode.{name}: fields differ"


@pytest.mark.parametrize("name", [n for n in spillway.__all__ if inspect.isclass(getattr(spillway, n))])
def test_class_stub_matches_runtime(name):
    cls = getattr(spillway, name)
    if cls.__module__ == "spillway._core":
        tree, stub_name = parse("_core.pyi"), "_core.pyi"
    else:
        tree, stub_name = parse("__init__.pyi"), "__init__.pyi"
    nodes = [n for n in top_level(tree).get(name, []) if isinstance(n, ast.ClassDef)]
    assert nodes, f"spillway.{name}: no class {name} in {stub_name}"
    members = class_members(nodes[0])
    missing = sorted(public_members(cls) - set(members))
    assert not missing, f"spillway.{name}: public members missing from the stub in {stub_name}: {missing}"
    stub_bases = {b.id if isinstance(b, ast.Name) else ast.unparse(b) for b in nodes[0].bases}
    runtime_bases = {b.__name__ for b in cls.__bases__} - {"object"}
    assert stub_bases == runtime_bases, f"spillway.{name}: stub bases {stub_bases}, runtime {runtime_bases}"
    if "__init__" in members and "__init__" in vars(cls) and cls.__module__ != "spillway._core":
        check_function(f"spillway.{name}.__init__", members["__init__"], cls.__init__, drop_self=True)
    for m, ns in members.items():
        attr = vars(cls).get(m)
        if inspect.isfunction(attr) and not m.startswith("__"):
            check_function(f"spillway.{name}.{m}", ns, attr, drop_self=True)


def test_gufunc_object_stub_matches_runtime():
    from spillway._gufunc import GUFunc

    node = [n for n in top_level(parse("__init__.pyi"))["_GUFunc"] if isinstance(n, ast.ClassDef)][0]
    members = class_members(node)
    for m in ("__call__", "kernel_source", "ptx"):
        assert m in members, f"_GUFunc.{m} is not in the stub"
        check_function(f"GUFunc.{m}", members[m], getattr(GUFunc, m), drop_self=True)
    assert "last_path" in members


def test_core_stub_is_current(tmp_path):
    """_core.pyi declares what nanobind's stubgen finds in the installed extension now (compared as
    names and parameter lists, so a different nanobind version's formatting does not matter)."""
    pytest.importorskip("nanobind.stubgen", reason="nanobind (its stubgen) is not installed")
    out = tmp_path / "_core.pyi"
    r = subprocess.run([sys.executable, "-m", "nanobind.stubgen", "-q", "-m", "spillway._core", "-o", str(out)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr

    def shape(tree):
        res = {}
        for name, nodes in top_level(tree).items():
            n = nodes[0]
            if isinstance(n, ast.FunctionDef):
                res[name] = [p[:2] for p in stub_params(n, False)]
            elif isinstance(n, ast.ClassDef):
                res[name] = sorted(class_members(n))
        return res

    fresh, shipped = shape(ast.parse(out.read_text())), shape(parse("_core.pyi"))
    assert shipped == fresh, ("python/spillway/_core.pyi is out of date; regenerate it with\n"
                              "  python -m nanobind.stubgen -m spillway._core -o python/spillway/_core.pyi\n"
                              f"shipped: {shipped}\nfresh:   {fresh}")
