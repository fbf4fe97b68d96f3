"""CUDA C of the Hopper (sm_90a) statements: TMA copies, mbarriers, wgmma, setmaxnreg.

Each statement becomes a call of a small inline helper (inline PTX) that the kernel's
prelude defines; `prelude` writes only the helpers a kernel uses, the wgmma ones per shape
and operand type. A TMA descriptor is a ``__grid_constant__`` kernel parameter of type
``at_tensor_map`` (the driver's 128-byte, 64-byte aligned ``CUtensorMap``), which the host
encodes at launch (`autotune.codegen.cuda.tensormap`).

The layouts are those the PTX ISA names canonical, and were checked on an H200: a
K-major operand copied by TMA with the 128-byte swizzle has rows of 64 halves, 8-row
groups 1024 bytes apart (the descriptor's stride byte offset) and steps 32 bytes per k16;
an MN-major one (a row-major K x N B) comes in 64-column boxes of K rows, whose distance is
the leading byte offset, 8-row groups of K again 1024 bytes apart, and steps 2048 bytes
per k16 (with leading and stride offsets swapped it computed garbage).
"""
from __future__ import annotations

from typing import Callable

from autotune.codegen.cuda.passes import CudaCodegenError
from autotune.ir.expr import Const, Expr
from autotune.ir.stmt import (
    Buffer,
    MbarrierArrive,
    MbarrierInit,
    MbarrierWait,
    NamedSync,
    SetMaxNReg,
    SmemMatrix,
    Stmt,
    TensorMap,
    TmaLoad,
    Wgmma,
    WgmmaCommit,
    WgmmaFence,
    WgmmaWait,
    walk_stmts,
)

HOPPER_STMTS = (TmaLoad, MbarrierInit, MbarrierArrive, MbarrierWait, Wgmma, WgmmaFence,
                WgmmaCommit, WgmmaWait, SetMaxNReg, NamedSync)
TENSOR_MAP_TYPE = "at_tensor_map"
# wgmma's operand type names, and the swizzle mode codes of its descriptors (bits 62-63)
_WGMMA_TYPES = {"float16": "f16", "bfloat16": "bf16"}
_DESC_SWIZZLE = {0: 0, 128: 1, 64: 2, 32: 3}
WGMMA_NS = tuple(range(8, 257, 8))

_COMMON = r"""
struct __align__(64) at_tensor_map { unsigned long long opaque[16]; };
static __device__ __forceinline__ unsigned at_smem(const void* p) {
  return (unsigned)__cvta_generic_to_shared(p);
}
"""
_MBARRIER = r"""
static __device__ __forceinline__ void at_mbar_init(unsigned long long* b, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" :: "r"(at_smem(b)), "r"(count));
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}
static __device__ __forceinline__ void at_mbar_arrive(unsigned long long* b) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" :: "r"(at_smem(b)) : "memory");
}
static __device__ __forceinline__ void at_mbar_expect(unsigned long long* b, int bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;"
               :: "r"(at_smem(b)), "r"(bytes) : "memory");
}
static __device__ __forceinline__ void at_mbar_wait(unsigned long long* b, int parity) {
  asm volatile("{\n.reg .pred P1;\nAT_WAIT:\n"
               "mbarrier.try_wait.parity.shared::cta.b64 P1, [%0], %1;\n"
               "@P1 bra.uni AT_DONE;\nbra.uni AT_WAIT;\nAT_DONE:\n}"
               :: "r"(at_smem(b)), "r"(parity) : "memory");
}
"""
_WGMMA_SYNC = r"""
static __device__ __forceinline__ unsigned long long at_desc(const void* p, int lbo, int sbo,
                                                             int swizzle) {
  const unsigned long long a = at_smem(p);
  return ((a & 0x3FFFF) >> 4) | ((unsigned long long)((lbo & 0x3FFFF) >> 4) << 16)
       | ((unsigned long long)((sbo & 0x3FFFF) >> 4) << 32)
       | ((unsigned long long)swizzle << 62);
}
"""


def uses_hopper(body: Stmt) -> bool:
    return any(isinstance(x, HOPPER_STMTS) for x in walk_stmts(body))


def prelude(body: Stmt) -> str:
    """The helper functions the Hopper statements of ``body`` call ('' when none)."""
    stmts = [x for x in walk_stmts(body) if isinstance(x, HOPPER_STMTS)]
    if not stmts:
        return ""
    parts = [_guarded("AT_HOPPER_COMMON", _COMMON)]
    if any(isinstance(x, (MbarrierInit, MbarrierArrive, MbarrierWait, TmaLoad)) for x in stmts):
        parts.append(_guarded("AT_HOPPER_MBARRIER", _MBARRIER))
    for rank in sorted({len(x.coords) for x in stmts if isinstance(x, TmaLoad)}):
        parts.append(_guarded(f"AT_HOPPER_TMA_{rank}D", _tma_helper(rank)))
    wgmmas = sorted({_wgmma_key(x) for x in stmts if isinstance(x, Wgmma)})
    if any(isinstance(x, (Wgmma, WgmmaFence, WgmmaCommit, WgmmaWait)) for x in stmts):
        parts.append(_guarded("AT_HOPPER_DESC", _WGMMA_SYNC))
    for key in wgmmas:
        parts.append(_guarded(wgmma_name(*key).upper(), _wgmma_helper(*key)))
    return "".join(parts)


def _guarded(macro: str, text: str) -> str:
    """``text`` once per translation unit (kernels compiled together share helpers)."""
    return f"#ifndef {macro}\n#define {macro}\n{text.strip()}\n#endif\n"


def _tma_helper(rank: int) -> str:
    coords = ", ".join(f"int c{i}" for i in range(rank))
    slots = ", ".join(f"%{3 + i}" for i in range(rank))
    operands = ", ".join(f'"r"(c{i})' for i in range(rank))
    return (f"static __device__ __forceinline__ void at_tma_load_{rank}d(void* dst, "
            f"const {TENSOR_MAP_TYPE}* map, unsigned long long* bar, {coords}) {{\n"
            f'  asm volatile("cp.async.bulk.tensor.{rank}d.shared::cluster.global.tile'
            f'.mbarrier::complete_tx::bytes [%0], [%1, {{{slots}}}], [%2];"\n'
            f'               :: "r"(at_smem(dst)), "l"((unsigned long long)map), '
            f'"r"(at_smem(bar)), {operands} : "memory");\n}}\n')


def _wgmma_key(s: Wgmma) -> tuple[int, str, str]:
    if s.a.buffer.dtype != s.b.buffer.dtype or s.a.buffer.dtype not in _WGMMA_TYPES:
        raise CudaCodegenError(f"wgmma on {s.a.buffer.dtype} x {s.b.buffer.dtype}; both "
                               f"operands must be one of {', '.join(_WGMMA_TYPES)}")
    if s.n not in WGMMA_NS:
        raise CudaCodegenError(f"wgmma n = {s.n}; a multiple of 8 up to 256")
    if s.a.major != "k":
        raise CudaCodegenError("wgmma's A operand from shared memory is K-major here")
    return s.n, _WGMMA_TYPES[s.a.buffer.dtype], s.b.major


def wgmma_name(n: int, ptx_type: str, b_major: str) -> str:
    return f"at_wgmma_m64n{n}k16_{ptx_type}_{b_major}"


def _wgmma_helper(n: int, ptx_type: str, b_major: str) -> str:
    regs = n // 2
    slots = ", ".join(f"%{i}" for i in range(regs))
    outs = ", ".join(f'"+f"(d[{i}])' for i in range(regs))
    trans_b = 1 if b_major == "mn" else 0  # B given row-major (N contiguous): transposed
    return (f"static __device__ __forceinline__ void {wgmma_name(n, ptx_type, b_major)}("
            "float* d, unsigned long long da, unsigned long long db) {\n"
            '  asm volatile("{\\n.reg .pred p;\\nsetp.ne.b32 p, 1, 0;\\n"\n'
            f'    "wgmma.mma_async.sync.aligned.m64n{n}k16.f32.{ptx_type}.{ptx_type} "\n'
            f'    "{{{slots}}}, %{regs}, %{regs + 1}, p, 1, 1, 0, {trans_b};\\n}}"\n'
            f"    : {outs}\n"
            '    : "l"(da), "l"(db));\n}\n')


def hopper_stmt(s: Stmt, expr: Callable[[Expr], str], at: Callable[[Buffer, Expr], str],
                ref: Callable[[Buffer, tuple[Expr, ...]], str],
                name: Callable[[TensorMap], str]) -> str:
    """The C statement of one Hopper statement; ``expr`` prints an expression, ``at`` a
    pointer to a buffer's element, ``ref`` an element, ``name`` a descriptor's name."""
    if isinstance(s, TmaLoad):
        coords = ", ".join(expr(c) for c in reversed(s.coords))  # innermost first
        return (f"at_tma_load_{len(s.coords)}d({at(s.dst, s.dst_offset)}, &{name(s.tmap)}, "
                f"&{ref(s.bar, (s.bar_index,))}, {coords});")
    if isinstance(s, MbarrierInit):
        return f"at_mbar_init(&{ref(s.bar, (s.index,))}, {s.count});"
    if isinstance(s, MbarrierArrive):
        if s.expect_bytes:
            return f"at_mbar_expect(&{ref(s.bar, (s.index,))}, {s.expect_bytes});"
        return f"at_mbar_arrive(&{ref(s.bar, (s.index,))});"
    if isinstance(s, MbarrierWait):
        return f"at_mbar_wait(&{ref(s.bar, (s.index,))}, {expr(s.parity)});"
    if isinstance(s, Wgmma):
        n, ptx_type, major = _wgmma_key(s)
        row = ref(s.acc, (*s.acc_index, _zero()))
        return (f"{wgmma_name(n, ptx_type, major)}(&{row}, {_desc(s.a, at)}, "
                f"{_desc(s.b, at)});")
    if isinstance(s, WgmmaFence):
        return 'asm volatile("wgmma.fence.sync.aligned;" ::: "memory");'
    if isinstance(s, WgmmaCommit):
        return 'asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");'
    if isinstance(s, WgmmaWait):
        return f'asm volatile("wgmma.wait_group.sync.aligned {s.pending};" ::: "memory");'
    if isinstance(s, SetMaxNReg):
        op = "inc" if s.increase else "dec"
        return f'asm volatile("setmaxnreg.{op}.sync.aligned.u32 {s.count};");'
    if isinstance(s, NamedSync):
        return f'asm volatile("bar.sync {s.barrier}, {s.threads};" ::: "memory");'
    raise TypeError(f"unknown statement {type(s).__name__}")


def _zero() -> Expr:
    return Const(0)


def _desc(m: SmemMatrix, at: Callable[[Buffer, Expr], str]) -> str:
    return f"at_desc({at(m.buffer, m.offset)}, {m.lbo}, {m.sbo}, {_DESC_SWIZZLE[m.swizzle]})"
