"""`compile_model`: the traced model with every matched group replaced by a module that runs
autotune's kernel on the tensors' own memory (numpy views, no copies), the rest on torch.

A kernel is specialised to the shapes it was extracted at; calls with other shapes, other
dtypes or that need gradients run the same (folded) computation on torch instead. A conv's
or linear layer's weight that the schedule packs into panels is packed once, here, not on
every call: such a layer's workload is the prepacked form (`autotune.schedule.prepack`),
tuned and looked up as such. On a CUDA target the kernels run on
torch's CUDA tensors (`autotune.frontend.cuda_runtime`), and by default its calls replay
CUDA graphs (`autotune.frontend.cuda_graphs`). With ``layout="auto"`` (the default), convs
run in a channel-blocked layout where they can on llvm, transformed only at the edges of
blocked chains (`autotune.frontend.layouts`), and channels-last on Hopper's wgmma kernels
(`autotune.frontend.channels_last`). `plan_model` lists the kernels a compiled model runs,
without compiling them.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Sequence

import torch
from torch import fx, nn

from autotune.api import (
    SETTINGS_DB,
    DbArg,
    TargetArg,
    as_target,
    best,
    chosen_config,
    open_database,
)
from autotune.codegen.llvm.runtime import ALIGN, CpuKernel
from autotune.frontend.builds import build_kernels
from autotune.frontend.channels_last import channels_last
from autotune.frontend.cuda_graphs import CudaGraphModel
from autotune.frontend.cuda_runtime import cuda_module_maker
from autotune.frontend.groups import KernelGroup, ModuleMaker
from autotune.frontend.inductor import check_rest_mode, hand_to_inductor
from autotune.frontend.layouts import (
    POOLED_OPS,
    LayoutTransform,
    blocked_concats,
    blocked_splits,
    check_layout_mode,
    choose_layouts,
    insert_transforms,
)
from autotune.frontend.padding import pad_for_target
from autotune.frontend.plan import plan_model_run
from autotune.frontend.torch import (
    Match,
    as_tuple,
    match_model,
    prepacks,
    runs_pools,
    trace,
)
from autotune.ops import Workload, aligned_empty
from autotune.ops.layout import blocked_shape
from autotune.space import Config
from autotune.target import Target

if TYPE_CHECKING:
    from autotune.codegen.kernel import Kernel

class KernelModule(KernelGroup):
    """A group run by an autotune kernel on this CPU, on the tensors' own memory."""

    def __init__(self, match: Match, kernel: "Kernel", pack: "Kernel | None",
                 in_shapes: Sequence[tuple[int, ...]], out_shape: tuple[int, ...],
                 conv_args: dict[str, Any]) -> None:
        # a blocked layer reads its data in NCHW[in_block]c, a residual and its output in
        # NCHW[block]c
        self.in_blocks = [match.workload.in_block] + [match.workload.block] * (len(in_shapes) - 1)
        # a pooled 1 x 1 output is alike in both layouts: the node's own shape
        self.out_block = 1 if match.workload.op in POOLED_OPS else match.workload.block
        super().__init__(match, [blocked_shape(tuple(s), b) for s, b in zip(in_shapes,
                                                                              self.in_blocks)],
                         blocked_shape(tuple(out_shape), self.out_block), conv_args)
        self.kernel = kernel
        self.params = match.params  # numpy, 64-byte aligned: torch's fallback reads these
        self.kernel_params = match.params  # what the kernel takes: the weight packed, if it is
        if pack is not None:
            packed = aligned_empty(pack.arg_buffers[-1].shape)
            pack(match.params[0], packed)
            self.kernel_params = (packed, *match.params[1:])
        # the weights bound once: a call passes only the activations' and output's pointers.
        # The kernel takes the main input, the constants, then the other inputs (B, a residual)
        self._call = kernel.partial({1 + j: p for j, p in enumerate(self.kernel_params)}) \
            if isinstance(kernel, CpuKernel) else None

    def forward(self, *xs: torch.Tensor) -> torch.Tensor:
        if not self._fits(xs):
            if self.workload.block == 1:
                return self.forward_torch(*xs)
            plain = [LayoutTransform(b, 1)(x) for x, b in zip(xs, self.in_blocks)]
            return LayoutTransform(1, self.out_block)(self.forward_torch(*plain))
        out = torch.empty(self.out_shape, dtype=torch.float32)
        if self._call is not None:
            ptrs = [x.data_ptr() for x in xs]
            ptrs.append(out.data_ptr())
            if all(p % ALIGN == 0 for p in ptrs) and all(x.is_contiguous() for x in xs):
                self._call(*ptrs)
                return out
        arrays = [x.contiguous().numpy() for x in xs]  # views: contiguous() is x itself here
        if self.kind == "linear":  # the input and a residual, flattened to rows
            specs = self.workload.arg_specs
            rest = specs[1 + len(self.kernel_params):]
            arrays = [arrays[0].reshape(specs[0].shape),
                      *(a.reshape(spec.shape) for a, spec in zip(arrays[1:], rest))]
        elif self.kind == "matmul":
            arrays = [a.reshape(spec.shape) for a, spec in zip(arrays, self.workload.arg_specs)]
        self.kernel(arrays[0], *self.kernel_params, *arrays[1:],
                    out.numpy().reshape(self.workload.output_shape))
        return out

    def _fits(self, xs: Sequence[torch.Tensor]) -> bool:
        if torch.is_grad_enabled() and any(x.requires_grad for x in xs):
            return False
        return all(x.dtype == torch.float32 and x.device.type == "cpu" and
                   tuple(x.shape) == s for x, s in zip(xs, self.in_shapes))

    def torch_params(self) -> list[torch.Tensor]:
        return [torch.from_numpy(a) for a in self.params]


@dataclass(frozen=True)
class PlannedKernel:
    """One kernel a compiled model runs: its workload, the config it is built with, and the
    places (module paths) where the model runs it."""

    workload: Workload
    config: Config
    places: tuple[str, ...]


def plan_model(model: nn.Module, example_inputs: Any, *, target: TargetArg = "llvm",
               db: DbArg = SETTINGS_DB, layout: str | None = None
               ) -> tuple[PlannedKernel, ...]:
    """The kernels `compile_model` would build for ``model`` on ``target`` with ``layout``,
    one per workload in graph order, with the configs it would pick; nothing is compiled."""
    tgt = _supported(as_target(target))
    inputs = as_tuple(example_inputs)
    gm = trace(model, inputs)
    pad_for_target(gm, inputs, tgt, check_layout_mode(layout, tgt))
    _, matches = _matches(gm, tgt, db, layout)
    configs = _configs(matches, tgt, db)
    places: dict[Workload, list[str]] = {}
    for m in matches:
        places.setdefault(m.workload, []).append(m.place)
    return tuple(PlannedKernel(wl, configs[wl], tuple(where)) for wl, where in places.items())


def compile_model(model: nn.Module, example_inputs: Any, *, target: TargetArg = "llvm",
                  db: DbArg = SETTINGS_DB, layout: str | None = None,
                  cuda_graphs: bool | None = None) -> nn.Module:
    """``model`` (an eval-mode copy) with its supported operators on autotune's kernels: the
    best records in ``db``, else the default schedules (with a `NoTunedScheduleWarning`, once
    per workload). The result is called like the model; the rest of it runs on torch.
    On a CUDA target the folded weights are put on the example inputs' device (move the
    result with ``.to()`` to run elsewhere), and with ``cuda_graphs`` (None: where the
    example inputs are CUDA tensors) the result is a `CudaGraphModel`, whose calls without
    autograd replay a CUDA graph of the whole model (see `autotune.frontend.cuda_graphs`
    for when a call runs eagerly). ``layout`` (None: "auto" on llvm and cuda):
    "nchw" runs every layer in NCHW;
    "auto" runs convs, depthwise convs, max-pools and the channelwise ops in NCHW[x]c on
    llvm where `layouts.choose_layouts` says so, with `LayoutTransform` modules where a
    torch op or a layer in another layout reads a blocked tensor, and convs on cuda in NHWC
    where the Hopper wgmma kernels take them (`autotune.frontend.channels_last`: their
    activations are channels_last tensors)."""
    tgt = _supported(as_target(target))
    if cuda_graphs and tgt.kind != "cuda":
        raise ValueError(f"compile_model: cuda_graphs is for cuda targets, not {tgt.kind}")
    inputs = as_tuple(example_inputs)
    return compile_graph(trace(model, inputs), inputs, target=target, db=db, layout=layout,
                         cuda_graphs=cuda_graphs)


def compile_graph(gm: fx.GraphModule, inputs: Sequence[Any], *, target: TargetArg = "llvm",
                  db: DbArg = SETTINGS_DB, layout: str | None = None,
                  cuda_graphs: bool | None = None, rest: str = "eager") -> nn.Module:
    """`compile_model` of a graph already traced and shape-propagated at ``inputs`` (its
    modules in eval mode), rewritten in place (on cuda, wrapped in a `CudaGraphModel`
    with ``cuda_graphs``). ``rest`` runs the torch ops left between the kernels: "eager",
    or "inductor" (llvm, tensor inputs: partitions of them compiled by inductor,
    `autotune.frontend.inductor`; on cuda they stay eager)."""
    tgt = _supported(as_target(target))
    layout = check_layout_mode(layout, tgt)
    rest = check_rest_mode(rest)
    pad_for_target(gm, inputs, tgt, layout)
    _, matches = _matches(gm, tgt, db, layout)
    configs = _configs(matches, tgt, db)
    if tgt.kind == "cuda":
        device = next((x.device for x in inputs if isinstance(x, torch.Tensor)),
                      torch.device("cpu"))
        _rewrite(gm, matches, cuda_module_maker(matches, configs, tgt, device))
        if cuda_graphs is None:
            cuda_graphs = device.type == "cuda"
        return CudaGraphModel(gm) if cuda_graphs else gm
    # a prepacked workload's kernel comes with its pack
    kernels = build_kernels({m.workload: configs[m.workload] for m in matches}, tgt)
    _rewrite(gm, matches, lambda m, ins, out, conv: KernelModule(
        m, kernels[m.workload], kernels[m.workload].pack, ins, out, conv))
    if layout == "auto":
        modules = dict(gm.named_modules())

        def kernel_block(node: fx.Node) -> int:
            module = modules.get(str(node.target)) if node.op == "call_module" else None
            return module.out_block if isinstance(module, KernelModule) else 1

        concats = blocked_concats(gm, kernel_block)  # they read and write their parts' block

        def out_block(node: fx.Node) -> int:
            return concats.get(node.name) or kernel_block(node)

        concats.update(blocked_splits(gm, out_block))  # splits and parts: their tensor's

        def in_block(node: fx.Node, pos: int) -> int:
            if node.op in ("call_function", "call_method"):
                return concats.get(node.name, 1)
            module = modules.get(str(node.target))
            return module.in_blocks[pos] if isinstance(module, KernelModule) else 1

        insert_transforms(gm, out_block, in_block)
    if all(isinstance(x, torch.Tensor) for x in inputs):
        if rest == "inductor":  # before the plan: its torch steps are then the partitions
            hand_to_inductor(gm, inputs)
        plan_model_run(gm, inputs, tgt)
    return gm


def _matches(gm: fx.GraphModule, tgt: Target, db: DbArg, layout: str | None
             ) -> tuple[list[Match], list[Match]]:
    """The graph's matches, and them in the layouts ``layout`` chooses (by the records in
    ``db`` where both layouts of a conv have some)."""
    layout = check_layout_mode(layout, tgt)
    matches, _ = match_model(gm, prepack=prepacks(tgt), pools=runs_pools(tgt), target=tgt)
    if layout == "nchw":
        return matches, matches
    if tgt.kind == "cuda":  # no transforms to weigh: each conv that can runs channels-last
        return matches, channels_last(matches, tgt)
    with open_database(db, create=False) as database:
        def cost_of(wl: Workload) -> float | None:
            found = best(wl, tgt, db=database)
            return None if found is None else found.cost

        return matches, choose_layouts(gm, matches, tgt, cost_of)


def _supported(tgt: Target) -> Target:
    if tgt.kind not in ("llvm", "cuda"):
        raise ValueError(f"compile_model: runs kernels on this CPU (llvm) or a CUDA GPU, "
                         f"not {tgt.kind}")
    return tgt


def _configs(matches: Sequence[Match], tgt: Target, db: DbArg) -> dict[Workload, Config]:
    """Each workload's config: one lookup (and warning) per workload; a `WorkloadError` at
    ``dtype`` first when the target refuses one's dtype."""
    for m in matches:
        m.workload.check_target(tgt)
    configs: dict[Workload, Config] = {}
    with open_database(db, create=False) as database:
        for m in matches:
            if m.workload not in configs:
                configs[m.workload] = chosen_config(m.workload, tgt, db=database)
    return configs


def _rewrite(gm: fx.GraphModule, matches: Sequence[Match], make: ModuleMaker) -> None:
    nodes = {n.name: n for n in gm.graph.nodes}
    modules = dict(gm.named_modules())
    for k, m in enumerate(matches):
        group = [nodes[name] for name in m.nodes]
        inputs = [nodes[name] for name in m.inputs]
        first, last = group[0], group[-1]
        name = f"autotune_{k}"
        gm.add_submodule(name, make(
            m, [tuple(n.meta["tensor_meta"].shape) for n in inputs],
            tuple(last.meta["tensor_meta"].shape), _conv_args(first, modules)))
        with gm.graph.inserting_after(last):
            new = gm.graph.call_module(name, tuple(inputs))
        new.meta = dict(last.meta)  # its shape, for the groups it feeds
        last.replace_all_uses_with(new)
        nodes[last.name] = new  # later groups fed by this one read the kernel's output
        for node in reversed(group):
            gm.graph.erase_node(node)
    gm.graph.lint()
    gm.recompile()
    gm.delete_all_unused_submodules()


def _conv_args(node: fx.Node, modules: dict[str, nn.Module]) -> dict[str, Any]:
    conv = modules.get(str(node.target)) if node.op == "call_module" else None
    if not isinstance(conv, nn.Conv2d):
        return {}
    return {"stride": conv.stride, "padding": conv.padding, "dilation": conv.dilation,
            "groups": conv.groups}


def kernel_modules(gm: nn.Module) -> list[KernelGroup]:
    """The kernel modules of a compiled model (`KernelModule`, or `CudaKernelModule` on a
    CUDA target, inside a `CudaGraphModel` too), in graph order."""
    return [m for m in gm.modules() if isinstance(m, KernelGroup)]
