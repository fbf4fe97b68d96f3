"""Blocked layouts across a compiled model's layers (`compile_model(layout="auto")`).

A conv run in NCHW[x]c (x = the target's vector lanes) reads and writes contiguous vectors
of channels; consecutive blocked layers pass their tensors on blocked, so a model pays a
transform only where a chain of them starts (after a torch op such as a max-pool) and where
a torch op, an NCHW layer or the model's output needs NCHW. `choose_layouts` picks each
conv's layout; `insert_transforms` puts the transforms into the rewritten graph.
"""
from __future__ import annotations

import time
from dataclasses import replace
from statistics import median
from typing import Callable, Optional, Sequence

import torch
from torch import fx, nn

from autotune.frontend.channels_last import channels_last
from autotune.frontend.torch import Match
from autotune.ops import Workload
from autotune.ops.layout import NCHW, blocked
from autotune.target import Target

LAYOUTS = ("nchw", "auto")
# the best record's cost (s) of a workload, None when it has none
CostOf = Callable[[Workload], Optional[float]]


class LayoutTransform(nn.Module):
    """NCHW to NCHW[block]c (``to_blocked``) or back, as a contiguous copy."""

    def __init__(self, block: int, to_blocked: bool) -> None:
        super().__init__()
        self.block, self.to_blocked = block, to_blocked

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.to_blocked:
            n, c, h, w = x.shape
            return x.reshape(n, c // self.block, self.block, h, w).permute(0, 1, 3, 4, 2) \
                .contiguous()
        n, co, h, w, ci = x.shape
        return x.permute(0, 1, 4, 2, 3).reshape(n, co * ci, h, w).contiguous()

    def extra_repr(self) -> str:
        return f"{'to' if self.to_blocked else 'from'} NCHW{self.block}c"


def check_layout_mode(layout: str, target: Target) -> None:
    """ValueError unless ``layout`` is one of `LAYOUTS` ("auto": blocked convs on llvm,
    channels-last convs on cuda, `autotune.frontend.channels_last`)."""
    if layout not in LAYOUTS:
        raise ValueError(f"compile_model: layout={layout!r}; expected one of "
                         f"{', '.join(LAYOUTS)}")
    if layout == "auto" and target.kind not in ("llvm", "cuda"):
        raise ValueError(f"compile_model: layout='auto' is for llvm (blocked convs) and cuda "
                         f"(channels-last convs) targets, not {target.kind}")


# a blocked chain needs this many convs per layout transform at its edges
CONVS_PER_TRANSFORM = 2


def blockable(wl: Workload, block: int) -> bool:
    """Whether ``wl`` (a conv2d in NCHW) can run in NCHW[block]c."""
    return (wl.op == "conv2d" and wl.layout == NCHW and wl.dim("C") % block == 0
            and wl.dim("K") % block == 0)


def default_layouts(matches: Sequence[Match], target: Target) -> list[Match]:
    """``matches`` with the blockable convs of each worthwhile chain in NCHW[lanes]c: the
    layouts `choose_layouts` gives without records, which `tune_model(layout="auto")`
    tunes. A chain is a set of blockable convs linked by reading each other's outputs; it
    runs blocked when it has at least `CONVS_PER_TRANSFORM` convs for each transform at its
    edges (a lone conv would pay one on each side; MobileNet-V2's pairs of 1x1 convs,
    split by depthwise convs, ran its model 1.4x slower blocked than in NCHW)."""
    if target.kind == "cuda":
        return channels_last(matches, target)
    block = target.vector_lanes
    can = {m.nodes[-1]: m for m in matches if blockable(m.workload, block)}
    chain = {name: name for name in can}

    def root(name: str) -> str:
        while chain[name] != name:
            chain[name] = chain[chain[name]]
            name = chain[name]
        return name

    for out, m in can.items():
        for name in m.inputs:
            if name in can:
                chain[root(name)] = root(out)
    members: dict[str, set[str]] = {}
    for name in can:
        members.setdefault(root(name), set()).add(name)
    read_by_chain = {name for m in can.values() for name in m.inputs}
    blocked_outs: set[str] = set()
    for outs in members.values():
        if len(outs) < 2:
            continue
        entries = {name for out in outs for name in can[out].inputs if name not in outs}
        # an output no conv of the chain reads goes to a torch op, another layer or the
        # model's output: back to NCHW (one a chain conv also reads is not counted here)
        exits = {out for out in outs if out not in read_by_chain}
        if len(outs) >= CONVS_PER_TRANSFORM * (len(entries) + len(exits)):
            blocked_outs |= outs
    return [replace(m, workload=replace(m.workload, layout=blocked(block)))
            if m.nodes[-1] in blocked_outs else m for m in matches]


def choose_layouts(gm: fx.GraphModule, matches: Sequence[Match], target: Target,
                   cost_of: CostOf) -> list[Match]:
    """``matches`` with the convs `default_layouts` picks in NCHW[lanes]c, unless both
    forms have records and the NCHW one is faster counting the
    transforms each would need next to its neighbours' layouts (one pass in graph order);
    a conv whose NCHW form alone has records stays NCHW."""
    block = target.vector_lanes
    chosen = default_layouts(matches, target)
    producer = {m.nodes[-1]: i for i, m in enumerate(matches)}
    nodes = {n.name: n for n in gm.graph.nodes}
    for i, m in enumerate(matches):
        if chosen[i] is m:
            continue
        plain, fast = cost_of(m.workload), cost_of(chosen[i].workload)
        if plain is None and fast is None:
            continue
        if fast is None:
            chosen[i] = m
            continue
        if plain is None:
            continue

        def blocked_at(name: str) -> bool:
            j = producer.get(name)
            return j is not None and chosen[j].workload.layout != NCHW

        # transforms around the layer: its inputs', and its output's for each kind of user
        out = nodes[m.nodes[-1]]
        users = [producer_of_input(matches, chosen, u.name) for u in out.users]
        ins = [(name, blocked_at(name)) for name in m.inputs]
        t_in = [_transform_seconds(nodes[name], block) for name, _ in ins]
        t_out = _transform_seconds(out, block)
        as_blocked = fast + sum(t for t, (_, b) in zip(t_in, ins) if not b) \
            + (t_out if any(u is not True for u in users) else 0.0)
        as_plain = plain + sum(t for t, (_, b) in zip(t_in, ins) if b) \
            + (t_out if any(u is True for u in users) else 0.0)
        if as_plain < as_blocked:
            chosen[i] = m
    return chosen


def producer_of_input(matches: Sequence[Match], chosen: Sequence[Match], user: str
                      ) -> Optional[bool]:
    """For a graph node ``user``: True when a blocked match has it among its nodes (a blocked
    kernel reads there), False when an NCHW match does, None for a torch op."""
    for m, c in zip(matches, chosen):
        if user in m.nodes:
            return c.workload.layout != NCHW
    return None


def _transform_seconds(node: fx.Node, block: int) -> float:
    """What transforming ``node``'s tensor takes, timed on this host (median of 5)."""
    meta = node.meta.get("tensor_meta")
    shape = tuple(meta.shape) if meta is not None else ()
    if len(shape) != 4 or shape[1] % block:
        return 0.0
    x = torch.rand(shape)
    step = LayoutTransform(block, True)
    times = []
    for _ in range(5):
        start = time.perf_counter()
        step(x)
        times.append(time.perf_counter() - start)
    return median(times)


def insert_transforms(gm: fx.GraphModule, block_of: Callable[[fx.Node], int]) -> int:
    """Put a `LayoutTransform` wherever a node's layout (``block_of``: its output's block,
    1 for NCHW) differs from what a user reads (a blocked kernel its block, anything else
    NCHW): one per tensor and layout, shared by its users. Returns how many were put."""
    count = 0
    for node in list(gm.graph.nodes):
        have = block_of(node) if node.op == "call_module" else 1
        made: dict[int, fx.Node] = {}
        for user in list(node.users):
            need = block_of(user) if user.op == "call_module" else 1
            if need == have:
                continue
            if need not in made:
                source = node
                if have > 1:  # to NCHW first (then on to another block, if one is needed)
                    if 1 not in made:
                        made[1] = _transform(gm, node, have, False, count)
                        count += 1
                    source = made[1]
                if need > 1:
                    made[need] = _transform(gm, source, need, True, count)
                    count += 1
            user.replace_input_with(node, made[need])
    gm.graph.lint()
    gm.recompile()
    return count


def _transform(gm: fx.GraphModule, node: fx.Node, block: int, to_blocked: bool, k: int
               ) -> fx.Node:
    name = f"autotune_{'to' if to_blocked else 'from'}_blocked_{k}"
    gm.add_submodule(name, LayoutTransform(block, to_blocked))
    with gm.graph.inserting_after(node):
        return gm.graph.call_module(name, (node,))


def transforms(gm: nn.Module) -> list[LayoutTransform]:
    """The layout transforms of a compiled model, in graph order."""
    return [m for m in gm.modules() if isinstance(m, LayoutTransform)]
