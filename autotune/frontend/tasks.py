"""What extraction finds in a model: tasks (distinct workloads with their weights) and the
operators it could not map, each named by where it sits in the traced graph."""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

import numpy as np

from autotune.ops import Workload


@dataclass(frozen=True)
class Task:
    """One distinct workload of a model: ``weight`` is how many times one forward runs it;
    ``nodes`` name its places in the graph (the first node of each fused group)."""

    workload: Workload
    weight: int
    nodes: tuple[str, ...]

    @property
    def name(self) -> str:
        return str(self.workload)

    def to_dict(self) -> dict[str, Any]:
        return {"workload": self.workload.to_dict(), "weight": self.weight,
                "nodes": list(self.nodes)}


@dataclass(frozen=True)
class Unsupported:
    """An operator autotune has no kernel for, left to torch: its node, kind and why."""

    node: str
    op: str
    reason: str

    def to_dict(self) -> dict[str, str]:
        return {"node": self.node, "op": self.op, "reason": self.reason}


@dataclass(frozen=True)
class ModelTasks:
    """The tasks of a model (largest FLOP share first) and what stays in torch unsupported."""

    name: str
    tasks: tuple[Task, ...]
    unsupported: tuple[Unsupported, ...]

    @property
    def fingerprint(self) -> str:
        """A stable id of the task set (workloads and weights): a model run's resume key."""
        body = json.dumps(sorted((t.workload.key, t.weight) for t in self.tasks))
        return hashlib.sha1(body.encode()).hexdigest()

    def flops(self) -> int:
        """FLOPs of one forward pass over the tasks (what torch keeps is not counted)."""
        return sum(t.weight * t.workload.flops() for t in self.tasks)


@dataclass(frozen=True)
class Match:
    """A group of graph nodes one kernel replaces: ``nodes`` (fx node names: main op, then a
    BatchNorm, a residual add and a ReLU or ReLU6 when fused), the nodes feeding its activation
    ``inputs`` (the main op's, then the residual's), and its constant ``params`` in kernel
    order (folded weight, then per-channel epilogue vectors; none for matmuls of two
    activations). The kernel takes ``inputs[0]``, ``params``, ``inputs[1:]``: the residual
    is the last epilogue argument. ``place`` names the main op (its module's path).
    ``cast``: a float32 activation is cast to the workload's half dtype first (autocast)."""

    workload: Workload
    nodes: tuple[str, ...]
    inputs: tuple[str, ...]
    params: tuple[np.ndarray, ...]
    kind: str  # "conv", "linear", "matmul", "pool", "avgpool", "gate", "affine" or
    # "shuffle"
    place: str
    cast: bool = False
