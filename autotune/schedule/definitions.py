"""Compute definitions of the operators (shared by the CPU and GPU templates).

Each builder returns an ``OpGraph``: the kernel's input tensors in argument order (main
inputs, then the epilogue's arrays), the output, and the intermediate tensors a
template may inline, materialise or cache (a padded input, a packed weight). Builders are
cached: every config of a workload schedules the same graph, which schedules never mutate
(``Stage.op`` holds what a schedule changes). Arguments have the workload's dtype (a padded
input its input's); what a template computes in between is float32.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property, lru_cache
from math import ceil
from typing import Any, Sequence

from autotune.ir.expr import FLOAT, Const, Expr, Select, all_of, cmp
from autotune.ops import ArgSpec, Workload
from autotune.ops.pool import end_pad
from autotune.schedule.activation import apply_stages
from autotune.schedule.compute import Tensor, compute, placeholder, reduce_axis
from autotune.schedule.schedule import Schedule, topo_order

ZERO = Const(0.0, FLOAT)
NEG_INF = Const(float("-inf"), FLOAT)


GRAPHS = 64  # graphs each builder keeps (one per workload and packing)


@dataclass(frozen=True)
class OpGraph:
    inputs: list[Tensor]
    output: Tensor
    temps: list[Tensor] = field(default_factory=list)
    pad: Tensor | None = None     # zero-padded input (conv ops), None when pad == 0
    packed: Tensor | None = None  # weight / B packed into panels, when asked for

    @cached_property
    def order(self) -> list[Tensor]:
        """The computed tensors, producers first (once per graph: graphs are cached)."""
        return topo_order(self.output, self.temps)

    def schedule(self) -> Schedule:
        return Schedule(self.output, self.inputs, self.temps, self.order)


def _epilogue(wl: Workload, channel_axis: int, channel_of=None, out_shape=None, main: int = 2):
    """Placeholders and the ``post(acc, *axes)`` function of the workload's epilogue;
    ``channel_of(axes)``: the channel a per-channel vector is read at (default: the axis
    ``channel_axis``); ``out_shape``: the output's shape as the graph views it (a residual
    is viewed so too); ``main``: the op's own inputs, before the epilogue's."""
    vecs = {a.name: placeholder(a.name, out_shape if a.name == "residual" and out_shape
                                else a.shape, a.dtype) for a in _epilogue_args(wl, main)}
    if not wl.epilogue:
        return [], None

    def post(acc: Expr, *axes: Expr) -> Expr:
        c = channel_of(axes) if channel_of is not None else axes[channel_axis]
        # the residual is read where the output is written: same index
        return apply_stages(acc, wl.epilogue, c, lambda name, ch: vecs[name][ch],
                            lambda: vecs["residual"][axes])

    return list(vecs.values()), post


def _epilogue_args(wl: Workload, main: int = 2) -> list[ArgSpec]:
    return [a for a in wl.arg_specs if a.role == "input"][main:]


@lru_cache(maxsize=GRAPHS)
def matmul_graph(wl: Workload, pack: int | None = None, pack_a: int | None = None) -> OpGraph:
    """C[i, j] = sum_k A[i, k] * B[k, j]; with ``pack``, B is read from panels
    Bp[j // pack, k, j % pack] so that a register tile's row of B is contiguous; with
    ``pack_a``, A from panels Ap[i // pack_a, k, i % pack_a] (a tile's column of A)."""
    return _matmul(wl, batched=False, pack=pack, pack_a=pack_a)


@lru_cache(maxsize=GRAPHS)
def batch_matmul_graph(wl: Workload, pack: int | None = None, pack_a: int | None = None
                       ) -> OpGraph:
    """C[b, i, j] = sum_k A[b, i, k] * B[b, k, j] (A and B optionally packed per batch)."""
    return _matmul(wl, batched=True, pack=pack, pack_a=pack_a)


def _matmul(wl: Workload, batched: bool, pack: int | None, pack_a: int | None) -> OpGraph:
    M, N, K = wl.dim("M"), wl.dim("N"), wl.dim("K")
    lead: tuple[int, ...] = (wl.dim("B"),) if batched else ()
    A, B = placeholder("A", (*lead, M, K), wl.dtype), placeholder("B", (*lead, K, N), wl.dtype)
    extra, post = _epilogue(wl, len(lead) + 1)
    k = reduce_axis(K, "k")
    bnames = ["b"] if batched else []
    temps: list[Tensor] = []
    read_a = lambda b, i, kk: A[(*b, i, kk)]  # noqa: E731
    read_b = lambda b, kk, j: B[(*b, kk, j)]  # noqa: E731
    packed = None
    if pack:
        packed = _b_panels(B, pack, bnames)
        temps.append(packed)
        read_b = lambda b, kk, j: packed[(*b, j // pack, kk, j % pack)]  # noqa: E731
    if pack_a:
        apack = compute("A_pack", (*lead, ceil(M / pack_a), K, pack_a),
                        lambda *ax: _guarded(A, (*ax[:-3], ax[-3] * pack_a + ax[-1], ax[-2]),
                                             [(ax[-3] * pack_a + ax[-1], M)]),
                        axis_names=[*bnames, "io", "k", "ii"])
        temps.append(apack)
        read_a = lambda b, i, kk: apack[(*b, i // pack_a, kk, i % pack_a)]  # noqa: E731

    def body(*ax):
        b, i, j = ax[:-2], ax[-2], ax[-1]
        return read_a(b, i, k.var) * read_b(b, k.var, j)

    C = compute("C", (*lead, M, N), body, [k], post=post, axis_names=[*bnames, "i", "j"],
                dtype=wl.dtype)
    return OpGraph([A, B, *extra], C, temps, packed=packed)


def _b_panels(B: Tensor, pack: int, lead_names: Sequence[str] = ()) -> Tensor:
    """B [..., K, N] as column panels Bp[..., j // pack, k, j % pack] (zeros past N)."""
    *lead, K, N = B.shape
    return compute("B_pack", (*lead, ceil(N / pack), K, pack),
                   lambda *ax: _guarded(B, (*ax[:-3], ax[-2], ax[-3] * pack + ax[-1]),
                                        [(ax[-3] * pack + ax[-1], N)]),
                   axis_names=[*lead_names, "jo", "k", "ji"])


@lru_cache(maxsize=GRAPHS)
def gemv_graph(wl: Workload, parts: int, pack: int | None = None) -> OpGraph:
    """A one-row matmul as ``parts`` partial sums over contiguous ranges of k,
    ``C_part[p, j] = sum_kk A[0, p*chunk + kk] * B[p*chunk + kk, j]``, then
    ``C[0, j] = sum_p C_part[p, j]`` (where the epilogue runs): each range is a parallel
    task that streams a contiguous block of B's rows. With ``pack``, B is read from
    column panels Bp[j // pack, k, j % pack], as `matmul_graph` packs it."""
    N, K = wl.dim("N"), wl.dim("K")
    A, B = placeholder("A", (1, K)), placeholder("B", (K, N))
    extra, post = _epilogue(wl, 1)
    chunk = ceil(K / parts)
    kk = reduce_axis(chunk, "kk")
    temps: list[Tensor] = []
    packed = None
    if pack:
        packed = _b_panels(B, pack)
        temps.append(packed)

    def body(p, j):
        k = p * chunk + kk.var
        b, at = (B, (k, j)) if packed is None else (packed, (j // pack, k, j % pack))
        if parts * chunk == K:
            return A[0, k] * b[at]
        return _guarded(A, (0, k), [(k, K)]) * _guarded(b, at, [(k, K)])

    part = compute("C_part", (parts, N), body, [kk], axis_names=["p", "j"])
    rp = reduce_axis(parts, "rp")
    C = compute("C", (1, N), lambda i, j: part[rp.var, j], [rp], post=post,
                axis_names=["i", "j"])
    return OpGraph([A, B, *extra], C, [*temps, part], packed=packed)


def _padded(data: Tensor, ph: int, pw: int, fill: Const = ZERO,
            end: tuple[int, int] = (0, 0)) -> Tensor | None:
    """``data`` padded by ``ph``, ``pw`` on every side and ``end`` more past the bottom and
    right edges (a ceil_mode pool's), with ``fill``; None without padding."""
    if ph == 0 and pw == 0 and end == (0, 0):
        return None
    n_, c_, h_, w_ = data.shape
    return compute("data_pad", (n_, c_, h_ + 2 * ph + end[0], w_ + 2 * pw + end[1]),
                   lambda n, c, h, w: _guarded(data, (n, c, h - ph, w - pw),
                                               [(h - ph, h_), (w - pw, w_)], lower=True,
                                               fill=fill),
                   axis_names=["n", "c", "h", "w"], dtype=data.dtype)


def conv_groups(wl: Workload) -> tuple[int, int, int, int]:
    """(groups, images, input channels, output channels) of a conv2d or group_conv2d as its
    kernels compute it: [N, C, H, W] is [N*G, C/G, H, W] in memory, so G groups are a conv
    over N*G images, of C/G channels each, image b reading the weights of group b % G."""
    g = wl.dim("groups") if wl.op == "group_conv2d" else 1
    return g, wl.dim("N") * g, wl.dim("C") // g, wl.dim("K") // g


def _group_of(n: Expr, batch: int, groups: int) -> Expr:
    """The group of image ``n`` of the N*G a grouped conv computes (n itself when N is 1)."""
    return n if batch == 1 else n % groups


@lru_cache(maxsize=GRAPHS)
def conv2d_graph(wl: Workload, pack: int | None = None) -> OpGraph:
    """out[n, k, y, x] = sum_{c,r,s} pad(data)[n, c, y*sh + r*dh, x*sw + s*dw] * w[k, c, r, s];
    with ``pack``, the weight is read from Wp[k // pack, c, r, s, k % pack]. A grouped conv
    is computed over N*G images of C/G channels (`conv_groups`), with weight w[g, k, c, r, s]
    and Wp[g, k // pack, c, r, s, k % pack] for the image's group g."""
    N, H, W, R, S = (wl.dim(x) for x in ("N", "H", "W", "R", "S"))
    G, B, C, K = conv_groups(wl)
    (sh, sw), (ph, pw), (dh, dw) = wl.pair("stride"), wl.pair("pad"), wl.pair("dilation")
    grouped = G > 1
    lead = (G,) if grouped else ()  # a grouped conv's weights lead with their group

    def group(n):  # image n's group, as an index prefix
        return (_group_of(n, N, G),) if grouped else ()

    data = placeholder("data", (B, C, H, W), wl.dtype)
    weight = placeholder("weight", (*lead, K, C, R, S), wl.dtype)
    out_shape = (B, K, wl.out_h, wl.out_w)
    extra, post = _epilogue(wl, 1, channel_of=(lambda axes: _group_of(axes[0], N, G) * K
                                               + axes[1]) if grouped else None,
                            out_shape=out_shape if grouped else None)
    pad = _padded(data, ph, pw)
    src = pad or data
    rc, rr, rs = reduce_axis(C, "rc"), reduce_axis(R, "rr"), reduce_axis(S, "rs")
    temps = [pad] if pad else []
    packed = None
    if pack:
        def pack_at(*axes):
            *g, ko, c, r, s, ki = axes
            return _guarded(weight, (*g, ko * pack + ki, c, r, s), [(ko * pack + ki, K)])

        packed = compute("weight_pack", (*lead, ceil(K / pack), C, R, S, pack), pack_at,
                         axis_names=["g"] * len(lead) + ["ko", "c", "r", "s", "ki"])
        temps.append(packed)

        def w_at(n, k):
            return packed[(*group(n), k // pack, rc.var, rr.var, rs.var, k % pack)]
    else:
        def w_at(n, k):
            return weight[(*group(n), k, rc.var, rr.var, rs.var)]

    def body(n, k, y, x):
        return src[n, rc.var, y * sh + rr.var * dh, x * sw + rs.var * dw] * w_at(n, k)

    out = compute("out", out_shape, body, [rc, rr, rs], post=post,
                  axis_names=["n", "k", "y", "x"], dtype=wl.dtype)
    return OpGraph([data, weight, *extra], out, temps, pad=pad, packed=packed)


@lru_cache(maxsize=GRAPHS)
def conv2d_blocked_graph(wl: Workload, overhang: tuple[int, int] = (0, 0)) -> OpGraph:
    """conv2d in NCHW[x]c (data blocked by bi, output by bo; a block of 1 is NCHW):
    out[n, ko, y, x, ki] = sum_{co,r,s,ci} pad(data)[n, co, y*sh + r*dh, x*sw + s*dw, ci]
    * Wp[ko, co, r, s, ci, ki], the KCRS weight packed to Wp[K/bo, C/bi, R, S, bi, bo] so
    that a vector of output channels is contiguous at every (input channel, tap). A grouped
    conv runs over N*G images of C/G channels (`conv_groups`; a block holds channels of one
    group), image n of group g reading Wp[g*K/(G*bo) + ko, ...]. With ``overhang`` (output
    rows, columns a schedule's tiles compute past the edges), the padded data also covers
    what those read, zeros, so that no read in a tile needs a guard."""
    N, H, W, R, S = (wl.dim(x) for x in ("N", "H", "W", "R", "S"))
    G, B, C, K = conv_groups(wl)
    (sh, sw), (dh, dw) = wl.pair("stride"), wl.pair("dilation")
    bi, bo = wl.in_block, wl.block
    # NCHW data (a block of 1) keeps its four dimensions
    data = placeholder("data", (B, C, H, W) if bi == 1 else (B, C // bi, H, W, bi))
    weight = placeholder("weight", (G * K, C, R, S))

    def k_block(n, ko):  # the output channel block of the whole conv
        return ko if G == 1 else _group_of(n, N, G) * (K // bo) + ko

    out_shape = (B, K // bo, wl.out_h, wl.out_w, bo)
    extra, post = _epilogue(wl, 1, channel_of=lambda axes: k_block(axes[0], axes[1]) * bo
                            + axes[4], out_shape=out_shape if G > 1 else None)
    end = _overhang_end(wl, overhang)
    pad = _padded(data, *wl.pair("pad"), end=end) if bi == 1 else \
        _blocked_padded(data, wl.pair("pad"), end=end)
    src = pad or data
    packed = compute("weight_pack", (G * K // bo, C // bi, R, S, bi, bo),
                     lambda ko, co, r, s, ci, ki: weight[ko * bo + ki, co * bi + ci, r, s],
                     axis_names=["ko", "co", "r", "s", "ci", "ki"])
    rco, rci = reduce_axis(C // bi, "rco"), reduce_axis(bi, "rci")
    rr, rs = reduce_axis(R, "rr"), reduce_axis(S, "rs")

    def body(n, ko, y, x, ki):
        at = (n, rco.var, y * sh + rr.var * dh, x * sw + rs.var * dw)
        return src[at if bi == 1 else (*at, rci.var)] * packed[k_block(n, ko), rco.var, rr.var,
                                                                rs.var, rci.var, ki]

    out = compute("out", out_shape, body, [rco, rci, rr, rs], post=post,
                  axis_names=["n", "ko", "y", "x", "ki"])
    temps = [pad, packed] if pad else [packed]
    return OpGraph([data, weight, *extra], out, temps, pad=pad, packed=packed)


def _overhang_end(wl: Workload, overhang: tuple[int, int]) -> tuple[int, int]:
    """Rows and columns past the padded data's bottom and right edges that output rows and
    columns ``overhang`` past the output's edges read."""
    end = []
    for o, extent, size, pad, stride, dilation, taps in zip(
            overhang, (wl.out_h, wl.out_w), (wl.dim("H"), wl.dim("W")), wl.pair("pad"),
            wl.pair("stride"), wl.pair("dilation"), (wl.dim("R"), wl.dim("S"))):
        read = (extent + o - 1) * stride + (taps - 1) * dilation + 1 if o else 0
        end.append(max(0, read - (size + 2 * pad)))
    return end[0], end[1]


def _blocked_padded(data: Tensor, pad: tuple[int, int], fill: Const = ZERO,
                    end: tuple[int, int] = (0, 0)) -> Tensor | None:
    """NCHW[x]c ``data`` padded along H and W by ``pad`` (and ``end`` more past the bottom
    and right edges) with ``fill``; None without padding."""
    ph, pw = pad
    if ph == 0 and pw == 0 and end == (0, 0):
        return None
    N, C, H, W, b = data.shape
    return compute("data_pad", (N, C, H + 2 * ph + end[0], W + 2 * pw + end[1], b),
                   lambda n, c, h, w, ci: _guarded(data, (n, c, h - ph, w - pw, ci),
                                                   [(h - ph, H), (w - pw, W)], lower=True,
                                                   fill=fill),
                   axis_names=["n", "c", "h", "w", "ci"])


@lru_cache(maxsize=GRAPHS)
def window_blocked_graph(wl: Workload) -> OpGraph:
    """A depthwise conv (multiplier 1) or a max- or average pool in NCHW[x]c:
    out[n, co, y, x, ci] = sum (or max) over r, s of pad(data)[n, co, y*sh + r, x*sw + s, ci]
    (times Wp[co, r, s, ci], the weight packed so that a vector of channels is contiguous at
    every tap; an average times 1 / (R*S))."""
    N, C, H, W, R, S = (wl.dim(x) for x in ("N", "C", "H", "W", "R", "S"))
    (sh, sw), b = wl.pair("stride"), wl.block
    data = placeholder("data", (N, C // b, H, W, b))
    pool = wl.op in POOL_OPS
    maximum = wl.op == "max_pool2d"
    pad = _blocked_padded(data, wl.pair("pad"), NEG_INF if maximum else ZERO,
                          end_pad(wl.params) if pool else (0, 0))
    src = pad or data
    rr, rs = reduce_axis(R, "rr"), reduce_axis(S, "rs")
    names = ["n", "c", "y", "x", "ci"]
    temps = [pad] if pad else []
    if pool:
        out = compute("out", wl.output_shape,
                      lambda n, c, y, x, ci: src[n, c, y * sh + rr.var, x * sw + rs.var, ci],
                      [rr, rs], axis_names=names, **_pooling(wl))
        return OpGraph([data], out, temps, pad=pad)
    weight = placeholder("weight", (C, 1, R, S))
    extra, post = _epilogue(wl, 1, channel_of=lambda axes: axes[1] * b + axes[4])
    packed = compute("weight_pack", (C // b, R, S, b),
                     lambda co, r, s, ci: weight[co * b + ci, 0, r, s],
                     axis_names=["co", "r", "s", "ci"])

    def body(n, c, y, x, ci):
        return src[n, c, y * sh + rr.var, x * sw + rs.var, ci] * packed[c, rr.var, rs.var, ci]

    out = compute("out", wl.output_shape, body, [rr, rs], post=post, axis_names=names)
    return OpGraph([data, weight, *extra], out, [*temps, packed], pad=pad, packed=packed)


@lru_cache(maxsize=GRAPHS)
def depthwise_graph(wl: Workload) -> OpGraph:
    """out[n, c, y, x] = sum_{r,s} pad(data)[n, c // m, y*sh + r, x*sw + s] * w[c, 0, r, s]."""
    N, C, H, W, R, S, m = (wl.dim(x) for x in ("N", "C", "H", "W", "R", "S", "multiplier"))
    (sh, sw), (ph, pw) = wl.pair("stride"), wl.pair("pad")
    data = placeholder("data", (N, C, H, W), wl.dtype)
    weight = placeholder("weight", (C * m, 1, R, S), wl.dtype)
    extra, post = _epilogue(wl, 1)
    pad = _padded(data, ph, pw)
    src = pad or data
    rr, rs = reduce_axis(R, "rr"), reduce_axis(S, "rs")

    def body(n, c, y, x):
        cin = c // m if m > 1 else c
        return src[n, cin, y * sh + rr.var, x * sw + rs.var] * weight[c, 0, rr.var, rs.var]

    out = compute("out", wl.output_shape, body, [rr, rs], post=post,
                  axis_names=["n", "c", "y", "x"], dtype=wl.dtype)
    return OpGraph([data, weight, *extra], out, [pad] if pad else [], pad=pad)


POOL_OPS = ("max_pool2d", "avg_pool2d")


def _pooling(wl: Workload) -> dict[str, Any]:
    """A pool's reduction: the max, or the sum times 1 / (R*S)."""
    if wl.op == "max_pool2d":
        return {"combiner": "max"}
    inv = Const(1.0 / (wl.dim("R") * wl.dim("S")), FLOAT)
    return {"post": lambda acc, *axes: acc * inv}


@lru_cache(maxsize=GRAPHS)
def pool2d_graph(wl: Workload) -> OpGraph:
    """out[n, c, y, x] = max_{r,s} pad(data)[n, c, y*sh + r, x*sw + s], padded with -inf
    (padded cells never win); or an average pool's sum over the window, padded with zeros,
    times 1 / (R*S)."""
    N, C, H, W = (wl.dim(x) for x in ("N", "C", "H", "W"))
    (sh, sw), (ph, pw) = wl.pair("stride"), wl.pair("pad")
    data = placeholder("data", (N, C, H, W), wl.dtype)
    pad = _padded(data, ph, pw, NEG_INF if wl.op == "max_pool2d" else ZERO, end_pad(wl.params))
    src = pad or data
    rr, rs = reduce_axis(wl.dim("R"), "rr"), reduce_axis(wl.dim("S"), "rs")
    out = compute("out", wl.output_shape,
                  lambda n, c, y, x: src[n, c, y * sh + rr.var, x * sw + rs.var], [rr, rs],
                  axis_names=["n", "c", "y", "x"], dtype=wl.dtype, **_pooling(wl))
    return OpGraph([data], out, [pad] if pad else [], pad=pad)


@lru_cache(maxsize=GRAPHS)
def channelwise_graph(wl: Workload) -> OpGraph:
    """global_avg_pool2d: out[n, c, 0, 0(, ci)] = sum over h, w of data[n, c, h, w(, ci)],
    times 1 / (H*W); channel_mul: out[n, c, y, x(, ci)] = data[...] * gate[n, c, 0, 0(, ci)];
    channel_affine: data[...] * factor[ch] + offset[ch], then the epilogue (NCHW, or NCHW[x]c
    with the block's lane last, ch = c * x + ci)."""
    N, C, H, W = (wl.dim(x) for x in "NCHW")
    b = wl.block
    blocked = b > 1
    data = placeholder("data", (N, C // b, H, W, b) if blocked else (N, C, H, W))
    names = ["n", "c", "y", "x", *(["ci"] if blocked else [])]
    if wl.op == "global_avg_pool2d":
        rh, rw = reduce_axis(H, "rh"), reduce_axis(W, "rw")
        inv = Const(1.0 / (H * W), FLOAT)
        out = compute("out", wl.output_shape,
                      lambda n, c, i, j, *ci: data[(n, c, rh.var, rw.var, *ci)], [rh, rw],
                      post=lambda acc, *axes: acc * inv, axis_names=names)
        return OpGraph([data], out)
    if wl.op == "channel_affine":
        factor, offset = placeholder("factor", (C,)), placeholder("offset", (C,))
        # a per-channel vector's index: the channel, c * b + ci when blocked
        channel_of = (lambda axes: axes[1] * b + axes[4]) if blocked else None
        extra, post = _epilogue(wl, 1, channel_of=channel_of, out_shape=wl.output_shape,
                                main=3)

        def affine(n, c, y, x, *ci):
            ch = c * b + ci[0] if ci else c
            value = data[(n, c, y, x, *ci)] * factor[ch] + offset[ch]
            return value if post is None else post(value, n, c, y, x, *ci)

        out = compute("out", wl.output_shape, affine, axis_names=names)
        return OpGraph([data, factor, offset, *extra], out)
    gate = placeholder("gate", (N, C // b, 1, 1, b) if blocked else (N, C, 1, 1))
    out = compute("out", wl.output_shape,
                  lambda n, c, y, x, *ci: data[(n, c, y, x, *ci)] * gate[(n, c, 0, 0, *ci)],
                  axis_names=names)
    return OpGraph([data, gate], out)


@lru_cache(maxsize=GRAPHS)
def shuffle_graph(wl: Workload) -> OpGraph:
    """channel_shuffle: out[n, c, y, x] = part_{c % g}[n, c // g, y, x] (NCHW); blocked,
    channel c = cb * b + ci of out[n, cb, y, x, ci] read from its part's block and lane."""
    N, C, H, W, g = (wl.dim(x) for x in ("N", "C", "H", "W", "groups"))
    b = wl.block
    blocked = b > 1
    parts = [placeholder(a.name, a.shape, wl.dtype) for a in wl.arg_specs if a.role == "input"]
    names = ["n", "c", "y", "x", *(["ci"] if blocked else [])]

    def body(n, c, y, x, *ci):
        ch = c * b + ci[0] if blocked else c
        i = ch // g
        where = (n, i // b, y, x, i % b) if blocked else (n, i, y, x)
        value = parts[g - 1][where]
        for j in range(g - 2, -1, -1):  # the part of channel ch
            value = Select(cmp("==", ch % g, j), parts[j][where], value)
        return value

    out = compute("out", wl.output_shape, body, axis_names=names, dtype=wl.dtype)
    return OpGraph(parts, out)


def _guarded(t: Tensor, idx: tuple, bounds: list[tuple[Expr, int]], lower: bool = False,
             fill: Const = ZERO) -> Expr:
    """``t[idx]`` where every (expr, n) in ``bounds`` has 0 <= expr < n, else ``fill``."""
    conds = []
    for e, n in bounds:
        if lower:
            conds.append(cmp(">=", e, 0))
        conds.append(cmp("<", e, n))
    c = all_of(conds)
    return t[idx] if c is None else Select(c, t[idx], fill)
