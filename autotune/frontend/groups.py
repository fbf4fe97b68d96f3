"""`KernelGroup`: one matched group of a compiled model (conv+BN+epilogue, linear, matmul,
max-pool), the base of the modules that run it on autotune's kernels (`runtime.KernelModule`
on this CPU, `cuda_runtime.CudaKernelModule` on a GPU), with the same computation on torch."""
from __future__ import annotations

from typing import Any, Callable, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from autotune.frontend.tasks import Match
from autotune.ops.epilogue import ACTIVATIONS

# each epilogue activation on torch
TORCH_ACTIVATIONS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "relu": torch.relu, "relu6": lambda y: torch.clamp(y, 0.0, 6.0), "hardswish": F.hardswish,
    "hardsigmoid": F.hardsigmoid, "sigmoid": torch.sigmoid, "silu": F.silu, "gelu": F.gelu}

# A group's module from (its match, input shapes, output shape, conv arguments).
ModuleMaker = Callable[[Match, Sequence[tuple[int, ...]], tuple[int, ...], dict[str, Any]],
                       nn.Module]


class KernelGroup(nn.Module):
    """One matched group (conv+BN(+residual add)+activation, linear(+residual add)
    +activation, matmul, max-pool, global average pool, channel gate, batch
    norm+activation) of a compiled model: what its kernel computes, and the same on torch
    (``forward_torch``)."""

    def __init__(self, match: Match, in_shapes: Sequence[tuple[int, ...]],
                 out_shape: tuple[int, ...], conv_args: dict[str, Any]) -> None:
        super().__init__()
        self.workload, self.kind, self.place = match.workload, match.kind, match.place
        self.in_shapes = tuple(tuple(s) for s in in_shapes)
        self.out_shape = tuple(out_shape)
        self.conv_args = conv_args
        self.activation = next((s for s in match.workload.epilogue if s in ACTIVATIONS), None)

    def torch_params(self) -> list[torch.Tensor]:
        """The folded weight (then bias) as torch tensors."""
        raise NotImplementedError

    def forward_torch(self, *xs: torch.Tensor) -> torch.Tensor:
        """The same computation on torch (folded weights; any shape that torch accepts)."""
        if self.kind == "pool":
            wl = self.workload
            if wl.op == "avg_pool2d":
                return F.avg_pool2d(xs[0], (wl.dim("R"), wl.dim("S")), wl.pair("stride"),
                                    wl.pair("pad"))
            return F.max_pool2d(xs[0], (wl.dim("R"), wl.dim("S")), wl.pair("stride"),
                                wl.pair("pad"), ceil_mode=bool(wl.dim("ceil_mode")))
        if self.kind == "avgpool":  # to the node's shape: (N, C) or (N, C, 1, 1)
            pooled = xs[0].mean((2, 3), keepdim=True)
            return pooled.reshape(pooled.shape[0], *self.out_shape[1:])
        if self.kind == "gate":
            return xs[0] * xs[1]
        if self.kind == "shuffle":  # the parts' channels interleaved
            return torch.stack(xs, 2).flatten(1, 2)
        # the folded constants in the activation's dtype (autocast casts again where on)
        params = [p.to(xs[0].dtype) for p in self.torch_params()]
        bias = params[1] if len(params) > 1 else None
        if self.kind == "affine":
            y = xs[0] * params[0].view(1, -1, 1, 1) + params[1].view(1, -1, 1, 1)
        elif self.kind == "conv":
            y = F.conv2d(xs[0], params[0], bias, **self.conv_args)
        elif self.kind == "linear":
            y = F.linear(xs[0], params[0].t(), bias)
        else:
            y = torch.matmul(xs[0], xs[1])
        if "residual" in self.workload.epilogue:
            y = y + xs[1]
        return y if self.activation is None else TORCH_ACTIVATIONS[self.activation](y)

    def extra_repr(self) -> str:
        return f"{self.place}: {self.workload}"
