"""CPU template of the channelwise ops (`autotune.ops.channelwise`): the global average
pool, the channel gate and the channel affine map, in NCHW or NCHW[x]c.

Both are one pass over the data, bound by memory: the parallel tasks are blocks of
channels (`tile_c`: channel blocks per task) of each image, and, for the gate, rows of
them. In NCHW[x]c a vector is a block's channels at one pixel: the pool keeps one vector
accumulator per block of its task (several in flight hide the adds' latency) and the gate
multiplies each pixel's vector by the block's gate vector; in NCHW the pool sums a
channel's pixels into a scalar and the gate runs along rows, vectorised.
"""
from __future__ import annotations

from typing import Any

from autotune.ops import Workload
from autotune.schedule.definitions import channelwise_graph
from autotune.schedule.schedule import Schedule
from autotune.schedule.templates.common import nearest_split, parallel_outer, vector_width
from autotune.space import Choice, Config, ConfigSpace, Knob, Split
from autotune.target import Target
from autotune.target.cpu_facts import facts_of

MAX_ACCUMULATORS = 8  # channel blocks a pool task sums at once


def space(wl: Workload, target: Target) -> ConfigSpace:
    knobs: list[Knob] = [Split("tile_c", wl.dim("C") // wl.block, 2,
                               max_inner=MAX_ACCUMULATORS)]
    if wl.op != "global_avg_pool2d":  # parallel: images x channel tiles, or their rows too
        knobs.append(Choice("parallel", ["channels", "rows"]))
    return ConfigSpace(knobs, default=default_values(wl, target, knobs), name=f"cpu_{wl.op}")


def default_values(wl: Workload, target: Target, knobs: list[Any]) -> dict[str, Any]:
    """Pool: 4 accumulators (blocks, or channels in NCHW) a task, fewer where the tasks
    would not give every core 2; gate and affine map: a channel block a task, rows in
    parallel where the channel tiles alone give a core fewer than 4 tasks."""
    cores = facts_of(target).cores
    blocks = wl.dim("C") // wl.block
    per_task = 4 if wl.op == "global_avg_pool2d" else 1
    while per_task > 1 and wl.dim("N") * blocks // per_task < 2 * cores:
        per_task //= 2
    values: dict[str, Any] = {"tile_c": nearest_split(knobs[0], (per_task,))}
    if wl.op != "global_avg_pool2d":
        values["parallel"] = "channels" if wl.dim("N") * blocks >= 4 * cores else "rows"
    return values


def schedule(wl: Workload, target: Target, cfg: Config) -> Schedule:
    g = channelwise_graph(wl)
    s = g.schedule()
    pool = wl.op == "global_avg_pool2d"
    out = s.cache_write(g.output, "local") if pool else None
    st = s[g.output]
    n, c, y, x, *ci = st.axis
    c0, c1 = st.tile(c, cfg["tile_c"])
    lanes = target.vector_lanes
    if out is not None:
        vec = list(st.split(ci[0], factor=vector_width(wl.block, lanes))) if ci else []
        st.reorder(n, c0, y, x, c1, *vec)
        task = parallel_outer(st, [n, c0], 2)
        if vec:
            st.vectorize(vec[-1])
        out.compute_at(st, task)
        rh, rw = out.reduce_axis
        out.reorder(rh, rw, *out.axis)
        for a in out.axis[:-1] if ci else out.axis:
            out.unroll(a)
        if ci:
            out.vectorize(out.axis[-1])
        return s
    st.reorder(n, c0, y, c1, x, *ci)
    parallel_outer(st, [n, c0, y] if cfg["parallel"] == "rows" else [n, c0],
                   3 if cfg["parallel"] == "rows" else 2)
    inner = ci[0] if ci else x
    _, v = st.split(inner, factor=vector_width(wl.block, lanes) if ci else lanes)
    st.vectorize(v)
    return s
