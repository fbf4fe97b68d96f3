"""Extraction from PyTorch: trace a module with torch.fx, find the operators autotune has
kernels for, fold each following BatchNorm into its conv and fuse bias / ReLU / ReLU6 as
epilogue, and a conv's residual add (ResNet's ``relu(bn(conv(x)) + identity)``,
MobileNet-V2's ``x + bn(conv(x))``) as the `residual` stage. Max-pools (``nn.MaxPool2d``,
``F.max_pool2d``) and average pools (``nn.AvgPool2d``, ``F.avg_pool2d``) are matched for
llvm targets, the only ones the pools have kernels for.
A group's workload has the dtype it computes in (`autotune.frontend.precision`: float16 or
bfloat16 for a half model or an autocast region); a group the target cannot run in its dtype
is unsupported.

`match_model` returns the traced graph and every `Match` (the runtime rewrites the graph
from them); `extract` keeps what tuning needs: the distinct workloads and their counts.
For an llvm target, a conv's or linear layer's workload is its prepacked form
(``Workload.prepacked``): the model packs its constant weight once, so that is what is tuned.
"""
from __future__ import annotations

import copy
import operator
from collections import OrderedDict
from dataclasses import replace
from math import prod
from typing import Any, Optional, Sequence

import torch
import torch.nn.functional as F
from torch import fx, nn
from torch.fx.passes.shape_prop import ShapeProp

from autotune.frontend.attention import split_attention
from autotune.frontend.layouts import (
    channel_concats,
    channel_splits,
    check_layout_mode,
    concat_parts,
    default_layouts,
)
from autotune.frontend.padding import pad_for_target
from autotune.frontend.precision import (
    PrecisionError,
    group_dtype,
    meta_dtype,
    stored,
    symbolic_trace,
)
from autotune.frontend.tasks import Match, ModelTasks, Task, Unsupported
from autotune.ops import PREPACKABLE_OPS, Workload, WorkloadError, op_spec, workload
from autotune.ops.shuffle import MAX_GROUPS as MAX_SHUFFLE_GROUPS
from autotune.target import Target

_RELU_FUNCS = (F.relu, torch.relu, torch.relu_)
_RELU6_FUNCS = (F.relu6,)
# activations other than relu and relu6, by module type, function and tensor method (GELU
# only exact: its tanh approximation is another function)
_ACT_MODULES = {nn.Hardswish: "hardswish", nn.Hardsigmoid: "hardsigmoid", nn.Sigmoid: "sigmoid",
                nn.SiLU: "silu", nn.GELU: "gelu"}
_ACT_FUNCS = {F.hardswish: "hardswish", F.hardsigmoid: "hardsigmoid", torch.sigmoid: "sigmoid",
              F.sigmoid: "sigmoid", F.silu: "silu", F.gelu: "gelu"}
_ACT_METHODS = {"sigmoid": "sigmoid"}
_ADD_FUNCS = (operator.add, operator.iadd, torch.add)
_MATMUL_FUNCS = (torch.matmul, torch.bmm, operator.matmul)
_OTHER_CONVS = (nn.Conv1d, nn.Conv3d, nn.ConvTranspose1d, nn.ConvTranspose2d, nn.ConvTranspose3d)
_FUNCTIONAL = {F.conv2d: "conv2d", F.linear: "linear"}
# (F.max_pool2d with return_indices=True traces as F.max_pool2d_with_indices: unsupported)
_MAX_POOL_FUNCS = (F.max_pool2d, torch.max_pool2d, F.max_pool2d_with_indices)
# F.max_pool2d's arguments in order (torch.max_pool2d has the first six)
_MAX_POOL_ARGS = ("input", "kernel_size", "stride", "padding", "dilation", "ceil_mode",
                  "return_indices")
_AVG_POOL_FUNCS = (F.avg_pool2d,)
_AVG_POOL_ARGS = ("input", "kernel_size", "stride", "padding", "ceil_mode",
                  "count_include_pad", "divisor_override")


def trace(model: nn.Module, example_inputs: Sequence[torch.Tensor]) -> fx.GraphModule:
    """An eval-mode copy of ``model`` traced by torch.fx (its autocast regions kept), every
    node annotated with the shape and dtype of its output for ``example_inputs`` (the
    caller's module is left untouched)."""
    module = copy.deepcopy(model).eval()
    try:
        gm = symbolic_trace(module)
    except Exception as exc:  # data-dependent control flow and the like
        raise ValueError(f"cannot trace {type(model).__name__} with torch.fx: {exc}") from exc
    drop_identities(gm)
    split_attention(gm)  # its projections then match as matmul kernels
    with torch.no_grad():
        ShapeProp(gm).propagate(*example_inputs)
    return gm


_IDENTITY_MODULES = (nn.Identity, nn.Dropout, nn.Dropout2d, nn.AlphaDropout)
# functions that are the identity with training=False -> their positional parameters
_IDENTITY_FUNCTIONS = {"stochastic_depth": ("input", "p", "mode", "training"),
                       "dropout": ("input", "p", "training")}


def drop_identities(gm: fx.GraphModule) -> None:
    """Take out what is the identity in eval mode (dropout; torchvision's stochastic depth,
    EfficientNet's, traced as a call of ``stochastic_depth`` with ``training=False``), so
    that an add after it can fuse into the conv before it as the residual stage."""
    modules = dict(gm.named_modules())
    for node in list(gm.graph.nodes):
        if node.op == "call_module":
            identity = isinstance(modules.get(str(node.target)), _IDENTITY_MODULES)
        elif node.op == "call_function" and \
                getattr(node.target, "__name__", "") in _IDENTITY_FUNCTIONS:
            names = _IDENTITY_FUNCTIONS[node.target.__name__]
            given = {**dict(zip(names, node.args)), **node.kwargs}
            identity = given.get("training", True) is False
        else:
            continue
        if identity and node.args and isinstance(node.args[0], fx.Node):
            node.replace_all_uses_with(node.args[0])
            gm.graph.erase_node(node)
    gm.graph.lint()
    gm.recompile()


def match_model(gm: fx.GraphModule, *, prepack: bool = False, pools: bool = False,
                target: Any = None) -> tuple[list[Match], list[Unsupported]]:
    """The kernel groups of a traced graph, in graph order, and the unsupported operators;
    with ``prepack`` (llvm targets), a group with a constant weight has the prepacked form
    of its workload; with ``pools`` (llvm targets), max- and average pools are matched too; with a
    ``target`` (a `Target`), a group it cannot run (a half dtype on a CPU) is unsupported."""
    modules = dict(gm.named_modules())
    matches: list[Match] = []
    unsupported: list[Unsupported] = []
    claimed: set[str] = set()  # nodes in a group: an add two convs reach fuses into the first
    for node in gm.graph.nodes:
        try:
            found = _pool(node, modules) if pools else None
            if found is None and pools:
                found = _channelwise(node, modules)
            if found is None and pools:
                found = _shuffle(node, modules)
            if found is None and pools and node.name not in claimed:
                found = _affine(node, modules)
            if found is None:
                found = _match(node, modules, claimed)
            if found is not None and target is not None:
                _check_target(found.workload, target)
        except _Unsupported as why:
            unsupported.append(Unsupported(_place(node), why.op, str(why)))
            continue
        if found is not None:
            if prepack and found.params and found.workload.op in PREPACKABLE_OPS:
                found = replace(found, workload=replace(found.workload, prepacked=True))
            matches.append(found)
            claimed.update(found.nodes)
    return matches, unsupported


def extract(model: nn.Module, example_inputs: Sequence[torch.Tensor], *,
            target: Any = "llvm", layout: Optional[str] = None) -> ModelTasks:
    """The tasks of ``model`` at ``example_inputs`` (batch as given): each distinct workload
    with how many times a forward pass runs it, largest FLOP share first, and the
    operators left to torch because autotune has no kernel for them. ``target`` (a spec
    or `Target`; default this CPU, as `tune_model`'s): the workloads `compile_model` runs
    and `tune_model` tunes there (on llvm the max-pools too, and the prepacked forms;
    None: no target, every layer in its usual form and the pools left to torch);
    ``layout`` as `compile_model` takes it: under "auto" on llvm (its default there), the
    layers in the blocked layouts it runs without records
    (`autotune.frontend.layouts.default_layouts`)."""
    tgt = _target(target)
    inputs = as_tuple(example_inputs)
    gm = trace(model, inputs)
    mode = check_layout_mode(layout, tgt) if tgt is not None and layout != "nchw" else "nchw"
    if tgt is not None:
        pad_for_target(gm, inputs, tgt, mode)
    matches, unsupported = match_model(gm, prepack=prepacks(target), pools=runs_pools(target),
                                       target=tgt)
    if tgt is not None and mode == "auto":
        matches = default_layouts(matches, tgt, channel_concats(gm), channel_splits(gm))
    return ModelTasks(type(model).__name__, group(matches), tuple(unsupported))


def prepacks(target: Any) -> bool:
    """Whether a compiled model packs its constant weights beforehand on ``target`` (a spec
    or `Target`; None: no target, the usual workloads): on llvm targets."""
    return _kind(target) == "llvm"


def runs_pools(target: Any) -> bool:
    """Whether a compiled model runs its pools on autotune's kernels on ``target`` (a spec
    or `Target`; None: no target): where max_pool2d and avg_pool2d have kernels (llvm);
    elsewhere they stay in torch."""
    return _kind(target) in op_spec("max_pool2d").targets


def _kind(target: Any) -> str | None:
    tgt = _target(target)
    return None if tgt is None else str(tgt.kind)


def _target(target: Any) -> Any:
    """``target`` (a spec or `Target`) as a `Target`; None for None."""
    if target is None:
        return None
    return Target(target) if isinstance(target, str) else target


def _check_target(wl: Workload, target: Any) -> None:
    try:
        wl.check_target(target)
    except WorkloadError as why:
        raise _Unsupported(wl.op, str(why)) from None


def group(matches: Sequence[Match]) -> tuple[Task, ...]:
    """Matches grouped by workload into tasks, largest weight x FLOPs first."""
    places: "OrderedDict[Workload, list[str]]" = OrderedDict()
    for m in matches:
        places.setdefault(m.workload, []).append(m.place)
    tasks = [Task(wl, len(where), tuple(where)) for wl, where in places.items()]
    return tuple(sorted(tasks, key=lambda t: -t.weight * t.workload.flops()))


def as_tuple(example_inputs: Any) -> tuple[torch.Tensor, ...]:
    """A model's example inputs as a tuple (a tensor alone is one input)."""
    return (example_inputs,) if isinstance(example_inputs, torch.Tensor) else tuple(example_inputs)


class _Unsupported(Exception):
    def __init__(self, op: str, reason: str) -> None:
        super().__init__(reason)
        self.op = op


def _place(node: fx.Node) -> str:
    return str(node.target) if node.op == "call_module" else node.name


def _shape(node: Any) -> Optional[tuple[int, ...]]:
    meta = getattr(node, "meta", {}).get("tensor_meta")
    return tuple(meta.shape) if meta is not None and hasattr(meta, "shape") else None


def _dtype(node: fx.Node, op: str) -> tuple[str, bool]:
    """The group's workload dtype and whether it casts its activations (`group_dtype`)."""
    try:
        return group_dtype(node)
    except PrecisionError as why:
        raise _Unsupported(op, str(why)) from None


def _check_fp32(node: fx.Node, op: str) -> None:
    for arg in node.all_input_nodes:
        meta = arg.meta.get("tensor_meta")
        if meta is not None and getattr(meta, "dtype", torch.float32) != torch.float32:
            raise _Unsupported(op, f"input dtype {meta.dtype}; autotune kernels are float32")


def _match(node: fx.Node, modules: dict[str, nn.Module], claimed: set[str]
           ) -> Optional[Match]:
    if node.op == "call_module":
        mod = modules[str(node.target)]
        if isinstance(mod, nn.Conv2d):
            return _conv(node, mod, modules, claimed)
        if isinstance(mod, nn.Linear):
            return _linear(node, mod, modules, claimed)
        if isinstance(mod, _OTHER_CONVS):
            raise _Unsupported(type(mod).__name__.lower(), f"{type(mod).__name__}: no such "
                               f"operator in autotune.ops")
    elif node.op == "call_function" and node.target in _FUNCTIONAL:
        name = _FUNCTIONAL[node.target]
        raise _Unsupported(name, f"functional {name} (weights as graph inputs); use "
                           f"nn.{'Conv2d' if name == 'conv2d' else 'Linear'}")
    elif (node.op == "call_function" and node.target in _MATMUL_FUNCS) or \
            (node.op == "call_method" and node.target in ("matmul", "bmm")):
        return _matmul(node)
    return None


def _pool_arguments(node: fx.Node, modules: dict[str, nn.Module]
                    ) -> Optional[tuple[str, dict[str, Any]]]:
    """A pooling module's or function's op and its arguments by name; None for another
    node."""
    module = modules[str(node.target)] if node.op == "call_module" else None
    if isinstance(module, nn.MaxPool2d):
        op, given = "max_pool2d", dict(kernel_size=module.kernel_size, stride=module.stride,
                                       padding=module.padding, dilation=module.dilation,
                                       ceil_mode=module.ceil_mode,
                                       return_indices=module.return_indices)
    elif isinstance(module, nn.AvgPool2d):
        op, given = "avg_pool2d", dict(kernel_size=module.kernel_size, stride=module.stride,
                                       padding=module.padding, ceil_mode=module.ceil_mode,
                                       count_include_pad=module.count_include_pad,
                                       divisor_override=module.divisor_override)
    elif node.op == "call_function" and node.target in _MAX_POOL_FUNCS:
        op, given = "max_pool2d", {**dict(zip(_MAX_POOL_ARGS[1:], node.args[1:])),
                                   **node.kwargs}
    elif node.op == "call_function" and node.target in _AVG_POOL_FUNCS:
        op, given = "avg_pool2d", {**dict(zip(_AVG_POOL_ARGS[1:], node.args[1:])),
                                   **node.kwargs}
    else:
        return None
    return op, given


def _pool(node: fx.Node, modules: dict[str, nn.Module]) -> Optional[Match]:
    """A max-pool (``nn.MaxPool2d`` or ``F.max_pool2d``) of float32 NCHW data without
    dilation or indices as a max_pool2d match, or an average pool (``nn.AvgPool2d``,
    ``F.avg_pool2d``) that counts its padding, without ceil_mode or a divisor override, as
    avg_pool2d; None for another node."""
    found = _pool_arguments(node, modules)
    if found is None:
        return None
    op, given = found
    x = _input(node, 0, op)
    shape = _shape(x)
    if shape is None or len(shape) != 4:
        raise _Unsupported(op, f"input shape {shape}; expected NCHW")
    _check_fp32(node, op)
    kernel = _pair(given["kernel_size"])
    stride = _pair(given.get("stride") or kernel)  # None or [] means the window
    pad = _pair(given.get("padding", 0))
    if op == "max_pool2d":
        plain = {"dilation": ((1, 1), _pair(given.get("dilation", 1))),
                 "return_indices": (False, given.get("return_indices", False))}
    else:  # without padding, count_include_pad makes no difference
        plain = {"ceil_mode": (False, bool(given.get("ceil_mode", False))),
                 "count_include_pad": (True, bool(given.get("count_include_pad", True))
                                       or pad == (0, 0)),
                 "divisor_override": (None, given.get("divisor_override"))}
    for name, (want, value) in plain.items():
        if value != want:
            raise _Unsupported(op, f"{name}={value}; {op} has {name}={want}")
    n, c, h, w = shape
    params = dict(N=n, C=c, H=h, W=w, R=kernel[0], S=kernel[1], stride=stride, pad=pad)
    if op == "max_pool2d":
        params["ceil_mode"] = int(bool(given.get("ceil_mode", False)))
    return Match(_workload(op, [], params), (node.name,), (x.name,), (), "pool", _place(node))


_MUL_FUNCS = (operator.mul, operator.imul, torch.mul)
_MEAN_FUNCS = (torch.mean,)


def _channelwise(node: fx.Node, modules: dict[str, nn.Module]) -> Optional[Match]:
    """A global average pool of float32 NCHW data (``nn.AdaptiveAvgPool2d(1)``,
    ``F.adaptive_avg_pool2d(x, 1)``, ``x.mean((2, 3))`` with or without ``keepdim``) as
    global_avg_pool2d, or a tensor times a per-channel gate of shape [N, C, 1, 1] (either
    operand order) as channel_mul; None for another node."""
    if _is_global_pool(node, modules):
        x = _input(node, 0, "global_avg_pool2d")
        shape = _shape(x)
        if shape is None or len(shape) != 4 or meta_dtype(x) != torch.float32:
            return None
        n, c, h, w = shape
        wl = _workload("global_avg_pool2d", [], dict(N=n, C=c, H=h, W=w))
        return Match(wl, (node.name,), (x.name,), (), "avgpool", _place(node))
    is_mul = ((node.op == "call_function" and node.target in _MUL_FUNCS)
              or (node.op == "call_method" and node.target in ("mul", "mul_")))
    if not is_mul or node.kwargs or len(node.args) != 2 or \
            not all(isinstance(a, fx.Node) for a in node.args):
        return None
    a, b = node.args
    shapes = (_shape(a), _shape(b))
    for data, gate, (sd, sg) in ((a, b, shapes), (b, a, shapes[::-1])):
        if sd is not None and sg is not None and len(sd) == 4 and \
                tuple(sg) == (sd[0], sd[1], 1, 1) and tuple(sd[2:]) != (1, 1) and \
                meta_dtype(data) == meta_dtype(gate) == torch.float32:
            n, c, h, w = sd
            wl = _workload("channel_mul", [], dict(N=n, C=c, H=h, W=w))
            return Match(wl, (node.name,), (data.name, gate.name), (), "gate", _place(node))
    return None


_SHUFFLE_FUNCS = (F.channel_shuffle, torch.channel_shuffle)
_RESHAPES = ("view", "reshape")


def _shuffle(node: fx.Node, modules: dict[str, nn.Module]) -> Optional[Match]:
    """A channel concat of ``g`` equal float32 NCHW parts whose only reader shuffles its
    channels in ``g`` groups, as channel_shuffle (the cat too: the kernel reads the parts):
    ``nn.ChannelShuffle``, ``F.channel_shuffle``, or ShuffleNet's view(N, g, C/g, H, W),
    transpose(1, 2), contiguous, view(N, C, H, W) (the size arithmetic between them
    included); None for another node."""
    parts = concat_parts(node)
    if parts is None or not 2 <= len(parts) <= MAX_SHUFFLE_GROUPS or \
            not all(_shape(p) == _shape(parts[0]) and meta_dtype(p) == torch.float32
                    for p in parts):
        return None
    last = _shuffle_end(node, len(parts), modules)
    group = _closed_group(node, last) if last is not None else None
    if group is None:
        return None
    n, c, h, w = _shape(node)  # type: ignore[misc]
    wl = _workload("channel_shuffle", [], dict(N=n, C=c, H=h, W=w, groups=len(parts)))
    return Match(wl, group, tuple(p.name for p in parts), (), "shuffle", _place(last))


def _shuffle_end(cat: fx.Node, g: int, modules: dict[str, nn.Module]) -> Optional[fx.Node]:
    """The node that ends a shuffle in ``g`` groups of the channels of ``cat``, else None."""
    n, c, h, w = _shape(cat)  # type: ignore[misc]
    readers = [u for u in cat.users if _shape(u) is not None]  # not x.size()
    if len(readers) != 1:
        return None
    (step,) = readers
    if step.op == "call_module" and isinstance(modules[str(step.target)], nn.ChannelShuffle):
        return step if modules[str(step.target)].groups == g else None
    if step.op == "call_function" and step.target in _SHUFFLE_FUNCS:
        groups = step.args[1] if len(step.args) > 1 else step.kwargs.get("groups")
        return step if groups == g else None
    path = [step]  # view, transpose, contiguous (or not), view: each the last one's reader
    while len(path) < 4:
        nxt = [u for u in path[-1].users if _shape(u) is not None]
        if len(nxt) != 1 or len(path[-1].users) != 1:
            break
        path.append(nxt[0])
    if len(path) == 4 and _is_method(path[2], "contiguous"):
        del path[2]
    if len(path) < 3:
        return None
    split, swap, merge = path[:3]
    swapped = swap.args[1:]
    if not (_is_method(split, *_RESHAPES) and _shape(split) == (n, g, c // g, h, w)) or \
            not ((_is_method(swap, "transpose") or (swap.op == "call_function" and
                                                   swap.target is torch.transpose))
                 and all(isinstance(d, int) for d in swapped)
                 and sorted(d % 5 for d in swapped) == [1, 2]) or \
            not (_is_method(merge, *_RESHAPES, "flatten") and _shape(merge) == (n, c, h, w)):
        return None
    return merge


def _is_method(node: fx.Node, *names: str) -> bool:
    return node.op == "call_method" and node.target in names


def _closed_group(first: fx.Node, last: fx.Node) -> Optional[tuple[str, ...]]:
    """``first``, ``last`` and the nodes between them that ``last`` depends on, in graph
    order, when they read nothing else and nothing else reads them (but ``last``); None
    otherwise."""
    order = {n: i for i, n in enumerate(first.graph.nodes)}
    members = {first, last}
    stack = [last]
    while stack:
        for a in stack.pop().all_input_nodes:
            if a not in members and order[a] > order[first]:
                members.add(a)
                stack.append(a)
    if any(a not in members for m in members - {first} for a in m.all_input_nodes) or \
            any(u not in members for m in members - {last} for u in m.users):
        return None
    return tuple(m.name for m in sorted(members, key=order.__getitem__))


def _affine(node: fx.Node, modules: dict[str, nn.Module]) -> Optional[Match]:
    """An inference batch norm of float32 NCHW data that no conv folds (its input is not a
    conv's: DenseNet's norm before each conv), and the activation after it, as
    channel_affine (factor = gamma / sqrt(var + eps), offset = beta - mean * factor)."""
    bn = _batchnorm(node, modules)
    if bn is None:
        return None
    x = _input(node, 0, "channel_affine")
    shape = _shape(x)
    if shape is None or len(shape) != 4 or meta_dtype(x) != torch.float32:
        return None
    scale, shift = _bn_affine(bn)
    act_node = _user(node)
    act = _activation(act_node, modules)
    nodes = (node.name,) + ((act_node.name,) if act and act_node is not None else ())
    n, c, h, w = shape
    wl = _workload("channel_affine", [act] if act else [], dict(N=n, C=c, H=h, W=w))
    return Match(wl, nodes, (x.name,), (stored(scale, "float32"), stored(shift, "float32")),
                 "affine", _place(node))


def _is_global_pool(node: fx.Node, modules: dict[str, nn.Module]) -> bool:
    """Whether ``node`` averages its input over the last two dimensions, to 1 x 1 or away."""
    if node.op == "call_module":
        mod = modules[str(node.target)]
        return isinstance(mod, nn.AdaptiveAvgPool2d) and mod.output_size in (1, (1, 1))
    if node.op == "call_function" and node.target is F.adaptive_avg_pool2d:
        size = node.args[1] if len(node.args) > 1 else node.kwargs.get("output_size")
        return size in (1, (1, 1), [1, 1])
    if (node.op == "call_function" and node.target in _MEAN_FUNCS) or \
            (node.op == "call_method" and node.target == "mean"):
        dims = node.args[1] if len(node.args) > 1 else node.kwargs.get("dim")
        rest = {k: v for k, v in node.kwargs.items() if k != "dim"}
        if rest not in ({}, {"keepdim": True}, {"keepdim": False}) or len(node.args) > 2:
            return False
        return isinstance(dims, (tuple, list)) and sorted(d % 4 for d in dims) == [2, 3]
    return False


def _pair(value: Any) -> tuple[int, int]:
    """An int or a sequence of one or two ints (torch's pool arguments) as (h, w)."""
    items = tuple(value) if isinstance(value, (tuple, list)) else (value, value)
    if len(items) == 1:
        items = (items[0], items[0])
    if len(items) != 2 or not all(isinstance(v, int) for v in items):
        raise _Unsupported("max_pool2d", f"window argument {value!r}; expected ints")
    return (int(items[0]), int(items[1]))


def _input(node: fx.Node, i: int, what: str) -> fx.Node:
    """The ``i``-th argument of ``node`` as a graph node (a constant there is unsupported)."""
    arg = node.args[i] if len(node.args) > i else None
    if not isinstance(arg, fx.Node):
        raise _Unsupported(what, f"argument {i} is {type(arg).__name__}, not a traced tensor")
    return arg


def _user(node: fx.Node) -> Optional[fx.Node]:
    users = list(node.users)
    return users[0] if len(users) == 1 else None


def _activation(node: Optional[fx.Node], modules: dict[str, nn.Module]) -> Optional[str]:
    """The epilogue activation ``node`` computes (relu, relu6, hardswish, hardsigmoid,
    sigmoid, silu, gelu), if it is one."""
    if node is None:
        return None
    if node.op == "call_module":
        mod = modules[str(node.target)]
        if type(mod) is nn.ReLU:
            return "relu"
        if isinstance(mod, nn.Hardtanh) and (mod.min_val, mod.max_val) == (0.0, 6.0):
            return "relu6"  # nn.ReLU6 is a Hardtanh(0, 6)
        if isinstance(mod, nn.GELU) and mod.approximate != "none":
            return None
        return _ACT_MODULES.get(type(mod))
    if node.op == "call_function":
        if node.target in _RELU_FUNCS:
            return "relu"
        if node.target is F.gelu and node.kwargs.get("approximate", "none") != "none":
            return None
        if node.target in _ACT_FUNCS and _only_inplace(node):
            return _ACT_FUNCS[node.target]
        if node.target is F.hardtanh:
            lo = node.args[1] if len(node.args) > 1 else node.kwargs.get("min_val", -1.0)
            hi = node.args[2] if len(node.args) > 2 else node.kwargs.get("max_val", 1.0)
            return "relu6" if (lo, hi) == (0.0, 6.0) else None
        return "relu6" if node.target in _RELU6_FUNCS else None
    if node.op == "call_method" and node.target in ("relu", "relu_"):
        return "relu"
    if node.op == "call_method" and len(node.args) == 1:
        return _ACT_METHODS.get(str(node.target))
    return None


def _only_inplace(node: fx.Node) -> bool:
    """Whether an activation call passes nothing but its input and, maybe, ``inplace``
    (dynamo's graphs give torchvision's ``hardswish(x, True)``; GELU's second parameter is
    ``approximate``, tested apart)."""
    if node.target is F.gelu:
        return len(node.args) == 1
    rest = node.args[1:]
    return len(rest) <= 1 and set(node.kwargs) <= {"inplace"} and \
        all(isinstance(v, bool) for v in (*rest, *node.kwargs.values()))


def _residual(node: Optional[fx.Node], value: fx.Node, claimed: set[str]
              ) -> Optional[fx.Node]:
    """The other operand when ``node`` adds a tensor of ``value``'s shape and dtype to
    ``value`` (no broadcasting, no ``alpha``) and no earlier group took it, else None."""
    if node is None or node.name in claimed or node.kwargs or len(node.args) != 2:
        return None
    is_add = ((node.op == "call_function" and node.target in _ADD_FUNCS)
              or (node.op == "call_method" and node.target == "add"))
    if not is_add:
        return None
    a, b = node.args
    other = b if a is value else a
    if not isinstance(other, fx.Node) or other is value or _shape(other) != _shape(value):
        return None
    same = meta_dtype(other) == meta_dtype(value) == meta_dtype(node)
    return other if same and meta_dtype(other) is not None else None


def _batchnorm(node: Optional[fx.Node], modules: dict[str, nn.Module]) -> Optional[nn.BatchNorm2d]:
    if node is None or node.op != "call_module":
        return None
    mod = modules[str(node.target)]
    # Folding needs the running statistics: a BN without them normalises by the batch.
    if isinstance(mod, nn.BatchNorm2d) and mod.running_mean is not None and not mod.training:
        return mod
    return None


def _conv(node: fx.Node, conv: nn.Conv2d, modules: dict[str, nn.Module], claimed: set[str]
          ) -> Match:
    shape = _shape(node.args[0])
    if shape is None or len(shape) != 4:
        raise _Unsupported("conv2d", f"input shape {shape}; expected NCHW")
    dtype, cast = _dtype(node, "conv2d")
    if conv.padding_mode != "zeros":
        raise _Unsupported("conv2d", f"padding_mode={conv.padding_mode!r}; only zero padding")
    n, c, h, w = shape
    k = conv.out_channels
    r, s = conv.kernel_size
    pad = _padding(conv)
    params: dict[str, Any] = dict(N=n, C=c, H=h, W=w, R=r, S=s, stride=tuple(conv.stride),
                                  pad=pad)
    if conv.groups == 1:
        op = "conv2d"
        params.update(K=k, dilation=tuple(conv.dilation))
    elif conv.groups == c and k % c == 0:
        op = "depthwise_conv2d"
        if tuple(conv.dilation) != (1, 1):
            raise _Unsupported(op, f"depthwise conv with dilation {tuple(conv.dilation)}; "
                               f"depthwise_conv2d has none")
        params.update(multiplier=k // c)
    else:  # c and k are multiples of groups: torch's Conv2d checks
        op = "group_conv2d"
        params.update(K=k, dilation=tuple(conv.dilation), groups=conv.groups)
    nodes = [node]
    after = _user(node)
    bn = _batchnorm(after, modules)
    if bn is not None and meta_dtype(after) != meta_dtype(node):
        bn = None  # a BatchNorm giving another dtype: folded, the group could not say it
    if bn is not None and after is not None:
        nodes.append(after)
    after = _user(nodes[-1])
    identity = _residual(after, nodes[-1], claimed)
    if after is not None and identity is not None:
        nodes.append(after)
        after = _user(after)
    act = _activation(after, modules)
    if after is not None and act is not None:
        nodes.append(after)
    weight, bias = _folded(conv, bn)
    epilogue = ((["bias"] if bias is not None else []) + (["residual"] if identity else [])
                + ([act] if act else []))
    wl = _workload(op, epilogue, params, dtype)
    consts = (stored(weight, dtype),) + ((stored(bias, dtype),) if bias is not None else ())
    inputs = (_input(node, 0, "conv2d").name,) + ((identity.name,) if identity else ())
    return Match(wl, tuple(x.name for x in nodes), inputs, consts, "conv", _place(node), cast)


def _padding(conv: nn.Conv2d) -> tuple[int, int]:
    if not isinstance(conv.padding, str):
        return (int(conv.padding[0]), int(conv.padding[1]))
    if conv.padding == "valid":
        return (0, 0)
    pads = []
    for d, k in zip(conv.dilation, conv.kernel_size):
        total = d * (k - 1)
        if total % 2:
            raise _Unsupported("conv2d", "padding='same' that pads one side more than the "
                               "other")
        pads.append(total // 2)
    return (pads[0], pads[1])


def _folded(conv: nn.Conv2d, bn: Optional[nn.BatchNorm2d]
            ) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
    """The conv's weight and bias with ``bn`` folded in (as inference compilers do), in
    float64, to be rounded once into the group's dtype:
    w' = w * g / sqrt(var + eps), b' = (b - mean) * g / sqrt(var + eps) + beta."""
    w = conv.weight.detach().double()
    b = conv.bias.detach().double() if conv.bias is not None else None
    if bn is not None:
        scale, shift = _bn_affine(bn)
        w = w * scale[:, None, None, None]
        b = (b * scale if b is not None else 0.0) + shift
    return w, b


def _bn_affine(bn: nn.BatchNorm2d) -> tuple[torch.Tensor, torch.Tensor]:
    """An inference batch norm as ``x * scale + shift`` (float64): scale = g / sqrt(var +
    eps), shift = beta - mean * scale."""
    assert bn.running_var is not None and bn.running_mean is not None  # _batchnorm checks
    var, mean = bn.running_var.double(), bn.running_mean.double()
    gamma = bn.weight.detach().double() if bn.weight is not None else torch.ones_like(var)
    beta = bn.bias.detach().double() if bn.bias is not None else torch.zeros_like(var)
    scale = gamma / torch.sqrt(var + bn.eps)
    return scale, beta - mean * scale


def _linear(node: fx.Node, lin: nn.Linear, modules: dict[str, nn.Module], claimed: set[str]
            ) -> Match:
    shape = _shape(node.args[0])
    if shape is None or len(shape) < 1:
        raise _Unsupported("linear", f"input shape {shape}")
    dtype, cast = _dtype(node, "linear")
    nodes = [node]
    after = _user(node)
    # an add of a tensor of the output's shape (a transformer's x + proj(...)), as a conv's
    identity = _residual(after, node, claimed)
    if after is not None and identity is not None:
        nodes.append(after)
        after = _user(after)
    act = _activation(after, modules)
    if after is not None and act is not None:
        nodes.append(after)
    bias = lin.bias is not None
    epilogue = ((["bias"] if bias else []) + (["residual"] if identity else [])
                + ([act] if act else []))
    wl = _workload("matmul", epilogue, dict(M=prod(shape[:-1]), N=lin.out_features,
                                             K=lin.in_features), dtype)
    consts = (stored(lin.weight.t(), dtype),) + ((stored(lin.bias, dtype),) if bias else ())
    inputs = (_input(node, 0, "linear").name,) + ((identity.name,) if identity else ())
    return Match(wl, tuple(x.name for x in nodes), inputs, consts, "linear", _place(node),
                 cast)


def _matmul(node: fx.Node) -> Match:
    a, b = _input(node, 0, "matmul"), _input(node, 1, "matmul")
    sa, sb = _shape(a), _shape(b)
    if sa is None or sb is None:
        raise _Unsupported("matmul", "an operand is not a traced tensor")
    dtype, cast = _dtype(node, "matmul")
    if len(sa) == 2 and len(sb) == 2:
        wl = _workload("matmul", [], dict(M=sa[0], N=sb[1], K=sa[1]), dtype)
    elif len(sa) >= 3 and sa[:-2] == sb[:-2]:
        wl = _workload("batch_matmul", [], dict(B=prod(sa[:-2]), M=sa[-2], N=sb[-1], K=sa[-1]),
                       dtype)
    else:
        raise _Unsupported("matmul", f"operand shapes {sa} @ {sb}: only 2-D @ 2-D and "
                           f"batches of equal leading dimensions (no broadcasting)")
    return Match(wl, (node.name,), (a.name, b.name), (), "matmul",
                 _place(node), cast)


def _workload(op: str, epilogue: list[str], params: dict[str, Any], dtype: str = "float32"
              ) -> Workload:
    try:
        return workload(op, epilogue=epilogue, dtype=dtype, **params)
    except ValueError as exc:  # a size beyond the operator's bounds
        raise _Unsupported(op, str(exc)) from None
