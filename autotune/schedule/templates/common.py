"""Helpers shared by templates: choosing default knob values, parallel outer loops."""
from __future__ import annotations

import math
from functools import partial
from typing import Callable, Sequence

from autotune.schedule.schedule import Axis, Stage
from autotune.space import Config, Split


def nearest_split(knob: Split, inner: Sequence[int]) -> tuple[int, ...]:
    """The candidate of ``knob`` whose inner factors are closest (in log scale) to ``inner``,
    preferring tilings without a tail (padded iterations cost guards and wasted work)."""
    def dist(c: tuple[int, ...]) -> float:
        waste = math.prod(c) / knob.extent - 1
        return sum(abs(math.log2(a) - math.log2(b)) for a, b in zip(c[1:], inner)) + 4 * waste
    return min(knob.candidates, key=dist)


def vector_width(extent: int, lanes: int) -> int:
    """SIMD width for an innermost tile of ``extent``: full vectors when it is a multiple of
    the target's lanes, else the whole tile as one (LLVM splits odd widths legally)."""
    return lanes if extent % lanes == 0 else extent


def parallel_outer(st: Stage, loops: Sequence[Axis], count: int) -> Axis:
    """Fuse the first ``count`` of ``loops`` (adjacent, outermost) and mark the result parallel."""
    fused = st.fuse(*loops[:count]) if count > 1 else loops[0]
    st.parallel(fused)
    return fused


def register_tile_limit(splits: Sequence[str], limit: int) -> Callable[[Config], str | None]:
    """A validity predicate: the product of the innermost factors of ``splits`` (the
    accumulator tile) may not exceed ``limit`` floats, beyond which it spills and the
    unrolled code explodes."""
    return partial(_tile_reason, tuple(splits), limit)


def _tile_reason(splits: tuple[str, ...], limit: int, cfg: Config) -> str | None:
    tile = math.prod(cfg[s][-1] for s in splits)
    return f"register tile of {tile} floats exceeds {limit}" if tile > limit else None
