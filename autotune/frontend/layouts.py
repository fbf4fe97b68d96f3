"""Blocked layouts across a compiled model's layers (`compile_model(layout="auto")`).

Convs, depthwise convs and max-pools run in NCHW[x]c (x: the target's vector lanes, or half
of them where the lanes do not divide a tensor's channels): each reads and writes
contiguous vectors of channels, and consecutive blocked layers pass their tensors on
blocked, from the model's first conv (which reads the image in NCHW and writes blocked
channels) to the last layer before a torch op (an average pool, a classifier's flatten),
where a transform returns to NCHW. `default_layouts` gives every layer its layout,
`choose_layouts` keeps a layer NCHW where the records say so, and `insert_transforms`
puts the transforms into the rewritten graph.
"""
from __future__ import annotations

import operator
import time
from dataclasses import replace
from math import gcd
from statistics import median
from typing import Callable, Optional, Sequence

import torch
from torch import fx, nn

from autotune.frontend.channels_last import channels_last
from autotune.frontend.tasks import Match
from autotune.ops import Workload, prepackable
from autotune.ops.layout import LAYOUT_OPS, NCHW, mixed
from autotune.target import Target

LAYOUTS = ("nchw", "auto")
CONCAT_FUNCS = (torch.cat, torch.concat, torch.concatenate)
# ops whose output has 1 x 1 pixels: its NCHW[x]c form is its NCHW one, which users read
POOLED_OPS = ("global_avg_pool2d",)
# the best record's cost (s) of a workload, None when it has none
CostOf = Callable[[Workload], Optional[float]]


class LayoutTransform(nn.Module):
    """A tensor from NCHW[source]c to NCHW[target]c (a block of 1: NCHW), as a contiguous
    copy."""

    def __init__(self, source: int, target: int) -> None:
        super().__init__()
        self.source, self.target = source, target

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.source > 1:  # to NCHW: a view where the next step copies anyway
            n, co, h, w, ci = x.shape
            x = x.permute(0, 1, 4, 2, 3).reshape(n, co * ci, h, w)
        if self.target == 1:
            return x.contiguous()
        n, c, h, w = x.shape
        return x.reshape(n, c // self.target, self.target, h, w).permute(0, 1, 3, 4, 2) \
            .contiguous()

    def extra_repr(self) -> str:
        def name(block: int) -> str:
            return "NCHW" if block == 1 else f"NCHW{block}c"
        return f"{name(self.source)} to {name(self.target)}"


def check_layout_mode(layout: Optional[str], target: Target) -> str:
    """``layout`` for ``target`` (None: "auto" on llvm and cuda, where the blocked model and
    the channels-last wgmma convs ran every benchmark model faster, "nchw" elsewhere);
    ValueError unless it is one of `LAYOUTS` ("auto": blocked layers on llvm, channels-last
    convs on cuda, `autotune.frontend.channels_last`)."""
    if layout is None:
        return "auto" if target.kind in ("llvm", "cuda") else "nchw"
    if layout not in LAYOUTS:
        raise ValueError(f"compile_model: layout={layout!r}; expected one of "
                         f"{', '.join(LAYOUTS)}")
    if layout == "auto" and target.kind not in ("llvm", "cuda"):
        raise ValueError(f"compile_model: layout='auto' is for llvm (blocked convs) and cuda "
                         f"(channels-last convs) targets, not {target.kind}")
    return layout


def channel_block(channels: int, lanes: int) -> int:
    """The block of a tensor of ``channels`` in a blocked model: the vector lanes, or half
    of them, whichever divides the channels first; 1 (NCHW) when neither does."""
    return next((b for b in (lanes, lanes // 2) if b > 1 and channels % b == 0), 1)


def concat_parts(node: fx.Node) -> Optional[list[fx.Node]]:
    """The tensors ``node`` joins when it is a concatenation of 4-D tensors along channels
    (``torch.cat(xs, 1)``, its aliases, dim -3), else None."""
    if node.op != "call_function" or node.target not in CONCAT_FUNCS:
        return None
    parts = node.args[0] if node.args else node.kwargs.get("tensors")
    dim = node.args[1] if len(node.args) > 1 else node.kwargs.get("dim", 0)
    meta = node.meta.get("tensor_meta")
    if dim not in (1, -3) or getattr(meta, "shape", None) is None or \
            len(meta.shape) != 4 or not isinstance(parts, (list, tuple)) or \
            not all(isinstance(p, fx.Node) for p in parts):
        return None
    return list(parts)


def channel_concats(gm: fx.GraphModule) -> dict[str, list[str]]:
    """The concatenations of 4-D tensors along channels in ``gm`` (`concat_parts`): node
    name -> the names of the tensors joined. In NCHW[x]c, with every part's channels a
    multiple of x, the same call on the blocked tensors is the blocked concatenation: such
    a concat passes its parts' block on (`default_layouts`, `blocked_concats`)."""
    return {node.name: [p.name for p in parts] for node in gm.graph.nodes
            if (parts := concat_parts(node)) is not None}


SPLIT_FUNCS = (torch.chunk, torch.split)
SPLIT_METHODS = ("chunk", "split")


def channel_splits(gm: fx.GraphModule) -> dict[str, tuple[str, tuple[int, ...]]]:
    """The splits of 4-D tensors along channels in ``gm`` (``x.chunk(k, 1)``, ``split``) and
    the parts taken from them: the split's and each part's (getitem) name -> (the tensor
    split, every part's channels). Where a block divides every part's channels, the same
    call on the blocked tensor splits it into the blocked parts: the split passes its
    tensor's block on (`default_layouts`, `blocked_splits`)."""
    found: dict[str, tuple[str, tuple[int, ...]]] = {}
    for node in gm.graph.nodes:
        if not ((node.op == "call_function" and node.target in SPLIT_FUNCS) or
                (node.op == "call_method" and node.target in SPLIT_METHODS)):
            continue
        source = node.args[0] if node.args else None
        dim = node.args[2] if len(node.args) > 2 else node.kwargs.get("dim", 0)
        metas = node.meta.get("tensor_meta")
        # only parts taken one by one: a reader of the whole tuple would get blocked parts
        if dim not in (1, -3) or not isinstance(source, fx.Node) or \
                not isinstance(metas, (tuple, list)) or \
                not all(len(getattr(m, "shape", ())) == 4 for m in metas) or \
                not all(u.op == "call_function" and u.target is operator.getitem and
                        isinstance(u.args[1], int) for u in node.users):
            continue
        channels = tuple(int(m.shape[1]) for m in metas)
        found[node.name] = (source.name, channels)
        for user in node.users:
            found[user.name] = (source.name, channels)
    return found


def _split_block(split: tuple[str, tuple[int, ...]], block: Callable[[str], int]) -> int:
    """The block the parts of a split pass on: their tensor's, where it divides them all."""
    source, channels = split
    b = block(source)
    return b if all(c % b == 0 for c in channels) else 1


def blocked_splits(gm: fx.GraphModule, out_block: Callable[[fx.Node], int]) -> dict[str, int]:
    """The channel splits of ``gm`` (rewritten, its kernels in) and their parts whose tensor
    comes in a block > 1 that divides every part (``out_block`` of a kernel module): name
    -> block. Each split is made to split along dim 1 of the blocked tensor."""
    nodes = {n.name: n for n in gm.graph.nodes}
    found: dict[str, int] = {}
    for name, split in channel_splits(gm).items():
        b = _split_block(split, lambda source: out_block(nodes[source]))
        if b > 1:
            found[name] = b
            node = nodes[name]
            if node.target is not operator.getitem:
                _split_blocks(node, b)
    return found


def _split_blocks(node: fx.Node, block: int) -> None:
    """``node``, a split along channels, made the same split of the blocked tensor: along
    dim 1, and a split's sizes counted in blocks (a chunk's count stays)."""
    args, kwargs = list(node.args), dict(node.kwargs)
    if len(args) > 2:
        args[2] = 1
    else:
        kwargs["dim"] = 1
    if node.target in (torch.split, "split"):
        key = next((k for k in ("split_size_or_sections", "split_size") if k in kwargs), None)
        sizes = kwargs[key] if key else args[1]
        sizes = sizes // block if isinstance(sizes, int) else [s // block for s in sizes]
        if key:
            kwargs[key] = sizes
        else:
            args[1] = sizes
    node.args, node.kwargs = tuple(args), kwargs


def _concat_block(parts: Sequence[str], block: Callable[[str], int]) -> int:
    """The block a concat of ``parts`` passes on: theirs, where they share one; else 1."""
    blocks = {block(p) for p in parts}
    return blocks.pop() if len(blocks) == 1 else 1


def blocked_concats(gm: fx.GraphModule, out_block: Callable[[fx.Node], int]) -> dict[str, int]:
    """The channel concats of ``gm`` (rewritten, its kernels in) whose parts all come in one
    block > 1 (``out_block`` of a kernel module; a concat's own, in graph order): name ->
    block. Each is made to concatenate along dim 1 of the blocked tensors."""
    nodes = {n.name: n for n in gm.graph.nodes}
    found: dict[str, int] = {}

    def block(name: str) -> int:
        return found.get(name) or out_block(nodes[name])

    for name, parts in channel_concats(gm).items():
        b = _concat_block(parts, block)
        if b > 1:
            found[name] = b
            node = nodes[name]
            node.args, node.kwargs = (list(node.args[0] if node.args else
                                           node.kwargs["tensors"]), 1), {}
    return found


def default_layouts(matches: Sequence[Match], target: Target,
                    concats: Optional[dict[str, list[str]]] = None,
                    splits: Optional[dict[str, tuple[str, tuple[int, ...]]]] = None
                    ) -> list[Match]:
    """``matches`` in the layouts a blocked model runs without records, which
    `tune_model(layout="auto")` tunes. In graph order, each tensor a conv writes is blocked
    by `channel_block` of its channels, and a depthwise conv or max-pool keeps the block of
    the tensor it reads (a global average pool too, whose 1 x 1 output is then NCHW as
    well; a channel gate keeps its data's); a conv reads its data in the block its
    producer wrote (NCHW from a torch op or the model's input: the first conv reads the
    image as it is), as ``IN>OUT`` when the two differ. A blocked depthwise conv takes its
    prepacked form (its weight packed once into vectors of channels). What cannot be
    blocked (a conv whose output channels no block divides, a depthwise conv with a
    multiplier, a layer reading NCHW but a conv, a grouped conv whose groups' channels the
    blocks do not divide) stays NCHW; a grouped conv is blocked as a conv, by a block of
    one group's output channels, and a conv feeding one writes a block of its groups'
    input channels where one fits; a conv computing a channel gate writes the block of the
    data the gate scales (no transform between them). A channel concat (``concats``,
    `channel_concats`) whose parts share a block passes it on, so its readers read it
    blocked. On cuda: channels-last convs (`autotune.frontend.channels_last`)."""
    if target.kind == "cuda":
        return channels_last(matches, target)
    lanes = target.vector_lanes
    block: dict[str, int] = {}  # a kernel's output node -> its block
    grouped = _group_reads(matches)
    # a channel gate's gate (squeeze-and-excitation's last conv) -> the data it scales
    gated = {m.inputs[1]: m.inputs[0] for m in matches if m.workload.op == "channel_mul"}
    chosen = []
    concats = concats or {}
    splits = splits or {}

    def block_of(name: str) -> int:
        if name not in block and name in concats:
            block[name] = _concat_block(concats[name], block_of)
        if name not in block and name in splits:
            block[name] = _split_block(splits[name], block_of)
        return block.get(name, 1)

    for m in matches:
        wl = m.workload
        bi = block_of(m.inputs[0])
        bo = 1
        # a conv writes a block that the grouped convs reading its output can read too
        if wl.op == "conv2d" and wl.layout == NCHW:
            bo = _block_for_readers(wl.dim("K"), grouped.get(m.nodes[-1]), lanes)
            if m.nodes[-1] in gated:  # the gate in its data's block: the gate reads them alike
                data_block = block_of(gated[m.nodes[-1]])
                bo = data_block if wl.dim("K") % data_block == 0 else bo
        elif wl.op == "group_conv2d" and wl.layout == NCHW:
            # a block holds channels of one group, on both sides
            groups = wl.dim("groups")
            if (wl.dim("C") // groups) % bi == 0:
                bo = _block_for_readers(wl.dim("K") // groups, grouped.get(m.nodes[-1]), lanes)
        elif wl.op in LAYOUT_OPS and wl.layout == NCHW and \
                (wl.op != "depthwise_conv2d" or wl.dim("multiplier") == 1):
            bo = bi
        if bo == 1:
            chosen.append(m)
            continue
        if wl.op not in POOLED_OPS:
            block[m.nodes[-1]] = bo
        layout = mixed(bi, bo) if wl.op in ("conv2d", "group_conv2d") else mixed(bo, bo)
        chosen.append(replace(m, workload=replace(
            wl, layout=layout, prepacked=wl.prepacked or prepackable(wl.op, layout))))
    return chosen


def _block_for_readers(channels: int, group_channels: int | None, lanes: int) -> int:
    """The block of a conv's output of ``channels``: one that also divides the
    ``group_channels`` of the grouped convs reading it, where there is one; else its own."""
    if group_channels is not None:
        capped = channel_block(gcd(channels, group_channels), lanes)
        if capped > 1:
            return capped
    return channel_block(channels, lanes)


def _group_reads(matches: Sequence[Match]) -> dict[str, int]:
    """A tensor (its producer's output node) -> the input channels of one group of the
    grouped convs that read it, which a block of it must divide (ResNeXt's 1x1 conv of 256
    channels before a conv in groups of 8 writes a block of 8, not 16)."""
    reads: dict[str, int] = {}
    for m in matches:
        if m.workload.op == "group_conv2d":
            per_group = m.workload.dim("C") // m.workload.dim("groups")
            reads[m.inputs[0]] = gcd(reads.get(m.inputs[0], 0), per_group)
    return reads


def choose_layouts(gm: fx.GraphModule, matches: Sequence[Match], target: Target,
                   cost_of: CostOf) -> list[Match]:
    """``matches`` in the layouts `default_layouts` gives, except that a layer whose NCHW
    form alone has records stays NCHW, and so does one whose two forms both have records
    where the NCHW one is faster counting the transforms each would need next to its
    neighbours' layouts (one pass in graph order)."""
    lanes = target.vector_lanes
    chosen = default_layouts(matches, target, channel_concats(gm), channel_splits(gm))
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
        t_in = [_transform_seconds(nodes[name], lanes) for name, _ in ins]
        t_out = _transform_seconds(out, lanes)
        # the data of a conv reading NCHW into a blocked output needs no transform
        reads_plain = chosen[i].workload.in_block == 1
        as_blocked = fast + sum(t for k, (t, (_, b)) in enumerate(zip(t_in, ins))
                                if not b and not (k == 0 and reads_plain)) \
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


def _transform_seconds(node: fx.Node, lanes: int) -> float:
    """What blocking ``node``'s tensor takes, timed on this host (median of 5)."""
    meta = node.meta.get("tensor_meta")
    shape = tuple(meta.shape) if meta is not None else ()
    if len(shape) != 4 or channel_block(shape[1], lanes) == 1:
        return 0.0
    x = torch.rand(shape)
    step = LayoutTransform(1, channel_block(shape[1], lanes))
    times = []
    for _ in range(5):
        start = time.perf_counter()
        step(x)
        times.append(time.perf_counter() - start)
    return median(times)


# a node's output block (1: NCHW), and the block a node reads at an argument position
OutBlock = Callable[[fx.Node], int]
InBlock = Callable[[fx.Node, int], int]


def insert_transforms(gm: fx.GraphModule, out_block: OutBlock, in_block: InBlock) -> int:
    """Put a `LayoutTransform` wherever a node's layout (``out_block``: 1 for NCHW, for
    anything but a module or a blocked concat) differs from what a user reads there
    (``in_block`` of a kernel module and the argument's position, of a blocked concat;
    NCHW for anything else): one per tensor and layout, shared by its users. Returns how
    many were put."""
    count = 0
    for node in list(gm.graph.nodes):
        have = out_block(node)
        made: dict[int, fx.Node] = {}

        def reading(need: int) -> fx.Node:
            nonlocal count
            if need not in made:
                made[need] = _transform(gm, node, have, need, count)
                count += 1
            return made[need]

        for user in list(node.users):
            # a blocked concat or split
            if user.op in ("call_function", "call_method") and in_block(user, 0) > 1:
                if in_block(user, 0) != have:
                    user.replace_input_with(node, reading(in_block(user, 0)))
                continue
            if user.op != "call_module" or user.kwargs:
                if have != 1:
                    user.replace_input_with(node, reading(1))
                continue
            args = list(user.args)
            for pos, arg in enumerate(args):
                need = in_block(user, pos)
                if arg is node and need != have:
                    args[pos] = reading(need)
            user.args = tuple(args)
    gm.graph.lint()
    gm.recompile()
    return count


def _transform(gm: fx.GraphModule, node: fx.Node, source: int, target: int, k: int
               ) -> fx.Node:
    name = f"autotune_layout_{k}"
    gm.add_submodule(name, LayoutTransform(source, target))
    with gm.graph.inserting_after(node):
        return gm.graph.call_module(name, (node,))


def transforms(gm: nn.Module) -> list[LayoutTransform]:
    """The layout transforms of a compiled model, in graph order."""
    return [m for m in gm.modules() if isinstance(m, LayoutTransform)]
