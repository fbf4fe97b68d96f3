"""A compiled model run as a plan (llvm targets): its kernels back to back, without torch
dispatch between them.

At compile time the rewritten graph is cut into steps in graph order: each run of
consecutive kernels becomes one native function calling their entries (`CallSequence`),
and every other node (a torch op left in the graph, a layout transform) stays a torch
step, evaluated as `torch.fx.Interpreter` would. Every kernel's output lives in one arena
allocated once, at an offset of a static memory plan: tensors whose lifetimes do not
overlap share memory, and each kernel's workspaces (live during its call) take their place
in it too. A channel concat of one image's kernel outputs (DenseNet's blocks,
Inception's and SqueezeNet's branches) costs nothing: its inputs are written in place, at
their channels' offsets in the concat's buffer, and a concat of a prefix of another's
inputs is a view of it (`concat_aliases`). The kernels' pointers into the arena are bound
once; only pointers to the model's inputs and to torch steps' results are set per call.

A call runs the plan when it fits (the example inputs' shapes, dtypes and device, no
gradient wanted), else the graph's own code. The plan is not reentrant: calls take a lock.
"""
from __future__ import annotations

import operator
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np
import torch
from torch import fx, nn

from autotune.codegen.llvm.runtime import ALIGN, BoundCall
from autotune.codegen.llvm.sequence import CallSequence
from autotune.frontend.groups import KernelGroup
from autotune.frontend.layouts import LayoutTransform
from autotune.ops import aligned_empty
from autotune.target import Target

_FLOAT_BYTES = 4
# ops that view their input (the plan binds their result once where the input is bound once)
# (a split's parts, along channels of one image, are views too: ShuffleNet's chunks)
VIEW_FUNCS = (torch.flatten, torch.reshape, torch.squeeze, torch.unsqueeze, torch.chunk,
              torch.split, operator.getitem)
VIEW_METHODS = ("flatten", "view", "reshape", "squeeze", "unsqueeze", "chunk", "split")
# (a layout transform of 1 x 1 pixels is a view too: both layouts are alike there)
VIEW_MODULES = (nn.Flatten, nn.Dropout, nn.Identity, LayoutTransform)


@dataclass
class _Kernel:
    """A kernel node: its call (weights bound) and, per free argument, the node whose tensor
    it reads, None for the output (an arena pointer, bound once)."""

    node: fx.Node
    call: BoundCall
    reads: list[fx.Node]


@dataclass
class _Run:
    """Consecutive kernels as one native call; ``dynamic``: (call, free argument, node) set
    from the node's tensor before each run (model inputs, torch steps' results)."""

    sequence: CallSequence
    dynamic: list[tuple[BoundCall, int, fx.Node]]
    kernels: list[_Kernel]


Shape = tuple[int, ...]


def _cat_inputs(node: fx.Node) -> list[fx.Node] | None:
    """The inputs of a ``torch.cat`` along dim 1 (channels, or channel blocks), else None."""
    if node.op != "call_function" or node.target is not torch.cat:
        return None
    tensors = node.args[0] if node.args else node.kwargs.get("tensors")
    dim = node.args[1] if len(node.args) > 1 else node.kwargs.get("dim", 0)
    if dim != 1 or not isinstance(tensors, (list, tuple)) or \
            not all(isinstance(t, fx.Node) for t in tensors):
        return None
    return list(tensors)


def concat_aliases(nodes: Sequence[fx.Node], shapes: dict[fx.Node, Shape],
                   reads_only: Callable[[fx.Node], bool] = lambda node: False
                   ) -> tuple[dict[fx.Node, tuple[fx.Node, int]], dict[fx.Node, Shape]]:
    """Where channel concats can be views: node -> (the concat whose buffer holds it, offset in
    floats), and the shapes of ``shapes`` (the kernels' outputs) with the concats'. A
    concat of one image's kernel outputs (or of such concats: Inception's nested ones),
    each used once in it, gets a buffer (largest first) in which its inputs are written
    at their channels' offsets; a concat whose inputs already lie there in order, one
    after another, is a view of it (DenseNet's concat of the first k features is a
    prefix of the block's). Its channels are contiguous for one image only, so a batch
    stays a copy. Only kernels, concats, the output and nodes ``reads_only`` vouches for
    may read the concat and its inputs: another torch op could change one in place,
    which would change the other too."""
    step = ALIGN // _FLOAT_BYTES  # each input must start aligned, as the kernels assume
    sized = dict(shapes)  # and the eligible concats'
    eligible: dict[fx.Node, list[fx.Node]] = {}

    def read_safely(node: fx.Node) -> bool:
        return all(u in shapes or _cat_inputs(u) is not None or u.op == "output"
                   or reads_only(u) for u in node.users)

    def leaves(node: fx.Node) -> list[fx.Node]:
        return [x for i in eligible[node] for x in leaves(i)] if node in eligible else [node]

    for n in nodes:  # in graph order: an inner concat before the one that takes it
        ins = _cat_inputs(n)
        if ins is None or len(set(ins)) != len(ins) or \
                not all(i in sized and sized[i][0] == 1 for i in ins) or \
                not read_safely(n) or not all(read_safely(i) for i in ins):
            continue
        eligible[n] = ins
        if all(int(np.prod(sized[x])) % step == 0 for x in leaves(n)[:-1]):
            sized[n] = (1, sum(sized[i][1] for i in ins), *sized[ins[0]][2:])
        else:
            del eligible[n]
    alias: dict[fx.Node, tuple[fx.Node, int]] = {}
    for cat in sorted(eligible, key=lambda c: -len(leaves(c))):
        ins = eligible[cat]
        sizes = [int(np.prod(sized[i])) for i in ins]
        placed = [alias.get(i) for i in ins]
        if cat not in alias and not any(x in alias for x in (*ins, *leaves(cat))):
            _place(cat, cat, 0, eligible, sized, alias)  # a buffer of its own
            continue
        if placed[0] is None:
            continue
        root, base = placed[0]
        expected = [(root, base + sum(sizes[:j])) for j in range(len(ins))]
        if placed == expected and alias.get(cat, (root, base)) == (root, base):
            alias[cat] = (root, base)  # a prefix (or a run) of another concat: a view
    return alias, sized


def _place(cat: fx.Node, root: fx.Node, base: int, eligible: dict[fx.Node, list[fx.Node]],
           sized: dict[fx.Node, Shape], alias: dict[fx.Node, tuple[fx.Node, int]]
           ) -> None:
    """Put ``cat``'s inputs at their offsets from ``base`` in ``root``'s buffer, an inner
    concat's inputs inside its part."""
    offset = base
    for i in eligible[cat]:
        alias[i] = (root, offset)
        if i in eligible:
            _place(i, root, offset, eligible, sized, alias)
        offset += int(np.prod(sized[i]))


def arena_offsets(sizes: Sequence[int], lives: Sequence[tuple[int, int]]) -> tuple[list[int],
                                                                                     int]:
    """Offsets (in floats, multiples of 16: 64 bytes) for buffers of ``sizes`` floats alive
    over the closed step intervals ``lives``, and the arena's size: largest first, each at the
    lowest offset clear of every placed buffer whose life overlaps its own."""
    step = ALIGN // _FLOAT_BYTES
    padded = [-(-s // step) * step for s in sizes]
    offsets = [0] * len(sizes)
    placed: list[int] = []
    for i in sorted(range(len(sizes)), key=lambda i: -padded[i]):
        busy = sorted((offsets[j], offsets[j] + padded[j]) for j in placed
                      if lives[j][0] <= lives[i][1] and lives[i][0] <= lives[j][1])
        at = 0
        for lo, hi in busy:
            if at + padded[i] <= lo:
                break
            at = max(at, hi)
        offsets[i] = at
        placed.append(i)
    return offsets, max((o + p for o, p in zip(offsets, padded)), default=0)


class ModelPlan:
    """The plan of a rewritten graph module; called like it (see the module's docstring)."""

    def __init__(self, gm: fx.GraphModule, example_inputs: Sequence[torch.Tensor],
                 target: Target) -> None:
        self.gm = gm
        self._lock = threading.Lock()
        self._signature = [(tuple(x.shape), x.dtype, x.device) for x in example_inputs]
        # inputs nothing reads (weights dynamo passes, now folded into kernels) go unchecked
        self._checked = [i for i, n in enumerate(n for n in gm.graph.nodes
                                                 if n.op == "placeholder") if n.users]
        modules = dict(gm.named_modules())
        nodes = list(gm.graph.nodes)
        index = {n: i for i, n in enumerate(nodes)}
        kernel_of = {n: modules[str(n.target)] for n in nodes if n.op == "call_module"
                     and isinstance(modules[str(n.target)], KernelGroup)
                     and getattr(modules[str(n.target)], "_call", None) is not None}
        alias, shapes = concat_aliases(
            nodes, {k: tuple(kernel_of[k].out_shape) for k in kernel_of},
            lambda n: n.op == "call_module" and isinstance(modules[str(n.target)],
                                                           LayoutTransform))
        # the buffer each value lives in: a kernel's output its own (or, written in place,
        # its concat's); a torch step's result may alias any of its inputs' (a view), so it
        # keeps their buffers alive
        roots: dict[fx.Node, set[fx.Node]] = {}
        start: dict[fx.Node, int] = {}
        end: dict[fx.Node, int] = {}
        for n in nodes:
            if n in kernel_of or n in alias:
                buffer = alias[n][0] if n in alias else n
                roots[n] = {buffer}
                start.setdefault(buffer, index[n])
                end[buffer] = max(end.get(buffer, index[n]), index[n])
            else:
                roots[n] = set().union(*(roots[a] for a in n.all_input_nodes))
            for a in n.all_input_nodes:
                for k in roots[a]:
                    end[k] = max(end[k], index[n])
        outs = list(start)
        sizes = [int(np.prod(shapes[k])) for k in outs]
        # each kernel's workspaces (its padded input, ...) live during its own call only: in
        # the arena they share memory with values not live then, instead of every kernel
        # holding its own (ResNet-18's 5.7 MB of padded inputs pushed its weights, which
        # fit the last-level cache beside ONNX Runtime's data, out of it)
        spaces = [(n, i, -(-b // _FLOAT_BYTES)) for n in kernel_of
                  for i, b in enumerate(w.nbytes for w in kernel_of[n].kernel.workspaces)]
        offsets, total = arena_offsets(
            sizes + [size for _, _, size in spaces],
            [(start[k], end[k]) for k in outs] + [(index[n], index[n]) for n, _, _ in spaces])
        self.arena = aligned_empty((max(total, 1),))
        self.arena_bytes = total * _FLOAT_BYTES
        self._workspaces: dict[fx.Node, list[tuple[int, int]]] = {}
        for (n, i, _), off in zip(spaces, offsets[len(outs):]):
            self._workspaces.setdefault(n, []).append((i, off))
        self._values: dict[fx.Node, torch.Tensor] = {}
        at = dict(zip(outs, offsets))
        for n in [*outs, *(n for n in nodes if n in alias)]:
            root, offset = alias.get(n, (n, 0))
            off, size = at[root] + offset, int(np.prod(shapes[n]))
            self._values[n] = torch.from_numpy(self.arena[off:off + size].reshape(shapes[n]))
        self._output_roots = roots[nodes[-1]] if nodes and nodes[-1].op == "output" else set()
        self._steps: list[Any] = []
        pending: list[_Kernel] = []
        for n in nodes:
            if n in kernel_of:
                pending.append(self._kernel(n, kernel_of[n]))
                continue
            if n in self._values:  # a concat written in place by its inputs' kernels
                continue
            if self._static_view(n, modules):
                continue  # bound once, like a kernel's output: no step
            if pending:
                self._steps.append(self._run(pending, target))
                pending = []
            if n.op in ("call_function", "call_method", "call_module", "get_attr"):
                self._steps.append(n)
        if pending:
            self._steps.append(self._run(pending, target))
        self._placeholders = [n for n in nodes if n.op == "placeholder"]
        self._output = nodes[-1] if nodes and nodes[-1].op == "output" else None
        self._modules = modules
        self.kernels = len(kernel_of)
        self.runs = sum(isinstance(s, _Run) for s in self._steps)

    def _static_view(self, node: fx.Node, modules: dict[str, Any]) -> bool:
        """Whether ``node`` only views a value bound once (a kernel's output): a flatten,
        reshape or view of it, its parts (a chunk or split, each contiguous and aligned as
        the kernels need; one of them), or a module that returns it in eval mode (dropout,
        identity, a layout transform of 1 x 1 pixels). The view is then bound once too."""
        if not node.all_input_nodes or any(a not in self._values for a in node.all_input_nodes):
            return False
        if node.op == "call_module":
            mod = modules[str(node.target)]
            if not (isinstance(mod, VIEW_MODULES) and not mod.training):
                return False
        elif not ((node.op == "call_function" and node.target in VIEW_FUNCS) or
                  (node.op == "call_method" and node.target in VIEW_METHODS)):
            return False
        value = self._eval(node, self._values, modules)
        source = self._values[node.all_input_nodes[0]]
        if isinstance(source, tuple):  # one of a split's parts, each checked below
            ok = node.target is operator.getitem and isinstance(value, torch.Tensor)
        elif isinstance(value, tuple):
            ok = len(value) > 0 and all(_inside(part, source) for part in value)
        else:
            ok = isinstance(value, torch.Tensor) and value.is_contiguous() and \
                value.data_ptr() == source.data_ptr()  # not a copy (a layout transform's)
        if ok:
            self._values[node] = value
        return ok

    def _kernel(self, node: fx.Node, module: Any) -> _Kernel:
        fixed = {1 + j: p for j, p in enumerate(module.kernel_params)}
        call = module.kernel.partial(fixed)  # its own pointer array: the module keeps its own
        reads = [a for a in node.args if isinstance(a, fx.Node)]
        for j, a in enumerate(reads):
            if a in self._values:
                call.set_pointer(j, self._values[a].data_ptr())
        call.set_pointer(len(reads), self._values[node].data_ptr())
        base = self.arena.ctypes.data
        for i, off in self._workspaces.get(node, ()):
            call.set_workspace(i, base + off * _FLOAT_BYTES)
        return _Kernel(node, call, reads)

    def _run(self, kernels: list[_Kernel], target: Target) -> _Run:
        sequence = CallSequence([k.call.native for k in kernels], target,
                                keep=[k.call for k in kernels])
        dynamic = [(k.call, j, a) for k in kernels for j, a in enumerate(k.reads)
                   if a not in self._values]
        return _Run(sequence, dynamic, kernels)

    def fits(self, args: Sequence[Any]) -> bool:
        """Whether a call on ``args`` can run the plan."""
        if len(args) != len(self._signature):
            return False
        for i in self._checked:
            x, (shape, dtype, device) = args[i], self._signature[i]
            if not isinstance(x, torch.Tensor) or tuple(x.shape) != shape or \
                    x.dtype != dtype or x.device != device:
                return False
            if x.requires_grad and torch.is_grad_enabled():
                return False
        return True

    def __call__(self, *args: Any) -> Any:
        if not self.fits(args):
            return self.unplanned(*args)
        with self._lock:
            return self._execute(args)

    def unplanned(self, *args: Any) -> Any:
        """The graph's own code on ``args``: every module called (forward hooks run)."""
        return type(self.gm).forward(self.gm, *args)

    def profile(self, *args: Any) -> list[tuple[fx.Node, float]]:
        """A planned call on ``args`` timed step by step: (node, seconds) for each kernel
        (called on its own, in the plan's order, on the data the model run leaves in the
        caches) and each torch step; where a layer's time in the model differs from its
        time alone."""
        if not self.fits(args):
            raise ValueError("ModelPlan.profile: the arguments do not fit the plan")
        times: list[tuple[fx.Node, float]] = []
        with self._lock:
            self._execute(args, times)
        return times

    def _execute(self, args: Sequence[torch.Tensor],
                 times: list[tuple[fx.Node, float]] | None = None) -> Any:
        env: dict[fx.Node, Any] = dict(self._values)
        env.update(zip(self._placeholders, args))
        for step in self._steps:
            if isinstance(step, _Run):
                for call, j, node in step.dynamic:
                    x = env[node]
                    if not x.is_contiguous() or x.data_ptr() % ALIGN:  # a view: copied
                        x = env[node] = x.clone(memory_format=torch.contiguous_format)
                    call.set_pointer(j, x.data_ptr())
                if times is None:
                    step.sequence()
                    continue
                for k in step.kernels:
                    t0 = time.perf_counter()
                    k.call.run()
                    times.append((k.node, time.perf_counter() - t0))
            else:
                t0 = time.perf_counter()
                env[step] = self._eval(step, env, self._modules)
                if times is not None:
                    times.append((step, time.perf_counter() - t0))
        if self._output is None:
            return None
        result = fx.node.map_arg(self._output.args[0], lambda n: env[n])
        if not self._output_roots:
            return result
        # the arena is reused by the next call: what may share it is handed out as a copy
        return _map_tensors(result, lambda t: t.clone())

    def _eval(self, node: fx.Node, env: dict[fx.Node, Any], modules: dict[str, Any]) -> Any:
        args = fx.node.map_arg(node.args, lambda n: env[n])
        kwargs = fx.node.map_arg(node.kwargs, lambda n: env[n])
        if node.op == "call_function":
            return node.target(*args, **kwargs)  # type: ignore[operator]
        if node.op == "call_method":
            return getattr(args[0], str(node.target))(*args[1:], **kwargs)
        if node.op == "call_module":
            return modules[str(node.target)](*args, **kwargs)
        value: Any = self.gm
        for name in str(node.target).split("."):  # get_attr
            value = getattr(value, name)
        return value


def _inside(part: Any, whole: torch.Tensor) -> bool:
    """Whether ``part`` is a contiguous, aligned tensor in ``whole``'s memory."""
    if not isinstance(part, torch.Tensor) or not part.is_contiguous():
        return False
    lo, at = whole.data_ptr(), part.data_ptr()
    return (at - lo) % ALIGN == 0 and lo <= at and \
        at + part.numel() * part.element_size() <= lo + whole.numel() * whole.element_size()


def _map_tensors(value: Any, fn: Callable[[torch.Tensor], torch.Tensor]) -> Any:
    if isinstance(value, torch.Tensor):
        return fn(value)
    if isinstance(value, (tuple, list)):
        return type(value)(_map_tensors(v, fn) for v in value)
    if isinstance(value, dict):
        return {k: _map_tensors(v, fn) for k, v in value.items()}
    return value


def plan_model_run(gm: fx.GraphModule, example_inputs: Sequence[torch.Tensor],
                   target: Target) -> ModelPlan:
    """Give ``gm`` (a compiled model's rewritten graph) a plan and make calls run it: the
    module is still an `fx.GraphModule`, whose own code serves calls the plan does not fit."""
    plan = ModelPlan(gm, example_inputs, target)
    gm.forward = plan  # the instance's forward; the class keeps the graph's code
    return plan
