"""Per-level access statistics of one buffer in one store's loop nest.

Footprints are boxes: per dimension the affine range of the index over the loops at and
below a level, capped by the dimension's size and by those loops' iterations.
"""
from __future__ import annotations

import math

from autotune.costmodel.nest import ITEMSIZE, Access

LINE = 64  # bytes per cache line: footprints are also counted in whole lines


class BufStats:
    """Per level (outer to inner): flattened-index stride w.r.t. the level's var (NaN when
    not affine), footprint elements, touches and footprint bytes in whole lines, per entry."""

    __slots__ = ("foot", "lines", "stride", "touch")

    def __init__(self, accs: list[Access], ext: list[int], inner: list[int]):
        n = len(ext)
        buf = accs[0].buffer
        shape, strides = buf.shape, buf.strides
        item = ITEMSIZE.get(buf.dtype, 4)
        first = accs[0]
        stride = [0.0] * n
        for d, (coefs, _) in enumerate(first.dims):
            sd = strides[d]
            for lv, c in coefs.items():
                stride[lv] += c * sd
            for lv in first.opaque[d]:
                stride[lv] = math.nan  # the index is not affine in this loop's var
        foot = [1.0] * n
        lines = [1.0] * n
        last = len(shape) - 1
        # the accumulator's read and write share an index: the union needs each form once
        uniq = [a for i, a in enumerate(accs)
                if all(a.dims != b.dims or a.opaque != b.opaque for b in accs[:i])]
        for d in range(len(shape)):
            distinct, span = dim_extent(uniq, d, ext, shape[d])
            if d == last:
                for lv in range(n):
                    foot[lv] *= distinct[lv]
                    lines[lv] *= math.ceil(min(span[lv], shape[d]) * item / LINE) * LINE
            else:
                for lv in range(n):
                    foot[lv] *= distinct[lv]
                    lines[lv] *= distinct[lv]
        if last < 0:
            lines = [float(LINE)] * n
        self.stride = stride
        self.foot = foot
        k = len(accs)
        self.touch = [k * i for i in inner]
        self.lines = lines


def dim_extent(accs: list[Access], d: int, ext: list[int], size: int
               ) -> tuple[list[float], list[float]]:
    """Distinct indices and index span of dim ``d`` under each level (union of accesses).

    The span is the affine range; distinct indices are also capped by the iterations of
    the loops that occur in the index (a stride-2 index touches n, not 2n - 1, elements).
    Below a non-affine term's loops the term is constant; at and above them the dimension's
    range is unknown and taken as all the iterations (at most the size)."""
    n = len(ext)
    if len(accs) == 1:
        return one_dim(accs[0], d, ext, size)
    lo = [math.inf] * n
    hi = [-math.inf] * n
    cap = [0.0] * n
    for a in accs:
        coefs, c0 = a.dims[d]
        hidden = a.opaque[d]
        neg = pos = 0
        iters = 1
        blind = False
        for lv in range(n - 1, -1, -1):
            c = coefs.get(lv, 0)
            if c or lv in hidden:
                e = ext[lv]
                iters *= e
                v = c * (e - 1)
                if v < 0:
                    neg += v
                else:
                    pos += v
                blind = blind or lv in hidden
            if blind:
                l, h = 0, min(iters, size) - 1
            else:
                l, h = c0 + neg, c0 + pos
            lo[lv] = min(lo[lv], l)
            hi[lv] = max(hi[lv], h)
            cap[lv] += iters
    span = [float(h - l + 1) for l, h in zip(lo, hi)]
    return [min(s, c, size) for s, c in zip(span, cap)], span


def one_dim(a: Access, d: int, ext: list[int], size: int) -> tuple[list[float], list[float]]:
    """``dim_extent`` for a buffer accessed once (the common case, without the union)."""
    n = len(ext)
    coefs, _ = a.dims[d]
    hidden = a.opaque[d]
    distinct = [1.0] * n
    span = [1.0] * n
    if not coefs and not hidden:
        return distinct, span
    width = 0
    iters = 1
    blind = False
    for lv in range(n - 1, -1, -1):
        c = coefs.get(lv, 0)
        if c or lv in hidden:
            e = ext[lv]
            iters *= e
            width += abs(c) * (e - 1)
            blind = blind or lv in hidden
        s = float(min(iters, size) if blind else width + 1)
        span[lv] = s
        distinct[lv] = min(s, iters, size)
    return distinct, span
