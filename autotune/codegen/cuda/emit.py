"""CUDA C text of a prepared loop AST (see ``passes.prepare``).

blockIdx/threadIdx loops become index constants, vthread and unrolled loops ``#pragma
unroll`` loops, local buffers register arrays, shared buffers ``__shared__`` arrays at
function scope (past 48 KB, pointers into one ``extern __shared__`` block of dynamic shared
memory, which the launch sizes), ``Sync`` ``__syncthreads()``, ``Fence`` ``__threadfence()``,
``AtomicAdd`` ``atomicAdd``; in a kernel that fences, a workspace it writes is read with
``__ldcg`` (at L2, where another block's fenced writes are). Index arithmetic is ``int``
unless a buffer is large enough to need ``long long``. Buffers are typed by their dtype: a
float16/bfloat16 element is widened to float when loaded and rounded to nearest even when
stored. Fragment buffers become ``nvcuda::wmma::fragment`` arrays, the Mma statements
wmma calls, and the Async statements ``cp.async`` inline PTX.
"""
from __future__ import annotations

import re

from autotune.codegen.cuda.hopper import (
    HOPPER_STMTS,
    TENSOR_MAP_TYPE,
    hopper_stmt,
)
from autotune.codegen.cuda.passes import (
    SWIZZLE_ALIGN,
    CudaCodegenError,
    Launch,
    dynamic_shared_layout,
    shared_buffers,
    tensor_maps,
)
from autotune.codegen.cuda.semantics import c_division, flat_index, index_bits, written_buffers
from autotune.ir.analysis import Interval, affine, loop_extents, simplify
from autotune.ir.expr import (
    FLOAT,
    And,
    BinOp,
    Cmp,
    Const,
    Expr,
    Load,
    Select,
    Var,
    add,
    mul,
    walk,
)
from autotune.ir.stmt import (
    Allocate,
    AsyncCommit,
    AsyncCopy,
    AsyncWait,
    AtomicAdd,
    Buffer,
    Fence,
    For,
    ForKind,
    IfThenElse,
    MmaFill,
    MmaLoad,
    MmaStore,
    MmaSync,
    PrimFunc,
    Scope,
    Seq,
    SetMaxNReg,
    Stmt,
    Store,
    Sync,
    TensorMap,
    walk_stmts,
)
from autotune.ir.visitor import StmtVisitor
from autotune.ops.dtypes import dtype_info, element_c_type

# floor division and modulo for operands that may be negative (C rounds toward zero)
PRELUDE = """\
#ifndef AT_CUDA_PRELUDE
#define AT_CUDA_PRELUDE
template <typename T> static __device__ __forceinline__ T at_floordiv(T a, T b) {
  T q = a / b;
  return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}
template <typename T> static __device__ __forceinline__ T at_floormod(T a, T b) {
  T r = a % b;
  return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}
#endif
"""

_LAUNCH_INDEX = {ForKind.BLOCK_X: "blockIdx.x", ForKind.BLOCK_Y: "blockIdx.y",
                 ForKind.BLOCK_Z: "blockIdx.z", ForKind.THREAD_X: "threadIdx.x",
                 ForKind.THREAD_Y: "threadIdx.y", ForKind.THREAD_Z: "threadIdx.z"}
_KEYWORDS = {"int", "float", "for", "if", "else", "const", "do", "while", "return", "char",
             "long", "short", "auto", "break", "case", "default", "switch", "void", "min",
             "max", "threadIdx", "blockIdx", "blockDim", "gridDim", "signed", "unsigned"}
# C precedence levels used to print the fewest parentheses
_PREC = {"?": 1, "||": 2, "&&": 3, "==": 4, "!=": 4, "<": 5, "<=": 5, ">": 5, ">=": 5,
         "+": 6, "-": 6, "*": 7, "/": 7, "%": 7}
_ATOM = 9
_WIDEN = {"float16": "__half2float", "bfloat16": "__bfloat162float"}
_ROUND = {"float16": "__float2half_rn", "bfloat16": "__float2bfloat16_rn"}
_HEADERS = {"float16": "cuda_fp16.h", "bfloat16": "cuda_bf16.h"}
_WMMA = "nvcuda::wmma::"
_FRAGMENT_USE = {Scope.WMMA_A: "matrix_a", Scope.WMMA_B: "matrix_b",
                 Scope.WMMA_ACC: "accumulator"}
_SHARED_ALIGN, _MMA_SHARED_ALIGN = 16, 128  # wmma needs 32-byte aligned pointers
_DYNAMIC = "at_shared"  # the extern dynamic shared block ("at_" names are never a buffer's)
# dtype -> (vector type, maker from two floats) of a store of two adjacent elements
_PAIRS = {"float16": ("__half2", "__floats2half2_rn"),
          "bfloat16": ("__nv_bfloat162", "__floats2bfloat162_rn"),
          FLOAT: ("float2", "make_float2")}


class _Names:
    def __init__(self) -> None:
        self.by_id: dict[int, str] = {}
        self.used: set[str] = set()

    def __call__(self, obj: Var | Buffer | TensorMap) -> str:
        key = id(obj)
        if key not in self.by_id:
            base = re.sub(r"\W", "_", obj.name) or "v"
            if base[0].isdigit() or base in _KEYWORDS or base.startswith("at_"):
                base = "v_" + base
            name, n = base, 1
            while name in self.used:
                name, n = f"{base}_{n}", n + 1
            self.used.add(name)
            self.by_id[key] = name
        return self.by_id[key]


def emit_kernel(func: PrimFunc, body: Stmt, launch: Launch, name: str) -> str:
    """The ``extern "C" __global__`` definition of kernel ``name`` (without the prelude)."""
    return _Emitter(func, body, launch).kernel(name)


def headers(func: PrimFunc) -> str:
    """The ``#include`` lines ``func`` needs (none for a float32 kernel without wmma)."""
    bufs = [*func.args, *func.workspaces,
            *(x.buffer for x in walk_stmts(func.body) if isinstance(x, Allocate))]
    names = [_HEADERS[b.dtype] for b in bufs if b.dtype in _HEADERS]
    if any(b.scope.is_fragment for b in bufs):
        names.append("mma.h")
    return "".join(f"#include <{n}>\n" for n in dict.fromkeys(sorted(names)))


def c_type(dtype: str) -> str:
    """The CUDA C element type of a buffer of ``dtype``."""
    return element_c_type(dtype)


def mma_shared_buffers(s: Stmt) -> set[Buffer]:
    """Buffers that wmma loads or stores or cp.async fills: declared 128-byte aligned."""
    out: set[Buffer] = set()
    for x in walk_stmts(s):
        if isinstance(x, MmaLoad):
            out.add(x.src)
        elif isinstance(x, (MmaStore, AsyncCopy)):
            out.add(x.dst)
    return out


def fragment_layouts(s: Stmt) -> dict[Buffer, str]:
    """The one memory layout each A/B fragment buffer is loaded with (a wmma fragment's
    layout is part of its type); CudaCodegenError for a buffer loaded with both."""
    out: dict[Buffer, str] = {}
    for x in walk_stmts(s):
        if isinstance(x, MmaLoad) and x.frag.scope is not Scope.WMMA_ACC:
            if out.setdefault(x.frag, x.layout) != x.layout:
                raise CudaCodegenError(f"fragment {x.frag.name} is loaded both row- and "
                                       "column-major; a wmma fragment has one layout")
    return out


def fragment_shapes(s: Stmt) -> dict[Buffer, tuple[int, int, int]]:
    """The MMA shape of each fragment buffer (one per buffer)."""
    out: dict[Buffer, tuple[int, int, int]] = {}
    for x in walk_stmts(s):
        if isinstance(x, (MmaFill, MmaLoad, MmaStore)):
            uses, shape = [x.frag], x.shape
        elif isinstance(x, MmaSync):
            uses, shape = [x.acc, x.a, x.b], x.shape
        else:
            continue
        for b in uses:
            if out.setdefault(b, shape) != shape:
                raise CudaCodegenError(f"fragment {b.name} is used with MMA shapes "
                                       f"{out[b]} and {shape}")
    return out


class _Emitter(StmtVisitor):
    """The kernel's lines, each statement's indented ``ind`` levels."""

    def __init__(self, func: PrimFunc, body: Stmt, launch: Launch):
        self.func, self.body, self.launch = func, body, launch
        self.names = _Names()
        self.lines: list[str] = []
        self.ind = 1
        self.ext = loop_extents(body)
        self.ranges: dict[Var, Interval] = {}
        self.itype = "long long" if index_bits(func) == 64 else "int"
        self.layouts = fragment_layouts(body)
        self.frag_shapes = fragment_shapes(body)
        self.mma_shared = mma_shared_buffers(body)
        # workspaces written in a launch that fences: other blocks read them (split-K)
        fences = any(isinstance(x, Fence) for x in walk_stmts(body))
        self.scratch = set(func.workspaces) & written_buffers(body) if fences else set()

    # ------------------------------------------------------------------ structure
    def kernel(self, name: str) -> str:
        stored = written_buffers(self.body)
        # TMA descriptors first: a CUtensorMap parameter is 64-byte aligned, which the
        # start of the parameter block (and every 128 bytes after it) is
        params = [f"const __grid_constant__ {TENSOR_MAP_TYPE} {self.names(m)}"
                  for m in tensor_maps(self.func)]
        for b in (*self.func.args, *self.func.workspaces):
            const = "" if b in stored else "const "
            params.append(f"{const}{c_type(b.dtype)}* __restrict__ {self.names(b)}")
        bounds_ = f"{self.launch.threads}"
        if any(isinstance(x, SetMaxNReg) for x in walk_stmts(self.body)):
            bounds_ += ", 1"  # setmaxnreg takes effect only under a register cap at entry
        head = f'extern "C" __global__ void __launch_bounds__({bounds_}) {name}('
        self.lines.append(head + ", ".join(params) + ") {")
        if self.launch.dynamic_shared_bytes:
            self._dynamic_shared()
        else:
            for b in dict.fromkeys(shared_buffers(self.func.body)):
                align = _MMA_SHARED_ALIGN if b in self.mma_shared else _SHARED_ALIGN
                self.lines.append(f"  __shared__ __align__({align}) {c_type(b.dtype)} "
                                  f"{self.names(b)}[{b.size}];")
        self.visit(self.body)
        self.lines.append("}")
        return "\n".join(self.lines) + "\n"

    def _dynamic_shared(self) -> None:
        """Every shared buffer as a pointer at its fixed offset in the one dynamic block
        (past the 48 KB of static arrays a block may declare; see `dynamic_shared_layout`)."""
        offsets, size = dynamic_shared_layout(self.func.body)
        if size > self.launch.dynamic_shared_bytes:
            raise CudaCodegenError(f"{size} bytes of shared buffers > the launch's "
                                   f"{self.launch.dynamic_shared_bytes} dynamic bytes")
        if self.launch.tensor_maps:
            # swizzled TMA tiles need 1024-byte alignment, which the block's base is not
            # promised: align it here (the launch sized the block with the slack)
            self.lines.append(f"  extern __shared__ __align__({SWIZZLE_ALIGN}) "
                              f"unsigned char {_DYNAMIC}_raw[];")
            self.lines.append(f"  unsigned char* const {_DYNAMIC} = (unsigned char*)"
                              f"(((unsigned long long){_DYNAMIC}_raw + {SWIZZLE_ALIGN - 1}) & "
                              f"~{SWIZZLE_ALIGN - 1}ull);")
        else:
            self.lines.append(f"  extern __shared__ __align__({_MMA_SHARED_ALIGN}) "
                              f"unsigned char {_DYNAMIC}[];")
        for b, offset in offsets.items():
            t = c_type(b.dtype)
            self.lines.append(f"  {t}* const {self.names(b)} = "
                              f"reinterpret_cast<{t}*>({_DYNAMIC} + {offset});")

    @property
    def pad(self) -> str:
        return "  " * self.ind

    def indented(self, s: Stmt) -> None:
        self.ind += 1
        self.visit(s)
        self.ind -= 1

    def visit_seq(self, s: Seq) -> None:
        stmts, k = s.stmts, 0
        while k < len(stmts):
            if k + 1 < len(stmts) and self._paired(stmts[k], stmts[k + 1]):
                self._store_pair(stmts[k], stmts[k + 1])  # type: ignore[arg-type]
                k += 2
                continue
            self.visit(stmts[k])
            k += 1

    def visit_allocate(self, s: Allocate) -> None:
        b = s.buffer
        if b.scope.is_fragment:
            self.lines.append(f"{self.pad}{self._fragment_type(b)} {self.names(b)}[{b.size}];")
        elif b.scope is not Scope.SHARED:  # shared ones are declared up front
            self.lines.append(f"{self.pad}{c_type(b.dtype)} {self.names(b)}[{b.size}];")
        self.visit(s.body)

    def visit_if(self, s: IfThenElse) -> None:
        self.lines.append(f"{self.pad}if ({self.expr(s.cond)}) {{")
        self.indented(s.then)
        if s.else_ is not None:
            self.lines.append(f"{self.pad}}} else {{")
            self.indented(s.else_)
        self.lines.append(f"{self.pad}}}")

    def visit_leaf(self, s: Stmt) -> None:
        pad = self.pad
        if isinstance(s, Store):
            self._store(s)
        elif isinstance(s, Sync):
            self.lines.append(f"{pad}__syncthreads();")
        elif isinstance(s, Fence):
            self.lines.append(f"{pad}__threadfence();")
        elif isinstance(s, AtomicAdd):
            self.lines.append(f"{pad}{self._ref(s.result, s.result_index)} = atomicAdd("
                              f"&{self._ref(s.buffer, s.index)}, {s.value!r}f);")
        else:
            self.lines.append(pad + self._warp_or_async(s))

    # ------------------------------------------------------------------ tensor cores
    def _fragment_type(self, b: Buffer) -> str:
        shape = self.frag_shapes.get(b)
        if shape is None:
            raise CudaCodegenError(f"fragment {b.name} is never used by an Mma statement")
        m, n, k = shape
        use = _FRAGMENT_USE[b.scope]
        if b.scope is Scope.WMMA_ACC:
            if b.dtype != FLOAT:
                raise CudaCodegenError(f"accumulator {b.name} is {b.dtype}; only float32")
            return f"{_WMMA}fragment<{_WMMA}{use}, {m}, {n}, {k}, float>"
        if b.dtype not in _WIDEN:
            raise CudaCodegenError(f"fragment {b.name} is {b.dtype}; wmma takes "
                                   f"{' or '.join(_WIDEN)} operands")
        layout = self.layouts.get(b)
        if layout is None:
            raise CudaCodegenError(f"fragment {b.name} is never loaded: its layout is unknown")
        return (f"{_WMMA}fragment<{_WMMA}{use}, {m}, {n}, {k}, {c_type(b.dtype)}, "
                f"{_WMMA}{layout}_major>")

    def _at(self, b: Buffer, offset: Expr) -> str:
        """A pointer to element ``offset`` (flat) of ``b``."""
        return f"{self.names(b)} + {self._sub(simplify(offset, self.ext), _PREC['+'] + 1)}"

    def _warp_or_async(self, s: Stmt) -> str:
        """One Mma (warp-collective) or Async (cp.async) statement."""
        if isinstance(s, MmaFill):
            return f"{_WMMA}fill_fragment({self._ref(s.frag, s.index)}, {s.value!r}f);"
        if isinstance(s, MmaLoad):
            layout = (f", {_WMMA}mem_{s.layout}_major" if s.frag.scope is Scope.WMMA_ACC
                      else "")
            return (f"{_WMMA}load_matrix_sync({self._ref(s.frag, s.index)}, "
                    f"{self._at(s.src, s.offset)}, {s.ldm}{layout});")
        if isinstance(s, MmaSync):
            acc = self._ref(s.acc, s.acc_index)
            return (f"{_WMMA}mma_sync({acc}, {self._ref(s.a, s.a_index)}, "
                    f"{self._ref(s.b, s.b_index)}, {acc});")
        if isinstance(s, MmaStore):
            if s.dst.dtype != FLOAT:
                raise CudaCodegenError(f"mma_store into {s.dst.name} ({s.dst.dtype}): "
                                       "accumulators are stored as float32")
            return (f"{_WMMA}store_matrix_sync({self._at(s.dst, s.offset)}, "
                    f"{self._ref(s.frag, s.index)}, {s.ldm}, {_WMMA}mem_row_major);")
        if isinstance(s, AsyncCopy):
            return self._async_copy(s)
        if isinstance(s, HOPPER_STMTS):
            return hopper_stmt(s, self.expr, self._at, self._ref, self.names)
        if isinstance(s, AsyncCommit):
            return 'asm volatile("cp.async.commit_group;\\n" ::);'
        if isinstance(s, AsyncWait):
            # the clobber keeps the compiler from moving shared accesses across the wait
            return f'asm volatile("cp.async.wait_group {s.pending};\\n" ::: "memory");'
        raise TypeError(f"unknown statement {type(s).__name__}")

    def _async_copy(self, s: AsyncCopy) -> str:
        """``cp.async`` of 4, 8 or 16 bytes (16 bypass L1: ``.cg``); where ``valid`` is
        false the source size is 0, so nothing is read and the destination zero-filled,
        and the source address is the buffer's start (never out of bounds)."""
        nbytes = s.elems * dtype_info(s.dst.dtype).itemsize
        if nbytes not in (4, 8, 16):
            raise CudaCodegenError(f"cp.async of {nbytes} bytes; 4, 8 or 16 are possible")
        cache = "cg" if nbytes == 16 else "ca"
        dst = f"(unsigned)__cvta_generic_to_shared({self._at(s.dst, s.dst_offset)})"
        if s.valid is None:
            src = self._at(s.src, s.src_offset)
            return (f'asm volatile("cp.async.{cache}.shared.global [%0], [%1], {nbytes};\\n" '
                    f':: "r"({dst}), "l"({src}));')
        ok = self.expr(s.valid)
        off = self._sub(simplify(s.src_offset, self.ext), _PREC["?"] + 1)
        src = f"{self.names(s.src)} + (at_ok ? {off} : 0)"
        return (f"{{ const bool at_ok = {ok}; "
                f'asm volatile("cp.async.{cache}.shared.global [%0], [%1], {nbytes}, %2;\\n" '
                f':: "r"({dst}), "l"({src}), "r"(at_ok ? {nbytes} : 0)); }}')

    def visit_for(self, s: For) -> None:
        pad = self.pad
        v = self.names(s.var)
        self.ranges[s.var] = (0, s.extent - 1)
        index = _LAUNCH_INDEX.get(s.kind)
        if index is not None:
            self.lines.append(f"{pad}const {self.itype} {v} = {index};")
            self.visit(s.body)
            return
        if s.extent == 1:
            self.lines.append(f"{pad}const {self.itype} {v} = 0;")
            self.visit(s.body)
            return
        if s.kind in (ForKind.UNROLLED, ForKind.VTHREAD):
            self.lines.append(f"{pad}#pragma unroll")
        self.lines.append(f"{pad}for ({self.itype} {v} = 0; {v} < {s.extent}; ++{v}) {{")
        self.indented(s.body)
        self.lines.append(f"{pad}}}")

    def _paired(self, a: Stmt, b: Stmt) -> bool:
        """Whether stores ``a`` then ``b`` write elements i and i + 1 of one global buffer,
        i provably even (so the two make one 4- or 8-byte aligned store, given a buffer
        aligned as device allocations are), neither reading the buffer it writes. (Not
        registers: a vector view of a register array would move it to local memory.)"""
        if not (isinstance(a, Store) and isinstance(b, Store) and a.buffer is b.buffer
                and a.buffer.dtype in _PAIRS and a.buffer.scope is Scope.GLOBAL):
            return False
        if any(ld.buffer is a.buffer for st in (a, b) for ld in walk(st.value)
               if isinstance(ld, Load)):
            return False
        first = flat_index(a.buffer, a.indices, self.ext)
        second = flat_index(b.buffer, b.indices, self.ext)
        step = affine(simplify(add(second, mul(first, -1)), self.ext), ())
        form = affine(first, ())
        return (step == ({}, 1) and form is not None
                and all(k % 2 == 0 for k in form[0].values()) and form[1] % 2 == 0)

    def _store_pair(self, a: Store, b: Store) -> None:
        """Two adjacent elements as one vector store (rounded once each, as `_store`)."""
        vector, make = _PAIRS[a.buffer.dtype]
        target = self._ref(a.buffer, a.indices)
        self.lines.append(f"{self.pad}*reinterpret_cast<{vector}*>(&{target}) = "
                          f"{make}({self.expr(a.value)}, {self.expr(b.value)});")

    def _store(self, s: Store) -> None:
        pad, target = self.pad, self._ref(s.buffer, s.indices)
        v = s.value
        rounding = _ROUND.get(s.buffer.dtype)
        if rounding is not None:  # computed in float, rounded once into the half buffer
            self.lines.append(f"{pad}{target} = {rounding}({self.expr(v)});")
        elif (isinstance(v, BinOp) and v.op == "+" and isinstance(v.a, Load)
                and v.a.buffer is s.buffer and v.a.indices == s.indices):
            self.lines.append(f"{pad}{target} += {self.expr(v.b)};")
        else:
            self.lines.append(f"{pad}{target} = {self.expr(v)};")

    # ------------------------------------------------------------------ expressions
    def _ref(self, b: Buffer, indices: tuple[Expr, ...]) -> str:
        return f"{self.names(b)}[{self.expr(flat_index(b, indices, self.ext))}]"

    def expr(self, e: Expr) -> str:
        return self._expr(e)[0]

    def _expr(self, e: Expr) -> tuple[str, int]:
        """Text of ``e`` and its precedence (higher binds tighter)."""
        if isinstance(e, Var):
            return self.names(e), _ATOM
        if isinstance(e, Const):
            return _const(e), _ATOM
        if isinstance(e, Load):
            widen = _WIDEN.get(e.buffer.dtype)
            if widen is not None:
                return f"{widen}({self._ref(e.buffer, e.indices)})", _ATOM
            if e.buffer in self.scratch:  # not L1: another block wrote it
                return f"__ldcg(&{self._ref(e.buffer, e.indices)})", _ATOM
            return self._ref(e.buffer, e.indices), _ATOM
        if isinstance(e, Select):
            c, t, f = self._sub(e.cond, 2), self._sub(e.t, 2), self._sub(e.f, 1)
            return f"{c} ? {t} : {f}", _PREC["?"]
        if isinstance(e, And):
            return f"{self._sub(e.a, 3)} && {self._sub(e.b, 4)}", _PREC["&&"]
        if isinstance(e, Cmp):
            p = _PREC[e.op]
            return f"{self._sub(e.a, p)} {e.op} {self._sub(e.b, p + 1)}", p
        if isinstance(e, BinOp):
            return self._binop(e)
        raise TypeError(f"unknown expression {type(e).__name__}")

    def _binop(self, e: BinOp) -> tuple[str, int]:
        if e.op in ("min", "max"):
            fn = ("fminf" if e.op == "min" else "fmaxf") if e.dtype == FLOAT else e.op
            return f"{fn}({self.expr(e.a)}, {self.expr(e.b)})", _ATOM
        if e.op in ("//", "%"):
            if not c_division(e, self.ranges):
                fn = "at_floordiv" if e.op == "//" else "at_floormod"
                return f"{fn}<{self.itype}>({self.expr(e.a)}, {self.expr(e.b)})", _ATOM
            op = "/" if e.op == "//" else "%"
        else:
            op = e.op
        p = _PREC[op]
        return f"{self._sub(e.a, p)} {op} {self._sub(e.b, p + 1)}", p

    def _sub(self, e: Expr, min_prec: int) -> str:
        text, p = self._expr(e)
        return text if p >= min_prec else f"({text})"


def _const(e: Const) -> str:
    if e.dtype == FLOAT:
        v = float(e.value)
        if v != v:
            return "__int_as_float(0x7fffffff)"
        if v in (float("inf"), float("-inf")):
            return ("-" if v < 0 else "") + "__int_as_float(0x7f800000)"
        return f"{v!r}f"
    if e.dtype == "bool":
        return "true" if e.value else "false"
    v = int(e.value)
    return f"{v}LL" if not -2**31 <= v < 2**31 else str(v)
