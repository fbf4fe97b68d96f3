"""Default tiles for the CUDA-core templates, ranked by a small analytic model of the GPU.

A fixed default tile suits one shape: ResNet-18's 7x7x512 conv under the old fixed tile ran
64 blocks of 64 threads on a 132-SM H100, 0.09x cuDNN, while its 56x56 convs matched
cuDNN. The model here scores every (thread, inner) tiling of the output axes (vthreads 1)
by the cycles its busiest SM spends: waves of resident blocks, each reduction step costing a
warp its multiply-adds, its shared-memory loads and its share of the cooperative global
fill, an SM with too few warps to hide latency issuing as slowly as one with just enough.
It orders tilings for a template's default; tuning replaces it.
"""
from __future__ import annotations

from math import prod
from typing import Any, Callable, Iterable, Iterator, Mapping, NamedTuple, Sequence

import numpy as np

from autotune.space import Split
from autotune.target import CudaLimits

MAX_BLOCKS_PER_SM = 32  # every arch from sm_80 to sm_90
HIDING_WARPS = 8        # resident warps an SM needs to hide its latencies
BASE_REGS = 24          # registers a thread holds beside its accumulators and operands
# SM cycles per warp-wide instruction: 4 FMA pipes; shared memory moves 128 B a cycle and
# broadcasts a shared address (weights across a row); L2 serves an SM ~20 B a cycle
FMA_CYCLES, SHARED_CYCLES, GLOBAL_CYCLES = 0.25, 0.5, 6.0
SECTOR_FLOATS = 8       # global memory moves 32-byte sectors: a narrow row costs a whole one


class OperandAxis(NamedTuple):
    """How the output axis of knob ``knob`` indexes an operand: a block spanning n outputs
    loads (n - 1) * stride + extent elements for ``taps`` reduction steps (a conv's rows:
    stride, (R - 1) * dilation + 1, R); ``contiguous`` where the axis is the operand's
    innermost in memory, so that its run is read in whole sectors."""

    knob: int
    stride: int = 1
    extent: int = 1
    taps: int = 1
    contiguous: bool = False


def ranked_tiles(knobs: Sequence[Split], dims: Sequence[int],
                 operands: Sequence[Sequence[OperandAxis]], reduction: int, grid: int,
                 lim: CudaLimits) -> Iterator[tuple[tuple[int, ...], ...]]:
    """Tilings of the 4-level ``knobs`` (outer, vthread, thread, inner) of float32 data,
    best first (those that cannot launch left out);
    ``dims`` names the block dimension (0 x, 1 y, 2 z) each knob's threads bind to.

    ``operands`` says, per operand staged in shared memory, which output axes index it:
    a thread loads the product of their inner factors per reduction step, the block its
    window of their spans. ``grid`` counts the blocks of other axes (batch, groups);
    ``reduction`` the multiply-adds per output.
    """
    cands = [[c for c in k.candidates if c[1] == 1] for k in knobs]
    arrays = []
    for axis, cs in enumerate(cands):
        shape = [1] * len(knobs)
        shape[axis] = len(cs)
        arrays.append(np.array(cs, dtype=np.float64).reshape(*shape, 4))
    outer = [a[..., 0] for a in arrays]
    thread = [a[..., 2] for a in arrays]
    inner = [a[..., 3] for a in arrays]
    threads = prod(thread)
    per_thread = prod(inner)
    blocks = grid * prod(outer)
    shared_loads = sum(prod(inner[a.knob] for a in op) for op in operands)

    def run(a: OperandAxis) -> np.ndarray:
        n = (thread[a.knob] * inner[a.knob] - 1) * a.stride + a.extent
        return (np.ceil(n / SECTOR_FLOATS) * SECTOR_FLOATS if a.contiguous else n) / a.taps
    global_loads = sum(prod(run(a) for a in op) for op in operands) / threads

    warps = np.ceil(threads / lim.warp_size)
    regs = BASE_REGS + per_thread + shared_loads
    resident = np.minimum(lim.max_threads_per_sm // (warps * lim.warp_size), MAX_BLOCKS_PER_SM)
    resident = np.minimum(resident, lim.regs_per_block // (warps * lim.warp_size * regs))
    resident = np.maximum(resident, 1)
    per_sm = np.ceil(blocks / lim.multiprocessors)
    waves = np.ceil(per_sm / resident)
    busy_warps = np.minimum(per_sm, resident) * warps
    issue = per_thread * FMA_CYCLES + shared_loads * SHARED_CYCLES
    traffic = global_loads * GLOBAL_CYCLES
    # fewer warps than hide the latencies issue as slowly as that many would; the fill's
    # traffic takes the SM's share of L2 bandwidth only for the warps there are
    cycles = waves * reduction * (np.maximum(busy_warps, HIDING_WARPS) * issue
                                  + busy_warps * traffic)
    # a block whose registers outgrow the SM's file does not launch
    fits = (threads <= lim.max_threads_per_block) & (per_thread <= lim.regs_per_thread // 2) \
        & (warps * lim.warp_size * regs <= lim.regs_per_block)
    for axis, dim in enumerate(dims):
        fits &= thread[axis] <= lim.max_block_dim[dim]
    cycles = np.where(np.broadcast_to(fits, cycles.shape), cycles, np.inf)
    for flat in np.argsort(cycles, axis=None, kind="stable"):
        if not np.isfinite(cycles.flat[flat]):
            return
        pos = np.unravel_index(flat, cycles.shape)
        yield tuple(cands[axis][p] for axis, p in enumerate(pos))


def first_valid(validity: Callable[[Mapping[str, Any]], str | None],
                configs: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """The first of ``configs`` that ``validity`` accepts (ValueError if none does)."""
    last = "no candidates"
    for cfg in configs:
        reason = validity(cfg)
        if reason is None:
            return dict(cfg)
        last = reason
    raise ValueError(f"no valid default tiling: {last}")
