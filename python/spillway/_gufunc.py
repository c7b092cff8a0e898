"""spillway.gufunc: generalized ufuncs whose body is a Numba CUDA device function written in Python.

The user writes the body for ONE instance (the core arrays of one loop index), as for Numba's
``guvectorize``; spillway parses the layout signature with the C++ gufunc's rules
(``include/spillway/map/signature.hpp``), broadcasts the loop dimensions NumPy-style, merges the
loop dimensions every operand walks as one (``collapse_loop_dims`` in ``detail/gufunc_plan.hpp``),
generates a kernel in Python source that spreads the instances over threads with a grid-stride
loop, and compiles it with ``numba.cuda.jit`` once per signature, team size, loop rank and operand
types. In the cooperative form a team of threads shares each instance (the C++ ``gufunc_team``):
the body gets its ``rank`` and the team ``size`` first and combines partial results with
:func:`team_sum`.

Everything up to the kernel (parsing, binding, broadcasting, planning, team sizes) is plain
Python + NumPy and needs neither numba nor a GPU. numba-cuda is imported on the first call; with
``NUMBA_ENABLE_CUDASIM=1`` set before numba is imported, the same kernels run in Numba's CUDA
simulator on host arrays (how the tests check the kernel path on machines without a GPU).

On a GPU, launches whose plan it covers run a linked kernel instead (``_gufunc_lto``: the body
compiled to LTO-IR by numba-cuda, linked by nvJitLink into a loop kernel written in CUDA C++),
which moves seed 002's shapes at 0.89-0.98x of a device-to-device copy where the generated kernel
moved 0.60-0.70x; ``GUFunc.last_kernel`` says which ran.

See docs/python-gufunc.md.
"""

from __future__ import annotations

import functools
import math
import threading
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

__all__ = ["gufunc", "GUFunc", "Signature", "parse_signature", "team_sum", "GufuncStreamError"]

MAX_RANK = 8  # the C++ library's max_rank: at most 8 core dimensions per argument, 8 loop dimensions
BLOCK = 256  # threads per block, and the size of a block team (the C++ map_block)
WHOLE_COPY_MAX = 32 << 20  # host arrays up to this many bytes (inputs + outputs) are copied whole


# ---- signatures (the C++ parse_signature, same messages) -----------------------------------------

Dim = Union[str, int]  # a name bound by the arguments, or a fixed size


@dataclass(frozen=True)
class Signature:
    """A parsed layout signature: each input's and each output's core dimensions."""

    text: str
    inputs: Tuple[Tuple[Dim, ...], ...]
    outputs: Tuple[Tuple[Dim, ...], ...]


def _sig_error(text: str, pos: int, what: str):
    raise ValueError(f'gufunc signature "{text}": {what} at position {pos}')


def _skip(t: str, p: int) -> int:
    while p < len(t) and t[p].isspace():
        p += 1
    return p


def _is_alpha(c: str) -> bool:
    return c.isascii() and (c.isalpha() or c == "_")


def _is_alnum(c: str) -> bool:
    return c.isascii() and (c.isalnum() or c == "_")


def _parse_list(t: str, p: int):
    out = []
    while True:
        p = _skip(t, p)
        if p >= len(t) or t[p] != "(":
            _sig_error(t, p, "expected '('")
        p += 1
        dims: List[Dim] = []
        p = _skip(t, p)
        if p < len(t) and t[p] == ")":
            p += 1
        else:
            while True:
                p = _skip(t, p)
                start = p
                if p < len(t) and t[p].isascii() and t[p].isdigit():
                    v = 0
                    while p < len(t) and t[p].isascii() and t[p].isdigit():
                        if v > (1 << 50):
                            _sig_error(t, start, "fixed dimension too large")
                        v = v * 10 + int(t[p])
                        p += 1
                    dims.append(v)
                elif p < len(t) and _is_alpha(t[p]):
                    while p < len(t) and _is_alnum(t[p]):
                        p += 1
                    dims.append(t[start:p])
                elif p < len(t) and t[p] == "?":
                    _sig_error(t, p, "optional core dimensions ('?') are not supported")
                else:
                    _sig_error(t, p, "expected a dimension name or size")
                p = _skip(t, p)
                if p < len(t) and t[p] == ",":
                    p += 1
                    continue
                if p < len(t) and t[p] == ")":
                    p += 1
                    break
                _sig_error(t, p, "expected ',' or ')'")
        if len(dims) > MAX_RANK:
            _sig_error(t, p, "more than max_rank core dimensions")
        out.append(tuple(dims))
        p = _skip(t, p)
        if p < len(t) and t[p] == ",":
            p += 1
            continue
        return tuple(out), p


@functools.lru_cache(maxsize=256)
def parse_signature(text: str) -> Signature:
    """Parses a NumPy-style layout signature such as ``"(n),(n)->()"`` or ``"(m,o),(m,o)->(m,o)"``.

    Names are identifiers (bound by the arguments' shapes); a number fixes a size. Raises
    ``ValueError`` naming the text, what was expected and the position (0-based) of the problem,
    ``TypeError`` when ``text`` is not a string."""
    if not isinstance(text, str):
        raise TypeError(f"gufunc signature must be a str such as \"(n),(n)->()\", got {type(text).__name__}")
    inputs, p = _parse_list(text, 0)
    p = _skip(text, p)
    if p + 1 >= len(text) or text[p] != "-" or text[p + 1] != ">":
        _sig_error(text, p, "expected '->'")
    outputs, p = _parse_list(text, p + 2)
    p = _skip(text, p)
    if p != len(text):
        _sig_error(text, p, "unexpected trailing text")
    return Signature(text, inputs, outputs)


# ---- binding and broadcasting (the C++ bind_signature / broadcast_shapes, same messages) ---------

def shape_string(shape) -> str:
    s = ",".join(str(int(v)) for v in shape)
    return f"({s},)" if len(shape) == 1 else f"({s})"


def broadcast_shapes(shapes: Sequence[Sequence[int]], who: str = "broadcast_shapes",
                     names: Optional[Sequence[str]] = None) -> Tuple[int, ...]:
    """NumPy's broadcast of ``shapes`` (right-aligned; size-1 dimensions stretch). Raises
    ``ValueError`` naming ``who``, both arguments, their shapes, the dimension and both sizes."""

    def name(a):
        return names[a] if names is not None and a < len(names) else f"argument {a}"

    rank = max((len(s) for s in shapes), default=0)
    if rank > MAX_RANK:
        raise ValueError(f"{who}: broadcast rank {rank} exceeds max_rank {MAX_RANK}")
    out = [1] * rank
    owner = [-1] * rank
    for a, s in enumerate(shapes):
        for k, e in enumerate(s):
            d = rank - len(s) + k
            if e < 0:
                raise ValueError(f"{who}: {name(a)} has negative extent {e} in dimension {k}")
            if e == 1:
                continue
            if out[d] == 1:
                out[d] = int(e)
                owner[d] = a
            elif out[d] != e:
                o = shapes[owner[d]]
                raise ValueError(f"{who}: {name(a)} with shape {shape_string(s)} cannot be broadcast with "
                                 f"{name(owner[d])} with shape {shape_string(o)}: dimension {d - rank} (from the "
                                 f"right) has size {e} vs {out[d]}")
    return tuple(out)


@dataclass
class Binding:
    sizes: Dict[str, int]
    loop_shape: Tuple[int, ...]
    output_shapes: List[Tuple[int, ...]]


def bind_signature(sig: Signature, inputs: Sequence[Sequence[int]],
                   outputs: Optional[Sequence[Optional[Sequence[int]]]] = None) -> Binding:
    """Binds ``sig`` to the inputs' shapes (scalars: ``()``) and, where given, the outputs' shapes:
    each argument's trailing dimensions are its core dimensions, the rest broadcast as loop
    dimensions. Raises ``ValueError`` naming the argument, the core dimension and both sizes."""
    who = f'gufunc "{sig.text}"'
    if len(inputs) != len(sig.inputs):
        raise ValueError(f"{who}: the signature has {len(sig.inputs)} inputs but {len(inputs)} were given")
    outputs = list(outputs) if outputs is not None else []
    if outputs and len(outputs) != len(sig.outputs):
        raise ValueError(f"{who}: the signature has {len(sig.outputs)} outputs but {len(outputs)} were given")
    sizes: Dict[str, int] = {}
    origin: Dict[str, str] = {}
    loops, names = [], []

    def bind(core, shape, arg):
        shape = tuple(int(v) for v in shape)
        if len(shape) < len(core):
            raise ValueError(f"{who}: {arg} has shape {shape_string(shape)} (rank {len(shape)}) but needs at least "
                             f"{len(core)} core dimensions")
        nloop = len(shape) - len(core)
        for k, d in enumerate(core):
            e = shape[nloop + k]
            if e < 0:
                raise ValueError(f"{who}: {arg} has negative extent {e} in core dimension {k}")
            if isinstance(d, int):
                if e != d:
                    raise ValueError(f"{who}: {arg} core dimension {k} must be {d} but is {e}")
                continue
            if d not in sizes:
                sizes[d] = e
                origin[d] = arg
            elif sizes[d] != e:
                raise ValueError(f"{who}: {arg} core dimension '{d}' has size {e} but {origin[d]} gives it size "
                                 f"{sizes[d]}")
        loops.append(shape[:nloop])
        names.append(arg)

    for i, s in enumerate(inputs):
        bind(sig.inputs[i], s, f"argument {i}")
    for i, s in enumerate(outputs):
        if s is not None:
            bind(sig.outputs[i], s, f"output {i}")
    loop = broadcast_shapes(loops, who + " (loop dimensions)", names)
    out_shapes = []
    for i, core in enumerate(sig.outputs):
        shape = list(loop)
        for d in core:
            if isinstance(d, int):
                shape.append(d)
            elif d in sizes:
                shape.append(sizes[d])
            else:
                raise ValueError(f"{who}: output {i} core dimension '{d}' is not bound by any argument (give the "
                                 "output array)")
        out_shapes.append(tuple(shape))
    for i, s in enumerate(outputs):
        if s is not None and tuple(int(v) for v in s) != out_shapes[i]:
            raise ValueError(f"{who}: output {i} has shape {shape_string(s)} but the arguments give "
                             f"{shape_string(out_shapes[i])}")
    return Binding(sizes, loop, out_shapes)


# ---- the loop plan -------------------------------------------------------------------------------

@dataclass
class OperandLayout:
    """One operand as the planner sees it: ``shape`` and ``strides`` in elements (``None`` for a
    scalar passed by value), and its number of core dimensions."""

    shape: Tuple[int, ...]
    strides: Optional[Tuple[int, ...]]
    core_rank: int


@dataclass
class Plan:
    binding: Binding
    loop_extents: Tuple[int, ...]  # the collapsed loop the kernel walks (rank >= 1)
    instances: int
    max_core_size: int
    # per operand (inputs, then outputs): (loop strides over loop_extents, core shape, core strides)
    # in elements; None for scalars
    ops: List[Optional[Tuple[Tuple[int, ...], Tuple[int, ...], Tuple[int, ...]]]]


def _c_strides(shape) -> Tuple[int, ...]:
    out, acc = [], 1
    for n in reversed(shape):
        out.append(acc)
        acc *= max(int(n), 1)
    return tuple(reversed(out))


def _is_c_contiguous(shape, strides) -> bool:
    """Strides (elements) are exactly the C-order strides of ``shape``, size-1 dimensions
    included, and no extent is 0: such a view is C-contiguous for any reading of the flag, so a
    kernel typed for layout "C" accepts it (numba converts "C" to "A", never the reverse)."""
    if any(int(n) == 0 for n in shape):
        return False
    return tuple(int(v) for v in strides) == _c_strides(shape)


def collapse_loop(extents: Sequence[int], strides: Sequence[Sequence[int]]):
    """Drops size-1 loop dimensions and merges a dimension into its outer neighbour where every
    operand's outer stride is its inner stride times the inner extent (the C++
    collapse_loop_dims). Returns (extents, strides per operand); the result has rank >= 1 (a
    single instance is the loop (1,) with stride 0)."""
    ext: List[int] = []
    st: List[List[int]] = [[] for _ in strides]
    for d, e in enumerate(extents):
        if e == 1:
            continue
        if ext and all(st[k][-1] == strides[k][d] * e for k in range(len(strides))):
            ext[-1] *= e
            for k in range(len(strides)):
                st[k][-1] = strides[k][d]
        else:
            ext.append(int(e))
            for k in range(len(strides)):
                st[k].append(int(strides[k][d]))
    if not ext:
        return (1,), [(0,) for _ in strides]
    return tuple(ext), [tuple(s) for s in st]


def plan_gufunc(sig: Signature, inputs: Sequence[OperandLayout], outputs: Sequence[Optional[OperandLayout]]) -> Plan:
    """Binds the signature, broadcasts the loop dimensions and collapses them. ``outputs`` entries
    are None where spillway allocates the output (planned C-contiguous)."""
    for i, op in enumerate(inputs):
        if op.strides is None and sig.inputs[i]:
            raise ValueError(f'gufunc "{sig.text}": argument {i} is a scalar but the signature gives it '
                             f"{len(sig.inputs[i])} core dimensions")
    b = bind_signature(sig, [op.shape for op in inputs], [None if o is None else o.shape for o in outputs])
    loop = b.loop_shape
    layouts = list(inputs) + [o if o is not None else OperandLayout(b.output_shapes[i], _c_strides(b.output_shapes[i]),
                                                                     len(sig.outputs[i]))
                              for i, o in enumerate(outputs)]
    array_ix = [k for k, op in enumerate(layouts) if op.strides is not None]
    loop_strides, cores, max_core = [], [], 1
    for k in array_ix:
        op = layouts[k]
        nloop = len(op.shape) - op.core_rank
        ls = [0] * len(loop)
        off = len(loop) - nloop
        for d in range(nloop):
            ls[off + d] = 0 if op.shape[d] == 1 else int(op.strides[d])
        loop_strides.append(ls)
        core_shape = tuple(int(v) for v in op.shape[nloop:])
        cores.append((core_shape, tuple(int(v) for v in op.strides[nloop:])))
        max_core = max(max_core, math.prod(core_shape))
    instances = math.prod(loop)
    if all(math.prod(s) == 0 for s in b.output_shapes):
        instances = 0  # nothing to write (the C++ plan skips an empty output core the same way)
    ext, st = collapse_loop(loop, loop_strides) if loop_strides else collapse_loop(loop, [])
    ops: List[Optional[tuple]] = [None] * len(layouts)
    for j, k in enumerate(array_ix):
        ops[k] = (st[j], cores[j][0], cores[j][1])
    return Plan(b, ext, instances, max_core, ops)


def team_size_for(work: int, block: int = BLOCK) -> int:
    """Threads per instance for a core of ``work`` elements (the C++ gufunc_team_size): one
    thread under 16 elements, a sub-warp of up to 32 lanes at about 8 elements per lane, the whole
    block over 4096 elements."""
    if work < 16:
        return 1
    if work > 4096:
        return block
    t = 1
    while t < 32 and t * 8 < work:
        t *= 2
    return t


def _check_team(team, block: int, sig_text: str) -> int:
    if team is None:
        return 0
    if isinstance(team, str):
        if team == "block":
            return block
        raise ValueError(f'gufunc "{sig_text}": team {team!r}: give None/0 (automatic), a power of two up to 32, '
                         f'"block" or the block size {block}')
    if isinstance(team, bool) or not isinstance(team, (int, np.integer)):
        raise TypeError(f'gufunc "{sig_text}": team must be an int, None or "block", got {type(team).__name__}')
    team = int(team)
    if team == 0 or team == block or (1 <= team <= 32 and team & (team - 1) == 0):
        return team
    raise ValueError(f'gufunc "{sig_text}": team {team} must be 0 (automatic), a power of two up to 32, or the '
                     f"block size {block}")


# ---- numba: lazy import, the NumPy shim, team_sum --------------------------------------------------

_lock = threading.RLock()
_numba_state: Dict[str, Any] = {}
NUMPY_ROW_STACK_SHIM = False  # True once spillway has added np.row_stack for an older numba(-cuda)


def _apply_row_stack_shim() -> None:
    """numba and numba-cuda register an overload for ``np.row_stack`` when their NumPy support
    loads; NumPy 2.x deprecated it and later releases remove it, which makes that registration
    (an attribute lookup) fail on every JIT. Where NumPy lacks it, spillway adds a row_stack that
    forwards to ``np.vstack`` (what NumPy's own deprecated alias did) -- only then, and before numba
    is imported by spillway."""
    global NUMPY_ROW_STACK_SHIM
    if hasattr(np, "row_stack"):
        return

    def row_stack(tup, *, dtype=None, casting="same_kind"):
        """NumPy's removed alias of vstack, restored by spillway for numba (see spillway._gufunc)."""
        return np.vstack(tup, dtype=dtype, casting=casting)

    np.row_stack = row_stack
    NUMPY_ROW_STACK_SHIM = True


def _numba():
    """(numba, numba.cuda, simulator?) imported on first use, with the shim and team_sum's device
    implementation registered; ImportError with the install line when numba-cuda is missing."""
    with _lock:
        if _numba_state:
            return _numba_state["numba"], _numba_state["cuda"], _numba_state["sim"]
        _apply_row_stack_shim()
        try:
            import numba
            from numba import cuda
        except ImportError as e:
            raise ImportError("spillway.gufunc compiles its kernels with numba-cuda, which is not installed: "
                              "pip install numba-cuda   (for CUDA 13: pip install 'numba-cuda[cu13]')") from e
        sim = bool(getattr(numba.config, "ENABLE_CUDASIM", 0))
        if not sim:
            _register_team_sum(numba, cuda)
        _numba_state.update(numba=numba, cuda=cuda, sim=sim)
        return numba, cuda, sim


def team_sum(x, rank, size):
    """The sum of ``x`` over the members of a gufunc team, returned to every member.

    Call it inside a cooperative body (``spillway.gufunc(sig, cooperative=True)``) with the body's
    ``rank`` and ``size``, on every member of the team (it is a collective: shuffles within a
    sub-warp team, shared memory and ``syncthreads`` within a block team). ``x`` is a 32- or
    64-bit integer or float (smaller ones are summed as 32-bit and cast back). The order of the
    additions is fixed for a given team size, so results repeat run to run."""
    _, _, sim = _numba()
    if not sim:
        raise RuntimeError("spillway.team_sum runs inside a spillway.gufunc body on the GPU; it is not callable "
                           "from Python")
    return _team_sum_simulated(x, rank, size)


def _team_sum_simulated(x, rank, size):
    """team_sum under Numba's CUDA simulator: each member writes its value to a block-shared slot,
    then every member adds its team's slots in rank order. The simulator's
    syncthreads releases once every live thread of the block waits, so teams that run different
    instances still pair up correctly (each team's members all pass both barriers together)."""
    from numba.cuda.simulator.kernel import _get_kernel_context

    c = _get_kernel_context()
    if size == 1:
        return x
    slots = c.shared.array(c.blockDim.x, dtype=object)
    t = c.threadIdx.x
    slots[t] = x
    c.syncthreads()
    base = t - rank
    s = slots[base]
    for k in range(1, size):
        s = s + slots[base + k]
    c.syncthreads()
    return s


def _register_team_sum(numba, cuda) -> None:
    try:
        from numba.cuda.extending import overload
        kw = {}
    except ImportError:  # older numba-cuda: the core registry with the CUDA target
        from numba.core.extending import overload
        kw = {"target": "cuda"}
    # numba-cuda releases that carry their own type system have Float and Integer in
    # numba.cuda.types; older ones keep only the CUDA types there (Dim3, ...) and the scalars in
    # numba.core.types (seen on the GPU image's numba-cuda with numba 0.68.0).
    try:
        from numba.cuda import types as nbt
    except ImportError:
        nbt = None
    if nbt is None or not (hasattr(nbt, "Float") and hasattr(nbt, "Integer")):
        from numba.core import types as nbt

    @overload(team_sum, **kw)
    def _team_sum_cuda(x, rank, size):
        if isinstance(x, nbt.Float):
            wide = x if x.bitwidth >= 32 else nbt.float32
        elif isinstance(x, nbt.Integer):
            wide = x if x.bitwidth >= 32 else (nbt.int32 if x.signed else nbt.uint32)
        else:
            raise TypeError(f"spillway.team_sum: {x} is not summed by team_sum (32/64-bit integers and floats; "
                            "sum complex parts separately)")
        back = x

        def impl(x, rank, size):
            v = wide(x)
            if size == 1:
                return x
            if size <= 32:
                lane = cuda.laneid
                base = lane - (lane % size)
                mask = numba.uint32(((1 << size) - 1) << base)
                off = size >> 1
                while off > 0:
                    v = wide(v + cuda.shfl_xor_sync(mask, v, off))
                    off >>= 1
                return back(v)
            part = cuda.shared.array(32, dtype=wide)
            off = 16
            while off > 0:
                v = wide(v + cuda.shfl_xor_sync(numba.uint32(0xFFFFFFFF), v, off))
                off >>= 1
            if rank % 32 == 0:
                part[rank // 32] = v
            cuda.syncthreads()
            if rank == 0:
                t = part[0]
                for w in range(1, size // 32):
                    t = wide(t + part[w])
                part[0] = t
            cuda.syncthreads()
            r = part[0]
            cuda.syncthreads()
            return back(r)

        return impl


# ---- kernel source generation ----------------------------------------------------------------------

def _kernel_source(n_in: int, n_out: int, scalar_in: Sequence[bool], core_ranks: Sequence[int], loop_rank: int,
                   team: int, cooperative: bool) -> str:
    """The kernel for one configuration. Every array operand is passed as a strided view whose
    leading ``loop_rank`` dimensions are the (collapsed, broadcast: stride 0) loop; team ``t`` of
    ``team`` threads takes instances t, t + teams, ... (a grid-stride loop) and calls the body on
    that instance's core views. Scalars pass by value; a "()" array input passes its element; a
    "()" output passes a 1-element view (the body writes ``out[0]``, as with guvectorize)."""
    names = [f"a{k}" for k in range(n_in)] + [f"o{k}" for k in range(n_out)]
    ext = [f"e{d}" for d in range(1, loop_rank)]
    lines = [f"def _kernel(n{''.join(', ' + e for e in ext)}, {', '.join(names)}):"]
    lines.append("    tid = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x")
    if team == 1:
        lines += ["    i = tid", "    step = cuda.gridDim.x * cuda.blockDim.x"]
        if cooperative:
            lines.append("    rank = 0")
    else:
        lines += [f"    i = tid // {team}", f"    rank = tid % {team}",
                  f"    step = (cuda.gridDim.x * cuda.blockDim.x) // {team}"]
    lines.append("    while i < n:")
    if loop_rank == 1:
        idx, last = ["i"], "i"
    else:
        lines.append("        q = i")
        for d in range(loop_rank - 1, 0, -1):
            lines.append(f"        d{d} = q % e{d}")
            lines.append(f"        q = q // e{d}")
        lines.append("        d0 = q")
        idx = [f"d{d}" for d in range(loop_rank)]
        last = idx[-1]
    full = ", ".join(idx)
    one = ", ".join(idx[:-1] + [f"{last}:{last} + 1"])
    args = []
    for k, nm in enumerate(names):
        if k < n_in and scalar_in[k]:
            args.append(nm)
        elif k >= n_in and core_ranks[k] == 0:
            args.append(f"{nm}[{one}]")
        else:
            args.append(f"{nm}[{full}]")
    head = f"rank, {team}, " if cooperative else ""
    lines.append(f"        body({head}{', '.join(args)})")
    lines.append("        i += step")
    return "\n".join(lines) + "\n"


# ---- operands ----------------------------------------------------------------------------------------

_OK_KINDS = "biufc"


def _check_dtype(dt: np.dtype, what: str) -> np.dtype:
    dt = np.dtype(dt)
    if dt.kind not in _OK_KINDS or dt.fields is not None or not dt.isnative:
        raise TypeError(f"{what} has dtype {dt}; spillway.gufunc takes native-endian bool, integer, float or "
                        "complex numbers")
    return dt


def _is_device(x) -> bool:
    if isinstance(x, np.ndarray):
        return False
    if type(x).__name__ == "FakeCUDAArray":  # numba's simulator
        return True
    dev = getattr(x, "__dlpack_device__", None)
    if dev is not None:
        try:
            if dev()[0] == 1:  # kDLCPU
                return False
        except Exception:  # noqa: BLE001 - a producer that cannot say: look for the CAI below
            pass
    return hasattr(x, "__cuda_array_interface__")


@dataclass
class _Dev:
    """A device array read through __cuda_array_interface__ (or a simulator array)."""

    obj: Any
    ptr: int
    shape: Tuple[int, ...]
    strides: Tuple[int, ...]  # elements
    dtype: np.dtype
    stream: Optional[int]  # the producer's stream (CAI v3), None when not given
    host: Optional[np.ndarray] = None  # the simulator's backing array


def _read_device(x, i: int, what: str, writable: bool = False) -> _Dev:
    if type(x).__name__ == "FakeCUDAArray":
        a = x._ary
        return _Dev(x, 0, a.shape, tuple(s // a.itemsize for s in a.strides), _check_dtype(a.dtype, what), None, a)
    from . import _arrays  # the stream rule's one implementation (imports the extension: not at module load)

    cai = x.__cuda_array_interface__
    if writable and isinstance(cai.get("data"), tuple) and len(cai["data"]) == 2 and cai["data"][1]:
        raise ValueError(f"{what} is read-only (__cuda_array_interface__['data'] = {cai['data']!r})")
    dt = _check_dtype(np.dtype(cai["typestr"]), what)
    shape = tuple(int(v) for v in cai["shape"])
    if cai.get("strides") is None:
        strides = _c_strides(shape)
    else:
        bs = tuple(int(v) for v in cai["strides"])
        if any(s % dt.itemsize for s in bs):
            raise ValueError(f"{what}: strides {bs} are not multiples of the item size {dt.itemsize}")
        strides = tuple(s // dt.itemsize for s in bs)
    if cai.get("mask") is not None:
        raise ValueError(f"{what}: masked device arrays are not supported")
    # The producer's stream, by the rule (docs/python.md): the interface's v3 entry, else the
    # framework's current stream (CuPy, PyTorch), else none to wait for.
    if int(cai.get("version", 0)) >= 3 and cai.get("stream") is not None:
        stream = _arrays._cai_stream(cai["stream"], type(x).__name__)
    elif _arrays.framework_of(x) in ("cupy", "torch"):
        stream = _arrays.default_stream(x)
    else:
        stream = None
    return _Dev(x, int(cai["data"][0]), shape, strides, dt, stream)


def _device_id(x) -> Optional[int]:
    dev = getattr(x, "device", None)
    for attr in ("id", "index"):  # cupy.cuda.Device.id, torch.device.index
        v = getattr(dev, attr, None)
        if isinstance(v, int):
            return v
    return None


def _stream_handle(stream) -> Optional[int]:
    from . import _arrays

    return _arrays.stream_handle(stream)  # the one reading of stream= (int, __cuda_stream__, framework objects)


class GufuncStreamError(RuntimeError):
    """A streamed call (host arrays) failed part way. ``rows_started`` lists the ``(begin, count)``
    ranges of the first loop dimension whose kernels were enqueued before the failure: the outputs'
    rows there may hold results; every other row of a caller's ``out`` is untouched. ``report`` is
    the streaming report where spillway.stream gave one."""

    def __init__(self, message: str, rows_started, report=None):
        super().__init__(message)
        self.rows_started = rows_started
        self.report = report


# ---- the gufunc object ----------------------------------------------------------------------------------

class GUFunc:
    """A generalized ufunc over a Numba CUDA body; made by :func:`gufunc`. Call it like a NumPy
    ufunc: ``g(*inputs, out=None, dtype=None, stream=None, team=None, budget=None, devices=None,
    progress=False)``."""

    def __init__(self, signature: str, body: Callable, *, cooperative: bool = False, team=None, block: int = BLOCK):
        self.signature = parse_signature(signature)
        if not self.signature.outputs:
            raise ValueError(f'gufunc "{signature}": needs at least one output')
        if isinstance(block, bool) or not isinstance(block, (int, np.integer)) or not (32 <= block <= 1024) \
                or block % 32:
            raise ValueError(f"gufunc: block {block!r} must be a multiple of 32 from 32 to 1024")
        self.block = int(block)
        if not isinstance(cooperative, bool):
            raise TypeError(f"gufunc: cooperative must be True or False, got {type(cooperative).__name__}")
        self.cooperative = cooperative
        self.team = _check_team(team, self.block, signature)
        if self.team > 1 and not cooperative:
            raise ValueError(f'gufunc "{signature}": team {self.team} needs a cooperative body (cooperative=True: '
                             "body(rank, size, ...) splits the core loop); a plain body gets one thread per instance")
        py = getattr(body, "py_func", body)  # a numba dispatcher's Python function
        if not callable(py):
            raise TypeError(f"gufunc: the body must be a Python function, got {type(body).__name__}")
        self.py_func = py
        self._given = body
        self.__name__ = getattr(py, "__name__", "gufunc")
        self.__doc__ = getattr(py, "__doc__", None)
        want = len(self.signature.inputs) + len(self.signature.outputs) + (2 if cooperative else 0)
        code = getattr(py, "__code__", None)
        if code is not None and not (code.co_flags & 0x04) and code.co_argcount != want:
            form = "body(rank, size, inputs..., outputs...)" if cooperative else "body(inputs..., outputs...)"
            raise TypeError(f'gufunc "{signature}": {self.__name__} takes {code.co_argcount} parameters but the '
                            f"signature needs {want}: {form}")
        self._device_fn = None
        self._kernels: Dict[tuple, Any] = {}
        #: How the last call ran: "device", "host-whole", "host-streamed" or "simulator" (a diagnostic;
        #: not synchronized between threads calling one gufunc at once).
        self.last_path: Optional[str] = None
        #: Which kernel the last launch ran: "lto-staged" or "lto" (the body linked into spillway's
        #: CUDA C++ loop kernel, its inputs staged in shared memory or not), "numba" (the kernel
        #: Numba generates around the body), None before any launch. A diagnostic, as last_path.
        self.last_kernel: Optional[str] = None
        #: Why the last linked kernel could not be built (None when none failed).
        self.lto_error: Optional[str] = None

    def __repr__(self):
        form = "cooperative " if self.cooperative else ""
        return f"<spillway.gufunc {form}{self.__name__} \"{self.signature.text}\">"

    # -- compilation --

    def _body(self):
        """The body as the kernel calls it: a Numba CUDA device function (the caller's own when
        the body was given already decorated with ``cuda.jit(device=True)``)."""
        _, cuda, _ = _numba()
        with _lock:
            if self._device_fn is None:
                given = self._given
                if getattr(given, "py_func", None) is not None and getattr(given, "targetoptions", {}).get("device"):
                    self._device_fn = given
                else:
                    self._device_fn = cuda.jit(device=True)(self.py_func)
            return self._device_fn

    def _kernel_function(self, scalar_in, core_ranks, loop_rank, team):
        """The generated kernel as a Python function (not compiled)."""
        _, cuda, _ = _numba()
        src = _kernel_source(len(self.signature.inputs), len(self.signature.outputs), scalar_in, core_ranks,
                             loop_rank, team, self.cooperative)
        ns = {"cuda": cuda, "body": self._body()}
        exec(compile(src, f"<spillway.gufunc {self.__name__} {self.signature.text}>", "exec"), ns)
        fn = ns["_kernel"]
        fn.__spillway_source__ = src
        return fn

    def _kernel(self, scalar_in, core_ranks, loop_rank, team, arg_types):
        """The compiled kernel for one configuration (compiled eagerly for ``arg_types``, so type
        errors come before anything runs), cached on this object."""
        key = (tuple(scalar_in), tuple(core_ranks), loop_rank, team, arg_types)
        with _lock:
            k = self._kernels.get(key)
            if k is not None:
                return k
            numba, cuda, sim = _numba()
            fn = self._kernel_function(scalar_in, core_ranks, loop_rank, team)
            k = cuda.jit(fn) if sim else cuda.jit(numba.void(*arg_types))(fn)
            self._kernels[key] = k
            return k

    def ptx(self, *args, out_dtype=None, team=None, cc=(9, 0)) -> str:
        """PTX of the kernel a call with these host arguments would run (arrays as if on the
        device, C-contiguous), compiled by numba-cuda without a GPU: how the tests check the device
        code generation, team_sum included, on machines with none."""
        numba, cuda, sim = _numba()
        if sim:
            raise RuntimeError("spillway.gufunc.ptx: not under NUMBA_ENABLE_CUDASIM (the simulator compiles nothing)")
        sig = self.signature
        ops = [self._host_operand(a, i) for i, a in enumerate(args)]
        lays = [lay if k == "scalar" else OperandLayout(v.shape, _c_strides(v.shape), lay.core_rank) for k, lay, v in ops]
        plan = plan_gufunc(sig, lays, [None] * len(sig.outputs))
        t = self._team_for(plan, team)
        dt = np.dtype(out_dtype) if out_dtype is not None else self._default_dtype(ops, [])
        loop_rank = len(plan.loop_extents)
        scalar_in = [k == "scalar" for k, _, _ in ops]
        dts = [_scalar_value(v, None).dtype if k == "scalar" else v.dtype for k, _, v in ops] + [dt] * len(sig.outputs)
        nds = [0 if k == "scalar" else loop_rank + lay.core_rank for k, lay, _ in ops]
        nds += [loop_rank + len(c) for c in sig.outputs]
        types = self._kernel_types(numba, loop_rank, dts, nds, scalar_in, self._plan_layouts(plan, scalar_in))
        fn = self._kernel_function(scalar_in, [len(c) for c in sig.inputs + sig.outputs], loop_rank, t)
        # numba-cuda compiles a device function (the body, team_sum) for the current device's
        # compute capability; with no device present, tell it the one asked for.
        import numba.cuda.dispatcher as disp

        class _Cc:
            compute_capability = tuple(cc)

        with _lock:
            saved = disp.get_current_device
            disp.get_current_device = lambda: _Cc()
            try:
                text, _ = cuda.compile_ptx(fn, types, cc=cc)
            finally:
                disp.get_current_device = saved
        return text

    def kernel_source(self, *args, team=None) -> str:
        """The generated kernel's Python source for these arguments (host arrays or scalars), for
        reading: no numba needed."""
        ins = [self._host_operand(a, i) for i, a in enumerate(args)]
        plan = plan_gufunc(self.signature, [op[1] for op in ins], [None] * len(self.signature.outputs))
        t = self._team_for(plan, team)
        return _kernel_source(len(ins), len(self.signature.outputs), [op[1].strides is None for op in ins],
                              [len(c) for c in self.signature.inputs + self.signature.outputs],
                              len(plan.loop_extents), t, self.cooperative)

    def _team_for(self, plan: Plan, team) -> int:
        t = self.team if team is None else _check_team(team, self.block, self.signature.text)
        if not self.cooperative:
            if t > 1:
                raise ValueError(f'gufunc "{self.signature.text}": team {t} needs a cooperative body')
            return 1
        return t if t else team_size_for(plan.max_core_size, self.block)

    # -- operands --

    def _host_operand(self, a, i):
        """(kind, layout, value): kind "scalar" (a Python/NumPy scalar for a "()" input), "host"."""
        what = f'gufunc "{self.signature.text}": argument {i}'
        if isinstance(a, (bool, int, float, complex, np.generic)):
            if isinstance(a, np.generic):
                dt = _check_dtype(a.dtype, what)
            else:
                dt = np.result_type(a)
            v = np.asarray(a, dtype=dt)[()] if not isinstance(a, np.generic) else a
            if isinstance(a, int) and not isinstance(a, bool) and not -(1 << 63) <= a < (1 << 63):
                raise ValueError(f"{what}: the integer {a} does not fit in int64")
            return "scalar", OperandLayout((), None, 0), (v, a)
        if isinstance(a, (list, tuple)):
            a = np.asarray(a)
        if not isinstance(a, np.ndarray):
            raise TypeError(f"{what} is a {type(a).__name__}; give NumPy arrays, device arrays "
                            "(__cuda_array_interface__), or Python/NumPy scalars for \"()\" inputs")
        _check_dtype(a.dtype, what)
        return "host", OperandLayout(a.shape, tuple(s // a.itemsize for s in a.strides), len(self.signature.inputs[i])
                                     if i < len(self.signature.inputs) else 0), a

    # -- the call --

    def __call__(self, *args, out=None, dtype=None, stream=None, team=None, budget=None, devices=None,
                 progress=False):
        sig = self.signature
        if len(args) != len(sig.inputs):
            raise TypeError(f'gufunc "{sig.text}" takes {len(sig.inputs)} inputs, {len(args)} given')
        n_out = len(sig.outputs)
        outs = self._outs(out, n_out)
        if dtype is not None:
            dtype = _check_dtype(np.dtype(dtype), f'gufunc "{sig.text}": dtype')
        ops = []
        for i, a in enumerate(args):
            if _is_device(a):
                d = _read_device(a, i, f'gufunc "{sig.text}": argument {i}')
                ops.append(("device", OperandLayout(d.shape, d.strides, len(sig.inputs[i])), d))
            else:
                ops.append(self._host_operand(a, i))
        for i, (kind, lay, _) in enumerate(ops):
            if kind == "scalar" and sig.inputs[i]:
                raise ValueError(f'gufunc "{sig.text}": argument {i} is a scalar but the signature gives it '
                                 f"{len(sig.inputs[i])} core dimensions")
        out_ops = []
        for j, o in enumerate(outs):
            if o is None:
                out_ops.append(None)
                continue
            what = f'gufunc "{sig.text}": output {j}'
            if _is_device(o):
                d = _read_device(o, j, what, writable=True)
                out_ops.append(("device", OperandLayout(d.shape, d.strides, len(sig.outputs[j])), d))
            elif isinstance(o, np.ndarray):
                _check_dtype(o.dtype, what)
                if not o.flags.writeable:
                    raise ValueError(f"{what} is read-only")
                out_ops.append(("host", OperandLayout(o.shape, tuple(s // o.itemsize for s in o.strides),
                                                      len(sig.outputs[j])), o))
            else:
                raise TypeError(f"{what} is a {type(o).__name__}; give a NumPy array or a device array")
        plan = plan_gufunc(sig, [op[1] for op in ops], [None if o is None else o[1] for o in out_ops])
        for j, o in enumerate(out_ops):
            if o is not None and plan.instances and any(
                    st == 0 and e > 1 for st, e in zip(o[1].strides, o[1].shape)):
                raise ValueError(f'gufunc "{sig.text}": output {j} is a broadcast view (stride 0 with shape '
                                 f"{shape_string(o[1].shape)}); give a writable array of its own")
        if dtype is None:
            dtype = self._default_dtype(ops, out_ops)
        out_dtypes = [o[2].dtype if o is not None else dtype for o in out_ops]
        team_t = self._team_for(plan, team)
        _, cuda, sim = _numba()
        on_device = any(k == "device" for k, _, _ in ops) or any(o is not None and o[0] == "device" for o in out_ops)
        if on_device:
            if any(o is not None and o[0] == "host" for o in out_ops):
                raise TypeError(f'gufunc "{sig.text}": the inputs are on the device but an output is a NumPy array; '
                                "give a device array as out= (or copy the inputs to the host)")
            self.last_path = "simulator" if sim else "device"
            res = self._run_device(ops, out_ops, out_dtypes, plan, team_t, stream)
        elif sim:
            self.last_path = "simulator"
            res = self._run_simulated(ops, out_ops, out_dtypes, plan, team_t)
        else:
            if not cuda.is_available():
                raise RuntimeError(f'spillway.gufunc "{sig.text}" needs a GPU and numba.cuda sees none; to run the '
                                   "body on the host for testing, set NUMBA_ENABLE_CUDASIM=1 before numba is imported")
            res = self._run_host(ops, out_ops, out_dtypes, plan, team_t, budget, devices, progress)
        return res[0] if n_out == 1 else tuple(res)

    @staticmethod
    def _outs(out, n_out):
        if out is None:
            return [None] * n_out
        if isinstance(out, tuple):
            if len(out) != n_out:
                raise ValueError(f"gufunc: out has {len(out)} entries for {n_out} outputs")
            return list(out)
        if n_out != 1:
            raise ValueError(f"gufunc: give out as a tuple of {n_out} arrays")
        return [out]

    def _default_dtype(self, ops, out_ops) -> np.dtype:
        vals = []
        for kind, _, v in ops:
            if kind == "scalar":
                raw = v[1]
                vals.append(raw if isinstance(raw, np.generic) else raw)  # Python scalars are weak (NEP 50)
            else:
                vals.append(v.dtype)
        if not vals:
            return np.dtype(np.float64)
        return _check_dtype(np.result_type(*vals), f'gufunc "{self.signature.text}": the result')

    # -- launching --

    @staticmethod
    def _kernel_types(numba, loop_rank, dtypes, ndims, scalar_in, layouts=None):
        """The kernel's argument types: the instance count and loop extents (int64), then one type
        per operand (``dtypes``/``ndims`` for inputs then outputs; ``scalar_in`` marks the inputs
        passed by value; ``layouts``: "C" for an operand whose view is C-contiguous, else "A")."""
        scalar = list(scalar_in) + [False] * (len(dtypes) - len(scalar_in))
        lays = list(layouts) if layouts is not None else ["A"] * len(dtypes)
        return (numba.int64,) * loop_rank + tuple(GUFunc._arg_types(None, numba, dtypes, ndims, scalar, lays))

    def _arg_types(self, numba, ops_dtypes, ndims, scalar_in, layouts):
        from numba import from_dtype

        ts = []
        for dt, nd, sc, lay in zip(ops_dtypes, ndims, scalar_in, layouts):
            if sc:
                ts.append(from_dtype(dt))
            else:
                ts.append(numba.types.Array(from_dtype(dt), nd, lay))
        return ts

    @staticmethod
    def _plan_layouts(plan: Plan, scalar_in: Sequence[bool]) -> List[str]:
        """Per operand of the plan (inputs then outputs): "C" where its view (the collapsed loop,
        then the core) is C-contiguous, so the kernel indexes it without loading strides (a
        hand-written copy of the dot kernel ran 14% faster so at team 8 on an H200; the package's
        dot row moved only by run-to-run noise, 2026-11-28); "A" otherwise (a broadcast operand, a
        strided view); "S" for a scalar input."""
        out = []
        for k, op in enumerate(plan.ops):
            if op is None or (k < len(scalar_in) and scalar_in[k]):
                out.append("S")
                continue
            ls, cshape, cstr = op
            shape = tuple(plan.loop_extents) + tuple(cshape)
            strides = tuple(ls) + tuple(cstr)
            out.append("C" if _is_c_contiguous(shape, strides) else "A")
        return out

    def _launch(self, plan: Plan, team: int, operands, stream=None):
        """operands: per operand (inputs then outputs) either ("scalar", value, dtype) or
        ("array", base, dtype) where base is what _view(base, shape, strides) needs; the views and
        the kernel call are built here."""
        numba, cuda, sim = _numba()
        sig = self.signature
        n_in = len(sig.inputs)
        core_ranks = [len(c) for c in sig.inputs + sig.outputs]
        loop_rank = len(plan.loop_extents)
        scalar_in = [operands[k][0] == "scalar" for k in range(n_in)]
        args, dts, nds = [], [], []
        for k, (kind, base, dt) in enumerate(operands):
            dts.append(dt)
            if kind == "scalar":
                args.append(base)
                nds.append(0)
                continue
            ls, cshape, cstr = plan.ops[k]
            shape = tuple(plan.loop_extents) + tuple(cshape)
            strides = tuple(ls) + tuple(cstr)
            args.append(base(shape, strides))
            nds.append(len(shape))
        if plan.instances == 0:
            return
        if not sim and self._launch_linked(plan, team, operands, args, stream):
            return
        self.last_kernel = "numba"
        types = () if sim else self._kernel_types(numba, loop_rank, dts, nds, scalar_in,
                                                  self._plan_layouts(plan, scalar_in))
        kern = self._kernel(scalar_in, core_ranks, loop_rank, team, types)
        threads = plan.instances * team
        blocks = max(1, min(-(-threads // self.block), 1 << 20))
        if sim:
            blocks = min(blocks, 2)  # the simulator runs a Python thread per GPU thread
        extents = [int(e) for e in plan.loop_extents[1:]]
        if stream is None:
            kern[blocks, self.block](int(plan.instances), *extents, *args)
        else:
            kern[blocks, self.block, stream](int(plan.instances), *extents, *args)

    def _linked_kernel(self, lp, cuda):
        """The loaded linked kernel for ``lp`` in the current context (built on first use and
        cached per device), or None where it cannot be built here (the reason is kept in
        ``lto_error`` and the Numba kernel runs; not retried for this plan)."""
        from . import _gufunc_lto as lto

        ctx = cuda.current_context()
        dev = ctx.device
        key = ("lto", lp, int(dev.id))
        with _lock:
            if key in self._kernels:
                return self._kernels[key]
            cc = tuple(dev.compute_capability)
            try:
                cubin = next((v.cubin for k2, v in self._kernels.items()  # built for another device of this cc
                              if k2[0] == "lto" and k2[1] == lp and v is not None and v.cc == cc), None)
                if cubin is None:
                    cubin = lto.build_cubin(self._body(), lp, cc)
                k = lto.LinkedKernel(lp, cubin, cc)
            except Exception as e:  # noqa: BLE001 - the Numba kernel runs instead (and raises typing errors)
                self.lto_error = f"{type(e).__name__}: {e}"
                k = None
            self._kernels[key] = k
            return k

    def _launch_linked(self, plan: Plan, team: int, operands, args, stream) -> bool:
        """Launches the linked kernel (docs/python-gufunc.md, "Linked kernels") where it applies;
        False where the Numba kernel is to run."""
        from . import _gufunc_lto as lto

        if not lto.enabled():
            return False
        sig = self.signature
        lp = lto.plan_for(plan, operands, team, self.block, self.cooperative, len(sig.inputs),
                          list(sig.inputs) + list(sig.outputs))
        if lp is None:
            return False
        ptrs, lstr, cores, scalars = [], [], [], []
        for j, (kind, base, _) in enumerate(operands):
            if kind == "scalar":
                scalars.append(base)
                continue
            cai = getattr(args[j], "__cuda_array_interface__", None)
            if cai is None:
                return False  # not a device array view (a test's stand-in)
            ls, cshape, _ = plan.ops[j]
            ptrs.append(int(cai["data"][0]))
            lstr.append(int(ls[0]))
            cores.append(tuple(int(e) for e in cshape))
        _, cuda, _ = _numba()
        try:
            k = self._linked_kernel(lp, cuda)
        except Exception as e:  # noqa: BLE001 - no context here: the Numba path says why
            self.lto_error = f"{type(e).__name__}: {e}"
            return False
        if k is None:
            return False
        h = _stream_handle(stream) or 0  # the call's Numba stream (None: the default stream)
        try:
            self.last_kernel = k.launch(int(plan.instances), ptrs, lstr, scalars, cores, h)
        except Exception as e:  # noqa: BLE001 - refused at launch (nothing ran): the Numba kernel runs instead
            self.lto_error = f"{type(e).__name__}: {e}"
            with _lock:
                for key, v in list(self._kernels.items()):
                    if v is k:
                        self._kernels[key] = None
            return False
        return True

    def _run_simulated(self, ops, out_ops, out_dtypes, plan, team):
        """Host arrays under Numba's CUDA simulator: strided NumPy views are the kernel's arrays."""
        outs = []
        for j, o in enumerate(out_ops):
            outs.append(o[2] if o is not None else np.empty(plan.binding.output_shapes[j], dtype=out_dtypes[j]))
        operands = []
        for kind, lay, v in ops:
            if kind == "scalar":
                operands.append(("scalar", _scalar_value(v, None), None))
            else:
                operands.append(("array", _np_view(v), v.dtype))
        for o in outs:
            operands.append(("array", _np_view(o), o.dtype))
        _fix_scalar_dtypes(operands)
        self._launch(plan, team, operands)
        return outs

    def _run_device(self, ops, out_ops, out_dtypes, plan, team, stream):
        """Device arrays in, device arrays out: views over the arrays' memory, one launch on the
        launch stream, no synchronization (except to free device copies of host inputs)."""
        numba, cuda, sim = _numba()
        sig = self.signature
        devs = [v for k, _, v in ops if k == "device"] + [o[2] for o in out_ops if o is not None and o[0] == "device"]
        if sim:
            outs = [o[2].obj if o is not None else cuda.device_array(plan.binding.output_shapes[j], dtype=out_dtypes[j])
                    for j, o in enumerate(out_ops)]
            operands = []
            for kind, lay, v in ops:
                if kind == "scalar":
                    operands.append(("scalar", _scalar_value(v, None), None))
                else:
                    a = v.host if kind == "device" else v
                    operands.append(("array", _np_view(a), a.dtype))
            operands += [("array", _np_view(o._ary), o._ary.dtype) for o in outs]
            _fix_scalar_dtypes(operands)
            self._launch(plan, team, operands)
            return outs
        ids = {i for i in (_device_id(d.obj) for d in devs) if i is not None}
        if len(ids) > 1:
            raise ValueError(f'gufunc "{sig.text}": the device arrays are on devices {sorted(ids)}; put them on one '
                             "device")
        with (cuda.gpus[ids.pop()] if ids else _NullCtx()):
            s_handle = _stream_handle(stream)
            producers = [d.stream for d in devs if d.stream is not None]
            if s_handle is None:
                s_handle = producers[0] if producers else 0
            s = _numba_stream(cuda, s_handle)
            for p in {_norm_stream(p) for p in producers} - {_norm_stream(s_handle)}:
                ev = cuda.event(timing=False)  # the launch stream waits for the producer's pending work
                ev.record(stream=_numba_stream(cuda, p))
                ev.wait(stream=s)
            keep = []  # device copies of host inputs, alive until the kernel has run
            ins = []
            for kind, lay, v in ops:
                if kind == "host":  # a host input beside device inputs: copied whole to the device
                    dv = cuda.to_device(np.ascontiguousarray(v), stream=s)
                    keep.append(dv)
                    v = _read_device(dv, 0, "input")
                    kind, lay = "device", OperandLayout(v.shape, v.strides, lay.core_rank)
                ins.append((kind, lay, v))
            first = next((d.obj for d in devs), None)
            outs, out_devs = [], []
            for j, o in enumerate(out_ops):
                if o is not None:
                    outs.append(o[2].obj)
                    out_devs.append(o[2])
                else:
                    arr = _alloc_like(cuda, first, plan.binding.output_shapes[j], out_dtypes[j], s_handle, s)
                    outs.append(arr)
                    out_devs.append(_read_device(arr, j, "output"))
            if keep or any(o is None for o in out_ops):
                plan = plan_gufunc(sig, [lay for _, lay, _ in ins],
                                   [OperandLayout(d.shape, d.strides, len(c)) for d, c in zip(out_devs, sig.outputs)])
            operands = [("scalar", _scalar_value(v, None), None) if k == "scalar" else ("array", _cai_view(cuda, v), v.dtype)
                        for k, _, v in ins]
            operands += [("array", _cai_view(cuda, d), d.dtype) for d in out_devs]
            _fix_scalar_dtypes(operands)
            self._launch(plan, team, operands, s)
            if keep:
                s.synchronize()
        return outs

    def _run_host(self, ops, out_ops, out_dtypes, plan, team, budget, devices, progress):
        numba, cuda, _ = _numba()
        sig = self.signature
        n_out = len(sig.outputs)
        shapes = plan.binding.output_shapes
        user_outs = [o[2] if o is not None else None for o in out_ops]
        # Outputs the kernel writes: the caller's array where it is C-contiguous, else a temporary
        # copied into it at the end (so a failure leaves the caller's array untouched).
        targets = []
        for j in range(n_out):
            u = user_outs[j]
            if u is not None and u.flags.c_contiguous:
                targets.append(u)
            else:
                targets.append(np.empty(shapes[j], dtype=out_dtypes[j]))
        loop = plan.binding.loop_shape
        host_bytes = sum(v.nbytes for k, _, v in ops if k == "host") + sum(t.nbytes for t in targets)
        if plan.instances == 0:
            return self._finish(targets, user_outs)
        if len(loop) == 0 or loop[0] <= 1 or host_bytes <= WHOLE_COPY_MAX:
            self.last_path = "host-whole"
            self._host_whole(ops, targets, out_dtypes, plan, team)
        else:
            self.last_path = "host-streamed"
            self._host_streamed(ops, targets, plan, team, budget, devices, progress)
        return self._finish(targets, user_outs)

    @staticmethod
    def _finish(targets, user_outs):
        res = []
        for t, u in zip(targets, user_outs):
            if u is None:
                res.append(t)
            else:
                if u is not t:
                    u[...] = t
                res.append(u)
        return res

    def _host_whole(self, ops, targets, out_dtypes, plan, team):
        """Small host arrays: copied whole to the current device, one launch, copied back."""
        _, cuda, _ = _numba()
        s = cuda.stream()
        dev_in, lays = [], []
        for i, (kind, lay, v) in enumerate(ops):
            if kind == "scalar":
                dev_in.append(None)
                lays.append(lay)
            else:
                h = np.ascontiguousarray(v)
                d = cuda.to_device(h, stream=s)
                dev_in.append(d)
                lays.append(OperandLayout(h.shape, _c_strides(h.shape), lay.core_rank))
        dev_out = [cuda.device_array(t.shape, dtype=t.dtype, stream=s) for t in targets]
        plan = plan_gufunc(self.signature, lays, [OperandLayout(t.shape, _c_strides(t.shape), len(c))
                                                  for t, c in zip(targets, self.signature.outputs)])
        operands = []
        for (kind, _, v), d in zip(ops, dev_in):
            operands.append(("scalar", _scalar_value(v, None), None) if kind == "scalar"
                            else ("array", _cai_view(cuda, _read_device(d, 0, "input")), d.dtype))
        for d in dev_out:
            operands.append(("array", _cai_view(cuda, _read_device(d, 0, "output")), d.dtype))
        _fix_scalar_dtypes(operands)
        self._launch(plan, team, operands, s)
        for d, t in zip(dev_out, targets):
            d.copy_to_host(t, stream=s)
        s.synchronize()

    def _host_streamed(self, ops, targets, plan, team, budget, devices, progress):
        """Host arrays larger than WHOLE_COPY_MAX: spillway.stream cuts the first loop dimension into
        chunks; operands that vary along it are streamed, the others (broadcast along it) are
        copied whole to each device once and stay resident; scalars pass by value."""
        from ._stream import stream as sw_stream

        _, cuda, _ = _numba()
        sig = self.signature
        loop = plan.binding.loop_shape
        L0, r = loop[0], len(loop)
        streamed, resident = [], []
        for i, (kind, lay, v) in enumerate(ops):
            if kind == "scalar":
                continue
            nloop = v.ndim - lay.core_rank
            if nloop == r and v.shape[0] == L0:
                streamed.append(i)
            else:
                resident.append(i)
        hosts = {i: np.ascontiguousarray(ops[i][2]) for i in streamed}
        dev_ids = list(range(len(cuda.gpus))) if devices is None else [int(d) for d in devices]
        res_dev: Dict[int, Dict[int, Any]] = {}
        for d in dev_ids:
            with cuda.gpus[d]:
                res_dev[d] = {i: cuda.to_device(np.ascontiguousarray(ops[i][2])) for i in resident}
                cuda.synchronize()
        self._precompile_streamed(ops, targets, team)
        started: List[Tuple[int, int]] = []

        def fn(ch):
            started.append((ch.begin, ch.count))
            ins_dev = dict(zip(streamed, ch.inputs))
            lays, operands = [], []
            for i, (kind, lay, v) in enumerate(ops):
                if kind == "scalar":
                    lays.append(lay)
                    operands.append(("scalar", _scalar_value(v, None), None))
                    continue
                d = ins_dev[i] if i in ins_dev else res_dev[ch.device][i]
                dd = _read_device(d, i, "input")
                lays.append(OperandLayout(dd.shape, dd.strides, lay.core_rank))
                operands.append(("array", dd, dd.dtype))
            outs_dd = [_read_device(o, j, "output") for j, o in enumerate(ch.outputs)]
            p = plan_gufunc(sig, lays, [OperandLayout(d.shape, d.strides, len(c)) for d, c in zip(outs_dd, sig.outputs)])
            for d in outs_dd:
                operands.append(("array", d, d.dtype))
            operands = [(k, _cai_view(cuda, b) if k == "array" else b, dt) for k, b, dt in operands]
            _fix_scalar_dtypes(operands)
            self._launch(p, team, operands, ch.stream)

        report: dict = {}
        try:
            sw_stream(fn, [hosts[i] for i in streamed], targets, budget=budget, devices=devices, arrays="numba",
                      progress=progress, report=report)
        except KeyboardInterrupt:  # spillway.Cancelled: its report lists the chunks that completed
            raise
        except Exception as e:
            rows = sorted(started)
            raise GufuncStreamError(
                f'spillway.gufunc "{sig.text}": the streamed call failed after {len(rows)} chunk(s) were started '
                f"(rows {rows} of the first loop dimension, {L0} in all); those rows of the outputs may hold results, "
                f"the others are untouched: {type(e).__name__}: {e}", rows, report or None) from e

    def _precompile_streamed(self, ops, targets, team):
        """Compiles the kernel the chunks will use (planned over C-contiguous layouts, as the chunks'
        device arrays are), before any row moves: a typing error in the body then leaves the outputs
        untouched. A one-row last chunk may collapse to another loop rank and compile then."""
        numba, _, _ = _numba()
        sig = self.signature
        lays = [lay if kind == "scalar" else OperandLayout(v.shape, _c_strides(v.shape), lay.core_rank)
                for kind, lay, v in ops]
        plan = plan_gufunc(sig, lays, [OperandLayout(t.shape, _c_strides(t.shape), len(c))
                                       for t, c in zip(targets, sig.outputs)])
        loop_rank = len(plan.loop_extents)
        scalar_in = [kind == "scalar" for kind, _, _ in ops]
        dts = [_scalar_value(v, None).dtype if kind == "scalar" else v.dtype for kind, _, v in ops]
        dts += [t.dtype for t in targets]
        nds = [0 if kind == "scalar" else loop_rank + lay.core_rank for kind, lay, _ in ops]
        nds += [loop_rank + len(c) for c in sig.outputs]
        self._kernel(scalar_in, [len(c) for c in sig.inputs + sig.outputs], loop_rank, team,
                     self._kernel_types(numba, loop_rank, dts, nds, scalar_in, self._plan_layouts(plan, scalar_in)))


class _NullCtx:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def _norm_stream(h: int) -> int:
    return 0 if h in (0, 1) else h  # CAI: 1 is the legacy default stream


def _numba_stream(cuda, handle: int):
    if handle in (0, 1):
        return cuda.default_stream()
    if handle == 2:
        return cuda.per_thread_default_stream()
    return cuda.external_stream(handle)


def _alloc_like(cuda, like, shape, dtype, handle, s):
    """A new device array in the framework of ``like`` (CuPy, PyTorch; else Numba) on the current
    device, allocated in stream order on the launch stream."""
    mod = type(like).__module__.split(".")[0] if like is not None else ""
    if mod == "cupy":
        import cupy

        try:
            from ._arrays import cupy_stream
            cs = cupy_stream(handle, cupy.cuda.Device().id) if handle not in (0, 1) else cupy.cuda.Stream.null
        except ImportError:
            cs = cupy.cuda.ExternalStream(handle) if handle not in (0, 1) else cupy.cuda.Stream.null
        with cs:
            return cupy.empty(shape, dtype=dtype)
    if mod == "torch":
        import torch

        dev = like.device
        ts = torch.cuda.ExternalStream(handle, device=dev) if handle not in (0, 1) else torch.cuda.default_stream(dev)
        with torch.cuda.stream(ts):
            return torch.empty(shape, dtype=getattr(torch, np.dtype(dtype).name), device=dev)
    return cuda.device_array(shape, dtype=dtype, stream=s)


def _cai_view(cuda, d: _Dev):
    """A Numba device array view factory over ``d``'s memory with the planned shape/strides."""
    isz = d.dtype.itemsize

    def make(shape, strides):
        desc = {"shape": tuple(int(v) for v in shape), "strides": tuple(int(s) * isz for s in strides),
                "data": (d.ptr, False), "typestr": d.dtype.str, "version": 3, "stream": None}
        return cuda.from_cuda_array_interface(desc, owner=d.obj, sync=False)

    return make


def _np_view(a: np.ndarray):
    """A simulator device array over a strided view of ``a`` (no copy: the simulator's kernels
    read and write ``a`` itself, as a kernel would read and write device memory)."""
    from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray

    def make(shape, strides):
        return FakeCUDAArray(np.lib.stride_tricks.as_strided(a, shape=shape,
                                                             strides=tuple(s * a.itemsize for s in strides)))

    return make


def _scalar_value(v, _):
    return v[0]


def _fix_scalar_dtypes(operands):
    for k, (kind, base, dt) in enumerate(operands):
        if kind == "scalar":
            operands[k] = ("scalar", base, base.dtype)


# ---- the public factory ------------------------------------------------------------------------------

def gufunc(signature: str, body: Optional[Callable] = None, *, cooperative: bool = False, team=None,
           block: int = BLOCK):
    """A generalized ufunc whose body, for ONE instance, is a Numba CUDA device function.

    Use as a decorator (``@spillway.gufunc("(n),(n)->()")``) or call ``gufunc(sig, body)``. The
    body receives the instance's core arrays -- inputs, then outputs -- as Numba device array views
    (a ``"()"`` input as its value, a ``"()"`` output as a 1-element array: write ``out[0]``, as in
    ``numba.guvectorize``). With ``cooperative=True`` it receives ``rank, size`` first: ``size``
    threads (a team) run each instance together, ``rank`` in ``0..size-1``; split the core loop with
    ``range(rank, n, size)`` and combine with :func:`team_sum` (then write scalar outputs from
    ``rank == 0``). ``team`` fixes the team size (``None``: by core size, as the C++ gufunc: one
    thread under 16 elements, 2-32 lanes at ~8 elements each, the whole ``block`` over 4096);
    ``block`` is the threads per block (256).

    Calling it: ``g(*inputs, out=None, dtype=None, stream=None, team=None, budget=None,
    devices=None, progress=False)``. Inputs are NumPy arrays, device arrays (CuPy, PyTorch, Numba:
    anything with ``__cuda_array_interface__``) or scalars for ``"()"`` inputs (passed by value).
    Device inputs give device outputs (the first device input's framework) enqueued on ``stream``
    (default: the first producer stream in the inputs' CUDA Array Interface, else the legacy
    default stream), without waiting. Host inputs give NumPy outputs and block; above 32 MiB they
    stream through :func:`spillway.stream` chunk by chunk along the first loop dimension
    (``budget``, ``devices``, ``progress`` go there). ``out`` arrays are written in place.
    Raises ``TypeError`` for wrong kinds of objects and dtypes, ``ValueError`` for bad signatures,
    shapes and values, ``ImportError`` when numba-cuda is missing.
    """
    if body is not None:
        return GUFunc(signature, body, cooperative=cooperative, team=team, block=block)
    parse_signature(signature)  # a bad signature fails at the decorator line

    def deco(fn):
        return GUFunc(signature, fn, cooperative=cooperative, team=team, block=block)

    return deco
