"""`compile_model`: the traced model with every matched group replaced by a module that runs
autotune's kernel on the tensors' own memory (numpy views, no copies), the rest on torch.

A kernel is specialised to the shapes it was extracted at; calls with other shapes, other
dtypes or that need gradients run the same (folded) computation on torch instead. A conv's
or linear layer's weight that the schedule packs into panels is packed once, here
(`autotune.schedule.prepack`), not on every call.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

import torch
import torch.nn.functional as F
from torch import fx, nn

from autotune.api import SETTINGS_DB, DbArg, TargetArg, as_target, chosen_config, open_database
from autotune.driver import compile as compile_kernel
from autotune.driver import compile_prepacked
from autotune.frontend.torch import Match, _as_tuple, match_model, trace
from autotune.ops import aligned_empty

if TYPE_CHECKING:
    from autotune.codegen.kernel import Kernel
    from autotune.space import Config


class KernelModule(nn.Module):
    """One matched group (conv+BN(+residual add)+ReLU/ReLU6, linear+ReLU/ReLU6, matmul) run by
    an autotune kernel."""

    def __init__(self, match: Match, kernel: "Kernel", pack: "Kernel | None",
                 in_shapes: Sequence[tuple[int, ...]], out_shape: tuple[int, ...],
                 conv_args: dict[str, Any]) -> None:
        super().__init__()
        self.workload, self.kind, self.place = match.workload, match.kind, match.place
        self.kernel = kernel
        self.in_shapes = tuple(tuple(s) for s in in_shapes)
        self.out_shape = tuple(out_shape)
        self.params = match.params  # numpy, 64-byte aligned: torch's fallback reads these
        self.kernel_params = match.params  # what the kernel takes: the weight packed, if it is
        if pack is not None:
            packed = aligned_empty(pack.arg_buffers[-1].shape)
            pack(match.params[0], packed)
            self.kernel_params = (packed, *match.params[1:])
        self.conv_args = conv_args
        self.activation = next((s for s in match.workload.epilogue if s in ("relu", "relu6")),
                               None)

    def forward(self, *xs: torch.Tensor) -> torch.Tensor:
        if not self._fits(xs):
            return self.forward_torch(*xs)
        arrays = [x.contiguous().numpy() for x in xs]  # views: contiguous() is x itself here
        if self.kind == "linear":
            arrays[0] = arrays[0].reshape(self.workload.arg_specs[0].shape)
        elif self.kind == "matmul":
            arrays = [a.reshape(spec.shape) for a, spec in zip(arrays, self.workload.arg_specs)]
        out = torch.empty(self.out_shape, dtype=torch.float32)
        # arguments: the main input, the constants, the other inputs (B, a residual), out
        self.kernel(arrays[0], *self.kernel_params, *arrays[1:],
                    out.numpy().reshape(self.workload.output_shape))
        return out

    def _fits(self, xs: Sequence[torch.Tensor]) -> bool:
        if torch.is_grad_enabled() and any(x.requires_grad for x in xs):
            return False
        return all(x.dtype == torch.float32 and x.device.type == "cpu" and
                   tuple(x.shape) == s for x, s in zip(xs, self.in_shapes))

    def forward_torch(self, *xs: torch.Tensor) -> torch.Tensor:
        """The same computation on torch (folded weights; any shape that torch accepts)."""
        p = [torch.from_numpy(a) for a in self.params]
        bias = p[1] if len(p) > 1 else None
        if self.kind == "conv":
            y = F.conv2d(xs[0], p[0], bias, **self.conv_args)
        elif self.kind == "linear":
            y = F.linear(xs[0], p[0].t(), bias)
        else:
            y = torch.matmul(xs[0], xs[1])
        if "residual" in self.workload.epilogue:
            y = y + xs[1]
        if self.activation == "relu":
            return torch.relu(y)
        return torch.clamp(y, 0.0, 6.0) if self.activation == "relu6" else y

    def extra_repr(self) -> str:
        return f"{self.place}: {self.workload}"


def compile_model(model: nn.Module, example_inputs: Any, *, target: TargetArg = "llvm",
                  db: DbArg = SETTINGS_DB) -> fx.GraphModule:
    """``model`` (an eval-mode copy) with its supported operators on autotune's kernels: the
    best records in ``db``, else the default schedules (with a `NoTunedScheduleWarning`, once
    per workload). The result is called like the model; the rest of it runs on torch."""
    tgt = as_target(target)
    if tgt.kind != "llvm":
        raise ValueError(f"compile_model: runs kernels on this CPU only (target kind llvm), "
                         f"not {tgt.kind}")
    gm = trace(model, _as_tuple(example_inputs))
    matches, _ = match_model(gm)
    configs: dict[Any, Config] = {}
    kernels: dict[tuple[Any, bool], tuple[Kernel, Kernel | None]] = {}
    with open_database(db, create=False) as database:
        for m in matches:
            if m.workload not in configs:  # one lookup (and warning) per workload
                configs[m.workload] = chosen_config(m.workload, tgt, db=database)
            key = _kernel_key(m)
            if key not in kernels:
                config = configs[m.workload]
                kernels[key] = compile_prepacked(m.workload, tgt, config) if key[1] else (
                    compile_kernel(m.workload, tgt, config), None)
    _rewrite(gm, matches, kernels)
    return gm


def _kernel_key(m: Match) -> tuple[Any, bool]:
    """A match's kernel: its workload, and whether it has a constant operand to prepack (a
    matmul of two activations has none: its params are empty)."""
    return m.workload, bool(m.params)


def _rewrite(gm: fx.GraphModule, matches: Sequence[Match],
             kernels: dict[tuple[Any, bool], tuple["Kernel", "Kernel | None"]]) -> None:
    nodes = {n.name: n for n in gm.graph.nodes}
    modules = dict(gm.named_modules())
    for k, m in enumerate(matches):
        group = [nodes[name] for name in m.nodes]
        inputs = [nodes[name] for name in m.inputs]
        first, last = group[0], group[-1]
        name = f"autotune_{k}"
        gm.add_submodule(name, KernelModule(
            m, *kernels[_kernel_key(m)],
            [tuple(n.meta["tensor_meta"].shape) for n in inputs],
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


def kernel_modules(gm: nn.Module) -> list[KernelModule]:
    """The kernel modules of a compiled model, in graph order."""
    return [m for m in gm.modules() if isinstance(m, KernelModule)]
