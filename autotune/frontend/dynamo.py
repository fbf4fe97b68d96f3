"""``torch.compile(model, backend="autotune")``: the backend registered under the
``torch_dynamo_backends`` entry point (pyproject.toml), so the name works once autotune is
installed.

Dynamo hands over an FX graph of functions whose parameters and buffers are graph inputs.
`modularize` turns each conv, batch norm and linear whose weights are such inputs back
into a module holding their values (read once, at compile time: later changes to the
parameters are not seen), so that extraction matches the graph as it matches a traced
model; `compile_graph` then puts the kernels in and gives it its plan. The ops autotune has
no kernel for are handed to inductor (`autotune.frontend.inductor`: partitions of them
compiled for the example inputs, run eagerly on other calls). Options
(``torch.compile(..., options={...})``): ``target``, ``db`` and ``layout``, as
`compile_model` takes them, and ``rest``: "inductor" (the default) or "eager", what runs
the ops autotune has no kernel for.
"""
from __future__ import annotations

from typing import Any, Callable, Optional, Sequence

import torch
import torch.nn.functional as F
from torch import fx, nn
from torch.fx.passes.shape_prop import ShapeProp

from autotune.api import SETTINGS_DB
from autotune.frontend.attention import (
    node_arguments,
    replace_attention,
    self_attention_of,
)
from autotune.frontend.inductor import check_rest_mode
from autotune.frontend.runtime import compile_graph
from autotune.frontend.torch import drop_identities

OPTIONS = ("target", "db", "layout", "rest")
_CONVS = (torch.conv2d, F.conv2d)
# positional parameters after the input, as the functions take them
_CONV_ARGS = ("weight", "bias", "stride", "padding", "dilation", "groups")
_BN_ARGS = ("running_mean", "running_var", "weight", "bias", "training", "momentum", "eps")
_LINEAR_ARGS = ("weight", "bias")
# F.multi_head_attention_forward's parameters in order
_MHA_ARGS = ("query", "key", "value", "embed_dim_to_check", "num_heads", "in_proj_weight",
             "in_proj_bias", "bias_k", "bias_v", "add_zero_attn", "dropout_p",
             "out_proj_weight", "out_proj_bias", "training", "key_padding_mask", "need_weights",
             "attn_mask", "use_separate_proj_weight", "q_proj_weight", "k_proj_weight",
             "v_proj_weight", "static_k", "static_v", "average_attn_weights", "is_causal")


def autotune_backend(gm: fx.GraphModule, example_inputs: Sequence[Any], *,
                     options: Optional[dict[str, Any]] = None, mode: Optional[str] = None
                     ) -> Callable[..., Any]:
    """Compile dynamo's graph ``gm`` for ``example_inputs`` on autotune's kernels."""
    opts = dict(options or {})
    unknown = sorted(set(opts) - set(OPTIONS))
    if unknown:
        raise ValueError(f"torch.compile(backend='autotune'): unknown options {unknown}; "
                         f"expected {', '.join(OPTIONS)}")
    rest = check_rest_mode(opts.get("rest", "inductor"))  # before the graph is rewritten
    modularize(gm, example_inputs)
    drop_identities(gm)  # eval-mode dropout: an add after it then fuses as a residual
    with torch.no_grad():
        ShapeProp(gm).propagate(*example_inputs)
    return compile_graph(gm, list(example_inputs), target=opts.get("target", "llvm"),
                         db=opts.get("db", SETTINGS_DB), layout=opts.get("layout"),
                         rest=rest)


def modularize(gm: fx.GraphModule, example_inputs: Sequence[Any]) -> int:
    """Replace, in place, each ``conv2d``, ``batch_norm`` (inference) and ``linear`` call
    whose weights are the model's parameters or buffers (graph inputs) by a call of an
    eval-mode module holding their values, and split a plain self-attention call into two
    such projections around `attend`. Returns how many modules were added."""
    state = {n: x for n, x in zip((n for n in gm.graph.nodes if n.op == "placeholder"),
                                  example_inputs) if _is_state(n, x)}
    count = 0
    for node in list(gm.graph.nodes):
        if node.op != "call_function":
            continue
        module = None
        if node.target in _CONVS:
            module = _conv(_arguments(node, _CONV_ARGS), state)
        elif node.target is F.batch_norm and _ndim(node.args[0]) == 4:
            module = _batchnorm(_arguments(node, _BN_ARGS), state)
        elif node.target is F.linear:
            module = _linear(_arguments(node, _LINEAR_ARGS), state)
        elif node.target is F.multi_head_attention_forward:
            count += _split_attention(gm, node, state, count)
            continue
        if module is None:
            continue
        name = f"autotune_module_{count}"
        gm.add_submodule(name, module.eval())
        with gm.graph.inserting_before(node):
            call = gm.graph.call_module(name, (node.args[0],))
        call.meta = dict(node.meta)  # its example value: what later matches read
        node.replace_all_uses_with(call)
        gm.graph.erase_node(node)
        count += 1
    gm.recompile()
    return count


def _split_attention(gm: fx.GraphModule, node: fx.Node, state: dict[fx.Node, torch.Tensor],
                     count: int) -> int:
    """Split a plain self-attention call (as `attention.split_attention` does for the
    module, dynamo having traced into it) into its projections, modules holding their
    weights, and `attend` between them; returns the modules added (0: left whole)."""
    given = node_arguments(node, _MHA_ARGS)
    query = self_attention_of(given, node)
    if query is None or given.get("training", True) or \
            any(given.get(n) is not None for n in ("bias_k", "bias_v", "static_k", "static_v")) \
            or given.get("add_zero_attn") or given.get("use_separate_proj_weight") or \
            given.get("in_proj_weight") is None or given.get("out_proj_weight") is None or \
            not _constant(given, state, "in_proj_weight", "in_proj_bias", "out_proj_weight",
                          "out_proj_bias"):
        return 0
    names = [f"autotune_module_{count}", f"autotune_module_{count + 1}"]
    for name, part in zip(names, ("in_proj", "out_proj")):
        module = _linear({"weight": given[f"{part}_weight"], "bias": given.get(f"{part}_bias")},
                         state)
        assert module is not None  # both weights are constants (checked above)
        gm.add_submodule(name, module.eval())
    # dynamo's call takes (L, N, E)
    replace_attention(gm, node, query, names[0], names[1], int(given["num_heads"]), False)
    return 2


def _ndim(arg: Any) -> int:
    """The rank of a graph value, from the example dynamo records (-1 if unknown)."""
    value = arg.meta.get("example_value") if isinstance(arg, fx.Node) else None
    return value.dim() if isinstance(value, torch.Tensor) else -1


def _is_state(node: fx.Node, value: Any) -> bool:
    """A graph input that holds a module's parameter or buffer (dynamo names them so)."""
    return isinstance(value, torch.Tensor) and (
        isinstance(value, nn.Parameter) or "_parameters_" in node.name
        or "_buffers_" in node.name)


def _arguments(node: fx.Node, names: Sequence[str]) -> dict[str, Any]:
    given = dict(zip(names, node.args[1:]))
    given.update({k: v for k, v in node.kwargs.items() if k in names})
    return given


def _value(arg: Any, state: dict[fx.Node, torch.Tensor]) -> Optional[torch.Tensor]:
    """The tensor a parameter or buffer argument holds; None for no argument."""
    return None if arg is None else state[arg]


def _constant(args: dict[str, Any], state: dict[fx.Node, torch.Tensor], *names: str) -> bool:
    """Whether each of ``names`` is absent, None, or a parameter or buffer."""
    return all(args.get(n) is None or (isinstance(args[n], fx.Node) and args[n] in state)
               for n in names)


def _conv(args: dict[str, Any], state: dict[fx.Node, torch.Tensor]) -> Optional[nn.Module]:
    if args.get("weight") is None or not _constant(args, state, "weight", "bias"):
        return None
    weight, bias = _value(args["weight"], state), _value(args.get("bias"), state)
    assert weight is not None
    if weight.dim() != 4:
        return None
    groups = int(args.get("groups", 1))
    conv = nn.Conv2d(weight.shape[1] * groups, weight.shape[0], tuple(weight.shape[2:]),
                     stride=args.get("stride", 1), padding=args.get("padding", 0),
                     dilation=args.get("dilation", 1), groups=groups, bias=bias is not None)
    with torch.no_grad():
        conv.weight.copy_(weight)
        if bias is not None:
            conv.bias.copy_(bias)
    return conv


def _batchnorm(args: dict[str, Any], state: dict[fx.Node, torch.Tensor]
               ) -> Optional[nn.Module]:
    if args.get("training", False) or args.get("running_mean") is None or \
            not _constant(args, state, "running_mean", "running_var", "weight", "bias"):
        return None
    mean, var = _value(args["running_mean"], state), _value(args.get("running_var"), state)
    weight, bias = _value(args.get("weight"), state), _value(args.get("bias"), state)
    assert mean is not None and var is not None
    bn = nn.BatchNorm2d(mean.shape[0], eps=float(args.get("eps", 1e-5)),
                        affine=weight is not None)
    with torch.no_grad():
        bn.running_mean.copy_(mean)
        bn.running_var.copy_(var)
        if weight is not None:
            bn.weight.copy_(weight)
            bn.bias.copy_(bias if bias is not None else torch.zeros_like(weight))
    return bn


def _linear(args: dict[str, Any], state: dict[fx.Node, torch.Tensor]) -> Optional[nn.Module]:
    if args.get("weight") is None or not _constant(args, state, "weight", "bias"):
        return None
    weight, bias = _value(args["weight"], state), _value(args.get("bias"), state)
    assert weight is not None
    linear = nn.Linear(weight.shape[1], weight.shape[0], bias=bias is not None)
    with torch.no_grad():
        linear.weight.copy_(weight)
        if bias is not None:
            linear.bias.copy_(bias)
    return linear
