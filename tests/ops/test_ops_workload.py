"""Workload construction, validation, serialisation, arguments and flop counts."""
from __future__ import annotations

import json
import pickle

import numpy as np
import pytest

from autotune.ops import OPS, ArgSpec, Workload, WorkloadError, conv_out_size, workload

CONV = dict(N=1, C=8, H=14, W=14, K=16, R=3, S=3, stride=1, pad=1)
DW = dict(N=1, C=8, H=14, W=14, R=3, S=3, stride=2, pad=1, multiplier=2)
POOL = dict(N=1, C=8, H=14, W=14, R=3, S=3, stride=2, pad=1)


# ---- construction and canonical form ----------------------------------------------


def test_defaults_filled_and_pairs_normalised():
    w = workload("conv2d", **CONV)
    assert w.params["stride"] == (1, 1) and w.params["pad"] == (1, 1)
    assert w.params["dilation"] == (1, 1)
    assert workload("depthwise_conv2d", **{**DW, "multiplier": 1}) == workload(
        "depthwise_conv2d", **{k: v for k, v in DW.items() if k != "multiplier"}
    )
    assert workload("conv2d", **{**CONV, "stride": [2, 1]}).params["stride"] == (2, 1)


def test_params_mapping_is_read_only():
    w = workload("matmul", M=2, N=3, K=4)
    assert dict(w.params) == {"M": 2, "N": 3, "K": 4}
    with pytest.raises(TypeError):
        w.params["M"] = 5  # type: ignore[index]
    with pytest.raises(AttributeError):
        w.op = "conv2d"  # type: ignore[misc]


def test_numpy_integers_accepted():
    assert workload("matmul", M=np.int64(4), N=4, K=4) == workload("matmul", M=4, N=4, K=4)


@pytest.mark.parametrize(
    "given, canonical",
    [
        ((), ()),
        ("relu", ("relu",)),
        (["relu", "bias"], ("bias", "relu")),
        (("relu", "scale_shift"), ("scale_shift", "relu")),
        (("bias",), ("bias",)),
        (("relu", "residual", "scale_shift"), ("scale_shift", "residual", "relu")),
        (("residual", "relu6"), ("residual", "relu6")),
    ],
)
def test_epilogue_canonical_order(given, canonical):
    assert workload("matmul", M=2, N=2, K=2, epilogue=given).epilogue == canonical


def test_equality_and_hash_ignore_spelling():
    a = workload("conv2d", **CONV, epilogue=["relu", "bias"])
    b = workload("conv2d", **{**CONV, "stride": (1, 1), "dilation": 1}, epilogue=("bias", "relu"))
    assert a == b and hash(a) == hash(b) and len({a, b}) == 1
    assert a != workload("conv2d", **CONV, epilogue=["bias"])
    assert a != workload("conv2d", **{**CONV, "pad": (1, 0)})


def test_str():
    w = workload("conv2d", **{**CONV, "stride": (2, 1)}, epilogue=["relu", "bias"])
    assert str(w) == (
        "conv2d(N=1,C=8,H=14,W=14,K=16,R=3,S=3,stride=(2,1),pad=(1,1),dilation=(1,1))+bias+relu"
    )
    assert str(workload("matmul", M=1, N=2, K=3)) == "matmul(M=1,N=2,K=3)"


# ---- serialisation -------------------------------------------------------------------


def test_to_dict_and_canonical_json():
    w = workload("conv2d", **CONV, epilogue=["bias"])
    d = w.to_dict()
    assert d["op"] == "conv2d" and d["dtype"] == "float32" and d["epilogue"] == ["bias"]
    assert d["params"]["stride"] == [1, 1] and d["params"]["K"] == 16
    assert w.key == w.to_json() == json.dumps(d, sort_keys=True, separators=(",", ":"))
    assert " " not in w.key


@pytest.mark.parametrize(
    "w",
    [
        workload("matmul", M=3, N=5, K=7, epilogue=["relu"]),
        workload("batch_matmul", B=2, M=3, N=5, K=7),
        workload("conv2d", **{**CONV, "stride": (2, 1), "dilation": (1, 2)},
                 epilogue=["scale_shift", "relu"]),
        workload("depthwise_conv2d", **DW, epilogue=["bias"]),
    ],
    ids=str,
)
def test_json_round_trip(w):
    again = Workload.from_json(w.to_json())
    assert again == w and again.key == w.key and hash(again) == hash(w)
    assert Workload.from_dict(w.to_dict()) == w
    assert Workload.from_json(w.to_dict()) == w
    assert pickle.loads(pickle.dumps(w)) == w


def test_from_dict_accepts_wire_form_without_epilogue():
    w = Workload.from_dict({"op": "matmul", "params": {"M": 2, "N": 3, "K": 4}, "dtype": "float32"})
    assert w == workload("matmul", M=2, N=3, K=4)
    assert Workload.from_dict(
        {"op": "matmul", "params": {"M": 2, "N": 3, "K": 4}}).dtype == "float32"


@pytest.mark.parametrize(
    "data, field",
    [
        ({"op": "matmul", "params": {"M": 2, "N": 3, "K": 4}, "extra": 1}, "extra"),
        ({"params": {"M": 2}}, "op"),
        ({"op": "matmul", "params": [1, 2]}, "params"),
        ({"op": "matmul", "params": {"M": 2, "N": 3, "K": 4}, "epilogue": 5}, "epilogue"),
        ({"op": "matmul", "params": {"M": 2, "N": 3, "K": -4}}, "K"),
        ({"op": "matmul", "params": {"M": 2, "N": 3, "K": 4}, "dtype": "float64"}, "dtype"),
        ({"op": "matmul", "params": {"M": 2, "N": 3, "K": 4}, "epilogue": ["swish"]}, "swish"),
    ],
)
def test_from_dict_revalidates(data, field):
    with pytest.raises(ValueError, match=field):
        Workload.from_dict(data)


@pytest.mark.parametrize(
    "data, loc",
    [
        ({"op": "matmul", "params": {"M": 2, "N": 3, "K": 4}, "extra": 1}, ("extra",)),
        ({"params": {"M": 2}}, ("op",)),
        ({"op": 7}, ("op",)),
        ({"op": "matmul", "params": [1, 2]}, ("params",)),
        ({"op": "matmul", "params": {"M": 0, "N": 3, "K": 4}}, ("params", "M")),
        ({"op": "matmul", "params": {"M": 2, "N": 3}}, ("params", "K")),
        ({"op": "matmul", "params": {"M": 2, "N": 3, "K": 4, "Q": 1}}, ("params", "Q")),
        ({"op": "matmul", "params": {"M": 2, "N": 3, "K": 4}, "epilogue": ["swish"]},
         ("epilogue",)),
        ({"op": "matmul", "params": {"M": 2, "N": 3, "K": 4}, "dtype": "float64"}, ("dtype",)),
        ({"op": "matmul", "params": {"M": 2, "N": 3, "K": 4}, "dtype": ["float16"]}, ("dtype",)),
        ({"op": "matmul", "params": {"M": 2, "N": 3, "K": 4, "a.b": 1}}, ("params", "a.b")),
        # checks across parameters name the one at fault
        ({"op": "conv2d", "params": {"N": 1, "C": 2, "H": 5, "W": 5, "K": 2, "R": 9, "S": 3,
                                     "stride": 1, "pad": 1}}, ("params", "R")),
        ({"op": "max_pool2d", "params": {"N": 1, "C": 2, "H": 8, "W": 8, "R": 3, "S": 3,
                                         "stride": 2, "pad": [1, 2]}}, ("params", "pad")),
        ({"op": "max_pool2d", "params": {"N": 1, "C": 2, "H": 8, "W": 8, "R": 2, "S": 2,
                                         "stride": 2, "pad": 0}, "epilogue": ["bias"]},
         ("epilogue",)),
    ],
)
def test_from_dict_errors_name_their_field(data, loc):
    with pytest.raises(WorkloadError) as err:
        Workload.from_dict(data)
    assert err.value.loc == loc and isinstance(err.value, ValueError)
    assert err.value.field == ".".join(loc)


def test_from_json_rejects_bad_text():
    with pytest.raises(ValueError, match="JSON"):
        Workload.from_json("{not json")


# ---- invalid input -------------------------------------------------------------------

BAD = [
    ("unknown op", "softmax", {}, (), "float32",
     "op 'softmax'.*known ops: avg_pool2d, batch_matmul, channel_affine, channel_mul, "
     "channel_shuffle, conv2d"),
    ("dtype", "matmul", dict(M=1, N=1, K=1), (), "float64", "dtype"),
    ("half pool", "max_pool2d", POOL, (), "float16",
     "dtype 'float16' is not supported for max_pool2d"),
    ("unknown param", "matmul", dict(M=1, N=1, K=1, L=2), (), "float32", "'L'"),
    ("missing param", "matmul", dict(M=1, N=1), (), "float32", "missing parameter 'K'"),
    ("zero", "matmul", dict(M=0, N=1, K=1), (), "float32", "'M'=0"),
    ("negative", "batch_matmul", dict(B=-1, M=1, N=1, K=1), (), "float32", "'B'"),
    ("float", "matmul", dict(M=1, N=2.0, K=1), (), "float32", "'N'"),
    ("bool", "matmul", dict(M=1, N=1, K=True), (), "float32", "'K'"),
    ("str", "matmul", dict(M="4", N=1, K=1), (), "float32", "'M'"),
    ("none", "matmul", dict(M=None, N=1, K=1), (), "float32", "'M'"),
    ("negative pad", "conv2d", {**CONV, "pad": -1}, (), "float32", "'pad'"),
    ("zero stride", "conv2d", {**CONV, "stride": (1, 0)}, (), "float32", "'stride'"),
    ("zero dilation", "conv2d", {**CONV, "dilation": 0}, (), "float32", "'dilation'"),
    ("pair length", "conv2d", {**CONV, "stride": (1, 1, 1)}, (), "float32", "'stride'"),
    ("pair of floats", "conv2d", {**CONV, "pad": (1.0, 1)}, (), "float32", "'pad'"),
    ("pair on int param", "conv2d", {**CONV, "K": (1, 1)}, (), "float32", "'K'"),
    ("zero multiplier", "depthwise_conv2d", {**DW, "multiplier": 0}, (), "float32", "'multiplier'"),
    ("dilation on depthwise", "depthwise_conv2d", {**DW, "dilation": 2}, (), "float32",
     "'dilation'"),
    ("R too big", "conv2d", {**CONV, "H": 5, "R": 9, "pad": 1}, (), "float32",
     r"parameter 'R'=9 is larger than the padded input height 7 \(H \+ 2\*pad\)"),
    ("S too big", "conv2d", {**CONV, "W": 3, "S": 4, "pad": 0}, (), "float32", "'S'=4.*width 3"),
    ("dilated R too big", "conv2d", {**CONV, "H": 7, "R": 5, "pad": 0, "dilation": 2}, (),
     "float32", "'R'=5"),
    ("depthwise S too big", "depthwise_conv2d", {**DW, "W": 2, "S": 7, "pad": (0, 2)}, (),
     "float32", "'S'"),
    ("duplicate stage", "matmul", dict(M=1, N=1, K=1), ("relu", "relu"), "float32", "epilogue"),
    ("both affine", "matmul", dict(M=1, N=1, K=1), ("bias", "scale_shift"), "float32", "epilogue"),
    ("two activations", "matmul", dict(M=1, N=1, K=1), ("relu6", "relu"), "float32", "relu6"),
    ("two of the new activations", "matmul", dict(M=1, N=1, K=1), ("silu", "gelu"), "float32",
     "silu and gelu"),
    ("unknown stage", "matmul", dict(M=1, N=1, K=1), ("swish",), "float32",
     "epilogue stage 'swish'"),
]


@pytest.mark.parametrize("op, params, epilogue, dtype, message", [b[1:] for b in BAD],
                         ids=[b[0] for b in BAD])
def test_invalid_input_names_the_field(op, params, epilogue, dtype, message):
    with pytest.raises(ValueError, match=message):
        workload(op, epilogue=epilogue, dtype=dtype, **params)


# ---- shapes, arguments, flops ------------------------------------------------------------


def test_arg_specs_order_and_shapes():
    w = workload("conv2d", **CONV, epilogue=["relu", "scale_shift"])
    assert w.arg_specs == (
        ArgSpec("data", (1, 8, 14, 14), "input"),
        ArgSpec("weight", (16, 8, 3, 3), "input"),
        ArgSpec("scale", (16,), "input"),
        ArgSpec("shift", (16,), "input"),
        ArgSpec("out", (1, 16, 14, 14), "output"),
    )
    m = workload("batch_matmul", B=2, M=3, N=5, K=7, epilogue=["bias"])
    assert [(a.name, a.shape) for a in m.arg_specs] == [
        ("A", (2, 3, 7)), ("B", (2, 7, 5)), ("bias", (5,)), ("out", (2, 3, 5))
    ]
    d = workload("depthwise_conv2d", **DW, epilogue=["bias"])
    assert [a.shape for a in d.arg_specs] == [(1, 8, 14, 14), (16, 1, 3, 3), (16,), (1, 16, 7, 7)]
    assert (d.out_h, d.out_w, d.channels) == (7, 7, 16)
    # the residual has the output's shape and comes after the per-channel vectors
    r = workload("conv2d", **CONV, epilogue=["relu", "residual", "bias"])
    assert [(a.name, a.shape) for a in r.arg_specs] == [
        ("data", (1, 8, 14, 14)), ("weight", (16, 8, 3, 3)), ("bias", (16,)),
        ("residual", (1, 16, 14, 14)), ("out", (1, 16, 14, 14))]
    assert str(r).endswith("+bias+residual+relu")


def test_out_size_formula():
    w = workload("conv2d", N=1, C=1, H=31, W=17, K=1, R=3, S=7, stride=(2, 3), pad=(1, 3),
                 dilation=(2, 1))
    assert w.output_shape == (1, 1, (31 + 2 - 4 - 1) // 2 + 1, (17 + 6 - 6 - 1) // 3 + 1)
    assert (w.out_h, w.out_w) == (conv_out_size(31, 3, 2, 1, 2), conv_out_size(17, 7, 3, 3))
    with pytest.raises(AttributeError):
        workload("matmul", M=1, N=1, K=1).out_h


@pytest.mark.parametrize(
    "w",
    [
        workload("matmul", M=3, N=5, K=7, epilogue=["bias", "relu"]),
        workload("batch_matmul", B=2, M=3, N=5, K=7, epilogue=["scale_shift"]),
        workload("conv2d", **CONV, epilogue=["relu"]),
        workload("depthwise_conv2d", **DW),
        workload("conv2d", **CONV, epilogue=["residual"]),
    ],
    ids=str,
)
def test_random_args(w):
    args = w.random_args(seed=3)
    assert len(args) == len(w.arg_specs)
    for arg, spec in zip(args, w.arg_specs):
        assert arg.shape == spec.shape and arg.dtype == np.float32
        assert arg.flags.c_contiguous and arg.ctypes.data % 64 == 0
        if spec.role == "output":
            assert np.isnan(arg).all()
        else:
            assert (arg >= -1).all() and (arg < 1).all() and (arg != 0).all()
            assert arg.std() > 0.3  # spread over the range, not a constant
    again = w.random_args(seed=3)
    assert all(np.array_equal(a, b, equal_nan=True) for a, b in zip(args, again))
    assert not np.array_equal(args[0], w.random_args(seed=4)[0])


def test_reference_checks_arguments():
    w = workload("matmul", M=3, N=5, K=7)
    args = w.random_args(0)
    assert w.reference(args[:2]).shape == (3, 5)  # `out` is optional
    with pytest.raises(ValueError, match="'B'"):
        w.reference([args[0], np.zeros((5, 7), np.float32)])
    with pytest.raises(ValueError, match="2 inputs"):
        w.reference(args[:1])


@pytest.mark.parametrize(
    "w, flops",
    [
        (workload("matmul", M=3, N=5, K=7), 2 * 3 * 5 * 7),
        (workload("matmul", M=3, N=5, K=7, epilogue=["bias", "relu"]), 2 * 105 + 2 * 15),
        (workload("batch_matmul", B=2, M=3, N=5, K=7, epilogue=["scale_shift"]), 2 * 210 + 2 * 30),
        (workload("conv2d", **CONV), 2 * 16 * 14 * 14 * 8 * 9),
        (workload("conv2d", **CONV, epilogue=["scale_shift", "relu"]),
         2 * 16 * 196 * 72 + 3 * 16 * 196),
        (workload("depthwise_conv2d", **DW, epilogue=["relu"]), 2 * 16 * 49 * 9 + 16 * 49),
        (workload("depthwise_conv2d", **DW, epilogue=["residual", "relu6"]),
         2 * 16 * 49 * 9 + 3 * 16 * 49),
    ],
    ids=lambda x: str(x) if isinstance(x, Workload) else "",
)
def test_flops(w, flops):
    assert w.flops() == flops and isinstance(w.flops(), int)


# ---- the operator table ------------------------------------------------------------------


def test_ops_table_describe():
    assert set(OPS) == {"matmul", "batch_matmul", "conv2d", "group_conv2d", "depthwise_conv2d",
                        "max_pool2d", "avg_pool2d", "global_avg_pool2d", "channel_mul",
                        "channel_affine", "channel_shuffle"}
    for name, spec in OPS.items():
        d = spec.describe()
        assert d["name"] == name and d["doc"] and "\n" not in d["doc"]
        assert json.loads(json.dumps(d)) == d
        # takes no epilogue, runs on llvm only
        pool = name in ("max_pool2d", "avg_pool2d", "global_avg_pool2d", "channel_mul",
                        "channel_shuffle")
        assert d["epilogue"] == ([] if pool else ["bias", "scale_shift", "residual", "relu",
                                                   "relu6", "hardswish", "hardsigmoid",
                                                   "sigmoid", "silu", "gelu"])
        llvm_only = pool or name == "channel_affine"
        assert d["targets"] == (["llvm"] if llvm_only else ["llvm", "cuda"])
        assert [p["name"] for p in d["params"]] == list(spec.param_names)
    conv = {p["name"]: p for p in OPS["conv2d"].describe()["params"]}
    assert conv["dilation"] == {**conv["dilation"], "default": 1, "required": False, "pair": True}
    assert conv["R"]["required"] and conv["pad"]["minimum"] == 0
    with pytest.raises(TypeError):
        OPS["x"] = OPS["matmul"]  # type: ignore[index]
