"""The gufunc's linked kernels: the body compiled by numba-cuda to LTO-IR, a loop kernel written
here in CUDA C++ compiled to LTO-IR by NVRTC, both linked by nvJitLink into one cubin that is loaded
and launched through ``cuda.bindings.driver``.

The kernel Numba generates around the body (``_gufunc._kernel_source``) moved the dot of seed 002
at 0.63x of a device-to-device copy on an H200; the same body called from this kernel, its rows
staged into shared memory with ``cp.async``, at 0.98x, and seed 002's pricer at 0.89x against 0.70x
(docs/python-gufunc.md, "Linked kernels"). Numba compiles only a C-ABI wrapper here:
``spillway_gufunc_body(rank, pointers and scalars..., one extent per named core dimension)`` builds
the body's core views over the pointers (``_cview``; fixed sizes are constants) and calls the
body, unchanged.

Used for device launches whose plan it covers (``plan_for``): a loop of rank 1 after collapsing,
every array operand's core C-contiguous (any loop stride, broadcast included), dtypes with a C
type (integers, float32, float64). Anything else, and any failure to build (no NVRTC or nvJitLink,
a numba-cuda without LTO-IR output), runs the kernel Numba generates, as before. A typing error
in the body is raised by that path with Numba's own message. ``SPILLWAY_GUFUNC_LTO=0`` turns the
linked kernels off.
"""

from __future__ import annotations

import ctypes
import os
from dataclasses import dataclass
from typing import Any, List, Optional, Sequence, Tuple

import numpy as np

#: dtype name -> the C type of a pointer's element or a by-value scalar
C_TYPES = {"float32": "float", "float64": "double", "int8": "signed char", "int16": "short", "int32": "int",
           "int64": "long long", "uint8": "unsigned char", "uint16": "unsigned short", "uint32": "unsigned int",
           "uint64": "unsigned long long"}
MAX_GRID = 1 << 20  # the generated kernel's cap on blocks (a grid-stride loop covers the rest)
STAGE_SMEM_MAX = 48 << 10  # bytes of shared memory for the two staging buffers of a block (the dot's
# team 4 at 64 KiB ran no faster than unstaged, H200 2026-11-29)
BODY_SYMBOL = "spillway_gufunc_body"


def enabled() -> bool:
    return os.environ.get("SPILLWAY_GUFUNC_LTO", "1") not in ("0", "", "off", "false", "no")


@dataclass(frozen=True)
class LtoPlan:
    """What a linked kernel is specialised on (the cache key): per operand (inputs, then outputs)
    its kind ("array" / "scalar"), dtype name and core rank; which inputs are staged; the team,
    block and form; per operand its signature core dimensions (names, or fixed sizes), and the
    distinct names (one kernel parameter each: operands sharing a dimension share its value, as the
    body's index arithmetic then does)."""

    kinds: Tuple[str, ...]
    dtypes: Tuple[str, ...]
    core_ranks: Tuple[int, ...]
    staged: Tuple[bool, ...]
    n_in: int
    team: int
    block: int
    cooperative: bool
    dims: Tuple[Tuple[Any, ...], ...] = ()
    names: Tuple[str, ...] = ()


def plan_for(plan, operands, team: int, block: int, cooperative: bool, n_in: int,
             cores: Sequence[Sequence[Any]]) -> Optional[LtoPlan]:
    """The linked kernel's plan for a launch, or None where it does not apply. ``operands`` are
    _gufunc._launch's (kind, base, dtype); ``plan`` its Plan; ``cores`` the signature's core
    dimensions per operand (inputs, then outputs: names or fixed sizes)."""
    if len(plan.loop_extents) != 1:
        return None
    kinds, dts, ranks, staged = [], [], [], []
    for k, (kind, _, dt) in enumerate(operands):
        name = np.dtype(dt).name if dt is not None else None
        if kind == "scalar":
            if name not in C_TYPES:
                return None
            kinds.append("scalar")
            dts.append(name)
            ranks.append(0)
            staged.append(False)
            continue
        if name not in C_TYPES or len(cores[k]) != len(plan.ops[k][1]):
            return None
        ls, cshape, cstr = plan.ops[k]
        c = 1
        for e, s in zip(reversed(cshape), reversed(cstr)):
            if e != 1 and s != c:
                return None  # not a C-contiguous core
            c *= e
        kinds.append("array")
        dts.append(name)
        ranks.append(len(cshape))
        # staged: an input of a sub-warp team whose instances lie back to back, 16-byte rows
        isz = np.dtype(dt).itemsize
        staged.append(k < n_in and cooperative and 1 < team <= 32 and len(cshape) > 0 and ls[0] == c
                      and (c * isz) % 16 == 0 and c > 0)
    if any(staged):
        ipb = block // team
        tile = sum(ipb * _core_elems(plan.ops[k][1]) * np.dtype(operands[k][2]).itemsize
                   for k in range(len(operands)) if staged[k])
        if 2 * tile > STAGE_SMEM_MAX:
            staged = [False] * len(staged)
    dims, names = [], []
    for k, kind in enumerate(kinds):
        core = tuple(d if isinstance(d, str) else int(d) for d in cores[k]) if kind == "array" else ()
        dims.append(core)
        names += [d for d in core if isinstance(d, str) and d not in names]
    return LtoPlan(tuple(kinds), tuple(dts), tuple(ranks), tuple(staged), n_in, team, block, cooperative,
                   tuple(dims), tuple(names))


def _dim(lp: LtoPlan, d) -> str:
    """A core dimension in the generated sources: its parameter (z<j>), or a fixed size."""
    return f"z{lp.names.index(d)}" if isinstance(d, str) else f"_k{d}"


def fixed_sizes(lp: LtoPlan) -> List[int]:
    return sorted({d for core in lp.dims for d in core if not isinstance(d, str)})


def _core_elems(cshape) -> int:
    n = 1
    for e in cshape:
        n *= int(e)
    return n


# ---- source generation ----------------------------------------------------------------------------

def wrapper_source(lp: LtoPlan) -> str:
    """The C-ABI wrapper Numba compiles: raw pointers, scalars and core extents in, the body called
    on core views."""
    params = ["rank"]
    args = []
    for k, (kind, r) in enumerate(zip(lp.kinds, lp.core_ranks)):
        if kind == "scalar":
            params.append(f"s{k}")
            args.append(f"s{k}")
            continue
        params.append(f"p{k}")
        if r == 0:
            args.append(f"p{k}[0]" if k < lp.n_in else f"_cview(p{k}, (_one,))")
        else:
            args.append(f"_cview(p{k}, ({', '.join(_dim(lp, d) for d in lp.dims[k])},))")
    params += [f"z{j}" for j in range(len(lp.names))]
    head = f"rank, {lp.team}, " if lp.cooperative else ""
    return (f"def _wrapper({', '.join(params)}):\n"
            f"    body({head}{', '.join(args)})\n")


def wrapper_types(lp: LtoPlan, nbt) -> list:
    ts = [nbt.int64]
    for kind, dt, r in zip(lp.kinds, lp.dtypes, lp.core_ranks):
        t = getattr(nbt, dt)
        if kind == "scalar":
            ts.append(t)
            continue
        ts.append(nbt.CPointer(t))
    return ts + [nbt.int64] * len(lp.names)


def kernel_source(lp: LtoPlan) -> str:
    """The loop kernel (CUDA C++): ``spillway_gufunc_direct`` calls the body on each instance's
    global memory; ``spillway_gufunc_staged`` (where an input is staged) first copies a block's
    instances of the staged inputs into shared memory (16-byte ``cp.async``, two buffers: the next
    tile in flight while the body runs on this one)."""
    decl, kparams, call, stage = ["long long"], ["long long n"], ["(long long)rank"], []
    for k, (kind, dt, r) in enumerate(zip(lp.kinds, lp.dtypes, lp.core_ranks)):
        ct = C_TYPES[dt]
        if kind == "scalar":
            decl.append(ct)
            kparams.append(f"{ct} s{k}")
            call.append(f"s{k}")
            continue
        decl.append(f"{ct}*")
        kparams += [f"{ct}* p{k}", f"long long l{k}"]
        call.append(f"@P{k}@")
        if lp.staged[k]:
            stage.append((k, ct, r))
    for j in range(len(lp.names)):
        decl.append("long long")
        kparams.append(f"long long z{j}")
        call.append(f"z{j}")
    fixed = "".join(f"#define _k{v} {v}LL\n" for v in fixed_sizes(lp))
    head = (f'extern "C" __device__ void {BODY_SYMBOL}({", ".join(decl)});\n'
            f"#define TEAM {lp.team}\n#define BLOCK {lp.block}\n" + fixed)
    direct_call = ", ".join(call)
    for k in range(len(lp.kinds)):
        direct_call = direct_call.replace(f"@P{k}@", f"p{k} + i * l{k}")
    minb = (2048 // lp.block) if lp.team == lp.block else max(1, 1024 // lp.block)
    src = head + (
        f'extern "C" __global__ void __launch_bounds__(BLOCK, {minb}) spillway_gufunc_direct({", ".join(kparams)}) {{\n'
        "  const long long tid = (long long)blockIdx.x * BLOCK + threadIdx.x;\n"
        "  const int rank = threadIdx.x % TEAM;\n"
        "  const long long step = (long long)gridDim.x * BLOCK / TEAM;\n"
        f"  for (long long i = tid / TEAM; i < n; i += step) {BODY_SYMBOL}({direct_call});\n"
        "}\n")
    if not stage:
        return src
    sizes = []
    for k, ct, r in stage:
        dims = " * ".join(_dim(lp, d) for d in lp.dims[k])
        sizes.append(f"  const long long cb{k} = {dims} * (long long)sizeof({ct});\n")
    issue = []
    off = "0"
    offs = []
    for k, ct, r in stage:
        offs.append(off)
        off = f"{off} + IPB * cb{k}"
    if len({(lp.dims[k], ct) for k, ct, _ in stage}) == 1:
        # every staged input has the same core (the dot's two rows): one loop issues them all
        k0 = stage[0][0]
        body = "".join(f"        cp16(buf + {o} + j * 16, (const unsigned char*)(p{k} + r0 * l{k}) + j * 16);\n"
                       for (k, _, _), o in zip(stage, offs))
        issue.append(f"    const int c = (int)(nr * cb{k0} / 16);\n"
                     f"    for (int j = threadIdx.x; j < c; j += BLOCK) {{\n{body}    }}\n")
    else:
        for (k, ct, r), o in zip(stage, offs):
            issue.append(
                f"    {{ const unsigned char* g = (const unsigned char*)(p{k} + r0 * l{k});\n"
                f"      const int c = (int)(nr * cb{k} / 16);\n"
                f"      for (int j = threadIdx.x; j < c; j += BLOCK) cp16(buf + {o} + j * 16, g + j * 16); }}\n")
    staged_call = ", ".join(call)
    off = "0"
    for k in range(len(lp.kinds)):
        if lp.kinds[k] != "array":
            continue
        if lp.staged[k]:
            ct = C_TYPES[lp.dtypes[k]]
            staged_call = staged_call.replace(f"@P{k}@", f"({ct}*)(cur + {off} + local * cb{k})")
            off = f"{off} + IPB * cb{k}"
        else:
            staged_call = staged_call.replace(f"@P{k}@", f"p{k} + row * l{k}")
    src += (
        "__device__ __forceinline__ void cp16(void* s, const void* g) {\n"
        "  unsigned sa = (unsigned)__cvta_generic_to_shared(s);\n"
        '  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\\n" :: "r"(sa), "l"(g) : "memory");\n'
        "}\n"
        f'extern "C" __global__ void __launch_bounds__(BLOCK, 1) spillway_gufunc_staged({", ".join(kparams)}) {{\n'
        "  extern __shared__ __align__(16) unsigned char sm[];\n"
        "  constexpr int IPB = BLOCK / TEAM;\n"
        + "".join(sizes) +
        f"  const long long tile = {off};\n"
        "  const long long ntiles = (n + IPB - 1) / IPB;\n"
        "  const int rank = threadIdx.x % TEAM, local = threadIdx.x / TEAM;\n"
        "  auto issue = [&](long long t, int b) {\n"
        "    const long long r0 = t * IPB;\n"
        "    const long long nr = n - r0 < IPB ? n - r0 : IPB;\n"
        "    unsigned char* buf = sm + b * tile;\n"
        + "".join(issue) +
        "  };\n"
        "  long long t = blockIdx.x;\n"
        "  int b = 0;\n"
        "  if (t < ntiles) issue(t, 0);\n"
        '  asm volatile("cp.async.commit_group;\\n" ::: "memory");\n'
        "  for (; t < ntiles; t += gridDim.x) {\n"
        "    if (t + gridDim.x < ntiles) issue(t + gridDim.x, b ^ 1);\n"
        '    asm volatile("cp.async.commit_group;\\n" ::: "memory");\n'
        '    asm volatile("cp.async.wait_group 1;\\n" ::: "memory");\n'
        "    __syncthreads();\n"
        "    const unsigned char* cur = sm + b * tile;\n"
        "    const long long row = t * IPB + local;\n"
        f"    if (row < n) {BODY_SYMBOL}({staged_call});\n"
        "    __syncthreads();\n"
        "    b ^= 1;\n"
        "  }\n"
        "}\n")
    return src


# ---- numba-cuda: the body's LTO-IR --------------------------------------------------------------

_cview = None


def _make_cview():
    """An intrinsic: ``_cview(ptr, shape)`` is a C-contiguous array over ``ptr`` (a CPointer)
    with ``shape`` (a tuple of integers): numba-cuda has no carray in the CUDA target."""
    global _cview
    if _cview is not None:
        return _cview
    try:
        from numba.cuda import types as nbt
        nbt.CPointer  # noqa: B018
        nbt.BaseTuple  # noqa: B018
    except (ImportError, AttributeError):
        from numba.core import types as nbt
    try:
        from numba.cuda.extending import intrinsic
    except ImportError:
        from numba.core.extending import intrinsic
    try:
        from numba.cuda import cgutils
    except ImportError:
        from numba.core import cgutils
    try:
        from numba.cuda.np.arrayobj import populate_array
    except ImportError:
        from numba.np.arrayobj import populate_array

    @intrinsic
    def cview(typingctx, ptr, shape):
        if not isinstance(ptr, nbt.CPointer) or not isinstance(shape, nbt.BaseTuple):
            return None
        nd = len(shape)
        arrty = nbt.Array(ptr.dtype, nd, "C")

        def codegen(context, builder, signature, args):
            p, shp = args
            intp = nbt.intp
            dims = [context.cast(builder, builder.extract_value(shp, i), shape.types[i], intp) for i in range(nd)]
            isz = context.get_abi_sizeof(context.get_data_type(arrty.dtype))
            acc = context.get_constant(intp, isz)
            strides = []
            for d in reversed(dims):
                strides.insert(0, acc)
                acc = builder.mul(acc, d)
            ary = context.make_array(arrty)(context, builder)
            populate_array(ary, data=p, shape=cgutils.pack_array(builder, dims),
                           strides=cgutils.pack_array(builder, strides), itemsize=context.get_constant(intp, isz),
                           meminfo=None)
            return ary._getvalue()

        return arrty(ptr, shape), codegen

    _cview = (cview, nbt)
    return _cview


def body_ltoir(body_dev, lp: LtoPlan, cc) -> bytes:
    from numba import cuda

    cview, nbt = _make_cview()
    ns = {"body": body_dev, "_cview": cview, "_one": np.int64(1)}
    ns.update({f"_k{v}": np.int64(v) for v in fixed_sizes(lp)})
    exec(compile(wrapper_source(lp), "<spillway.gufunc LTO wrapper>", "exec"), ns)
    sig = nbt.void(*wrapper_types(lp, nbt))
    code, _ = cuda.compile(ns["_wrapper"], sig, device=True, abi="c", output="ltoir", cc=tuple(cc),
                           abi_info={"abi_name": BODY_SYMBOL})
    return bytes(code)


def nvrtc_ltoir(src: str, cc) -> bytes:
    from cuda.bindings import nvrtc

    ok = nvrtc.nvrtcResult.NVRTC_SUCCESS
    err, prog = nvrtc.nvrtcCreateProgram(src.encode(), b"spillway_gufunc.cu", 0, [], [])
    if err != ok:
        raise RuntimeError(f"nvrtcCreateProgram: {err}")
    try:
        opts = [f"-arch=compute_{cc[0]}{cc[1]}".encode(), b"-dlto", b"-std=c++17", b"-default-device"]
        (err,) = nvrtc.nvrtcCompileProgram(prog, len(opts), opts)
        if err != ok:
            _, n = nvrtc.nvrtcGetProgramLogSize(prog)
            log = b" " * n
            nvrtc.nvrtcGetProgramLog(prog, log)
            raise RuntimeError(f"NVRTC: {err}: {log.decode(errors='replace')}")
        err, n = nvrtc.nvrtcGetLTOIRSize(prog)
        buf = b" " * n
        (err,) = nvrtc.nvrtcGetLTOIR(prog, buf)
        if err != ok:
            raise RuntimeError(f"nvrtcGetLTOIR: {err}")
        return buf
    finally:
        nvrtc.nvrtcDestroyProgram(prog)


def link(blobs: Sequence[bytes], cc) -> bytes:
    from cuda.bindings import nvjitlink

    opts = [f"-arch=sm_{cc[0]}{cc[1]}", "-lto", "-O3"]
    h = nvjitlink.create(len(opts), opts)
    try:
        for i, b in enumerate(blobs):
            nvjitlink.add_data(h, nvjitlink.InputType.LTOIR, b, len(b), f"spillway_gufunc_{i}")
        try:
            nvjitlink.complete(h)
        except Exception as e:  # noqa: BLE001 - the log says why
            n = nvjitlink.get_error_log_size(h)
            log = bytearray(n)
            if n:
                nvjitlink.get_error_log(h, log)
            raise RuntimeError(f"nvJitLink: {e}: {bytes(log).decode(errors='replace')}") from None
        n = nvjitlink.get_linked_cubin_size(h)
        cubin = bytearray(n)
        nvjitlink.get_linked_cubin(h, cubin)
        return bytes(cubin)
    finally:
        nvjitlink.destroy(h)


def build_cubin(body_dev, lp: LtoPlan, cc) -> bytes:
    """The linked cubin for a plan (no GPU needed)."""
    return link([body_ltoir(body_dev, lp, cc), nvrtc_ltoir(kernel_source(lp), cc)], cc)


# ---- loading and launching ------------------------------------------------------------------------

def _ck(res, what):
    from cuda.bindings import driver

    err = res[0] if isinstance(res, tuple) else res
    if err != driver.CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"{what}: {err}")
    return res[1] if isinstance(res, tuple) and len(res) == 2 else None


class LinkedKernel:
    """A loaded linked kernel (one CUDA context)."""

    def __init__(self, lp: LtoPlan, cubin: bytes, cc=None):
        from cuda.bindings import driver

        self.lp = lp
        self.cubin = cubin
        self.cc = cc
        self.module = _ck(driver.cuModuleLoadData(cubin), "cuModuleLoadData")
        self.direct = _ck(driver.cuModuleGetFunction(self.module, b"spillway_gufunc_direct"), "cuModuleGetFunction")
        self.staged = None
        self.stage_bytes_per_instance = 0
        self.blocks_per_sm = None
        if any(lp.staged):
            self.staged = _ck(driver.cuModuleGetFunction(self.module, b"spillway_gufunc_staged"), "cuModuleGetFunction")
        self.sms = None

    def regs(self, staged: bool) -> int:
        from cuda.bindings import driver

        f = self.staged if staged else self.direct
        return _ck(driver.cuFuncGetAttribute(driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_NUM_REGS, f), "regs")

    def launch(self, n: int, ptrs: List[int], loop_strides: List[int], scalars: List[Any],
               core_shapes: List[Tuple[int, ...]], stream_handle: int):
        """ptrs/loop_strides/core_shapes per array operand (in operand order), scalars per scalar
        input (numpy scalars of the planned dtype)."""
        from cuda.bindings import driver

        lp = self.lp
        vals = [ctypes.c_int64(n)]
        sizes = {}
        ai = si = 0
        stage_elems_bytes = 0
        for k, kind in enumerate(lp.kinds):
            if kind == "scalar":
                v = scalars[si]
                si += 1
                vals.append(np.ctypeslib.as_ctypes_type(np.dtype(lp.dtypes[k]))(v.item() if hasattr(v, "item") else v))
                continue
            vals += [ctypes.c_void_p(ptrs[ai]), ctypes.c_int64(loop_strides[ai])]
            cs = core_shapes[ai]
            for d, e in zip(lp.dims[k], cs):
                if isinstance(d, str):
                    sizes.setdefault(d, int(e))
            if lp.staged[k]:
                stage_elems_bytes += _core_elems(cs) * np.dtype(lp.dtypes[k]).itemsize
                if ptrs[ai] % 16:
                    stage_elems_bytes = -1 << 62  # misaligned base: run the direct kernel
            ai += 1
        vals += [ctypes.c_int64(sizes[d]) for d in lp.names]
        params = (ctypes.c_void_p * len(vals))(*[ctypes.addressof(v) for v in vals])
        block, team = lp.block, lp.team
        if self.staged is not None and stage_elems_bytes > 0:
            ipb = block // team
            smem = 2 * ipb * stage_elems_bytes
            f = self.staged
            if smem > 48 << 10:
                _ck(driver.cuFuncSetAttribute(
                    f, driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, smem), "smem")
            per_sm = _ck(driver.cuOccupancyMaxActiveBlocksPerMultiprocessor(f, block, smem), "occupancy")
            if self.sms is None:
                dev = _ck(driver.cuCtxGetDevice(), "cuCtxGetDevice")
                self.sms = _ck(driver.cuDeviceGetAttribute(
                    driver.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev), "SMs")
            grid = max(1, min(max(1, per_sm) * self.sms, -(-n // ipb)))
        else:
            f, smem = self.direct, 0
            grid = max(1, min(-(-n * team // block), MAX_GRID))
        _ck(driver.cuLaunchKernel(f, grid, 1, 1, block, 1, 1, smem, stream_handle, ctypes.addressof(params), 0),
            "cuLaunchKernel")
        return "lto-staged" if f is self.staged else "lto"
