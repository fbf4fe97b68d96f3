"""Shared helpers of the cost-model tests: hand-built schedules and the measured dataset."""
from __future__ import annotations

import gzip
import json
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from autotune.ir.stmt import PrimFunc
from autotune.schedule.compute import compute, placeholder, reduce_axis
from autotune.schedule.lower import lower_schedule
from autotune.schedule.schedule import Schedule

if TYPE_CHECKING:
    from autotune.space import Config

DATA = Path(__file__).with_name("data") / "matmul_llvm.jsonl.gz"


def hand_matmul(M: int, N: int, K: int, ti: int, tj: int, tk: int, fuse: bool = False
                ) -> PrimFunc:
    """A register-tiled matmul built with the schedule API (independent of the templates)."""
    A, B = placeholder("A", (M, K)), placeholder("B", (K, N))
    k = reduce_axis(K, "k")
    C = compute("C", (M, N), lambda i, j: A[i, k.var] * B[k.var, j], [k], axis_names=["i", "j"])
    s = Schedule(C, [A, B])
    CL = s.cache_write(C, "local")
    st = s[C]
    i, j = st.axis
    io, ii = st.split(i, factor=ti)
    jo, ji = st.split(j, factor=tj)
    st.reorder(io, jo, ii, ji)
    attach = jo
    if fuse:
        attach = st.fuse(io, jo)
    st.parallel(io if not fuse else attach)
    st.vectorize(ji)
    CL.compute_at(st, attach)
    ii2, ji2 = CL.axis
    ko, ki = CL.split(CL.reduce_axis[0], factor=tk)
    CL.reorder(ko, ki, ii2, ji2)
    CL.unroll(ii2)
    CL.vectorize(ji2)
    return lower_schedule(s, "mm")


@lru_cache(maxsize=1)
def records() -> tuple[dict, ...]:
    """The measured matmul records (see data/record.py), in the database export format."""
    with gzip.open(DATA, "rt", encoding="utf-8") as fp:
        return tuple(json.loads(line) for line in fp if line.strip())


def by_workload() -> dict[str, list[dict]]:
    """Records grouped by workload key, in file order (the first key is the main workload)."""
    from autotune.ops import Workload
    out: dict[str, list[dict]] = {}
    for r in records():
        out.setdefault(Workload.from_dict(r["workload"]).key, []).append(r)
    return out


def gflops(recs: list[dict]) -> np.ndarray:
    return np.asarray([r["gflops"] or 0.0 for r in recs])


def config_of(record: dict, sp) -> Config | None:
    """The record's config in space ``sp``. Knobs added to the template after recording take
    their default (templates add knobs whose default keeps the old schedule); None when a
    recorded value is no longer a candidate."""
    from autotune.space import Config
    knobs = dict(record["config"]["knobs"])
    default = sp.default()
    for name in sp.names:
        knobs.setdefault(name, default[name])
    try:
        return Config.from_json({"knobs": {n: knobs[n] for n in sp.names}}, sp)
    except ValueError:
        return None


@lru_cache(maxsize=1)
def dataset() -> dict:
    """Per workload key (main workload first): (workload, target, configs, "ast" rows, gflops).

    Records are read in the space their own target gives (``-cores=1``, 512-bit vectors),
    so the tests do not depend on the machine they run on."""
    from autotune.costmodel.cache import features_for
    from autotune.driver import config_space
    from autotune.ops import Workload
    from autotune.target import Target
    out = {}
    for key, recs in by_workload().items():
        wl, target = Workload.from_json(key), Target(recs[0]["target"])
        sp = config_space(wl, target)
        pairs = [(c, r) for r in recs if (c := config_of(r, sp)) is not None]
        configs = [c for c, _ in pairs]
        X = features_for(wl, target, configs, "ast")
        out[key] = (wl, target, configs, X, gflops([r for _, r in pairs]))
    return out


def trial_records(key: str) -> list:
    """The dataset's records of workload ``key`` as `TrialRecord`s (what Database.history
    returns), configs completed as in ``dataset``."""
    from autotune.db.values import TrialRecord
    wl, target, configs, _, y = dataset()[key]
    out = []
    for c, g in zip(configs, y):
        cost = wl.flops() / (g * 1e9) if g > 0 else None
        out.append(TrialRecord(workload_key=key, target_key=target.key, config=c.to_dict(),
                               config_index=c.index, costs=(cost,) if cost else (), cost=cost,
                               gflops=float(g) if g > 0 else None,
                               error="none" if g > 0 else "runtime"))
    return out
