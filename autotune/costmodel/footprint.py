"""Per-level access statistics of one buffer in one store's loop nest.

Footprints are boxes: per dimension the affine range of the index over the loops at and
below a level, capped by the dimension's size and by those loops' iterations.
"""
from __future__ import annotations

import math

from librt.vecs import vec

from autotune.costmodel.nest import Access
from autotune.ops.dtypes import ELEMENT_BYTES

LINE = 64  # bytes per cache line: footprints are also counted in whole lines


class BufStats:
    """Per level (outer to inner): flattened-index stride w.r.t. the level's var (NaN when
    not affine), footprint elements, touches and footprint bytes in whole lines, per entry.

    (``vec[float]``, not lists: compiled, a vec holds unboxed doubles, where a list boxed a
    float object for every update, most of this class's cost.)"""

    __slots__ = ("foot", "lines", "stride", "touch")

    stride: vec[float]
    foot: vec[float]
    touch: vec[float]
    lines: vec[float]

    def __init__(self, accs: list[Access], ext: list[int], inner: list[int]):
        n = len(ext)
        buf = accs[0].buffer
        shape, strides = buf.shape, buf.strides
        item = ELEMENT_BYTES.get(buf.dtype, 4)
        first = accs[0]
        stride = vec[float]([0.0] * n)
        for d, (coefs, _) in enumerate(first.dims):
            sd = strides[d]
            for lv, c in coefs.items():
                stride[lv] += c * sd
            for lv in first.opaque[d]:
                stride[lv] = math.nan  # the index is not affine in this loop's var
        foot = vec[float]([1.0] * n)
        lines = vec[float]([1.0] * n)
        last = len(shape) - 1
        # the accumulator's read and write share an index: the union needs each form once
        uniq = [a for i, a in enumerate(accs)
                if all(a.dims != b.dims or a.opaque != b.opaque for b in accs[:i])]
        # (explicit float comparisons below, not min(): the compiled build calls the
        # generic builtin for mixed arguments, which was most of this function's cost)
        for d in range(len(shape)):
            distinct, span = dim_extent(uniq, d, ext, shape[d])
            if d == last:
                size = float(shape[d])
                for lv in range(n):
                    foot[lv] *= distinct[lv]
                    sp = span[lv]
                    if sp > size:
                        sp = size
                    lines[lv] *= float(math.ceil(sp * item / LINE) * LINE)
            else:
                for lv in range(n):
                    foot[lv] *= distinct[lv]
                    lines[lv] *= distinct[lv]
        if last < 0:
            lines = vec[float]([float(LINE)] * n)
        self.stride = stride
        self.foot = foot
        k = len(accs)
        self.touch = vec[float]([float(k * i) for i in inner])
        self.lines = lines


def dim_extent(accs: list[Access], d: int, ext: list[int], size: int
               ) -> tuple[vec[float], vec[float]]:
    """Distinct indices and index span of dim ``d`` under each level (union of accesses).

    The span is the affine range; distinct indices are also capped by the iterations of
    the loops that occur in the index (a stride-2 index touches n, not 2n - 1, elements).
    Below a non-affine term's loops the term is constant; at and above them the dimension's
    range is unknown and taken as all the iterations (at most the size)."""
    n = len(ext)
    if len(accs) == 1:
        return one_dim(accs[0], d, ext, size)
    lo = [0] * n
    hi = [0] * n
    cap = [0] * n
    for j, a in enumerate(accs):
        coefs, c0 = a.dims[d]
        hidden = a.opaque[d]
        neg = pos = 0
        iters = 1
        blind = False
        for lv in range(n - 1, -1, -1):
            c = coefs.get(lv, 0)
            opaque = lv in hidden
            if c or opaque:
                e = ext[lv]
                iters *= e
                v = c * (e - 1)
                if v < 0:
                    neg += v
                else:
                    pos += v
                blind = blind or opaque
            if blind:
                lw, h = 0, (iters if iters < size else size) - 1
            else:
                lw, h = c0 + neg, c0 + pos
            if j == 0 or lw < lo[lv]:
                lo[lv] = lw
            if j == 0 or h > hi[lv]:
                hi[lv] = h
            cap[lv] += iters
    return _distinct_and_span(lo, hi, cap, size)


def _distinct_and_span(lo: list[int], hi: list[int], cap: list[int], size: int
                       ) -> tuple[vec[float], vec[float]]:
    """Per level, the span ``lo..hi`` and the distinct indices (the span, at most ``cap``
    and ``size``)."""
    fsize = float(size)
    span = vec[float]([float(h - lw + 1) for lw, h in zip(lo, hi)])
    distinct = vec[float]([0.0] * len(span))
    for lv in range(len(span)):
        s = span[lv]
        fc = float(cap[lv])
        if fc < s:
            s = fc
        distinct[lv] = s if s < fsize else fsize
    return distinct, span


def one_dim(a: Access, d: int, ext: list[int], size: int) -> tuple[vec[float], vec[float]]:
    """``dim_extent`` for a buffer accessed once (the common case, without the union)."""
    n = len(ext)
    coefs, _ = a.dims[d]
    hidden = a.opaque[d]
    distinct = vec[float]([1.0] * n)
    span = vec[float]([1.0] * n)
    if not coefs and not hidden:
        return distinct, span
    fsize = float(size)
    width = 0
    iters = 1
    blind = False
    for lv in range(n - 1, -1, -1):
        c = coefs.get(lv, 0)
        opaque = lv in hidden
        if c or opaque:
            e = ext[lv]
            iters *= e
            width += (c if c >= 0 else -c) * (e - 1)
            blind = blind or opaque
        fi = float(iters)
        if blind:
            s = fi if fi < fsize else fsize
        else:
            s = float(width + 1)
        span[lv] = s
        if fi < s:
            s = fi
        distinct[lv] = s if s < fsize else fsize
    return distinct, span
