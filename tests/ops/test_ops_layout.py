"""Blocked layouts NCHW[x]c of conv2d, depthwise_conv2d and max_pool2d, and conv2d's data and
output in two layouts (IN>OUT): shapes, key, wire form, reference, refusals."""
from __future__ import annotations

import numpy as np
import pytest

from autotune.ops import Workload, WorkloadError, workload
from autotune.ops.layout import (
    blocked_shape,
    from_blocked,
    layout_block,
    layout_blocks,
    to_blocked,
)

PARAMS = dict(N=1, C=16, H=6, W=5, K=32, R=3, S=3, stride=2, pad=1)


def test_default_layout_keeps_the_key() -> None:
    wl = workload("conv2d", **PARAMS)
    assert "layout" not in wl.to_dict()
    assert Workload.from_json(wl.key) == wl
    blocked = workload("conv2d", layout="NCHW8c", **PARAMS)
    assert blocked.to_dict()["layout"] == "NCHW8c"
    assert blocked.key != wl.key
    assert Workload.from_json(blocked.key) == blocked
    assert str(blocked).endswith(" NCHW8c")


def test_blocked_argument_shapes() -> None:
    wl = workload("conv2d", layout="NCHW8c", epilogue=["bias", "residual", "relu"], **PARAMS)
    shapes = {a.name: a.shape for a in wl.arg_specs}
    assert shapes == {"data": (1, 2, 6, 5, 8), "weight": (32, 16, 3, 3), "bias": (32,),
                      "residual": (1, 4, 3, 3, 8), "out": (1, 4, 3, 3, 8)}
    assert wl.channels == 32 and (wl.out_h, wl.out_w) == (3, 3)
    assert wl.flops() == workload("conv2d", epilogue=["bias", "residual", "relu"],
                                  **PARAMS).flops()


def test_blocked_reference_is_the_nchw_one_blocked() -> None:
    chain = ["scale_shift", "residual", "relu"]
    wl = workload("conv2d", layout="NCHW16c", epilogue=chain, **PARAMS)
    plain = workload("conv2d", epilogue=chain, **PARAMS)
    args = wl.random_args(3)
    nchw = [from_blocked(a) if a.ndim == 5 else a for a in args]
    expected = to_blocked(plain.reference(nchw), 16)
    np.testing.assert_allclose(wl.reference(args), expected, rtol=1e-6)
    # the blocked order is not the plain one reshaped: a vector of channels is contiguous
    assert wl.reference(args)[0, 0, 0, 0, 1] == pytest.approx(
        plain.reference(nchw)[0, 1, 0, 0], rel=1e-6)


def test_blocking_round_trips() -> None:
    x = np.arange(2 * 32 * 3 * 4, dtype=np.float32).reshape(2, 32, 3, 4)
    b = to_blocked(x, 8)
    assert b.shape == (2, 4, 3, 4, 8) and b[1, 2, 1, 3, 5] == x[1, 2 * 8 + 5, 1, 3]
    np.testing.assert_array_equal(from_blocked(b), x)


@pytest.mark.parametrize("changes, field", [
    (dict(C=12), "params.C"), (dict(K=20), "params.K"), (dict(layout="NCHW8"), "layout"),
    (dict(layout="NWHC"), "layout"), (dict(layout="NCHW1c"), "layout"),
    (dict(layout="NCHW99c"), "layout"), (dict(layout=16), "layout")])
def test_refusals_name_the_field(changes: dict, field: str) -> None:
    data = {"op": "conv2d", "params": {**PARAMS, "stride": [2, 2], "pad": [1, 1]},
            "layout": "NCHW8c"}
    layout = changes.pop("layout", data["layout"])
    data = {**data, "layout": layout, "params": {**data["params"], **changes}}
    with pytest.raises(WorkloadError) as err:
        Workload.from_dict(data)
    assert err.value.field == field
    with pytest.raises(ValueError):
        workload("conv2d", layout=layout, **{**PARAMS, **changes})


def test_blocked_layouts_are_the_conv_and_pool_ops_only() -> None:
    with pytest.raises(WorkloadError) as err:
        Workload.from_dict({"op": "matmul", "params": {"M": 8, "N": 8, "K": 8},
                            "layout": "NCHW8c"})
    assert err.value.field == "layout" and "no blocked layout" in str(err.value)
    assert layout_block("NCHW") == 1 and layout_block("NCHW16c") == 16
    with pytest.raises(WorkloadError) as err:
        workload("depthwise_conv2d", layout="NCHW8c>NCHW16c", **{
            k: v for k, v in PARAMS.items() if k != "K"})
    assert err.value.field == "layout" and "only conv2d and group_conv2d take two" in str(err.value)


@pytest.mark.parametrize("op", ["depthwise_conv2d", "max_pool2d"])
def test_window_ops_blocked_reference_is_the_nchw_one_blocked(op: str) -> None:
    params = {k: v for k, v in PARAMS.items() if k != "K"}
    chain = ["bias", "residual", "relu6"] if op == "depthwise_conv2d" else []
    wl = workload(op, layout="NCHW8c", epilogue=chain, **params)
    plain = workload(op, epilogue=chain, **params)
    assert [a.shape for a in wl.arg_specs][0] == (1, 2, 6, 5, 8)
    assert wl.output_shape == (1, 2, 3, 3, 8) and wl.flops() == plain.flops()
    args = wl.random_args(3)
    nchw = [from_blocked(a) if a.ndim == 5 else a for a in args]
    np.testing.assert_allclose(wl.reference(args), to_blocked(plain.reference(nchw), 8),
                               rtol=1e-6)


@pytest.mark.parametrize("layout, blocks", [("NCHW>NCHW16c", (1, 16)),
                                            ("NCHW16c>NCHW8c", (16, 8)),
                                            ("NCHW8c>NCHW32c", (8, 32))])
def test_a_conv_reads_one_layout_and_writes_another(layout: str, blocks: tuple) -> None:
    chain = ["bias", "residual", "relu"]
    wl = workload("conv2d", layout=layout, epilogue=chain, **PARAMS)
    assert layout_blocks(layout) == blocks and (wl.in_block, wl.block) == blocks
    assert Workload.from_json(wl.key) == wl and str(wl).endswith(f" {layout}")
    shapes = {a.name: a.shape for a in wl.arg_specs}
    assert shapes["data"] == blocked_shape((1, 16, 6, 5), blocks[0])
    assert shapes["residual"] == shapes["out"] == blocked_shape((1, 32, 3, 3), blocks[1])
    plain = workload("conv2d", epilogue=chain, **PARAMS)
    args = wl.random_args(4)
    nchw = [from_blocked(a) if a.ndim == 5 else a for a in args]
    np.testing.assert_allclose(wl.reference(args), to_blocked(plain.reference(nchw), blocks[1]),
                               rtol=1e-6)


@pytest.mark.parametrize("layout", ["NCHW16c>NCHW16c", "NCHW>NCHW", "NCHW>NHWC", "NHWC>NCHW8c",
                                    "NCHW8c>NCHW8c>NCHW16c", "NCHW8c>"])
def test_two_layouts_must_differ_and_be_nchw_or_blocked(layout: str) -> None:
    with pytest.raises(ValueError, match="unknown layout"):
        layout_blocks(layout)


def test_blocked_data_is_written_blocked() -> None:
    with pytest.raises(WorkloadError, match="NCHW output comes from NCHW data") as err:
        workload("conv2d", layout="NCHW8c>NCHW", **PARAMS)
    assert err.value.field == "layout"


def test_api_schema_bounds_the_layout() -> None:
    from pydantic import ValidationError

    from autotune.service.schemas import WorkloadIn

    body = {"op": "conv2d", "params": {"N": 1, "C": 16, "H": 8, "W": 8, "K": 16, "R": 3,
                                       "S": 3, "stride": 1, "pad": 1}}
    assert WorkloadIn.model_validate({**body, "layout": "NCHW16c"}).layout == "NCHW16c"
    assert WorkloadIn.model_validate({**body, "layout": "NHWC"}).layout == "NHWC"
    assert Workload.from_dict(WorkloadIn.model_validate(body).model_dump()).layout == "NCHW"
    for bad in ("NCHW016c", "nchw16c", "NCHW16c" * 10, 16):
        with pytest.raises(ValidationError):
            WorkloadIn.model_validate({**body, "layout": bad})


def test_api_schema_pattern_is_the_validators_range() -> None:
    import re

    from autotune.ops.layout import MAX_BLOCK
    from autotune.service.schemas import _LAYOUT_PATTERN

    for x in range(0, 100):
        name = f"NCHW{x}c"
        valid = 2 <= x <= MAX_BLOCK
        assert bool(re.fullmatch(_LAYOUT_PATTERN, name)) == valid, name
        mixed = f"NCHW>{name}"
        assert bool(re.fullmatch(_LAYOUT_PATTERN, mixed)) == valid, mixed
        if valid:
            assert layout_block(name) == x and layout_blocks(mixed) == (1, x)
        else:
            with pytest.raises(ValueError):
                layout_block(name)
            with pytest.raises(ValueError):
                layout_blocks(mixed)


def test_nhwc_reference_is_the_nchw_one_with_channels_last() -> None:
    """NHWC data, KRSC weight, NHWC residual and output: the same convolution."""
    import autotune
    shape = dict(N=2, C=8, H=9, W=7, K=16, R=3, S=3, stride=2, pad=1, dtype="float16",
                 epilogue=["scale_shift", "residual", "relu"])
    nchw = autotune.workload("conv2d", **shape)
    nhwc = autotune.workload("conv2d", layout="NHWC", **shape)
    assert [a.shape for a in nhwc.arg_specs] == [
        (2, 9, 7, 8), (16, 3, 3, 8), (16,), (16,), (2, 5, 4, 16), (2, 5, 4, 16)]
    assert (nhwc.out_h, nhwc.out_w, nhwc.channels) == (5, 4, 16)
    args = nchw.random_args(1)
    last = [np.ascontiguousarray(a.transpose(0, 2, 3, 1)) if a.ndim == 4 else a
            for a in args]
    expected = nchw.reference(args[:-1]).transpose(0, 2, 3, 1)
    assert np.array_equal(nhwc.reference(last[:-1]), expected)
    assert nhwc.key != nchw.key and "NHWC" in str(nhwc)


def test_only_conv2d_takes_nhwc() -> None:
    import autotune
    with pytest.raises(WorkloadError) as err:
        autotune.workload("depthwise_conv2d", N=1, C=8, H=8, W=8, R=3, S=3, stride=1,
                          pad=1, layout="NHWC")
    assert err.value.loc == ("layout",)
