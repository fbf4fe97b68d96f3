"""`Template`: what the driver asks of a schedule template, whichever way it makes its loop
AST. A template module either schedules the operator's compute graph (`ScheduleModule`:
lowered by `autotune.schedule.lower`, its constant operand's packing split off for a
prepacked workload) or builds the loop AST itself (`LoopModule`: the tensor-core templates,
whose warp-level statements have no Schedule primitive); the registry wraps each in the
one interface."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional, Protocol

from autotune.ir.stmt import PrimFunc
from autotune.ops import Workload
from autotune.schedule.lower import lower_schedule
from autotune.schedule.prepack import split_packing
from autotune.schedule.schedule import Schedule
from autotune.space import Config, ConfigSpace
from autotune.target import Target

SpaceFn = Callable[[Workload, Target], ConfigSpace]


class Template(Protocol):
    """A template the registry chose for a workload and target: ``name`` (its module),
    ``family`` (the kernels whose records train one cost model: a variant the registry
    picks for a shape or layout, the GEMV or the blocked conv, is of its op's family), the
    space of configs, and the loop AST of one."""

    @property
    def name(self) -> str: ...

    @property
    def family(self) -> str: ...

    def space(self, workload: Workload, target: Target) -> ConfigSpace: ...

    def kernel(self, workload: Workload, target: Target, config: Config, prepack: bool
               ) -> tuple[PrimFunc, Optional[PrimFunc]]:
        """The kernel's loop AST and, when ``prepack`` and the config packs a constant
        operand, the packing kernel's. Raises `LoweringError` for a config that cannot be
        lowered."""
        ...


@dataclass(frozen=True)
class ScheduleTemplate:
    """A template that schedules the compute graph (``schedule(workload, target, config)``)."""

    name: str
    family: str
    space: SpaceFn
    schedule: Callable[[Workload, Target, Config], Schedule]

    def kernel(self, workload: Workload, target: Target, config: Config, prepack: bool
               ) -> tuple[PrimFunc, Optional[PrimFunc]]:
        sch = self.schedule(workload, target, config)
        pack_sch = split_packing(sch, workload.op) if prepack else None
        pack = None if pack_sch is None else lower_schedule(pack_sch,
                                                            name=f"at_{workload.op}_pack")
        return lower_schedule(sch, name=f"at_{workload.op}"), pack


@dataclass(frozen=True)
class LoopTemplate:
    """A template that builds the loop AST itself (``lower(workload, target, config)``);
    it packs nothing."""

    name: str
    family: str
    space: SpaceFn
    lower: Callable[[Workload, Target, Config], PrimFunc]

    def kernel(self, workload: Workload, target: Target, config: Config, prepack: bool
               ) -> tuple[PrimFunc, Optional[PrimFunc]]:
        return self.lower(workload, target, config), None
