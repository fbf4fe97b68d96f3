"""The numpy references against direct loops, for every op, epilogue and conv geometry."""
from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from autotune.ops import OPS, WorkloadError, workload


def naive_matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    m, k = a.shape
    n = b.shape[1]
    out = np.zeros((m, n))
    for i in range(m):
        for j in range(n):
            out[i, j] = sum(float(a[i, p]) * float(b[p, j]) for p in range(k))
    return out


def naive_batch_matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.stack([naive_matmul(a[i], b[i]) for i in range(a.shape[0])])


def naive_conv2d(data, weight, stride, pad, dilation=(1, 1), groups_of=None):
    """Direct conv; with `groups_of=m`, output channel o reads only input channel o // m."""
    n, c, h, w = data.shape
    k, wc, r, s = weight.shape
    (sh, sw), (ph, pw), (dh, dw) = stride, pad, dilation
    oh = (h + 2 * ph - dh * (r - 1) - 1) // sh + 1
    ow = (w + 2 * pw - dw * (s - 1) - 1) // sw + 1
    out = np.zeros((n, k, oh, ow))
    for y in range(oh):
        for x in range(ow):
            for i in range(r):
                for j in range(s):
                    iy, ix = y * sh - ph + i * dh, x * sw - pw + j * dw
                    if not (0 <= iy < h and 0 <= ix < w):
                        continue
                    if groups_of is None:
                        out[:, :, y, x] += data[:, :, iy, ix].astype(float) @ weight[:, :, i, j].T
                    else:
                        for o in range(k):
                            out[:, o, y, x] += (data[:, o // groups_of, iy, ix]
                                                * float(weight[o, 0, i, j]))
    return out


def naive_max_pool2d(data, r, s, stride, pad, mean=False):
    """Direct max over each window's cells inside the input (padding never counts); with
    ``mean``, their sum over the whole window's r*s cells (padding counts as zeros)."""
    n, c, h, w = data.shape
    (sh, sw), (ph, pw) = stride, pad
    oh, ow = (h + 2 * ph - r) // sh + 1, (w + 2 * pw - s) // sw + 1
    out = np.empty((n, c, oh, ow))
    for y in range(oh):
        for x in range(ow):
            cells = [data[:, :, iy, ix] for iy in range(y * sh - ph, y * sh - ph + r)
                     for ix in range(x * sw - pw, x * sw - pw + s) if 0 <= iy < h and 0 <= ix < w]
            out[:, :, y, x] = np.sum(np.stack(cells), axis=0) / (r * s) if mean else \
                np.max(np.stack(cells), axis=0)
    return out


def naive_epilogue(out: np.ndarray, stages, vectors, axis: int) -> np.ndarray:
    out = out.astype(float).copy()
    moved = np.moveaxis(out, axis, 0)  # a view: writes land in `out`
    for ch in range(moved.shape[0]):
        for stage in stages:
            if stage == "bias":
                moved[ch] += vectors["bias"][ch]
            elif stage == "scale_shift":
                moved[ch] = moved[ch] * vectors["scale"][ch] + vectors["shift"][ch]
            elif stage == "residual":
                moved[ch] += np.moveaxis(vectors["residual"], axis, 0)[ch]
            elif stage == "relu":
                moved[ch] = np.where(moved[ch] > 0, moved[ch], 0.0)
            elif stage == "relu6":
                moved[ch] = np.where(moved[ch] > 6, 6.0, np.where(moved[ch] > 0, moved[ch], 0.0))
            elif stage in ACTIVATION_OF:
                moved[ch] = np.vectorize(ACTIVATION_OF[stage])(moved[ch])
    return out


# the activations' definitions, element by element (torch's for the hard ones)
ACTIVATION_OF = {
    "hardswish": lambda x: x * min(max(x + 3, 0), 6) / 6,
    "hardsigmoid": lambda x: min(max(x + 3, 0), 6) / 6,
    "sigmoid": lambda x: 1 / (1 + math.exp(-x)),
    "silu": lambda x: x / (1 + math.exp(-x)),
    "gelu": lambda x: x * (1 + math.erf(x / math.sqrt(2))) / 2,
}


EPILOGUES = [(), ("bias",), ("scale_shift",), ("relu",), ("bias", "relu"), ("scale_shift", "relu"),
             ("bias", "relu6"), ("residual",), ("bias", "residual", "relu"), ("bias", "hardswish"),
             ("hardsigmoid",), ("scale_shift", "sigmoid"), ("residual", "silu"), ("bias", "gelu"),
             ("scale_shift", "residual")]

SMALL = {
    "matmul": dict(M=7, N=5, K=3),
    "batch_matmul": dict(B=2, M=3, N=5, K=7),
    "conv2d": dict(N=1, C=3, H=7, W=5, K=4, R=3, S=3, stride=1, pad=1),
    "group_conv2d": dict(N=2, C=4, H=7, W=5, K=6, R=3, S=3, stride=2, pad=1, groups=2),
    "depthwise_conv2d": dict(N=2, C=3, H=7, W=5, R=3, S=3, stride=1, pad=1, multiplier=2),
    "max_pool2d": dict(N=2, C=3, H=7, W=5, R=3, S=3, stride=1, pad=1),
    "avg_pool2d": dict(N=2, C=3, H=7, W=5, R=3, S=2, stride=(1, 2), pad=(1, 1)),
    "global_avg_pool2d": dict(N=2, C=3, H=7, W=5),
    "channel_mul": dict(N=2, C=3, H=7, W=5),
    "channel_affine": dict(N=2, C=3, H=7, W=5),
    "channel_shuffle": dict(N=2, C=6, H=7, W=5, groups=3),
}
NO_EPILOGUE = {"max_pool2d", "avg_pool2d", "global_avg_pool2d", "channel_mul", "channel_shuffle"}


def naive(w, args):
    """Direct-loop output of workload `w` (float64), epilogue included."""
    p = w.params
    if w.op == "matmul":
        out = naive_matmul(args[0], args[1])
    elif w.op == "batch_matmul":
        out = naive_batch_matmul(args[0], args[1])
    elif w.op == "conv2d":
        out = naive_conv2d(args[0], args[1], p["stride"], p["pad"], p["dilation"])
    elif w.op == "group_conv2d":  # each group's channels by their own conv
        g, cg, kg = p["groups"], p["C"] // p["groups"], p["K"] // p["groups"]
        out = np.concatenate([naive_conv2d(args[0][:, i * cg:(i + 1) * cg],
                                           args[1][i * kg:(i + 1) * kg], p["stride"], p["pad"],
                                           p["dilation"]) for i in range(g)], axis=1)
    elif w.op in ("max_pool2d", "avg_pool2d"):
        out = naive_max_pool2d(args[0], p["R"], p["S"], p["stride"], p["pad"],
                               mean=w.op == "avg_pool2d")
    elif w.op == "global_avg_pool2d":  # a sum per channel, in loops, over its pixels
        n, c, h, wd = args[0].shape
        out = np.zeros((n, c, 1, 1))
        for y in range(h):
            for x in range(wd):
                out[:, :, 0, 0] += args[0][:, :, y, x]
        out /= h * wd
    elif w.op == "channel_mul":
        out = args[0].astype(np.float64) * args[1][:, :, :1, :1]
    elif w.op == "channel_affine":  # per channel, in a loop
        out = np.empty(args[0].shape)
        for c in range(p["C"]):
            out[:, c] = args[0][:, c].astype(np.float64) * args[1][c] + args[2][c]
    elif w.op == "channel_shuffle":  # channel by channel: i * groups + j from part j
        g = p["groups"]
        out = np.empty(w.output_shape)
        for c in range(p["C"]):
            out[:, c] = args[c % g][:, c // g]
    else:
        out = naive_conv2d(args[0], args[1], p["stride"], p["pad"], groups_of=p["multiplier"])
    names = [spec.name for spec in w.arg_specs]
    vectors = dict(zip(names, args))
    axis = -1 if "matmul" in w.op else 1
    return naive_epilogue(out, w.epilogue, vectors, axis)


def check(w, seed=0):
    args = w.random_args(seed)
    expected = naive(w, args)
    got = w.reference(args)
    assert got.dtype == np.float32 and got.shape == w.output_shape
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
    assert np.isnan(args[-1]).all(), "reference must not write into `out`"


def test_channel_shuffle_is_torchs_of_the_parts_cat():
    torch = pytest.importorskip("torch")
    w = workload("channel_shuffle", N=2, C=12, H=3, W=5, groups=4)
    *parts, _ = w.random_args(2)
    shuffled = torch.nn.functional.channel_shuffle(
        torch.cat([torch.from_numpy(x) for x in parts], 1), 4)
    np.testing.assert_array_equal(w.reference(parts), shuffled.numpy())


@pytest.mark.parametrize("groups,C,why", [(1, 4, r"groups'=1 must be in \[2, 8\]"),
                                          (9, 9, r"groups'=9 must be in \[2, 8\]"),
                                          (4, 6, "groups'=4 must divide C=6")])
def test_channel_shuffle_refuses_groups_it_cannot_split(groups, C, why):
    with pytest.raises(ValueError, match=why) as err:
        workload("channel_shuffle", N=1, C=C, H=2, W=2, groups=groups)
    assert err.value.param == "groups"


def test_channel_affine_is_an_inference_batch_norm():
    torch = pytest.importorskip("torch")
    w = workload("channel_affine", N=2, C=4, H=3, W=5, epilogue=["relu"])
    data = w.random_args(1)[0]
    bn = torch.nn.BatchNorm2d(4).eval()
    with torch.no_grad():
        bn.running_mean.uniform_(-1, 1), bn.running_var.uniform_(0.5, 2)
        bn.weight.uniform_(0.5, 1.5), bn.bias.uniform_(-1, 1)
        expected = torch.relu(bn(torch.from_numpy(data))).numpy()
    scale = (bn.weight / torch.sqrt(bn.running_var + bn.eps)).detach().numpy()
    shift = (bn.bias - bn.running_mean * torch.from_numpy(scale)).detach().numpy()
    np.testing.assert_allclose(w.reference([data, scale, shift]), expected, rtol=1e-5,
                               atol=1e-6)


def test_small_table_covers_every_op():
    assert set(SMALL) == set(OPS)


@pytest.mark.parametrize("op, epilogue", [(op, epi) for op, epi in itertools.product(
    SMALL, EPILOGUES) if not (op in NO_EPILOGUE and epi)])
def test_every_op_and_epilogue_matches_direct_loops(op, epilogue):
    check(workload(op, epilogue=epilogue, **SMALL[op]))


@pytest.mark.parametrize("m, n, k", [(1, 1, 1), (7, 31, 5), (31, 2, 13)])
def test_matmul_shapes(m, n, k):
    check(workload("matmul", M=m, N=n, K=k))


def test_batch_matmul_prime_shapes():
    check(workload("batch_matmul", B=3, M=7, N=5, K=31))


CONV_CASES = [
    dict(N=2, C=3, H=7, W=7, K=4, R=3, S=3, stride=1, pad=1),
    dict(N=1, C=2, H=8, W=9, K=3, R=3, S=3, stride=2, pad=0),
    dict(N=1, C=2, H=7, W=11, K=2, R=3, S=5, stride=(2, 1), pad=(0, 3)),
    dict(N=1, C=5, H=7, W=7, K=3, R=1, S=1, stride=1, pad=0),
    dict(N=1, C=2, H=6, W=5, K=3, R=1, S=1, stride=2, pad=0),
    dict(N=1, C=2, H=13, W=13, K=2, R=7, S=7, stride=2, pad=3),
    dict(N=1, C=2, H=9, W=9, K=2, R=3, S=3, stride=1, pad=1, dilation=2),
    dict(N=1, C=2, H=9, W=8, K=2, R=3, S=2, stride=(1, 2), pad=(3, 0), dilation=(2, 1)),
    dict(N=1, C=7, H=31, W=7, K=3, R=3, S=3, stride=1, pad=1),
    dict(N=1, C=2, H=3, W=3, K=2, R=5, S=5, stride=1, pad=1),  # kernel == padded input
]


@pytest.mark.parametrize("params", CONV_CASES, ids=lambda p: str(workload("conv2d", **p)))
def test_conv2d_geometry(params):
    check(workload("conv2d", **params))


@pytest.mark.parametrize("params", [
    dict(N=1, C=6, H=7, W=7, K=9, R=3, S=3, stride=1, pad=1, groups=3),
    dict(N=2, C=8, H=9, W=6, K=4, R=1, S=3, stride=(2, 1), pad=(0, 1), dilation=2, groups=4),
    dict(N=1, C=4, H=5, W=5, K=8, R=3, S=3, stride=1, pad=1, groups=4),  # depthwise-like
])
def test_group_conv2d_matches_torch(params):
    torch = pytest.importorskip("torch")
    wl = workload("group_conv2d", epilogue=("bias",), **params)
    args = wl.random_args(0)
    want = torch.nn.functional.conv2d(
        *(torch.from_numpy(a).double() for a in args[:3]), stride=params["stride"],
        padding=params["pad"], dilation=params.get("dilation", 1), groups=params["groups"])
    np.testing.assert_allclose(wl.reference(args), want.numpy(), rtol=1e-5, atol=1e-5)


def test_group_conv2d_refuses_groups_that_do_not_divide_the_channels():
    with pytest.raises(ValueError, match="'groups'=3 must divide C=4"):
        workload("group_conv2d", N=1, C=4, H=5, W=5, K=6, R=3, S=3, stride=1, pad=1, groups=3)
    with pytest.raises(WorkloadError) as err:
        workload("group_conv2d", N=1, C=32, H=5, W=5, K=32, R=3, S=3, stride=1, pad=1,
                 groups=4, layout="NCHW16c")  # 8 channels a group: no block of 16
    assert err.value.field == "params.groups"


DEPTHWISE_CASES = [
    dict(N=1, C=3, H=7, W=7, R=3, S=3, stride=1, pad=1),
    dict(N=1, C=2, H=8, W=9, R=3, S=3, stride=2, pad=0, multiplier=2),
    dict(N=2, C=3, H=7, W=11, R=3, S=5, stride=(2, 1), pad=(0, 3)),
    dict(N=1, C=2, H=13, W=13, R=7, S=7, stride=2, pad=3, multiplier=3),
    dict(N=1, C=4, H=5, W=5, R=1, S=1, stride=1, pad=0),
    dict(N=1, C=7, H=31, W=7, R=3, S=3, stride=1, pad=1, multiplier=2),
]


@pytest.mark.parametrize("params", DEPTHWISE_CASES,
                         ids=lambda p: str(workload("depthwise_conv2d", **p)))
def test_depthwise_geometry(params):
    check(workload("depthwise_conv2d", **params))


def test_depthwise_channel_reads_input_channel_over_multiplier():
    w = workload("depthwise_conv2d", N=1, C=2, H=3, W=3, R=1, S=1, stride=1, pad=0, multiplier=2)
    data = np.stack([np.full((3, 3), 1.0), np.full((3, 3), 10.0)])[None].astype(np.float32)
    weight = np.array([1, 2, 3, 4], dtype=np.float32).reshape(4, 1, 1, 1)
    out = w.reference([data, weight])
    assert out[0, :, 0, 0].tolist() == [1.0, 2.0, 30.0, 40.0]


POOL_CASES = [
    dict(N=1, C=64, H=16, W=16, R=3, S=3, stride=2, pad=1),  # ResNet's stem pool, smaller
    dict(N=2, C=3, H=8, W=9, R=2, S=2, stride=2, pad=0),
    dict(N=1, C=2, H=9, W=7, R=3, S=3, stride=1, pad=1),
    dict(N=1, C=2, H=13, W=11, R=3, S=3, stride=3, pad=1),
    dict(N=1, C=3, H=10, W=11, R=3, S=5, stride=(2, 1), pad=(1, 2)),
    dict(N=1, C=2, H=4, W=4, R=4, S=4, stride=1, pad=0),  # one window: a global max
]


@pytest.mark.parametrize("params", POOL_CASES, ids=lambda p: str(workload("max_pool2d", **p)))
def test_max_pool2d_geometry(params):
    check(workload("max_pool2d", **params))


@pytest.mark.parametrize("params", POOL_CASES, ids=lambda p: str(workload("max_pool2d", **p)))
def test_max_pool2d_matches_torch_on_negative_data(params):
    """torch is the semantics to match: on all-negative data a padded cell (were it 0) would
    win every border window."""
    torch = pytest.importorskip("torch")
    w = workload("max_pool2d", **params)
    data = w.random_args(3)[0] - 2.0  # in [-3, -1]
    expected = torch.nn.functional.max_pool2d(torch.from_numpy(data), (w.dim("R"), w.dim("S")),
                                              w.pair("stride"), w.pair("pad")).numpy()
    np.testing.assert_array_equal(w.reference([data]), expected)


CEIL_CASES = [
    dict(N=1, C=2, H=13, W=13, R=3, S=3, stride=2, pad=0),  # SqueezeNet's, smaller: 6 x 6
    dict(N=1, C=2, H=14, W=9, R=3, S=3, stride=2, pad=1),   # a last window in the padding
    dict(N=2, C=3, H=7, W=8, R=2, S=3, stride=(2, 3), pad=(1, 1)),
    dict(N=1, C=1, H=5, W=6, R=2, S=2, stride=2, pad=0),    # rounded up, or not
]


@pytest.mark.parametrize("params", CEIL_CASES, ids=str)
def test_ceil_mode_max_pool2d_matches_torch(params):
    """Output sizes rounded up as torch rounds them (never a window wholly in the end
    padding) and -inf in the cells past the edges."""
    torch = pytest.importorskip("torch")
    w = workload("max_pool2d", ceil_mode=1, **params)
    data = w.random_args(3)[0] - 2.0
    expected = torch.nn.functional.max_pool2d(torch.from_numpy(data), (w.dim("R"), w.dim("S")),
                                              w.pair("stride"), w.pair("pad"),
                                              ceil_mode=True).numpy()
    assert w.output_shape == expected.shape
    np.testing.assert_array_equal(w.reference([data]), expected)


def test_ceil_mode_is_keyed_only_when_set():
    """A parameter added later stays out of the key at its default: the records of pools
    tuned before it still match."""
    plain = workload("max_pool2d", N=1, C=2, H=8, W=8, R=3, S=3, stride=2, pad=1)
    assert plain == workload("max_pool2d", N=1, C=2, H=8, W=8, R=3, S=3, stride=2, pad=1,
                             ceil_mode=0)
    assert "ceil_mode" not in plain.to_json() and "ceil_mode" not in str(plain)
    ceil = workload("max_pool2d", N=1, C=2, H=8, W=8, R=3, S=3, stride=2, pad=1, ceil_mode=1)
    assert '"ceil_mode":1' in ceil.to_json() and ceil.to_json() != plain.to_json()
    assert type(plain).from_json(ceil.to_json()) == ceil
    with pytest.raises(ValueError, match="'ceil_mode'=2 must be 0 or 1"):
        workload("max_pool2d", N=1, C=2, H=8, W=8, R=3, S=3, stride=2, pad=1, ceil_mode=2)


def test_max_pool2d_refuses_what_torch_refuses_and_epilogues():
    from autotune.ops import WorkloadError

    with pytest.raises(ValueError, match="'pad'=2 exceeds half the window height R=3"):
        workload("max_pool2d", N=1, C=1, H=8, W=8, R=3, S=3, stride=1, pad=2)
    with pytest.raises(ValueError, match="parameter 'S'=9 is larger than the padded input"):
        workload("max_pool2d", N=1, C=1, H=8, W=8, R=3, S=9, stride=1, pad=0)
    with pytest.raises(WorkloadError, match="takes no epilogue") as err:
        workload("max_pool2d", N=1, C=1, H=8, W=8, R=2, S=2, stride=2, pad=0, epilogue="relu")
    assert err.value.loc == ("epilogue",)
    pool = workload("max_pool2d", N=1, C=2, H=8, W=8, R=3, S=3, stride=2, pad=1)
    assert pool.flops() == 2 * 4 * 4 * 9  # one per comparison


@pytest.mark.serial
def test_reference_is_fast_on_realistic_shapes():
    import time

    for w in (
        workload("depthwise_conv2d", N=1, C=128, H=56, W=56, R=3, S=3, stride=1, pad=1),
        workload("conv2d", N=1, C=128, H=28, W=28, K=128, R=3, S=3, stride=1, pad=1),
    ):
        args = w.random_args(1)
        start = time.perf_counter()
        w.reference(args)
        assert time.perf_counter() - start < 0.5  # target 0.2 s; slack for a shared machine
