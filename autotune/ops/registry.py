"""The static table of operators, by name."""
from __future__ import annotations

from types import MappingProxyType
from typing import Mapping

from autotune.ops.channelwise import CHANNEL_AFFINE, CHANNEL_MUL, GLOBAL_AVG_POOL2D
from autotune.ops.conv2d import CONV2D
from autotune.ops.depthwise import DEPTHWISE_CONV2D
from autotune.ops.group_conv import GROUP_CONV2D
from autotune.ops.matmul import BATCH_MATMUL, MATMUL
from autotune.ops.pool import AVG_POOL2D, MAX_POOL2D
from autotune.ops.shuffle import CHANNEL_SHUFFLE
from autotune.ops.spec import OpSpec

OPS: Mapping[str, OpSpec] = MappingProxyType(
    {spec.name: spec
     for spec in (MATMUL, BATCH_MATMUL, CONV2D, GROUP_CONV2D, DEPTHWISE_CONV2D, MAX_POOL2D,
                  AVG_POOL2D, GLOBAL_AVG_POOL2D, CHANNEL_MUL, CHANNEL_AFFINE, CHANNEL_SHUFFLE)}
)


def op_spec(op: str) -> OpSpec:
    """The spec of operator `op`; ValueError naming the known ops otherwise."""
    spec = OPS.get(op) if isinstance(op, str) else None
    if spec is None:
        raise ValueError(f"workload: unknown op {op!r}; known ops: {', '.join(sorted(OPS))}")
    return spec
