"""CPU template of channel_shuffle (`autotune.ops.shuffle`), in NCHW or NCHW[x]c.

One pass that moves memory: the parallel tasks are tiles of output channels (`tile_c`:
channels, or channel blocks, per task) of each image, or their rows too. In NCHW an output
row is one part's row, copied as vectors; in NCHW[x]c a block's lanes come from every part,
so its lanes are either gathered as one vector (``lanes="vector"``) or written one by one,
unrolled, for LLVM's SLP vectorizer to turn into loads and shuffles (``"unrolled"``).
"""
from __future__ import annotations

from typing import Any

from autotune.ops import Workload
from autotune.schedule.definitions import shuffle_graph
from autotune.schedule.schedule import Schedule
from autotune.schedule.templates.common import nearest_split, parallel_outer
from autotune.space import Choice, Config, ConfigSpace, Knob, Split
from autotune.target import Target
from autotune.target.cpu_facts import facts_of


def space(wl: Workload, target: Target) -> ConfigSpace:
    knobs: list[Knob] = [Split("tile_c", wl.dim("C") // wl.block, 2, max_inner=16),
                         Choice("parallel", ["channels", "rows"])]
    if wl.block > 1:
        knobs.append(Choice("lanes", ["unrolled", "vector"]))
    return ConfigSpace(knobs, default=default_values(wl, target, knobs),
                       name="cpu_channel_shuffle")


def default_values(wl: Workload, target: Target, knobs: list[Any]) -> dict[str, Any]:
    """A channel (block) a task, rows in parallel where channels alone give a core fewer
    than 4 tasks; a block's lanes unrolled."""
    cores = facts_of(target).cores
    tasks = wl.dim("N") * wl.dim("C") // wl.block
    values: dict[str, Any] = {"tile_c": nearest_split(knobs[0], (1,)),
                              "parallel": "channels" if tasks >= 4 * cores else "rows"}
    if wl.block > 1:
        values["lanes"] = "unrolled"
    return values


def schedule(wl: Workload, target: Target, cfg: Config) -> Schedule:
    g = shuffle_graph(wl)
    s = g.schedule()
    st = s[g.output]
    n, c, y, x, *ci = st.axis
    c0, c1 = st.tile(c, cfg["tile_c"])
    st.reorder(n, c0, y, c1, x, *ci)
    rows = cfg["parallel"] == "rows"
    parallel_outer(st, [n, c0, y] if rows else [n, c0], 3 if rows else 2)
    if not ci:
        lanes = target.vector_lanes
        _, v = st.split(x, factor=lanes if wl.dim("W") >= lanes else wl.dim("W"))
        st.vectorize(v)
    elif cfg["lanes"] == "vector":
        st.vectorize(ci[0])
    else:
        st.unroll(ci[0])
    return s
