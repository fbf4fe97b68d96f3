"""Grouped 2-D convolution: ``groups`` independent convs, each over C/groups input channels
to K/groups output channels (ResNeXt's and RegNet's 3x3 convs), NCHW data and a
[K, C/groups, R, S] weight, as torch's ``conv2d(groups=...)``.

Row-major [N, C, H, W] is [N*groups, C/groups, H, W] byte for byte, so a grouped conv is a
conv2d over a batch of N*groups images whose weight depends on the image's group; the
kernels compute it that way (`autotune.schedule.definitions.conv_groups`)."""
from __future__ import annotations

import numpy as np

from autotune.ops.conv2d import CONV2D, check_kernel_fits
from autotune.ops.spec import OpSpec, ParamError, Params, ParamSpec, Shape, pair, sizes


def _check(params: Params) -> None:
    c, k, g = sizes(params, ("C", "K", "groups"))
    for name, size in (("C", c), ("K", k)):
        if size % g:
            raise ParamError(f"group_conv2d: parameter 'groups'={g} must divide {name}={size}",
                             "groups")
    check_kernel_fits("group_conv2d", params, pair(params, "dilation"))


def _per_group(params: Params) -> dict:
    """The conv2d params of one group."""
    g = int(params["groups"])  # type: ignore[arg-type]
    return {**{name: value for name, value in params.items() if name != "groups"},
            "C": int(params["C"]) // g, "K": int(params["K"]) // g}  # type: ignore[arg-type]


def _inputs(params: Params) -> tuple[tuple[str, Shape], ...]:
    n, c, h, w, k, r, s, g = sizes(params, ("N", "C", "H", "W", "K", "R", "S", "groups"))
    return (("data", (n, c, h, w)), ("weight", (k, c // g, r, s)))


def _output_shape(params: Params) -> Shape:
    n, k = sizes(params, "NK")
    return (n, k, *CONV2D.output_shape(_per_group(params))[2:])


def _macs(params: Params) -> int:
    return int(params["groups"]) * CONV2D.macs(_per_group(params))  # type: ignore[arg-type]


def _compute(params: Params, data: np.ndarray, weight: np.ndarray) -> np.ndarray:
    g = int(params["groups"])  # type: ignore[arg-type]
    one = _per_group(params)
    cg, kg = one["C"], one["K"]
    return np.concatenate([CONV2D.compute(one, data[:, i * cg:(i + 1) * cg],
                                          weight[i * kg:(i + 1) * kg]) for i in range(g)],
                          axis=1)


GROUP_CONV2D = OpSpec(
    name="group_conv2d",
    doc="out[N,K,OH,OW] = conv(data[N,C,H,W], weight[K,C/groups,R,S]) in `groups` groups",
    params=(*CONV2D.params, ParamSpec("groups", "channel groups; divides C and K")),
    channel_axis=1,
    inputs=_inputs,
    output_shape=_output_shape,
    macs=_macs,
    compute=_compute,
    check=_check,
)
