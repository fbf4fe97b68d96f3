"""The ops autotune has no kernel for, handed to inductor: `hand_to_inductor` groups a
rewritten graph's remaining torch ops into maximal partitions and makes each one call of an
`InductorPartition`, which runs inductor's code for the example's signature, else the ops.

Ours stay out: kernel modules, layout transforms, and views of a kernel's output (the plan
binds those once, for free). A partition is compiled only if it holds two ops that compute
(not views, not getitems): inductor's gain is fusing them, and one op alone is already a
single aten kernel that a C++ compile of seconds would not beat.
"""
from __future__ import annotations

import copy
import operator
import warnings
from typing import Any, Callable, Optional, Sequence

import torch
from torch import fx, nn
from torch._guards import tracing
from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner
from torch.fx.passes.operator_support import OperatorSupportBase
from torch.fx.passes.shape_prop import TensorMetadata
from torch.fx.passes.utils.fuser_utils import fuse_by_partitions

from autotune.frontend.groups import KernelGroup
from autotune.frontend.layouts import LayoutTransform

# the plan's own view ops, so that what it binds for free is judged alike here
from autotune.frontend.plan import VIEW_FUNCS, VIEW_METHODS, VIEW_MODULES

REST_MODES = ("eager", "inductor")
PREFIX = "autotune_inductor_"
_COMPUTE_OPS = ("call_function", "call_method", "call_module")

# (shape, stride, dtype, device) of each input: what inductor's code was compiled for
Signature = list[tuple[tuple[int, ...], tuple[int, ...], torch.dtype, torch.device]]


class InductorWarning(UserWarning):
    """Inductor could not compile a partition: it runs eagerly."""


def check_rest_mode(rest: str) -> str:
    """``rest`` if it is one of `REST_MODES`, else a ValueError naming the field."""
    if rest not in REST_MODES:
        raise ValueError(f"rest: what runs the ops autotune has no kernel for must be one of "
                         f"{', '.join(map(repr, REST_MODES))}, not {rest!r}")
    return rest


class InductorPartition(nn.Module):
    """A partition of a graph's torch ops: inductor's code on calls that fit the example's
    signature without wanting gradients, else the partition's own ops (``graph``)."""

    def __init__(self, graph: fx.GraphModule, compiled: Optional[Callable[..., Any]],
                 signature: Signature, outputs: int) -> None:
        super().__init__()
        self.graph = graph
        self.compiled = compiled
        self.signature = signature
        self.outputs = outputs  # 1: the graph returns its tensor bare, else a tuple

    def forward(self, *xs: Any) -> Any:
        if self.compiled is None or not self.fits(xs):
            return self.graph(*xs)
        out = self.compiled(*xs)  # compiled from a graph returning a tuple, always
        return out[0] if self.outputs == 1 else tuple(out)

    def fits(self, xs: Sequence[Any]) -> bool:
        """Whether inductor's code serves a call on ``xs``: it asserts the sizes and strides
        it was compiled for, and was compiled without autograd."""
        if len(xs) != len(self.signature):
            return False
        if torch.is_grad_enabled() and any(getattr(x, "requires_grad", False) for x in xs):
            return False
        return all(isinstance(x, torch.Tensor) and
                   (tuple(x.shape), x.stride(), x.dtype, x.device) == s
                   for x, s in zip(xs, self.signature))

    def extra_repr(self) -> str:
        ops = sum(n.op in _COMPUTE_OPS for n in self.graph.graph.nodes)
        return f"{ops} ops, {'inductor' if self.compiled is not None else 'eager'}"


class _Rest(OperatorSupportBase):
    """The nodes a partition may take: torch ops on and to tensors that are not ours."""

    def __init__(self, gm: fx.GraphModule) -> None:
        self.modules = dict(gm.named_modules())
        self.bound = _bound_views(gm, self.modules)

    def is_node_supported(self, submodules: Any, node: fx.Node) -> bool:
        if node.op not in _COMPUTE_OPS or _ours(node, self.modules) or node in self.bound:
            return False
        # inductor takes tensors; a node reading or making anything else stays out
        return _tensors(node, self.modules) and \
            all(_tensors(a, self.modules) for a in node.all_input_nodes)


def hand_to_inductor(gm: fx.GraphModule, inputs: Sequence[torch.Tensor]) -> list[str]:
    """Rewrite ``gm`` (kernels in, shape-propagated) in place: each partition of its torch
    ops worth compiling becomes a call of an `InductorPartition` compiled for the values it
    reads when ``gm`` runs on ``inputs``. Returns the partitions' module names."""
    parts = [p.nodes for p in CapabilityBasedPartitioner(
        gm, _Rest(gm), allows_single_node_partition=True).propose_partitions()]
    parts = [p for p in parts if _worth_compiling(p, dict(gm.named_modules()))]
    if not parts:
        return []
    fuse_by_partitions(gm, parts, prefix=PREFIX)
    names = [f"{PREFIX}{k}" for k in range(len(parts))]
    examples = _partition_inputs(gm, inputs, set(names))
    for name in names:
        graph = gm.get_submodule(name)
        compiled = _compile(name, graph, examples[name])
        signature: Signature = [] if compiled is None else [
            (tuple(x.shape), x.stride(), x.dtype, x.device) for x in examples[name]]
        gm.add_submodule(name, InductorPartition(graph, compiled, signature,
                                                 _output_count(graph)))
    gm.recompile()
    return names


def _ours(node: fx.Node, modules: dict[str, nn.Module]) -> bool:
    """A node autotune runs itself: a kernel module or a layout transform."""
    return node.op == "call_module" and \
        isinstance(modules.get(str(node.target)), (KernelGroup, LayoutTransform))


def _is_view(node: fx.Node, modules: dict[str, nn.Module]) -> bool:
    if node.op == "call_module":
        return isinstance(modules.get(str(node.target)), VIEW_MODULES)
    return (node.op == "call_function" and node.target in VIEW_FUNCS) or \
        (node.op == "call_method" and node.target in VIEW_METHODS)


def _bound_views(gm: fx.GraphModule, modules: dict[str, nn.Module]) -> set[fx.Node]:
    """Views of a kernel's output, or of such a view (a layout transform counts as one, as
    in the plan, where it views 1 x 1 pixels): the plan binds them once, for free."""
    bound: set[fx.Node] = set()
    for node in gm.graph.nodes:
        if _is_view(node, modules) and node.all_input_nodes and all(
                a in bound or (a.op == "call_module" and
                               isinstance(modules.get(str(a.target)), KernelGroup))
                for a in node.all_input_nodes):
            bound.add(node)
    return bound


def _tensors(node: fx.Node, modules: dict[str, nn.Module]) -> bool:
    """Whether ``node`` makes a tensor or a tuple of them (ShapeProp's record says; ours
    make tensors, a layout transform without a record too)."""
    if _ours(node, modules):
        return True
    meta = node.meta.get("tensor_meta")
    if isinstance(meta, TensorMetadata):  # a named tuple: before the test for tuples
        return True
    return isinstance(meta, (tuple, list)) and bool(meta) and \
        all(isinstance(m, TensorMetadata) for m in meta)


def _worth_compiling(part: dict[fx.Node, Any], modules: dict[str, nn.Module]) -> bool:
    """Two ops that compute at least (see the module's docstring)."""
    return sum(not _is_view(n, modules) and not _getitem(n) for n in part) >= 2


def _getitem(node: fx.Node) -> bool:
    return node.op == "call_function" and node.target is operator.getitem


class _Capture(fx.Interpreter):
    """Runs a graph, keeping the arguments of the calls of the modules ``names``."""

    def __init__(self, gm: fx.GraphModule, names: set[str]) -> None:
        super().__init__(gm)
        self.names = names
        self.seen: dict[str, list[Any]] = {}

    def call_module(self, target: Any, args: Any, kwargs: Any) -> Any:
        if target in self.names:
            self.seen[str(target)] = list(args)
        return super().call_module(target, args, kwargs)


def _partition_inputs(gm: fx.GraphModule, inputs: Sequence[torch.Tensor],
                      names: set[str]) -> dict[str, list[Any]]:
    """What each partition module of ``names`` reads when ``gm`` runs on ``inputs``: real
    values (one run of the graph, the partitions eager), to compile them for."""
    capture = _Capture(gm, names)
    with torch.no_grad():
        capture.run(*inputs)
    return capture.seen


def _output_count(graph: fx.GraphModule) -> int:
    """How many values the partition returns (one is returned bare, several as a tuple)."""
    out = graph.graph.output_node().args[0]
    return len(out) if isinstance(out, (tuple, list)) else 1


def _compile(name: str, graph: fx.GraphModule, examples: list[Any]
             ) -> Optional[Callable[..., Any]]:
    """Inductor's code for a copy of ``graph`` returning a tuple, or None (the partition
    stays eager) where a value read is not a tensor, or where inductor fails (warned)."""
    if not all(isinstance(x, torch.Tensor) for x in examples):
        return None  # an input the support test could not see (e.g. a constant's get_attr)
    # compile_fx may rewrite the graph it is given: the eager fallback keeps the original
    tupled = fx.GraphModule(graph, copy.deepcopy(graph.graph))
    out = tupled.graph.output_node()
    if _output_count(graph) == 1:
        out.args = ((out.args[0],),)
    tupled.recompile()
    try:
        from torch._inductor import compile as inductor_compile

        # an inference graph (calls wanting gradients run eagerly), compiled on its own: not
        # in the tracing context of a dynamo compile calling us, whose guards would then
        # take the partition's shapes as the traced frame's
        with torch.no_grad(), tracing(None):
            return inductor_compile(tupled, examples)
    except Exception as exc:  # no C++ compiler, an op inductor cannot lower, ...
        first = (str(exc).strip().splitlines() or [""])[0][:200]
        warnings.warn(f"{name} ({len(examples)} inputs) runs eagerly: inductor failed: "
                      f"{type(exc).__name__}: {first}", InductorWarning, stacklevel=2)
        return None
