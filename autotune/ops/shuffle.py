"""Channel shuffle (ShuffleNet's): the channels of ``groups`` equal parts interleaved, the
i-th channel of part j becoming channel i * groups + j of the output.

It is torch's ``channel_shuffle(torch.cat(parts, 1), groups)``, the cat included: the kernel
reads each part where it lies, so the concatenation before a shuffle is never written.
Each output element is one load and one store: the op counts 1 flop per element, so that
its GFLOP/s read as elements moved per nanosecond.
"""
from __future__ import annotations

import numpy as np

from autotune.ops.conv2d import BATCH, HEIGHT, WIDTH
from autotune.ops.spec import OpSpec, ParamError, Params, ParamSpec, Shape, sizes

# kernel arguments are the parts, then the output: a bound on both
MAX_GROUPS = 8
PARTS = tuple(f"part{j}" for j in range(MAX_GROUPS))


def _check(params: Params) -> None:
    c, g = sizes(params, ("C", "groups"))
    if not 2 <= g <= MAX_GROUPS:
        raise ParamError(f"channel_shuffle: parameter 'groups'={g} must be in "
                         f"[2, {MAX_GROUPS}]", "groups")
    if c % g:
        raise ParamError(f"channel_shuffle: parameter 'groups'={g} must divide C={c}",
                         "groups")


def _output(params: Params) -> Shape:
    return sizes(params, "NCHW")


def _inputs(params: Params) -> tuple[tuple[str, Shape], ...]:
    n, c, h, w, g = sizes(params, ("N", "C", "H", "W", "groups"))
    return tuple((PARTS[j], (n, c // g, h, w)) for j in range(g))


def _elements(params: Params) -> int:
    return int(np.prod(_output(params)))


def _shuffle(params: Params, *parts: np.ndarray) -> np.ndarray:
    return np.stack(parts, axis=2).reshape(_output(params))


CHANNEL_SHUFFLE = OpSpec(
    name="channel_shuffle",
    doc="out[N,C,H,W]: channel i*groups+j is channel i of part j (parts[groups][N,C/groups,"
        "H,W]; torch's channel_shuffle of their cat); 1 flop per output element",
    params=(BATCH, ParamSpec("C", "output channels (groups parts of C/groups)"), HEIGHT, WIDTH,
            ParamSpec("groups", f"parts interleaved, 2 to {MAX_GROUPS}; divides C")),
    channel_axis=1,
    inputs=_inputs,
    output_shape=_output,
    macs=_elements,
    compute=_shuffle,
    check=_check,
    flops_per_mac=1,
    epilogue=False,
    targets=("llvm",),
)
