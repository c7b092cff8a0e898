"""spillway.gufunc: the signature parser, the binding/broadcasting/loop planner, error types and
messages (host, no numba needed); the kernel path under Numba's CUDA simulator and the device code
compiled to PTX (host, numba-cuda needed, each in a subprocess of its own); seed 002's shapes on
the GPU (device arrays and host arrays streamed), compared with NumPy.

Why subprocesses: NUMBA_ENABLE_CUDASIM must be set before numba.cuda is first imported, and it
then holds for the whole process -- it would turn the Numba device arrays of the other test files
(test_gpu.py's ``arrays="numba"`` streams) into simulator arrays. The PTX compile patches numba's
current-device lookup while it runs. Both run in fresh interpreters, which import this file and run
its ``_sim_cases`` / ``_ptx_cases``.
"""

from __future__ import annotations

import importlib.util
import json
import os
import random
import subprocess
import sys
import types

import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
REQUIRE_GPU = os.environ.get("SPILLWAY_REQUIRE_GPU", "") == "1"


def _load_gufunc_module():
    """spillway._gufunc from the installed package; where the extension is not built (a checkout
    with no `pip install ./python`), from the source tree without running spillway/__init__ (the
    parser, the planner and the simulator path are pure Python)."""
    try:
        import spillway  # noqa: F401
    except ImportError:
        pkg = types.ModuleType("spillway")
        pkg.__path__ = [os.path.join(HERE, "..", "spillway")]
        sys.modules["spillway"] = pkg
    import spillway._gufunc as g

    return g


G = _load_gufunc_module()
HAVE_NUMBA = importlib.util.find_spec("numba") is not None


def need(condition: bool, reason: str) -> None:
    """conftest's rule (kept here so that this file also runs where conftest cannot import the
    extension): skip, or fail under SPILLWAY_REQUIRE_GPU=1."""
    if condition:
        return
    if REQUIRE_GPU:
        pytest.fail(f"SPILLWAY_REQUIRE_GPU=1 but {reason}")
    pytest.skip(reason)


def _seed(label: str) -> int:
    env = os.environ.get("SPILLWAY_TEST_SEED")
    seed = int(env) if env else random.SystemRandom().randrange(1 << 31)
    print(f"[seed] {label}: SPILLWAY_TEST_SEED={seed}")
    return seed


@pytest.fixture
def rng(request):
    return np.random.default_rng(_seed(request.node.nodeid))


# ---- the signature parser ----------------------------------------------------------------------------

@pytest.mark.parametrize("text, inputs, outputs", [
    ("(n),(n)->()", (("n",), ("n",)), ((),)),
    ("(m,o),(m,o)->(m,o)", (("m", "o"), ("m", "o")), (("m", "o"),)),
    ("(),()->()", ((), ()), ((),)),
    (" ( m , 3 ) , ( 3 ) -> ( m ) ", (("m", 3), (3,)), (("m",),)),
    ("(m,n),(n,p)->(m,p)", (("m", "n"), ("n", "p")), (("m", "p"),)),
    ("(n)->(),()", (("n",),), ((), ())),
    ("(_a1,b_2)->(_a1)", (("_a1", "b_2"),), (("_a1",),)),
])
def test_parse_signature(text, inputs, outputs):
    s = G.parse_signature(text)
    assert s.text == text and s.inputs == inputs and s.outputs == outputs


# The C++ parser's messages and positions (include/spillway/map/signature.hpp).
@pytest.mark.parametrize("text, what, pos", [
    ("(n),(n)", "expected '->'", 7),
    ("(n)->", "expected '('", 5),
    ("n->()", "expected '('", 0),
    ("(n,)->()", "expected a dimension name or size", 3),
    ("(n m)->()", "expected ',' or ')'", 3),
    ("(?)->()", "optional core dimensions ('?') are not supported", 1),
    ("(n?)->()", "expected ',' or ')'", 2),
    ("(n)->()x", "unexpected trailing text", 7),
    ("(n)-()", "expected '->'", 3),
    ("(a,b,c,d,e,f,g,h,i)->()", "more than max_rank core dimensions", 19),
    ("(99999999999999999999)->()", "fixed dimension too large", 1),
    ("", "expected '('", 0),
    ("(é)->()", "expected a dimension name or size", 1),
])
def test_parse_signature_errors(text, what, pos):
    with pytest.raises(ValueError) as e:
        G.parse_signature(text)
    assert str(e.value) == f'gufunc signature "{text}": {what} at position {pos}'


def test_parse_signature_type():
    with pytest.raises(TypeError, match="must be a str"):
        G.parse_signature(b"(n)->()")
    with pytest.raises(ValueError, match="expected '->'"):
        G.gufunc("(n),(n)")  # the decorator line fails, before any body exists


# ---- binding, broadcasting, planning ----------------------------------------------------------------

def _sig(t):
    return G.parse_signature(t)


@pytest.mark.parametrize("text, shapes, message", [
    ("(n),(n)->()", [(3, 4), (5,)],
     "argument 1 core dimension 'n' has size 5 but argument 0 gives it size 4"),
    ("(m,n),(n,p)->(m,p)", [(2, 3), (4, 5)],
     "argument 1 core dimension 'n' has size 4 but argument 0 gives it size 3"),
    ("(m,o),(m,o)->(m,o)", [(5,), (4, 5)], "argument 0 has shape (5,) (rank 1) but needs at least 2 core dimensions"),
    ("(3),(3)->(3)", [(4,), (3,)], "argument 0 core dimension 0 must be 3 but is 4"),
    ("(n)->(m)", [(4,)], "output 0 core dimension 'm' is not bound by any argument (give the output array)"),
    ("(n),(n)->()", [(4,)], "the signature has 2 inputs but 1 were given"),
    ("(n),(n)->()", [(3, 4, 5), (2, 5)],  # the loop shapes are broadcast, as in C++
     "(loop dimensions): argument 1 with shape (2,) cannot be broadcast with argument 0 with shape (3,4): dimension "
     "-1 (from the right) has size 2 vs 4"),
])
def test_bind_errors(text, shapes, message):
    with pytest.raises(ValueError) as e:
        G.bind_signature(_sig(text), shapes)
    assert str(e.value).startswith(f'gufunc "{text}"') and message in str(e.value), str(e.value)


def test_bind_output_shape_mismatch():
    with pytest.raises(ValueError, match=r"output 0 has shape \(1,\) but the arguments give \(3,\)"):
        G.bind_signature(_sig("(n),(n)->()"), [(3, 5), (5,)], [(1,)])
    with pytest.raises(ValueError, match=r"output 0 with shape \(4,\) cannot be broadcast with argument 0 with "
                                         r"shape \(3,\)"):  # an output's loop dims join the broadcast, as in C++
        G.bind_signature(_sig("(n),(n)->()"), [(3, 5), (5,)], [(4,)])
    with pytest.raises(ValueError, match="the signature has 1 outputs but 2 were given"):
        G.bind_signature(_sig("(n),(n)->()"), [(3, 5), (5,)], [(3,), (3,)])
    # a given output binds a name no input binds
    b = G.bind_signature(_sig("(n)->(m)"), [(2, 4)], [(2, 7)])
    assert b.output_shapes == [(2, 7)] and b.sizes == {"n": 4, "m": 7}


def test_bind_seed_002_shapes():
    b = G.bind_signature(_sig("(m,o),(m,o)->(m,o)"), [(4000, 5), (1000, 4000, 5)])
    assert b.loop_shape == (1000,) and b.output_shapes == [(1000, 4000, 5)] and b.sizes == {"m": 4000, "o": 5}
    b = G.bind_signature(_sig("(n),(n)->()"), [(1000000, 64), (1000000, 64)])
    assert b.loop_shape == (1000000,) and b.output_shapes == [(1000000,)]


def _random_shape(rng, rank, lo=0, hi=4):
    return tuple(int(v) for v in rng.integers(lo, hi, size=rank))


def test_broadcast_matches_numpy(rng):
    for _ in range(300):
        k = int(rng.integers(1, 4))
        base = _random_shape(rng, int(rng.integers(0, 5)), 1, 4)
        shapes = []
        for _ in range(k):  # drop leading dims and set some to 1: broadcastable with the base
            s = list(base[int(rng.integers(0, len(base) + 1)):])
            for i in range(len(s)):
                if rng.random() < 0.3:
                    s[i] = 1
            shapes.append(tuple(s))
        if rng.random() < 0.2 and shapes and shapes[0]:  # sometimes a shape that cannot broadcast
            s = list(shapes[0])
            s[-1] = s[-1] + 5
            shapes[0] = tuple(s)
        try:
            want = np.broadcast_shapes(*shapes)
        except ValueError:
            with pytest.raises(ValueError, match="cannot be broadcast"):
                G.broadcast_shapes(shapes)
            continue
        assert G.broadcast_shapes(shapes) == want, shapes


def _offsets_uncollapsed(loop, strides):
    return np.array([sum(i * s for i, s in zip(idx, strides)) for idx in np.ndindex(*loop)], dtype=np.int64)


def test_plan_collapse_keeps_every_offset(rng):
    """Walking the collapsed loop in row-major order visits each operand's instances at the same
    offsets as walking the broadcast loop itself (random shapes, strides and broadcasts)."""
    sig = _sig("(),(n),()->(n)")
    for _ in range(200):
        loop = _random_shape(rng, int(rng.integers(0, 4)), 1, 5)
        n = int(rng.integers(1, 4))
        layouts = []
        for core in (0, 1, 0):
            nl = int(rng.integers(0, len(loop) + 1))
            shape = tuple(1 if rng.random() < 0.3 else e for e in loop[len(loop) - nl:]) + ((n,) if core else ())
            base = np.empty(tuple(2 * max(e, 1) for e in shape))
            view = base[tuple(slice(None, None, int(rng.choice([1, 2]))) for _ in shape)][tuple(slice(0, e) for e in shape)]
            if rng.random() < 0.3 and view.ndim > 1:
                view = np.swapaxes(view, 0, -1)
                shape = view.shape
            layouts.append(G.OperandLayout(view.shape, tuple(s // 8 for s in view.strides), core))
        shapes = [l.shape for l in layouts]
        n = shapes[1][-1]
        try:
            p = G.plan_gufunc(sig, layouts, [None])
        except ValueError:
            continue
        full = p.binding.loop_shape
        assert full == np.broadcast_shapes(*[s[:len(s) - c] for s, c in zip(shapes, (0, 1, 0))])
        assert p.binding.output_shapes == [full + (n,)]
        assert len(p.loop_extents) >= 1 and np.prod(p.loop_extents) == max(np.prod(full), 1) or np.prod(full) == 0
        for k, lay in enumerate(layouts + [G.OperandLayout(full + (n,), G._c_strides(full + (n,)), 1)]):
            nl = len(lay.shape) - lay.core_rank
            bs = [0] * (len(full) - nl) + [0 if e == 1 else s for e, s in zip(lay.shape[:nl], lay.strides[:nl])]
            want = _offsets_uncollapsed(full, bs) if np.prod(full) else np.zeros(0, np.int64)
            ls = p.ops[k][0]
            got = _offsets_uncollapsed(p.loop_extents, ls)[:len(want)]
            np.testing.assert_array_equal(got, want, err_msg=f"operand {k}: {layouts} loop {full}")


def test_plan_seed_002_collapse():
    sig = _sig("(m,o),(m,o)->(m,o)")
    mb = G.OperandLayout((4000, 5), (5, 1), 2)
    d = G.OperandLayout((1000, 4000, 5), (20000, 5, 1), 2)
    p = G.plan_gufunc(sig, [mb, d], [None])
    assert p.loop_extents == (1000,) and p.instances == 1000 and p.max_core_size == 20000
    assert [o[0] for o in p.ops] == [(0,), (20000,), (20000,)]
    # elementwise over contiguous operands: one loop dimension; a broadcast row keeps two
    sig = _sig("(),()->()")
    a = G.OperandLayout((6, 7, 8), (56, 8, 1), 0)
    p = G.plan_gufunc(sig, [a, a], [None])
    assert p.loop_extents == (336,)
    b = G.OperandLayout((8,), (1,), 0)
    p = G.plan_gufunc(sig, [a, b], [None])
    assert p.loop_extents == (42, 8) and p.ops[1][0] == (0, 1)


def test_plan_empty_and_scalar():
    sig = _sig("(n),(n)->()")
    p = G.plan_gufunc(sig, [G.OperandLayout((0, 4), (4, 1), 1)] * 2, [None])
    assert p.instances == 0 and p.binding.output_shapes == [(0,)]
    p = G.plan_gufunc(sig, [G.OperandLayout((3, 0), (0, 1), 1)] * 2, [None])
    assert p.instances == 3  # a 0-length core still gives each instance an output to write
    p = G.plan_gufunc(sig, [G.OperandLayout((5,), (1,), 1)] * 2, [None])
    assert p.loop_extents == (1,) and p.instances == 1 and p.binding.output_shapes == [()]
    with pytest.raises(ValueError, match="argument 1 is a scalar but the signature gives it 1 core dimensions"):
        G.plan_gufunc(sig, [G.OperandLayout((5,), (1,), 1), G.OperandLayout((), None, 0)], [None])


@pytest.mark.parametrize("work, team", [(1, 1), (15, 1), (16, 2), (17, 4), (64, 8), (65, 16), (256, 32),
                                        (4096, 32), (4097, 256), (20000, 256)])
def test_team_size_rule(work, team):
    assert G.team_size_for(work) == team  # the C++ gufunc_team_size
    assert G.team_size_for(work, 512) == (512 if team == 256 else team)


# ---- errors at the call (types before values; none of these needs numba) ----------------------------

def _plain_dot(a, b, out):
    s = 0.0
    for i in range(a.shape[0]):
        s += a[i] * b[i]
    out[0] = s


def _coop_dot(rank, size, a, b, out):
    s = 0.0
    for i in range(rank, a.shape[0], size):
        s += a[i] * b[i]
    s = G.team_sum(s, rank, size)
    if rank == 0:
        out[0] = s


def test_call_errors():
    g = G.gufunc("(n),(n)->()", _plain_dot)
    a = np.ones((3, 4))
    with pytest.raises(TypeError, match="takes 2 inputs, 1 given"):
        g(a)
    with pytest.raises(TypeError, match="argument 1 is a str"):
        g(a, "abc")
    with pytest.raises(TypeError, match="argument 1 is a dict"):
        g(a, {})
    with pytest.raises(TypeError, match="dtype object"):
        g(a, np.array([None] * 4, dtype=object))
    with pytest.raises(TypeError, match=r"dtype \[\('x'"):
        g(a, np.zeros(4, dtype=[("x", "f8")]))
    with pytest.raises(TypeError, match=">f8"):
        g(a, np.ones(4, dtype=">f8"))
    with pytest.raises(ValueError, match="core dimension 'n' has size 5 but argument 0 gives it size 4"):
        g(a, np.ones(5))
    with pytest.raises(ValueError, match="argument 1 is a scalar but the signature gives it 1 core dimensions"):
        g(a, 2.0)
    with pytest.raises(ValueError, match=r"output 0 has shape \(1,\) but the arguments give \(3,\)"):
        g(a, a, out=np.empty(1))
    with pytest.raises(ValueError, match="read-only"):
        ro = np.empty(3)
        ro.flags.writeable = False
        g(a, a, out=ro)
    with pytest.raises(ValueError, match="broadcast view"):
        g(a, a, out=np.lib.stride_tricks.as_strided(np.empty(1), (3,), (0,)))
    with pytest.raises(TypeError, match="output 0 is a list"):
        g(a, a, out=[0.0, 0.0, 0.0])
    with pytest.raises(ValueError, match="out has 2 entries for 1 outputs"):
        g(a, a, out=(np.empty(3), np.empty(3)))
    with pytest.raises(TypeError, match="dtype"):
        g(a, a, dtype=object)
    with pytest.raises(ValueError, match="team 2 needs a cooperative body"):
        g(a, a, team=2)


def test_factory_errors():
    with pytest.raises(TypeError, match="takes 3 parameters but the signature needs 5: body\\(rank, size"):
        G.gufunc("(n),(n)->()", _plain_dot, cooperative=True)
    with pytest.raises(TypeError, match="takes 5 parameters but the signature needs 3: body\\(inputs"):
        G.gufunc("(n),(n)->()", _coop_dot)
    with pytest.raises(TypeError, match="must be a Python function"):
        G.gufunc("(n)->()", 3)
    with pytest.raises(ValueError, match="team 3 must be 0 \\(automatic\\), a power of two up to 32, or the block "
                                         "size 256"):
        G.gufunc("(n),(n)->()", _coop_dot, cooperative=True, team=3)
    with pytest.raises(ValueError, match="team 64"):
        G.gufunc("(n),(n)->()", _coop_dot, cooperative=True, team=64)
    with pytest.raises(TypeError, match="team must be an int"):
        G.gufunc("(n),(n)->()", _coop_dot, cooperative=True, team=2.0)
    with pytest.raises(ValueError, match="team 4 needs a cooperative body"):
        G.gufunc("(n),(n)->()", _plain_dot, team=4)
    with pytest.raises(ValueError, match="block 100 must be a multiple of 32"):
        G.gufunc("(n),(n)->()", _plain_dot, block=100)
    with pytest.raises(TypeError, match="cooperative must be True or False"):
        G.gufunc("(n),(n)->()", _plain_dot, cooperative=1)
    assert G.gufunc("(n),(n)->()", _coop_dot, cooperative=True, team="block").team == 256
    assert G.gufunc("(n),(n)->()", _coop_dot, cooperative=True, team=32, block=512).team == 32


def test_kernel_source_reads_as_planned():
    g = G.gufunc("(n),(n)->()", _coop_dot, cooperative=True)
    src = g.kernel_source(np.ones((10, 64), np.float32), np.ones(64, np.float32))
    assert "i = tid // 8" in src and "body(rank, 8, a0[i], a1[i], o0[i:i + 1])" in src, src
    g = G.gufunc("(),()->()", lambda x, y, o: None)
    src = g.kernel_source(np.ones((4, 1, 3)), 2.5)  # contiguous: one loop dimension; the scalar by value
    assert "body(a0[i], a1, o0[i:i + 1])" in src, src
    src = g.kernel_source(np.ones((4, 1, 3)), np.ones((5, 1)))  # loop (4,5,3): nothing merges
    assert "body(a0[d0, d1, d2], a1[d0, d1, d2], o0[d0, d1, d2:d2 + 1])" in src and "d2 = q % e2" in src, src
    compile(src, "<kernel>", "exec")


def _run_py(code: str, env_extra: dict, timeout: float = 900):
    env = dict(os.environ)
    env.pop("NUMBA_ENABLE_CUDASIM", None)
    env.update(env_extra)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout, env=env)


def test_import_without_numba_and_the_install_message():
    """spillway._gufunc imports with numba absent; calling a gufunc then says how to install it."""
    code = f"""
import sys
sys.modules["numba"] = None  # import numba -> ImportError
sys.path.insert(0, {HERE!r})
import test_gufunc as t
import numpy as np
g = t.G.gufunc("(n),(n)->()", t._plain_dot)
try:
    g(np.ones((2, 3)), np.ones(3))
except ImportError as e:
    print("IMPORTERROR", e)
"""
    r = _run_py(code, {})
    assert r.returncode == 0, r.stdout + r.stderr
    assert "IMPORTERROR" in r.stdout and "pip install numba-cuda" in r.stdout, r.stdout


def test_row_stack_shim_only_when_missing():
    code = f"""
import sys
sys.path.insert(0, {HERE!r})
import numpy as np
import test_gufunc as t
had = hasattr(np, "row_stack")
orig = getattr(np, "row_stack", None)
if t.G.NUMPY_ROW_STACK_SHIM:
    # Already shimmed (this NumPy lacks row_stack and numba was imported on the way here): the
    # function in place is spillway's, and applying again changes nothing.
    assert had and "spillway" in (orig.__doc__ or "")
    t.G._apply_row_stack_shim()
    assert np.row_stack is orig
    del np.row_stack
    t.G.NUMPY_ROW_STACK_SHIM = False
else:
    t.G._apply_row_stack_shim()
    if had:  # present: untouched
        assert np.row_stack is orig and t.G.NUMPY_ROW_STACK_SHIM is False
        del np.row_stack
    else:  # missing (and numba not imported yet): shimmed now
        assert t.G.NUMPY_ROW_STACK_SHIM is True and "spillway" in (np.row_stack.__doc__ or "")
        del np.row_stack
        t.G.NUMPY_ROW_STACK_SHIM = False
t.G._apply_row_stack_shim()
assert t.G.NUMPY_ROW_STACK_SHIM is True
a, b = np.arange(3.0), np.arange(3.0, 6.0)
np.testing.assert_array_equal(np.row_stack((a, b)), np.vstack((a, b)))
assert np.row_stack((a, b), dtype=np.float32).dtype == np.float32
print("OK", had)
"""
    r = _run_py(code, {})
    assert r.returncode == 0 and "OK" in r.stdout, r.stdout + r.stderr


# ---- the kernel path under Numba's CUDA simulator (a subprocess) ------------------------------------

def _sim_cases():
    """Cases run under NUMBA_ENABLE_CUDASIM=1: (name, fn(rng)). Each compares with NumPy."""
    import spillway._gufunc as g  # the module the subprocess loaded through _load_gufunc_module

    team_sum = g.team_sum

    def dot(a, b, out):
        s = 0.0
        for i in range(a.shape[0]):
            s += a[i] * b[i]
        out[0] = s

    def cdot(rank, size, a, b, out):
        s = 0.0
        for i in range(rank, a.shape[0], size):
            s += a[i] * b[i]
        s = team_sum(s, rank, size)
        if rank == 0:
            out[0] = s

    def isum(rank, size, a, out):
        s = 0
        for i in range(rank, a.shape[0], size):
            s += a[i]
        s = team_sum(s, rank, size)
        if rank == 0:
            out[0] = s

    def pricer(rank, size, mult_by, discount, cv):  # seed 002's body, as the C++ seed writes it
        cols = mult_by.shape[1]
        n = mult_by.shape[0] * cols
        for i in range(rank, n, size):
            cv[i // cols, i % cols] = mult_by[i // cols, i % cols] * discount[i // cols, i % cols]

    def axpb(x, y, o):
        o[0] = 2 * x + y

    def scale(a, s, out):
        for i in range(a.shape[0]):
            out[i] = a[i] * s

    def minmax(a, lo, hi):
        lo[0] = a[0]
        hi[0] = a[0]
        for i in range(1, a.shape[0]):
            lo[0] = min(lo[0], a[i])
            hi[0] = max(hi[0], a[i])

    def cross(a, b, c):
        c[0] = a[1] * b[2] - a[2] * b[1]
        c[1] = a[2] * b[0] - a[0] * b[2]
        c[2] = a[0] * b[1] - a[1] * b[0]

    def matmul(a, b, c):
        for i in range(a.shape[0]):
            for j in range(b.shape[1]):
                s = 0.0
                for k in range(a.shape[1]):
                    s += a[i, k] * b[k, j]
                c[i, j] = s

    def case_elementwise(rng):
        f = g.gufunc("(),()->()", axpb, block=32)
        for xs, ys, dt in [((4, 1, 3), (5, 1), np.float64), ((7,), (), np.float32), ((2, 3), (2, 3), np.int32)]:
            x = (rng.random(xs) * 10).astype(dt)
            y = (rng.random(ys) * 10).astype(dt)
            got = f(x, y)
            want = 2 * x + y
            assert got.shape == want.shape and got.dtype == want.dtype, (got.shape, got.dtype, want.dtype)
            np.testing.assert_allclose(got, want, rtol=1e-6)
        got = f(2.0, np.arange(3.0))  # a Python scalar by value
        np.testing.assert_array_equal(got, 4.0 + np.arange(3.0))
        assert f.last_path == "simulator"

    def case_dot_plain_and_teams(rng):
        a = rng.standard_normal((5, 3, 37))
        b = rng.standard_normal((3, 37))
        want = np.einsum("ijk,jk->ij", a, b)
        np.testing.assert_allclose(g.gufunc("(n),(n)->()", dot, block=32)(a, b), want, rtol=1e-12, atol=1e-12)
        coop = g.gufunc("(n),(n)->()", cdot, cooperative=True, block=64)
        for team in (None, 1, 2, 4, 8, 32, "block"):
            got = coop(a, b, team=team)
            np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12, err_msg=f"team {team}")

    def case_pricer(rng):
        mb = rng.uniform(0.5, 1.5, (40, 5))
        disc = rng.uniform(0.5, 1.5, (3, 40, 5))
        f = g.gufunc("(m,o),(m,o)->(m,o)", pricer, cooperative=True, block=64)
        out = np.full((3, 40, 5), np.nan)
        got = f(mb, disc, out=out)
        assert got is out
        np.testing.assert_array_equal(out, mb * disc)  # one multiply each: exact
        got = f(mb, disc, team=4)
        np.testing.assert_array_equal(got, mb * disc)

    def case_team_sum_integers(rng):
        f = g.gufunc("(n)->()", isum, cooperative=True, block=32)
        for dt in (np.int32, np.int64):
            a = rng.integers(-1000, 1000, (6, 50)).astype(dt)
            out = np.full(6, -7, dtype=dt)
            f(a, out=out, team=8)
            np.testing.assert_array_equal(out, a.sum(axis=1))

    def case_scalar_by_value(rng):
        f = g.gufunc("(n),()->(n)", scale, block=32)
        a = rng.random((4, 6)).astype(np.float32)
        got = f(a, 3.0)
        assert got.dtype == np.float32  # a Python float is weak (NEP 50)
        np.testing.assert_allclose(got, a * np.float32(3.0), rtol=1e-6)
        got = f(a, np.float64(3.0))
        assert got.dtype == np.float64
        np.testing.assert_allclose(got, a * 3.0, rtol=1e-6)

    def case_strided_and_reversed(rng):
        f = g.gufunc("(n),(n)->()", dot, block=32)
        base = rng.standard_normal((8, 12))
        a = base[::-2, ::3]  # negative and non-unit strides
        b = rng.standard_normal((4, 4)).T
        out_base = np.full((4, 3), np.nan)
        out = out_base[:, 1]  # a strided output, written in place
        f(a, b, out=out)
        np.testing.assert_allclose(out, np.einsum("ij,ij->i", a, b), rtol=1e-12)
        assert np.isnan(out_base[:, 0]).all() and np.isnan(out_base[:, 2]).all()

    def case_two_outputs(rng):
        f = g.gufunc("(n)->(),()", minmax, block=32)
        a = rng.standard_normal((3, 5, 9))
        lo, hi = f(a)
        np.testing.assert_array_equal(lo, a.min(axis=-1))
        np.testing.assert_array_equal(hi, a.max(axis=-1))

    def case_fixed_and_matmul(rng):
        a = rng.standard_normal((6, 3))
        b = rng.standard_normal((2, 1, 3))
        np.testing.assert_allclose(g.gufunc("(3),(3)->(3)", cross, block=32)(a, b), np.cross(a, b), rtol=1e-12,
                                   atol=1e-12)
        x = rng.standard_normal((2, 3, 4, 5))
        y = rng.standard_normal((3, 5, 2))
        np.testing.assert_allclose(g.gufunc("(m,n),(n,p)->(m,p)", matmul, block=32)(x, y), x @ y, rtol=1e-12)

    def case_empty_and_single(rng):
        f = g.gufunc("(n),(n)->()", dot, block=32)
        got = f(np.ones((0, 4)), np.ones(4))
        assert got.shape == (0,)
        got = f(np.ones((3, 0)), np.ones(0))  # empty cores: each instance still writes its output
        np.testing.assert_array_equal(got, np.zeros(3))
        a, b = rng.random(7), rng.random(7)
        got = f(a, b)
        assert got.shape == () and np.isclose(got[()], a @ b)

    def case_device_arrays(rng):
        from numba import cuda

        a = rng.standard_normal((9, 16))
        b = rng.standard_normal(16)
        da, db = cuda.to_device(a), cuda.to_device(b)
        f = g.gufunc("(n),(n)->()", cdot, cooperative=True, block=32)
        got = f(da, db)
        assert type(got).__name__ == "FakeCUDAArray" and f.last_path == "simulator"
        np.testing.assert_allclose(got.copy_to_host(), a @ b, rtol=1e-12)
        dout = cuda.to_device(np.full(9, np.nan))
        assert f(da, b, out=dout) is dout  # a host input beside device inputs is copied to the device
        np.testing.assert_allclose(dout.copy_to_host(), a @ b, rtol=1e-12)

    return [(n, fn) for n, fn in sorted(locals().items()) if n.startswith("case_")]


def _sim_main(seed: int) -> None:
    import traceback

    results = {}
    for i, (name, fn) in enumerate(_sim_cases()):
        try:
            fn(np.random.default_rng(seed + i))
            results[name] = "ok"
        except Exception:  # noqa: BLE001 - reported to the parent test
            results[name] = traceback.format_exc()
    print("SIMRESULTS " + json.dumps(results))


SIM_CASES = ["case_device_arrays", "case_dot_plain_and_teams", "case_elementwise", "case_empty_and_single",
             "case_fixed_and_matmul", "case_pricer", "case_scalar_by_value", "case_strided_and_reversed",
             "case_team_sum_integers", "case_two_outputs"]


@pytest.fixture(scope="module")
def sim_results():
    need(HAVE_NUMBA, "numba-cuda is not installed (pip install numba-cuda): the simulator tests need it")
    seed = _seed("test_gufunc simulator cases (case i uses seed + i)")
    code = f"import sys; sys.path.insert(0, {HERE!r}); import test_gufunc as t; t._sim_main({seed})"
    r = _run_py(code, {"NUMBA_ENABLE_CUDASIM": "1"})
    line = [ln for ln in r.stdout.splitlines() if ln.startswith("SIMRESULTS ")]
    assert r.returncode == 0 and line, r.stdout[-4000:] + r.stderr[-4000:]
    return json.loads(line[-1][len("SIMRESULTS "):])


def test_sim_case_list_is_complete():
    names = sorted(n for n, _ in _sim_cases())
    assert names == SIM_CASES


@pytest.mark.parametrize("case", SIM_CASES)
def test_simulator(sim_results, case):
    assert sim_results.get(case) == "ok", sim_results.get(case, "case did not run")


# ---- the device code, compiled to PTX with no GPU (a subprocess) ---------------------------------------

def _ptx_main() -> None:
    import spillway._gufunc as g

    f32 = np.float32
    out = {}
    coop = g.gufunc("(n),(n)->()", _coop_dot, cooperative=True)
    out["dot64_team8"] = coop.ptx(np.ones((10, 64), f32), np.ones((10, 64), f32))
    out["dot_block"] = coop.ptx(np.ones((3, 5000)), np.ones(5000))
    out["dot_plain"] = g.gufunc("(n),(n)->()", _plain_dot).ptx(np.ones((10, 64), f32), np.ones((10, 64), f32))
    mod = {"team_sum": g.team_sum}
    exec("def pricer(rank, size, mult_by, discount, cv):\n"
         "    cols = mult_by.shape[1]\n"
         "    n = mult_by.shape[0] * cols\n"
         "    for i in range(rank, n, size):\n"
         "        cv[i // cols, i % cols] = mult_by[i // cols, i % cols] * discount[i // cols, i % cols]\n", mod)
    out["pricer"] = g.gufunc("(m,o),(m,o)->(m,o)", mod["pricer"], cooperative=True).ptx(
        np.ones((4000, 5)), np.ones((10, 4000, 5)))
    exec("def isum(rank, size, a, out):\n"
         "    s = a.dtype.type(0)\n"
         "    for i in range(rank, a.shape[0], size):\n"
         "        s += a[i]\n"
         "    s = team_sum(s, rank, size)\n"
         "    if rank == 0:\n"
         "        out[0] = s\n", mod)
    out["isum32_team4"] = g.gufunc("(n)->()", mod["isum"], cooperative=True).ptx(
        np.ones((10, 20), np.int32), team=4)
    exec("def axpb(x, y, o):\n    o[0] = 2 * x + y\n", mod)
    out["axpb_scalar"] = g.gufunc("(),()->()", mod["axpb"]).ptx(np.ones((4, 1, 3)), 2.5)
    # the launch path's argument types (what a GPU call would compile), without a GPU: a recording
    # kernel stands in for the compiled one; the recorded types must match the arguments and compile
    import numba

    seen = {}

    class Recorder:
        def __init__(self, types):
            self.types = types

        def __getitem__(self, config):
            def call(*args):
                seen["args"] = [str(numba.typeof(a)) for a in args]
                seen["types"] = [str(t) for t in self.types]
            return call

    exec("def scale(a, s, out):\n    for i in range(a.shape[0]):\n        out[i] = a[i] * s\n", mod)
    sc = g.gufunc("(n),()->(n)", mod["scale"])
    sc._kernel = lambda scalar_in, core_ranks, loop_rank, team, types: Recorder(types)
    a = np.ones((3, 5, 4))
    o = np.empty((3, 5, 4))
    lay = [g.OperandLayout(a.shape, (20, 4, 1), 1), g.OperandLayout((), None, 0)]
    plan = g.plan_gufunc(sc.signature, lay, [g.OperandLayout(o.shape, (20, 4, 1), 1)])

    def view(x):
        return lambda sh, st: np.lib.stride_tricks.as_strided(x, sh, tuple(v * 8 for v in st))

    sc._launch(plan, 1, [("array", view(a), a.dtype), ("scalar", np.float64(2.0), np.dtype("f8")),
                         ("array", view(o), o.dtype)])
    out["launch_types"] = json.dumps(seen)
    # a broadcast input (stride 0 over the first loop dimension): its view is not C-contiguous
    seen = {}
    ab = np.ones((5, 4))
    lay = [g.OperandLayout((3, 5, 4), (0, 4, 1), 1), g.OperandLayout((), None, 0)]
    plan_b = g.plan_gufunc(sc.signature, lay, [g.OperandLayout(o.shape, (20, 4, 1), 1)])
    sc._launch(plan_b, 1, [("array", view(ab), ab.dtype), ("scalar", np.float64(2.0), np.dtype("f8")),
                           ("array", view(o), o.dtype)])
    out["launch_types_broadcast"] = json.dumps(seen)
    fn = sc._kernel_function([False, True], [1, 0, 1], len(plan.loop_extents), 1)
    types = sc._kernel_types(numba, len(plan.loop_extents), [a.dtype, np.dtype("f8"), o.dtype], [2, 0, 2],
                             [False, True])
    import numba.cuda.dispatcher as disp
    from numba import cuda

    class _Cc:
        compute_capability = (9, 0)

    saved = disp.get_current_device
    disp.get_current_device = lambda: _Cc()
    try:
        out["launch_ptx"] = cuda.compile_ptx(fn, types, cc=(9, 0))[0]
    finally:
        disp.get_current_device = saved
    print("PTXRESULTS " + json.dumps({k: v for k, v in out.items()}))


def _nvvm_reason():
    if not HAVE_NUMBA:
        return "numba-cuda is not installed (pip install numba-cuda)"
    return None


@pytest.fixture(scope="module")
def ptx_results():
    reason = _nvvm_reason()
    need(reason is None, reason or "")
    code = f"import sys; sys.path.insert(0, {HERE!r}); import test_gufunc as t; t._ptx_main()"
    r = _run_py(code, {})
    line = [ln for ln in r.stdout.splitlines() if ln.startswith("PTXRESULTS ")]
    if not line and ("NVVM" in r.stderr or "libnvvm" in r.stderr):
        need(False, "numba-cuda finds no NVVM (the CUDA toolkit's libnvvm) to compile PTX: " + r.stderr[-300:])
    assert r.returncode == 0 and line, r.stdout[-3000:] + r.stderr[-6000:]
    return json.loads(line[-1][len("PTXRESULTS "):])


def test_ptx_cooperative_dot_uses_team_shuffles(ptx_results):
    p = ptx_results["dot64_team8"]
    assert ".entry" in p and "shfl.sync.bfly" in p and "bar.sync" not in p.split(".entry")[1].split("shfl")[0]
    # three butterfly rounds for a team of 8, each a 64-bit value (s is a Python float: float64)
    assert p.count("shfl.sync.bfly.b32") == 6


def test_ptx_block_team_uses_shared_memory_and_barriers(ptx_results):
    p = ptx_results["dot_block"]
    assert "bar.sync" in p and ".shared" in p and "shfl.sync.bfly" in p


def test_launch_types_match_the_arguments(ptx_results):
    seen = json.loads(ptx_results["launch_types"])
    # n, then one type per operand: the input view, the scalar by value, the output view
    assert len(seen["args"]) == len(seen["types"]) == 4, seen
    assert seen["types"][0] == "int64" and seen["types"][2] == "float64", seen
    # C-contiguous views are typed "C" (no strides loaded in the kernel), exactly as numba types them
    assert seen["types"][1].startswith("array(float64, 2d, C") and seen["types"][3].startswith("array(float64, 2d, C")
    assert seen["args"][1] == seen["types"][1] and seen["args"][3] == seen["types"][3], seen
    assert ".entry" in ptx_results["launch_ptx"]
    # a broadcast operand stays "A" (its loop stride is 0); the contiguous output is still "C"
    b = json.loads(ptx_results["launch_types_broadcast"])
    assert len(b["types"]) == 5, b  # n, the second loop extent, a, s, out: the loop did not collapse
    assert b["types"][2].startswith("array(float64, 3d, A") and b["args"][2].startswith("array(float64, 3d, A"), b
    assert b["types"][4] == b["args"][4] and b["types"][4].startswith("array(float64, 3d, C"), b


def test_ptx_plain_and_other_forms(ptx_results):
    assert "shfl" not in ptx_results["dot_plain"] and ".entry" in ptx_results["dot_plain"]
    assert "st.f64" in ptx_results["pricer"] or "st.global.f64" in ptx_results["pricer"]
    assert "shfl.sync.bfly.b32" in ptx_results["isum32_team4"]
    assert ".entry" in ptx_results["axpb_scalar"] and "fma.rn.f64" in ptx_results["axpb_scalar"] or \
        "add.f64" in ptx_results["axpb_scalar"]


# ---- seed 002 on the GPU ----------------------------------------------------------------------------------

def _gpu():
    need(HAVE_NUMBA, "numba-cuda is not installed (pip install numba-cuda)")
    if os.environ.get("NUMBA_ENABLE_CUDASIM") == "1":
        need(False, "NUMBA_ENABLE_CUDASIM=1 in this process: the GPU tests need the real numba.cuda")
    from numba import cuda

    need(cuda.is_available(), "no GPU: numba.cuda.is_available() is False")
    return cuda


def _pricer_gufunc():
    def pricer(rank, size, mult_by, discount, cv):
        cols = mult_by.shape[1]
        n = mult_by.shape[0] * cols
        for i in range(rank, n, size):
            cv[i // cols, i % cols] = mult_by[i // cols, i % cols] * discount[i // cols, i % cols]

    return G.gufunc("(m,o),(m,o)->(m,o)", pricer, cooperative=True)


def _dot_gufunc():
    def dot(rank, size, a, b, out):
        s = a.dtype.type(0)  # the arrays' type: float32 stays float32 (a[0] * 0 would be float64)
        for i in range(rank, a.shape[0], size):
            s += a[i] * b[i]
        s = G.team_sum(s, rank, size)
        if rank == 0:
            out[0] = s

    return G.gufunc("(n),(n)->()", dot, cooperative=True)


def test_gpu_seed_002_pricer_device(rng):
    cuda = _gpu()
    mb = rng.uniform(0.5, 1.5, (4000, 5))
    disc = rng.uniform(0.5, 1.5, (1000, 4000, 5))
    f = _pricer_gufunc()
    d_mb, d_disc = cuda.to_device(mb), cuda.to_device(disc)
    d_out = cuda.to_device(np.full(disc.shape, np.nan))  # poisoned: every element must be written
    got = f(d_mb, d_disc, out=d_out)
    assert got is d_out and f.last_path == "device"
    np.testing.assert_array_equal(d_out.copy_to_host(), mb * disc)
    got = f(d_mb, d_disc)  # allocated output: a Numba device array
    assert cuda.is_cuda_array(got)
    np.testing.assert_array_equal(got.copy_to_host(), mb * disc)


def test_gpu_seed_002_pricer_host_streamed(rng):
    _gpu()
    mb = rng.uniform(0.5, 1.5, (4000, 5))
    disc = rng.uniform(0.5, 1.5, (1000, 4000, 5))
    f = _pricer_gufunc()
    out = np.full(disc.shape, np.nan)
    got = f(mb, disc, out=out, budget="48MiB")  # 160 MB in, 160 MB out: many chunks
    assert got is out and f.last_path == "host-streamed"
    np.testing.assert_array_equal(out, mb * disc)
    small = disc[:50]
    got = f(mb, small)
    assert f.last_path == "host-whole"
    np.testing.assert_array_equal(got, mb * small)


def test_gpu_dot_64_device(rng):
    cuda = _gpu()
    a = rng.standard_normal((1_000_000, 64)).astype(np.float32)
    b = rng.standard_normal((1_000_000, 64)).astype(np.float32)
    want = np.einsum("ij,ij->i", a.astype(np.float64), b.astype(np.float64))
    f = _dot_gufunc()
    da, db = cuda.to_device(a), cuda.to_device(b)
    for team in (None, 4, 32, "block"):
        d_out = cuda.to_device(np.full(a.shape[0], np.nan, np.float32))
        f(da, db, out=d_out, team=team)
        got = d_out.copy_to_host()
        assert not np.isnan(got).any(), f"team {team}: rows left unwritten"
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4, err_msg=f"team {team}")


def test_gpu_dot_64_host_streamed(rng, monkeypatch):
    _gpu()
    a = rng.standard_normal((400_000, 64)).astype(np.float32)
    b = rng.standard_normal((400_000, 64)).astype(np.float32)
    want = np.einsum("ij,ij->i", a.astype(np.float64), b.astype(np.float64))
    f = _dot_gufunc()
    out = np.full(a.shape[0], np.nan, np.float32)
    f(a, b, out=out, budget="16MiB")
    assert f.last_path == "host-streamed"
    np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-4)
    # a broadcast (resident) operand beside a streamed one, and a loop of rank 2
    bb = rng.standard_normal((7, 64)).astype(np.float32)
    aa = rng.standard_normal((60_000, 7, 64)).astype(np.float32)
    monkeypatch.setattr(G, "WHOLE_COPY_MAX", 1 << 20)
    got = f(aa, bb, budget="16MiB")
    assert f.last_path == "host-streamed" and got.shape == (60_000, 7)
    np.testing.assert_allclose(got, np.einsum("ijk,jk->ij", aa.astype(np.float64), bb), rtol=1e-4, atol=1e-4)


def test_gpu_cupy_in_cupy_out(rng):
    _gpu()
    need(importlib.util.find_spec("cupy") is not None, "cupy is not installed")
    import cupy as cp

    a = rng.standard_normal((5000, 64)).astype(np.float32)
    b = rng.standard_normal(64).astype(np.float32)
    f = _dot_gufunc()
    s = cp.cuda.Stream(non_blocking=True)
    with s:
        da, db = cp.asarray(a), cp.asarray(b)
        got = f(da, db)  # enqueued on CuPy's current stream (the arrays' CAI stream)
        assert isinstance(got, cp.ndarray) and got.shape == (5000,)
        host = cp.asnumpy(got)
    np.testing.assert_allclose(host, a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)


def test_gpu_broadcast_scalars_teams(rng):
    cuda = _gpu()

    def axpb(x, y, o):
        o[0] = 2 * x + y

    f = G.gufunc("(),()->()", axpb)
    x = rng.standard_normal((30, 1, 17))
    y = rng.standard_normal((40, 1))
    np.testing.assert_array_equal(f(cuda.to_device(x), cuda.to_device(y)).copy_to_host(), 2 * x + y)
    np.testing.assert_array_equal(f(cuda.to_device(x), 1.5).copy_to_host(), 2 * x + 1.5)

    def isum(rank, size, a, out):
        s = a.dtype.type(0)
        for i in range(rank, a.shape[0], size):
            s += a[i]
        s = G.team_sum(s, rank, size)
        if rank == 0:
            out[0] = s

    g = G.gufunc("(n)->()", isum, cooperative=True)
    for dt in (np.int32, np.int64, np.float32):
        a = rng.integers(-1000, 1000, (3000, 300)).astype(dt)
        for team in (1, 2, 8, 32, "block"):
            got = g(cuda.to_device(a), team=team).copy_to_host()
            np.testing.assert_array_equal(got, a.sum(axis=1, dtype=np.int64).astype(dt), err_msg=f"{dt} team {team}")


def test_gpu_typing_error_leaves_outputs_untouched(rng, monkeypatch):
    _gpu()

    def broken(rank, size, a, b, out):
        out[0] = undefined_name_in_body(a)  # noqa: F821 - the typing error under test

    f = G.gufunc("(n),(n)->()", broken, cooperative=True)
    monkeypatch.setattr(G, "WHOLE_COPY_MAX", 1 << 16)
    a = rng.standard_normal((50_000, 64))
    out = np.full(50_000, np.nan)
    with pytest.raises(Exception) as e:
        f(a, a, out=out, budget="8MiB")
    assert "undefined_name_in_body" in str(e.value)
    assert np.isnan(out).all()  # compiled before any row moved


# ---- linked kernels (the body's LTO-IR linked into spillway's CUDA C++ loop kernel) ----------------

def _lto_plan(sig_text, shapes, outs, dtypes, team, cooperative, scalars=(), strides=None):
    L = _lto_module()
    sig = G.parse_signature(sig_text)
    lays = []
    for i, sh in enumerate(shapes):
        if i in scalars:
            lays.append(G.OperandLayout((), None, 0))
        else:
            st = strides[i] if strides and strides[i] is not None else G._c_strides(sh)
            lays.append(G.OperandLayout(tuple(sh), tuple(st), len(sig.inputs[i])))
    out_lays = [G.OperandLayout(tuple(o), G._c_strides(o), len(c)) for o, c in zip(outs, sig.outputs)]
    plan = G.plan_gufunc(sig, lays, out_lays)
    ops = [("scalar", np.dtype(dt).type(1), np.dtype(dt)) if i in scalars else ("array", None, np.dtype(dt))
           for i, dt in enumerate(dtypes)]
    return L.plan_for(plan, ops, team, 256, cooperative, len(sig.inputs), list(sig.inputs) + list(sig.outputs))


def _lto_module():
    import importlib

    return importlib.import_module(G.__name__.rsplit(".", 1)[0] + "._gufunc_lto")


def test_lto_plans_and_sources():
    """Which launches the linked kernel takes, and what it generates (host, no numba needed)."""
    L = _lto_module()
    dot = _lto_plan("(n),(n)->()", [(1000, 64), (1000, 64)], [(1000,)], ["float32"] * 3, 8, True)
    assert dot.staged == (True, True, False) and dot.core_ranks == (1, 1, 0)
    src = L.kernel_source(dot)
    assert "spillway_gufunc_staged" in src and "spillway_gufunc_direct" in src and "cp.async.cg" in src
    assert dot.names == ("n",)  # one parameter per signature dimension, shared by the operands
    assert "def _wrapper(rank, p0, p1, p2, z0):" in L.wrapper_source(dot)
    assert "body(rank, 8, _cview(p0, (z0,)), _cview(p1, (z0,)), _cview(p2, (_one,)))" in L.wrapper_source(dot)
    # a fixed size is a constant in both sources
    fx = _lto_plan("(3,n)->(n)", [(100, 3, 16)], [(100, 16)], ["float32"] * 2, 1, False)
    assert "_cview(p0, (_k3, z0,))" in L.wrapper_source(fx) and "#define _k3 3LL" in L.kernel_source(fx)
    # seed 002's pricer: multBy broadcast (loop stride 0) is taken; a block team is not staged
    pr = _lto_plan("(m,o),(m,o)->(m,o)", [(4000, 5), (10, 4000, 5)], [(10, 4000, 5)], ["float64"] * 3, 256, True)
    assert pr is not None and not any(pr.staged)
    assert "spillway_gufunc_staged" not in L.kernel_source(pr)
    assert "__launch_bounds__(BLOCK, 8)" in L.kernel_source(pr)  # a block team: 32 registers (full occupancy)
    # a scalar passes by value; the plain form has no rank/size
    ax = _lto_plan("(),()->()", [(30, 17), ()], [(30, 17)], ["float64"] * 3, 1, False, scalars=(1,))
    assert ax.kinds == ("array", "scalar", "array")
    assert "body(p0[0], s1, _cview(p2, (_one,)))" in L.wrapper_source(ax)
    assert "double s1" in L.kernel_source(ax)
    # rows too wide to stage (2 x 32 x 2400 bytes > 48 KiB): direct
    wide = _lto_plan("(n)->()", [(3000, 300)], [(3000,)], ["int64"] * 2, 8, True)
    assert wide is not None and not any(wide.staged)
    # not taken: complex and float16 (no C type here), a loop of rank 2, a core that is not C-contiguous
    assert _lto_plan("(n),(n)->()", [(10, 4), (10, 4)], [(10,)], ["complex128"] * 3, 1, True) is None
    assert _lto_plan("(n),(n)->()", [(10, 4), (10, 4)], [(10,)], ["float16"] * 3, 1, True) is None
    assert _lto_plan("(n)->()", [(6, 10, 4)], [(6, 10)], ["float32"] * 2, 1, True,
                     strides=[(100, 8, 1)]) is None  # padded: the loop does not collapse to rank 1
    assert _lto_plan("(n)->()", [(10, 4)], [(10,)], ["float32"] * 2, 1, True, strides=[(1, 10)]) is None


def _lto_build_main():
    """(subprocess) builds the linked cubins for the dot, the pricer and a scalar body, no GPU."""
    import numba.cuda.dispatcher as disp

    class _Cc:
        compute_capability = (9, 0)

    disp.get_current_device = lambda: _Cc()
    L = _lto_module()
    mod = {"team_sum": G.team_sum, "np": np}
    exec("def dot(rank, size, a, b, out):\n"
         "    s = a.dtype.type(0)\n"
         "    for i in range(rank, a.shape[0], size):\n"
         "        s += a[i] * b[i]\n"
         "    s = team_sum(s, rank, size)\n"
         "    if rank == 0:\n"
         "        out[0] = s\n"
         "def pricer(rank, size, m, d, o):\n"
         "    c = m.shape[1]\n"
         "    for i in range(rank, m.shape[0] * c, size):\n"
         "        o[i // c, i % c] = m[i // c, i % c] * d[i // c, i % c]\n"
         "def axpb(x, y, o):\n"
         "    o[0] = 2 * x + y\n", mod)
    out = {}
    for name, sig, shapes, outs, dts, team, coop, sc in (
            ("dot", "(n),(n)->()", [(1000, 64), (1000, 64)], [(1000,)], ["float32"] * 3, 8, True, ()),
            ("pricer", "(m,o),(m,o)->(m,o)", [(4000, 5), (10, 4000, 5)], [(10, 4000, 5)], ["float64"] * 3, 256, True,
             ()),
            ("axpb", "(),()->()", [(30, 17), ()], [(30, 17)], ["float64"] * 3, 1, False, (1,))):
        lp = _lto_plan(sig, shapes, outs, dts, team, coop, scalars=sc)
        g = G.gufunc(sig, mod[name], cooperative=coop)
        out[name] = L.build_cubin(g._body(), lp, (9, 0))[:4].hex()
    print("LTORESULTS " + json.dumps(out))


def test_lto_build_cubin():
    """The body's LTO-IR (numba-cuda), the loop kernel's (NVRTC) and the link (nvJitLink) give a
    cubin with no GPU present."""
    need(HAVE_NUMBA, "numba-cuda is not installed (pip install numba-cuda)")
    need(importlib.util.find_spec("cuda.bindings") is not None, "cuda-bindings is not installed")
    code = f"import sys; sys.path.insert(0, {HERE!r}); import test_gufunc as t; t._lto_build_main()"
    r = _run_py(code, {})
    line = [ln for ln in r.stdout.splitlines() if ln.startswith("LTORESULTS ")]
    if not line and any(w in r.stderr for w in ("NVVM", "libnvvm", "nvrtc", "nvJitLink", "nvjitlink")):
        need(False, "no NVVM, NVRTC or nvJitLink library here: " + r.stderr[-300:])
    assert r.returncode == 0 and line, r.stdout[-3000:] + r.stderr[-6000:]
    got = json.loads(line[-1][len("LTORESULTS "):])
    assert got == {"dot": "7f454c46", "pricer": "7f454c46", "axpb": "7f454c46"}  # ELF


def test_gpu_linked_kernels_match_numba(rng, monkeypatch):
    """Seed 002's shapes and a scalar body run the linked kernel, and give what the Numba kernel
    gives (SPILLWAY_GUFUNC_LTO=0)."""
    cuda = _gpu()
    a = rng.standard_normal((100_003, 64)).astype(np.float32)  # a last tile part full
    b = rng.standard_normal((100_003, 64)).astype(np.float32)
    f = _dot_gufunc()
    da, db = cuda.to_device(a), cuda.to_device(b)
    got = {}
    for lto in ("1", "0"):
        monkeypatch.setenv("SPILLWAY_GUFUNC_LTO", lto)
        for team in (None, 4, 32, "block"):
            d_out = cuda.to_device(np.full(a.shape[0], np.nan, np.float32))
            f(da, db, out=d_out, team=team)
            got[(lto, team)] = d_out.copy_to_host()
            # team 8 (auto) and 32 stage their rows; team 4's two 32 KiB tiles pass the staging cap
            # (48 KiB) and a block team is never staged: those run unstaged
            want = ("lto-staged" if team in (None, 32) else "lto") if lto == "1" else "numba"
            assert f.last_kernel == want, (lto, team, f.last_kernel, f.lto_error)
    for team in (None, 4, 32, "block"):
        np.testing.assert_allclose(got[("1", team)], got[("0", team)], rtol=1e-5, atol=1e-5)
    monkeypatch.setenv("SPILLWAY_GUFUNC_LTO", "1")
    mb = rng.uniform(0.5, 1.5, (4000, 5))
    disc = rng.uniform(0.5, 1.5, (30, 4000, 5))
    p = _pricer_gufunc()
    np.testing.assert_array_equal(p(cuda.to_device(mb), cuda.to_device(disc)).copy_to_host(), mb * disc)
    assert p.last_kernel == "lto", p.lto_error

    def axpb(x, y, o):
        o[0] = 2 * x + y

    g = G.gufunc("(),()->()", axpb)
    x = rng.standard_normal((30, 1, 17))
    np.testing.assert_array_equal(g(cuda.to_device(x), 1.5).copy_to_host(), 2 * x + 1.5)
    assert g.last_kernel == "lto", g.lto_error
    y = rng.standard_normal((40, 1))
    np.testing.assert_array_equal(g(cuda.to_device(x), cuda.to_device(y)).copy_to_host(), 2 * x + y)
    assert g.last_kernel == "numba"  # the broadcast loop keeps rank 3: the Numba kernel
