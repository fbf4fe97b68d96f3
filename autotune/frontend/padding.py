"""Channel padding: a tensor whose channels fill only part of the last vector (MNASNet-1.3's
40, 104 and 248 channels, ShuffleNet-V2 x2.0's 488, on 16 lanes) gets zero channels up to a
multiple of the lanes, so that its layers run in full-width blocks rather than half-width
ones or NCHW.

A group of tensors is padded together: those that elementwise ops, BatchNorm, depthwise
convs, pools and a flatten or mean to [N, C] join. It is padded only when every op that
makes one of them is a conv (given zero filters and bias for the new channels) and every
op that reads one is a conv or linear layer (given zero weights for them) or an op of the
group; a graph input, a concat, a split or any other op keeps its group as it is. A padded
tensor the model returns is narrowed back to its channels.
The new channels hold finite values (zero, or an activation of zero) that every reader
multiplies by zero, so the model's output does not change.
"""
from __future__ import annotations

import math
import operator
from typing import Any, Optional, Sequence

import torch
from torch import fx, nn
from torch.fx.passes.shape_prop import ShapeProp
from torch.nn import functional as F

# The padded channels may be at most this much more than the real ones: 40 -> 48 and
# 488 -> 496 are padded on 16 lanes, 24 -> 32 not.
MAX_GROWTH = 1.25

_ACTIVATION_MODULES = (nn.ReLU, nn.ReLU6, nn.Hardswish, nn.Hardsigmoid, nn.SiLU, nn.Sigmoid,
                       nn.GELU, nn.Tanh, nn.Hardtanh, nn.LeakyReLU)
_POOL_MODULES = (nn.MaxPool2d, nn.AvgPool2d, nn.AdaptiveAvgPool2d, nn.AdaptiveMaxPool2d)
_UNARY_FUNCS = {F.relu, torch.relu, F.relu6, F.hardswish, F.hardsigmoid, torch.sigmoid,
                F.sigmoid, F.silu, F.gelu, torch.tanh, F.hardtanh, F.leaky_relu,
                F.adaptive_avg_pool2d, F.max_pool2d, F.avg_pool2d, F.adaptive_max_pool2d}
_UNARY_METHODS = {"relu", "relu_", "sigmoid", "sigmoid_", "tanh", "contiguous"}
_BINARY_FUNCS = {operator.add, operator.iadd, torch.add, operator.mul, operator.imul, torch.mul}
_BINARY_METHODS = {"add", "add_", "mul", "mul_"}
_FLATTEN_FUNCS = {torch.flatten, torch.mean}
_FLATTEN_METHODS = {"flatten", "view", "reshape", "mean"}


class _Groups:
    """Union-find over the graph's nodes, each root marked tainted (not to be padded)."""

    def __init__(self) -> None:
        self.parent: dict[fx.Node, fx.Node] = {}
        self.tainted: set[fx.Node] = set()

    def find(self, node: fx.Node) -> fx.Node:
        self.parent.setdefault(node, node)
        while self.parent[node] is not node:
            self.parent[node] = self.parent[self.parent[node]]
            node = self.parent[node]
        return node

    def union(self, a: fx.Node, b: fx.Node) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra is not rb:
            self.parent[ra] = rb
            if ra in self.tainted:
                self.tainted.add(rb)

    def taint(self, node: fx.Node) -> None:
        self.tainted.add(self.find(node))

    def is_tainted(self, node: fx.Node) -> bool:
        return self.find(node) in self.tainted


def _shape(node: Any) -> Optional[tuple[int, ...]]:
    meta = node.meta.get("tensor_meta") if isinstance(node, fx.Node) else None
    shape = getattr(meta, "shape", None)
    return tuple(shape) if shape is not None else None


def _channels(node: Any) -> Optional[int]:
    """The channels of a [N, C, H, W] or [N, C] tensor ``node`` makes, else None."""
    shape = _shape(node)
    return shape[1] if shape is not None and len(shape) in (2, 4) else None


def _tensor_args(node: fx.Node) -> list[fx.Node]:
    args = [*node.args, *node.kwargs.values()]
    flat: list[Any] = []
    for a in args:
        flat.extend(a if isinstance(a, (list, tuple)) else [a])
    return [a for a in flat if isinstance(a, fx.Node)]


def _plain_conv(conv: nn.Module) -> bool:
    return isinstance(conv, nn.Conv2d) and conv.padding_mode == "zeros"


def _is_depthwise(conv: nn.Conv2d) -> bool:
    return conv.groups == conv.in_channels == conv.out_channels


def _link(node: fx.Node, modules: dict[str, nn.Module], groups: _Groups,
          readers: list[tuple[fx.Node, fx.Node]]) -> None:
    """Join ``node`` to the group of the tensors it keeps channels with, record it as a
    reader of a tensor it may read padded, or taint what it touches."""
    inputs = _tensor_args(node)
    if node.op == "call_module":
        module = modules[str(node.target)]
        x = inputs[0] if inputs else None
        if _plain_conv(module) and len(inputs) == 1 and len(_shape(x) or ()) == 4:
            if _is_depthwise(module):
                groups.union(node, x)
            elif module.groups == 1:
                readers.append((node, x))  # its output starts a group of its own
            else:
                groups.taint(node)
                groups.taint(x)
            return
        if isinstance(module, nn.Linear) and len(inputs) == 1 and len(_shape(x) or ()) == 2:
            readers.append((node, x))
            groups.taint(node)  # its features are not padded
            return
        if isinstance(module, (nn.BatchNorm2d, *_ACTIVATION_MODULES, *_POOL_MODULES)) and \
                len(inputs) == 1:
            groups.union(node, inputs[0])
            return
    elif node.op in ("call_function", "call_method"):
        name = node.target if node.op == "call_method" else None
        if (node.target in _UNARY_FUNCS or name in _UNARY_METHODS) and inputs and \
                _shape(inputs[0]) is not None and \
                all(_shape(a) is None for a in inputs[1:]):
            groups.union(node, inputs[0])
            return
        if (node.target in _BINARY_FUNCS or name in _BINARY_METHODS) and \
                _joins_channels(node, inputs):
            for a in inputs:
                groups.union(node, a)
            return
        if (node.target in _FLATTEN_FUNCS or name in _FLATTEN_METHODS) and \
                _keeps_channels(node, inputs):
            groups.union(node, inputs[0])
            return
    groups.taint(node)
    for a in inputs:
        groups.taint(a)


def _joins_channels(node: fx.Node, inputs: Sequence[fx.Node]) -> bool:
    """An add or multiply of tensors with the output's channels (broadcast over pixels:
    a squeeze-and-excitation gate), besides plain numbers."""
    out = _shape(node)
    if out is None or len(out) != 4:
        return False
    return all((s := _shape(a)) is not None and len(s) == 4 and s[1] == out[1] and s[0] == out[0]
               for a in inputs)


def _keeps_channels(node: fx.Node, inputs: Sequence[fx.Node]) -> bool:
    """A flatten, view, reshape or mean of [N, C, H, W] into [N, C] (or [N, C, 1, 1]): the
    channels stay the second dimension, alone."""
    if len(inputs) != 1:
        return False
    src, out = _shape(inputs[0]), _shape(node)
    if src is None or out is None or len(src) != 4:
        return False
    if node.target in ("mean", torch.mean):  # over the pixels only
        dims = node.args[1] if len(node.args) > 1 else node.kwargs.get("dim")
        dims = dims if isinstance(dims, (list, tuple)) else (dims,)
        return all(isinstance(d, int) for d in dims) and \
            sorted(d % 4 for d in dims) == [2, 3] and \
            out in ((src[0], src[1]), (src[0], src[1], 1, 1))
    return src[2] == src[3] == 1 and out == (src[0], src[1])


def pad_channels(gm: fx.GraphModule, inputs: Sequence[Any], lanes: int) -> int:
    """Pad, in place, the channel groups of ``gm`` (shape-propagated at ``inputs``) that
    leave part of a ``lanes``-wide vector, where that is safe and grows them by at most
    `MAX_GROWTH`; shapes are propagated again when something changed. Returns how many
    groups were padded."""
    if lanes <= 1:
        return 0
    modules = dict(gm.named_modules())
    groups = _Groups()
    readers: list[tuple[fx.Node, fx.Node]] = []
    calls: dict[str, int] = {}
    for node in gm.graph.nodes:
        if node.op == "call_module":
            calls[str(node.target)] = calls.get(str(node.target), 0) + 1
    for node in gm.graph.nodes:
        if node.op == "placeholder" or node.op == "get_attr":
            groups.taint(node)
        elif node.op == "output":  # a tensor returned padded is narrowed back
            for a in _tensor_args(node):
                if _channels(a) is None:
                    groups.taint(a)
        else:
            _link(node, modules, groups, readers)
            if node.op == "call_module" and calls[str(node.target)] > 1:
                groups.taint(node)  # a shared module: its weights serve other calls too
                for a in _tensor_args(node):
                    groups.taint(a)
    seen: dict[fx.Node, set[int]] = {}  # untainted group root -> its tensors' channels
    for node in gm.graph.nodes:
        c = _channels(node)
        if node.op != "output" and c is not None and not groups.is_tainted(node):
            seen.setdefault(groups.find(node), set()).add(c)
    padded: dict[fx.Node, int] = {}  # group root -> its padded channels
    for root, channels in seen.items():
        if len(channels) == 1:  # every tensor of the group alike, a [N, C] one included
            c = channels.pop()
            width = math.ceil(c / lanes) * lanes
            if width != c and width <= MAX_GROWTH * c:
                padded[root] = width
    _drop_unblocked_readers(padded, groups, readers, modules, lanes)
    if not padded:
        return 0

    def width_of(node: fx.Node) -> Optional[int]:
        return padded.get(groups.find(node))

    _narrow_outputs(gm, {a: c for a in _tensor_args(_output(gm))
                         if (c := _channels(a)) is not None and width_of(a) is not None})
    for node in gm.graph.nodes:
        if node.op != "call_module":
            continue
        module = modules[str(node.target)]
        out_w = width_of(node)
        in_w = width_of(node.args[0]) if node.args and isinstance(node.args[0], fx.Node) \
            else None
        new = _padded_module(module, in_w, out_w)
        if new is not module:
            _set_module(gm, str(node.target), new)
    gm.recompile()
    with torch.no_grad():
        ShapeProp(gm).propagate(*inputs)
    return len(padded)


def _output(gm: fx.GraphModule) -> fx.Node:
    return next(n for n in gm.graph.nodes if n.op == "output")


def _narrow_outputs(gm: fx.GraphModule, returned: dict[fx.Node, int]) -> None:
    """Return each padded tensor of ``returned`` as its first channels (their count the
    value), copied contiguous: the caller sees the model's shapes (SqueezeNet's classifier
    conv of 1000 channels, padded to 1008, is the model's output)."""
    out = _output(gm)
    for x, c in returned.items():
        with gm.graph.inserting_before(out):
            narrowed = gm.graph.call_function(torch.narrow, (x, 1, 0, c))
            whole = gm.graph.call_method("contiguous", (narrowed,))
        out.replace_input_with(x, whole)


def _drop_unblocked_readers(padded: dict[fx.Node, int], groups: _Groups,
                            readers: Sequence[tuple[fx.Node, fx.Node]],
                            modules: dict[str, nn.Module], lanes: int) -> None:
    """Keep only the groups whose every conv reader makes a tensor a blocked layout holds
    (channels, padded or not, a multiple of half the lanes): a conv from a blocked tensor
    into NCHW runs after a layout change in torch, which cost ShuffleNet-V2 x2.0 (its 244
    channels padded to 256 between 244-channel convs) more than the full vectors gained."""
    changed = True
    while changed:
        changed = False
        for reader, x in readers:
            root = groups.find(x)
            if root not in padded or not isinstance(modules[str(reader.target)], nn.Conv2d):
                continue
            out = padded.get(groups.find(reader)) or _channels(reader) or 1
            if out % max(lanes // 2, 1):
                del padded[root]
                changed = True


def _padded_module(module: nn.Module, in_w: Optional[int], out_w: Optional[int]
                   ) -> nn.Module:
    """``module`` with its input channels widened to ``in_w`` and its output to ``out_w``
    (None: as they are), the new weights zero (BatchNorm: the identity)."""
    if isinstance(module, nn.Conv2d):
        if _is_depthwise(module):
            width = out_w or in_w
            if width is None or width == module.out_channels:
                return module
            return _conv_like(module, width, width, width)
        cin = in_w or module.in_channels
        cout = out_w or module.out_channels
        if (cin, cout) == (module.in_channels, module.out_channels):
            return module
        return _conv_like(module, cin, cout, 1)
    if isinstance(module, nn.Linear) and in_w is not None and in_w != module.in_features:
        new = nn.Linear(in_w, module.out_features, bias=module.bias is not None)
        with torch.no_grad():
            new.weight.zero_()
            new.weight[:, :module.in_features] = module.weight
            if module.bias is not None:
                new.bias.copy_(module.bias)
        return new.to(module.weight.dtype).eval()
    if isinstance(module, nn.BatchNorm2d) and out_w is not None and \
            out_w != module.num_features:
        return _batchnorm_like(module, out_w)
    return module


def _conv_like(conv: nn.Conv2d, cin: int, cout: int, groups: int) -> nn.Conv2d:
    new = nn.Conv2d(cin, cout, conv.kernel_size, stride=conv.stride, padding=conv.padding,
                    dilation=conv.dilation, groups=groups, bias=conv.bias is not None)
    new = new.to(conv.weight.dtype)
    k, c = conv.weight.shape[:2]
    with torch.no_grad():
        new.weight.zero_()
        new.weight[:k, :c] = conv.weight
        if conv.bias is not None:
            new.bias.zero_()
            new.bias[:k] = conv.bias
    return new.eval()


def _batchnorm_like(bn: nn.BatchNorm2d, width: int) -> nn.BatchNorm2d:
    new = nn.BatchNorm2d(width, eps=bn.eps, momentum=bn.momentum, affine=bn.affine,
                         track_running_stats=bn.track_running_stats)
    c = bn.num_features
    with torch.no_grad():  # the new channels: (x - 0) / sqrt(1 + eps) * 1 + 0, and x is 0
        if bn.affine:
            new.weight.fill_(1.0)
            new.bias.zero_()
            new.weight[:c] = bn.weight
            new.bias[:c] = bn.bias
        if bn.track_running_stats:
            assert new.running_mean is not None and new.running_var is not None
            new.running_mean.zero_()
            new.running_var.fill_(1.0)
            new.running_mean[:c] = bn.running_mean
            new.running_var[:c] = bn.running_var
    return new.eval()


def _set_module(gm: fx.GraphModule, path: str, module: nn.Module) -> None:
    parent, _, name = path.rpartition(".")
    setattr(gm.get_submodule(parent) if parent else gm, name, module)


def pad_for_target(gm: fx.GraphModule, inputs: Sequence[Any], target: Any, layout: str) -> int:
    """`pad_channels` where the model runs blocked (``layout`` "auto" on an llvm target),
    to the target's vector lanes; 0 elsewhere."""
    if target.kind != "llvm" or layout != "auto" or \
            not all(isinstance(x, torch.Tensor) for x in inputs):
        return 0
    return pad_channels(gm, inputs, target.vector_lanes)
