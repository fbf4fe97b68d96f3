"""Hopper (sm_90a) template for float16/bfloat16 matmul, batch_matmul and NHWC conv2d:
warpgroup MMA (wgmma) fed by TMA through an mbarrier pipeline, warp-specialized and
persistent.

A block is one producer warpgroup, whose first thread copies the A (BM x 64) and B
(64 x BN) tiles of every k step into a ring of shared-memory stages with TMA, and C
consumer warpgroups, each multiplying its MI 64-row slices of the stage with wgmma
(m64 x BN x 16, float32 accumulators in registers) and freeing the stage for the producer.
The producer gives its registers to the consumers (``setmaxnreg``). The grid is one block
per multiprocessor (or per output tile, when there are fewer); each block walks the output
tiles ``blockIdx.x, blockIdx.x + gridDim.x, ...`` in a raster order that keeps GROUP rows
(or columns) of tiles together for L2 reuse. BK is 64: one 128-byte swizzled row of halves.

An NHWC conv2d is an implicit GEMM of output pixels x K channels over (r, s, c): a block's
BM pixels are a BH x BW rectangle of one image's output (knob ``tile_w`` = BW), so the A
tile of tap (r, s) and 64 channels is one 4-D TMA box of the input (strided by the conv's
stride, shifted by the tap, zeros in the padding), and the B tile a box of the KRSC weight.

Measured on an H200 with the hand-written form of this kernel (float16, 128 x 256 tiles, 2
consumers, 4 stages): 690 TFLOP/s at 4096^3 against cuBLAS's 747, and 686 against 700 at
8192^3.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Any, Mapping

from autotune.ir.stmt import WARPGROUP
from autotune.ops import Workload
from autotune.ops.dtypes import MBARRIER, element_bytes
from autotune.ops.layout import NHWC
from autotune.schedule.templates.cuda_common import HALF_BYTES, limits
from autotune.schedule.templates.cuda_tensorcore import gemm_dims
from autotune.space import Choice, Config, ConfigSpace
from autotune.target import CudaLimits, Target

BLOCK_K = 64                  # halves per 128-byte swizzled row
TMA_ALIGN = 16                # bytes: a TMA tensor's row stride (and base) must be multiples
BOX_N = 64                    # columns of one B box (one 128-byte swizzled row)
MAX_BOX = 256                 # elements of a TMA box along any dimension
CONSUMERS = (1, 2)
M_TILES = (1, 2)              # m64 slices per consumer warpgroup
BLOCK_NS = (64, 128, 192, 256)
STAGES = (2, 3, 4, 5, 6)
RASTERS = ("m", "n")          # the dimension a group of tiles runs along
GROUPS = (1, 4, 8, 16)
INFLIGHT = (0, 1)             # wgmma groups kept in flight before freeing a stage
TILE_WS = (4, 8, 16, 32, 64)  # conv2d: output columns of a block's pixel rectangle
SPLITS = (1, 2, 4, 8, 16)     # k ranges per output tile (split-K)
WORKSPACE_CAP = 1 << 26       # bytes of split-K partial tiles a kernel may hold
MIN_SPLIT_TILES = 4           # k tiles per split the default keeps
MAX_ELEMENT_STRIDE = 8        # TMA's largest traversal stride (a conv's stride)
PRODUCER_REGS = 40
REG_FILE = 65536              # registers of a multiprocessor (one block per SM)
MAX_REGS = 240                # setmaxnreg's useful ceiling for a consumer
OTHER_REGS = 64               # a consumer's registers besides accumulators (addresses, epilogue)
BARRIER_BYTES = element_bytes(MBARRIER)


@dataclass(frozen=True)
class WgmmaTiling:
    """The geometry of a config: consumer warpgroups, m64 slices per consumer, the block's
    N (one wgmma's n), pipeline stages, raster (dimension, group size), and the wgmma
    groups kept in flight."""

    consumers: int
    m_tiles: int
    block_n: int
    stages: int
    raster: str = "m"
    group: int = 8
    inflight: int = 0
    tile_w: int = 0           # conv2d's BW (0 for GEMMs)
    split_k: int = 1

    @property
    def bm(self) -> int:
        return 64 * self.m_tiles * self.consumers

    @property
    def tile_h(self) -> int:
        """conv2d's BH: rows of the block's BH x BW pixel rectangle."""
        return self.bm // self.tile_w if self.tile_w else 0

    @property
    def threads(self) -> int:
        return WARPGROUP * (1 + self.consumers)

    @property
    def stage_bytes(self) -> int:
        return (self.bm + self.block_n) * BLOCK_K * HALF_BYTES

    @property
    def shared_bytes(self) -> int:
        """Tiles, barriers, and the 1024 bytes the kernel may skip to align its tiles."""
        return self.stages * (self.stage_bytes + 2 * BARRIER_BYTES) + 1024

    @property
    def accumulators(self) -> int:
        """float32 accumulator registers per consumer thread."""
        return self.m_tiles * self.block_n // 2

    @property
    def consumer_regs(self) -> int:
        """Registers per consumer thread after the producer's are given away (a multiple
        of 8, as setmaxnreg wants)."""
        free = (REG_FILE - WARPGROUP * PRODUCER_REGS) // (WARPGROUP * self.consumers)
        return min(MAX_REGS, free // 8 * 8)


def tiling(cfg: Mapping[str, Any]) -> WgmmaTiling:
    """The `WgmmaTiling` of a config of this template's space (or of its knob values)."""
    return WgmmaTiling(cfg["consumers"], cfg["m_tiles"], cfg["block_n"], cfg["stages"],
                       cfg["raster"], cfg["group"], cfg["inflight"], cfg.get("tile_w", 0),
                       cfg["split_k"])


def workload_reason(wl: Workload) -> str | None:
    """Why TMA cannot copy ``wl``'s operands (their rows must be multiples of 16 bytes;
    an NCHW conv has no rows of channels), or None; such workloads keep the wmma template."""
    if wl.op not in ("matmul", "batch_matmul", "conv2d"):
        return f"{wl.op} has no wgmma kernel"
    if wl.dtype not in ("float16", "bfloat16"):
        return f"wgmma kernels take float16 or bfloat16, not {wl.dtype}"
    if wl.op == "conv2d":
        if wl.layout != NHWC:
            return f"conv2d in {wl.layout}: the wgmma kernels read NHWC"
        if max(wl.pair("stride")) > MAX_ELEMENT_STRIDE:
            return f"stride {wl.pair('stride')}: TMA strides up to {MAX_ELEMENT_STRIDE}"
        rows: tuple[tuple[str, int], ...] = (("C", wl.dim("C")),)
    else:
        _, _, N, K = gemm_dims(wl)
        rows = (("K", K), ("N", N))
    for name, row in rows:
        if row * HALF_BYTES % TMA_ALIGN:
            return (f"{name} = {row}: a TMA copy needs rows of a multiple of {TMA_ALIGN} "
                    f"bytes ({TMA_ALIGN // HALF_BYTES} elements)")
    return None


def tiling_reason(t: WgmmaTiling, lim: CudaLimits) -> str | None:
    """Why ``t`` cannot run on a device with ``lim``, or None; each reason names its rule."""
    if not lim.arch.endswith("a") or int(lim.arch[3:-1]) != 90:
        return f"wgmma and setmaxnreg need sm_90a, not {lim.arch}"
    if t.block_n % BOX_N or not 0 < t.block_n <= MAX_BOX:
        return (f"block_n {t.block_n}: B arrives in {BOX_N}-column boxes and one wgmma "
                f"takes n <= {MAX_BOX}")
    if t.bm > MAX_BOX:
        return f"BM {t.bm} > {MAX_BOX}, the largest TMA box side"
    if t.stages not in STAGES:
        return f"{t.stages} stages; {', '.join(map(str, STAGES))} are supported"
    if t.threads > lim.max_threads_per_block:
        return f"{t.threads} threads per block > limit {lim.max_threads_per_block}"
    if t.shared_bytes > lim.max_shared_per_block_optin:
        return (f"{t.shared_bytes} bytes of shared memory ({t.stages} stages of "
                f"{t.stage_bytes}) > opt-in limit {lim.max_shared_per_block_optin} of {lim.arch}")
    budget = t.consumer_regs - OTHER_REGS
    if t.accumulators > budget:
        return (f"{t.accumulators} accumulator registers per consumer thread > "
                f"{budget} ({t.consumer_regs} after setmaxnreg, {OTHER_REGS} kept for the rest)")
    if t.inflight not in INFLIGHT:
        return f"inflight {t.inflight}; {', '.join(map(str, INFLIGHT))} are supported"
    if t.raster not in RASTERS or t.group not in GROUPS:
        return f"raster {t.raster!r} group {t.group} is not one of the template's"
    return None


def conv_reason(t: WgmmaTiling, wl: Workload) -> str | None:
    """Why ``t``'s pixel rectangle cannot serve conv2d ``wl`` (None for other ops): BW
    must divide BM, and the input box it reads (BH x BW pixels times the stride) must fit
    a TMA box."""
    if wl.op != "conv2d":
        return None
    if not t.tile_w or t.bm % t.tile_w:
        return f"tile_w {t.tile_w} does not divide the block's {t.bm} pixels"
    (sh, sw) = wl.pair("stride")
    if t.tile_h * sh > MAX_BOX or t.tile_w * sw > MAX_BOX:
        return (f"a {t.tile_h} x {t.tile_w} pixel tile at stride {(sh, sw)} reads an input "
                f"box wider than {MAX_BOX}")
    return None


def space(wl: Workload, target: Target) -> ConfigSpace:
    lim = limits(target)
    knobs = [
        Choice("split_k", list(SPLITS)),
        Choice("consumers", list(CONSUMERS)),
        Choice("m_tiles", list(M_TILES)),
        Choice("block_n", list(BLOCK_NS)),
        Choice("stages", list(STAGES)),
        Choice("raster", list(RASTERS)),
        Choice("group", list(GROUPS)),
        Choice("inflight", list(INFLIGHT)),
    ]
    if wl.op == "conv2d":
        knobs.append(Choice("tile_w", list(TILE_WS)))
    return ConfigSpace(knobs, default=default_values(wl, lim),
                       validity=partial(_validity, lim, wl), name="cuda_wgmma")


def _validity(lim: CudaLimits, wl: Workload, cfg: Config) -> str | None:
    t = tiling(cfg)
    return tiling_reason(t, lim) or conv_reason(t, wl) or split_reason(t, wl)


def k_tiles(wl: Workload) -> int:
    """64-wide k steps of ``wl``'s reduction: an NHWC conv's are taps x channel tiles."""
    if wl.op == "conv2d":
        return wl.dim("R") * wl.dim("S") * -(-wl.dim("C") // BLOCK_K)
    return -(-gemm_dims(wl)[3] // BLOCK_K)


def workspace_bytes(t: WgmmaTiling, wl: Workload) -> int:
    """Bytes of split-K's float32 partial tiles (0 without a split)."""
    if t.split_k == 1:
        return 0
    batch, rows, cols = tile_counts(wl, t)
    return t.split_k * batch * rows * cols * t.bm * t.block_n * 4


def split_reason(t: WgmmaTiling, wl: Workload) -> str | None:
    """Why ``t``'s split-K cannot serve ``wl``: a split with no k step of its own, or a
    workspace over WORKSPACE_CAP."""
    if t.split_k not in SPLITS:
        return f"split_k {t.split_k}; {', '.join(map(str, SPLITS))} are supported"
    if t.split_k == 1:
        return None
    steps = k_tiles(wl)
    per = -(-steps // t.split_k)
    if (t.split_k - 1) * per >= steps:
        return (f"split_k {t.split_k} leaves a split with no k step ({steps} steps of 64, "
                f"{per} per split)")
    ws = workspace_bytes(t, wl)
    if ws > WORKSPACE_CAP:
        return f"split_k {t.split_k} needs {ws} bytes of workspace > cap {WORKSPACE_CAP}"
    return None


def tile_counts(wl: Workload, t: WgmmaTiling) -> tuple[int, int, int]:
    """(images or batch, row tiles per image, column tiles) of ``wl`` under ``t``: an NHWC
    conv's row tiles are its BH x BW rectangles of output pixels."""
    batch, M, N, _ = gemm_dims(wl)
    if wl.op == "conv2d":
        rows = -(-wl.out_h // t.tile_h) * -(-wl.out_w // t.tile_w)
        return wl.dim("N"), rows, -(-wl.dim("K") // t.block_n)
    return batch, -(-M // t.bm), -(-N // t.block_n)


# (consumers, m_tiles, block_n) from the largest block tile down
_SHAPES = ((2, 1, 256), (2, 2, 128), (2, 1, 128), (1, 1, 128), (1, 1, 64))


FILL = 0.9  # of the multiprocessors a default's tiles must keep busy


def default_values(wl: Workload, lim: CudaLimits) -> dict[str, object]:
    """The largest block tile whose tiles still give nine in ten multiprocessors one
    (128 x 256, 2 consumers, down to 64 x 64), with the deepest pipeline of at most 4
    stages that fits; grouped rows of 8 tiles, no wgmma group in flight across stages."""
    pick = _SHAPES[-1]
    for shape in _SHAPES:
        c, mi, bn = shape
        t = WgmmaTiling(c, mi, bn, 2, tile_w=_default_tile_w(wl, 64 * mi * c))
        batch, rows, cols = tile_counts(wl, t)
        if batch * rows * cols >= FILL * lim.multiprocessors:
            pick = shape
            break
    c, mi, bn = pick
    values: dict[str, object] = {"consumers": c, "m_tiles": mi, "block_n": bn, "stages": 4,
                                 "raster": "m", "group": 8, "inflight": 0}
    if wl.op == "conv2d":
        values["tile_w"] = _default_tile_w(wl, 64 * mi * c)
    for stages in (4, 3, 2):
        values["stages"] = stages
        if tiling_reason(tiling({**values, "split_k": 1}), lim) is None:
            break
    return {"split_k": _default_split(wl, lim, values), **values}


def _default_split(wl: Workload, lim: CudaLimits, values: dict[str, object]) -> int:
    """The smallest split that gives nine in ten multiprocessors a tile, keeping
    MIN_SPLIT_TILES k steps per split; 1 when the tiles fill them already."""
    t = tiling({**values, "split_k": 1})
    batch, rows, cols = tile_counts(wl, t)
    tiles, steps = batch * rows * cols, k_tiles(wl)
    best = 1
    for split in SPLITS[1:]:
        if tiles * best >= FILL * lim.multiprocessors:
            break
        if -(-steps // split) < MIN_SPLIT_TILES or split_reason(
                tiling({**values, "split_k": split}), wl):
            break
        best = split
    return best


def _default_tile_w(wl: Workload, bm: int) -> int:
    """conv2d: the pixel rectangle's width that wastes the fewest output columns (the
    wider on a tie), within the TMA box; 0 for GEMMs."""
    if wl.op != "conv2d":
        return 0
    ow, sw = wl.out_w, wl.pair("stride")[1]
    fits = [w for w in TILE_WS if bm % w == 0 and w * sw <= MAX_BOX
            and bm // w * wl.pair("stride")[0] <= MAX_BOX]
    return min(fits, key=lambda w: (-(-ow // w) * w - ow, -w))
