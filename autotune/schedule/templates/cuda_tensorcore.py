"""CUDA tensor-core template for float16/bfloat16 matmul, batch_matmul and conv2d.

A thread block computes a BM x BN tile of the output seen as a GEMM (conv2d: implicit GEMM
per image, weights x im2col), its warps arranged WM x WN, each warp FM x FN fragments of
one MMA shape (nvcuda::wmma), float32 accumulators. The block tile is derived:
BM = WM * FM * m, BN = WN * FN * n, so every point of the space tiles exactly. With
``split_k`` S > 1 the k tiles are cut into S contiguous ranges, one block per range and
output tile; the partial tiles meet in a float32 workspace, summed in a fixed order by the
block that arrives last. The kernel is built as a loop AST directly (``lower``, see
`cuda_tensorcore_lower`), not through a Schedule.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Any, Mapping

from autotune.ir.stmt import WARP, WMMA_SHAPES
from autotune.ops import Workload
from autotune.schedule.templates.cuda_common import FLOAT_BYTES, HALF_BYTES, limits
from autotune.space import Choice, Config, ConfigSpace
from autotune.target import CudaLimits, Target

SHARED_ALIGN = 128           # bytes each shared tile is declared aligned to
FRAGMENT_ALIGN = 32          # wmma loads/stores need 256-bit aligned pointers
STAGING_PAD = 4              # floats added to a staging row (keeps ldm a multiple of 4)
WARP_COUNTS = (1, 2, 4)
FRAG_COUNTS = (1, 2, 4, 8)
BLOCK_KS = (16, 32, 64)
STAGES = (1, 2, 3, 4)         # 1: fill, barrier, compute, barrier; 2+: cp.async pipeline
VECTORS = (8, 4, 2)          # halves per cp.async: 16, 8 and 4 bytes
SPLITS = (1, 2, 4, 8, 16)    # k ranges per output tile (split-K)
WORKSPACE_CAP = 1 << 26      # bytes of split-K partial tiles a kernel may hold
MIN_SPLIT_TILES = 4          # k tiles per split the default keeps
SHAPE_NAMES = tuple("x".join(map(str, s)) for s in WMMA_SHAPES)


@dataclass(frozen=True)
class Tiling:
    """The geometry a config asks for: MMA shape (m, n, k), warp grid (WM, WN), fragments
    per warp (FM, FN), k step BK, pipeline stages, shared row padding (elements), whether
    the inner k loop is unrolled, the widest global->shared copy (elements), and the
    number of k ranges (split-K) per output tile."""

    mma: tuple[int, int, int]
    warps: tuple[int, int]
    frags: tuple[int, int]
    block_k: int
    stages: int = 2
    pad: int = 8
    unroll: bool = True
    vector: int = 8
    split_k: int = 1

    @property
    def bm(self) -> int:
        return self.warps[0] * self.frags[0] * self.mma[0]

    @property
    def bn(self) -> int:
        return self.warps[1] * self.frags[1] * self.mma[1]

    @property
    def threads(self) -> int:
        return self.warps[0] * self.warps[1] * WARP

    @property
    def lda(self) -> int:
        """Row length of the shared A tile (BM x BK, row-major, padded)."""
        return self.block_k + self.pad

    @property
    def ldb(self) -> int:
        """Row length of the shared B tile (BK x BN, row-major, padded)."""
        return self.bn + self.pad

    @property
    def ldc(self) -> int:
        """Row length of the float32 staging tile: one fragment of every warp at a time,
        (WM * m) x (WN * n)."""
        return self.warps[1] * self.mma[1] + STAGING_PAD

    @property
    def shared_tiles(self) -> tuple[int, int, int]:
        """Bytes of the A tiles, the B tiles (all stages) and the staging tile."""
        a = self.stages * self.bm * self.lda * HALF_BYTES
        b = self.stages * self.block_k * self.ldb * HALF_BYTES
        c = self.warps[0] * self.mma[0] * self.ldc * FLOAT_BYTES
        return a, b, c

    @property
    def shared_bytes(self) -> int:
        return sum(-(-t // SHARED_ALIGN) * SHARED_ALIGN for t in self.shared_tiles)

    @property
    def registers(self) -> int:
        """Registers per thread the fragments hold: float accumulators, and the A and B
        fragments of one k step (two 16-bit values per register)."""
        m, n, k = self.mma
        fm, fn = self.frags
        acc = fm * fn * m * n // WARP
        return acc + (fm * m * k + fn * k * n) // (2 * WARP)


def tiling(cfg: Mapping[str, Any]) -> Tiling:
    """The `Tiling` of a config of this template's space (or of its knob values)."""
    m, n, k = (int(x) for x in str(cfg["mma_shape"]).split("x"))
    return Tiling((m, n, k), (cfg["warps_m"], cfg["warps_n"]),
                  (cfg["frags_m"], cfg["frags_n"]), cfg["block_k"], cfg["stages"],
                  cfg["pad"], bool(cfg["unroll_k"]), cfg["vector"], cfg["split_k"])


def sm_version(lim: CudaLimits) -> int:
    """80 for sm_80, 90 for sm_90..."""
    return int(lim.arch.split("_")[1].rstrip("a"))


def register_budget(lim: CudaLimits) -> int:
    """Fragment registers a thread may hold: three quarters of its registers (the rest
    holds addresses and the epilogue)."""
    return 3 * lim.regs_per_thread // 4


def tiling_reason(t: Tiling, lim: CudaLimits) -> str | None:
    """Why ``t`` cannot run (or would break wmma's rules) on a device with ``lim``, or
    None. Each reason names its rule."""
    m, n, k = t.mma
    if t.mma not in WMMA_SHAPES:
        return f"MMA shape {m}x{n}x{k} is not one of wmma's {', '.join(SHAPE_NAMES)}"
    if t.bm < m or t.bn < n or t.block_k < k or t.block_k % k:
        return (f"MMA shape {m}x{n}x{k} larger than the tile {t.bm}x{t.bn}x{t.block_k} "
                "(or BK not a multiple of k)")
    if t.stages not in STAGES:
        return f"{t.stages} pipeline stages; {', '.join(map(str, STAGES))} are supported"
    if t.stages > 1 and sm_version(lim) < 80:
        return (f"stages {t.stages} (cp.async multi-buffering) needs sm_80 or later, "
                f"not {lim.arch}")
    for name, ldm, unit in (("A", t.lda, 8), ("B", t.ldb, 8), ("staging", t.ldc, 4)):
        if ldm % unit:
            return f"ldm {ldm} of the {name} tile is not a multiple of {unit} elements"
    reason = _alignment_reason(t)
    if reason:
        return reason
    if t.threads > lim.max_threads_per_block:
        return f"{t.threads} threads per block > limit {lim.max_threads_per_block}"
    if t.shared_bytes > lim.max_shared_per_block_optin:
        # past the 48 KB of static arrays the kernel's tiles are dynamic shared memory
        return (f"{t.shared_bytes} bytes of shared memory > opt-in limit "
                f"{lim.max_shared_per_block_optin} of {lim.arch}")
    budget = register_budget(lim)
    if t.registers > budget:
        return f"{t.registers} fragment registers per thread > budget {budget}"
    return None


def _alignment_reason(t: Tiling) -> str | None:
    """A fragment whose base is not 32-byte aligned: the steps between fragment bases
    (rows of fragments, columns of fragments, stages) must all be multiples of 32 bytes."""
    m, n, k = t.mma
    steps = {
        "A": [m * t.lda * HALF_BYTES, k * HALF_BYTES, t.bm * t.lda * HALF_BYTES],
        "B": [k * t.ldb * HALF_BYTES, t.block_k * t.ldb * HALF_BYTES],
        "staging": [m * t.ldc * FLOAT_BYTES, n * FLOAT_BYTES],
    }
    if t.warps[1] * t.frags[1] > 1:  # more than one fragment column of B per block
        steps["B"].append(n * HALF_BYTES)
    for name, sizes in steps.items():
        bad = [s for s in sizes if s % FRAGMENT_ALIGN]
        if bad:
            return (f"fragment base offsets of the {name} tile are not {FRAGMENT_ALIGN}-byte "
                    f"aligned (a step of {bad[0]} bytes)")
    return None


def gemm_dims(wl: Workload) -> tuple[int, int, int, int]:
    """(batch, M, N, K) of the GEMM the workload is: conv2d is K x (OH*OW) per image, with
    a reduction over C*R*S."""
    if wl.op == "conv2d":
        return (wl.dim("N"), wl.dim("K"), wl.out_h * wl.out_w,
                wl.dim("C") * wl.dim("R") * wl.dim("S"))
    batch = wl.dim("B") if wl.op == "batch_matmul" else 1
    return batch, wl.dim("M"), wl.dim("N"), wl.dim("K")


def k_tiles(t: Tiling, K: int) -> tuple[int, int]:
    """(k tiles of the reduction, k tiles per split): split s takes tiles s*per ..
    min((s+1)*per, tiles) - 1."""
    tiles = -(-K // t.block_k)
    return tiles, -(-tiles // t.split_k)


def tile_counts(M: int, N: int, bm: int, bn: int) -> tuple[int, int]:
    """Output tiles of bm x bn along M (rows) and along N (columns): the grid's y and x."""
    return -(-M // bm), -(-N // bn)


def output_tiles(batch: int, M: int, N: int, bm: int, bn: int) -> int:
    """Output tiles of the whole launch (every image or batch element's)."""
    rows, cols = tile_counts(M, N, bm, bn)
    return batch * rows * cols


def workspace_bytes(t: Tiling, wl: Workload) -> int:
    """Bytes of split-K's float32 partial tiles (0 without a split)."""
    if t.split_k == 1:
        return 0
    batch, M, N, _ = gemm_dims(wl)
    return t.split_k * output_tiles(batch, M, N, t.bm, t.bn) * t.bm * t.bn * FLOAT_BYTES


def split_reason(t: Tiling, wl: Workload, lim: CudaLimits) -> str | None:
    """Why ``t``'s split-K cannot serve ``wl``: a split with no k tile, a workspace over
    WORKSPACE_CAP, or too many blocks along the grid's z (batch x splits)."""
    if t.split_k not in SPLITS:
        return f"split_k {t.split_k}; {', '.join(map(str, SPLITS))} are supported"
    if t.split_k == 1:
        return None
    batch, _, _, K = gemm_dims(wl)
    tiles, per = k_tiles(t, K)
    if (t.split_k - 1) * per >= tiles:
        return (f"split_k {t.split_k} leaves a split with no k tile ({tiles} k tiles of "
                f"{t.block_k}, {per} per split)")
    ws = workspace_bytes(t, wl)
    if ws > WORKSPACE_CAP:
        return f"split_k {t.split_k} needs {ws} bytes of workspace > cap {WORKSPACE_CAP}"
    if batch * t.split_k > lim.max_grid_dim[2]:
        return f"grid dim z = {batch * t.split_k} > limit {lim.max_grid_dim[2]}"
    return None


def space(wl: Workload, target: Target) -> ConfigSpace:
    lim = limits(target)
    knobs = [
        # first (the most significant digit), 1 first: configs without a split keep the
        # indices they had before the knob existed (recorded pools replay by index)
        Choice("split_k", list(SPLITS)),
        Choice("mma_shape", list(SHAPE_NAMES)),
        Choice("warps_m", list(WARP_COUNTS)),
        Choice("warps_n", list(WARP_COUNTS)),
        Choice("frags_m", list(FRAG_COUNTS)),
        Choice("frags_n", list(FRAG_COUNTS)),
        Choice("block_k", list(BLOCK_KS)),
        Choice("stages", list(STAGES)),
        Choice("pad", [0, 8]),
        Choice("unroll_k", [False, True]),
        Choice("vector", list(VECTORS)),
    ]
    return ConfigSpace(knobs, default=default_values(wl, lim),
                       validity=partial(_validity, lim, wl), name="cuda_tensorcore")


def _validity(lim: CudaLimits, wl: Workload, cfg: Config) -> str | None:
    t = tiling(cfg)
    return tiling_reason(t, lim) or split_reason(t, wl, lim)


LARGE_GEMM = 2048     # both output sides at least this: a deeper pipeline, where valid
LARGE_STAGES = (4, 3)


def default_values(wl: Workload, lim: CudaLimits) -> dict[str, object]:
    """128 x 128 x 32 with 8 warps (2 x 4) of 4 x 2 16x16x16 fragments, two stages, pad 8;
    halved (fragments first, then warps) while half the tile still covers a small problem,
    then, larger side first down to 32 x 32, while the grid leaves multiprocessors idle (a
    1024^2 output in 128^2 tiles is 64 blocks for 132 SMs). A large GEMM (M, N >= 2048)
    gets 4 stages (83 KB of shared memory, dynamic), else 3, where the device allows: on an
    H200, fp16 matmul 4096^3 ran at 326 TFLOP/s against 288 with 2 stages and 265 with
    a 128 x 256 tile of 3 stages (218 registers a thread: one block per SM). Where the
    tiles still leave SMs idle, split-K: the smallest split that fills them, keeping
    MIN_SPLIT_TILES k tiles per split (ResNet's 512x7x7 conv at batch 1: 32 tiles of
    32 x 32, K = 4608, split 8)."""
    batch, M, N, K = gemm_dims(wl)
    (wm, fm), (wn, fn) = _shrink(M, 2, 4), _shrink(N, 4, 2)
    unit = 16
    while True:
        bm, bn = wm * fm * unit, wn * fn * unit
        if output_tiles(batch, M, N, bm, bn) >= lim.multiprocessors or max(bm, bn) <= 32:
            break
        if bm >= bn:
            wm, fm = _halve(wm, fm)
        else:
            wn, fn = _halve(wn, fn)
    block_k = 32 if K > 16 else 16
    values: dict[str, object] = {
        "mma_shape": "16x16x16", "warps_m": wm, "warps_n": wn, "frags_m": fm, "frags_n": fn,
        "block_k": block_k, "stages": 2 if sm_version(lim) >= 80 else 1, "pad": 8,
        "unroll_k": True, "vector": 8}
    if min(M, N) >= LARGE_GEMM and values["stages"] == 2:
        deeper = (s for s in LARGE_STAGES
                  if tiling_reason(tiling({**values, "stages": s, "split_k": 1}), lim) is None)
        values["stages"] = next(deeper, 2)
    blocks = output_tiles(batch, M, N, bm, bn)
    return {"split_k": _default_split(wl, lim, values, blocks, K), **values}


def _default_split(wl: Workload, lim: CudaLimits, values: dict[str, object], blocks: int,
                   K: int) -> int:
    """The smallest split of SPLITS that gives every multiprocessor a block, or the largest
    that keeps MIN_SPLIT_TILES k tiles per split and is valid; 1 when the tiles fill them."""
    best = 1
    for split in SPLITS[1:]:
        if blocks * best >= lim.multiprocessors:
            break
        t = tiling({**values, "split_k": split})
        tiles, per = k_tiles(t, K)
        if per < MIN_SPLIT_TILES or split_reason(t, wl, lim):
            break
        best = split
    return best


def _shrink(extent: int, warps: int, frags: int, unit: int = 16) -> tuple[int, int]:
    while warps * frags * unit // 2 >= extent and warps * frags > 1:
        warps, frags = _halve(warps, frags)
    return warps, frags


def _halve(warps: int, frags: int) -> tuple[int, int]:
    """Half the fragments a side of the tile holds, fragments per warp first."""
    return (warps, frags // 2) if frags > 1 else (warps // 2, frags)
