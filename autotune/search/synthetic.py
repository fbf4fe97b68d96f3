"""A synthetic objective over any `ConfigSpace`: tuners tested and compared without hardware.

`SyntheticExecutor` implements the Executor protocol with a smooth, deterministic cost of a
config's knob positions (a bowl around a seeded optimum) and a deterministic share of failed
configs. `synthetic_records` turns a sample of the space into exported-record dicts for
`ReplayExecutor`.
"""
from __future__ import annotations

import zlib
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from autotune.measure.executor import Executor
from autotune.measure.result import ErrorKind, MeasureInput, MeasureResult

if TYPE_CHECKING:
    from autotune.space import Config, ConfigSpace


class SyntheticObjective:
    """cost(config) = base * (1 + sharpness * mean squared distance to the optimum in [0, 1]^d)."""

    def __init__(self, space: "ConfigSpace", *, seed: int = 0, base: float = 1e-3,
                 sharpness: float = 20.0, fail_rate: float = 0.0) -> None:
        # Not default_rng(seed): a tuner seeded alike would draw the optimum first.
        rng = np.random.default_rng([seed, 0x5EED])
        self.space, self.base, self.sharpness, self.fail_rate = space, base, sharpness, fail_rate
        self._span = np.maximum(np.asarray(space.dims, dtype=float) - 1, 1)
        self.optimum = rng.integers(0, np.asarray(space.dims))  # knob positions of the best
        self._salt = seed

    def cost(self, config: "Config") -> float:
        """Seconds per call of ``config`` (the optimum costs ``base``)."""
        digits = self.space.encode([config])[0]
        dist = ((digits - self.optimum) / self._span) ** 2
        return self.base * (1.0 + self.sharpness * float(dist.mean()))

    def fails(self, config: "Config") -> bool:
        """Whether ``config`` fails to compile (deterministic per index, never the optimum)."""
        if self.fail_rate <= 0:
            return False
        h = zlib.crc32(f"{self._salt}:{config.index}".encode()) / 2**32
        return h < self.fail_rate and self.cost(config) > self.base

    @property
    def best_cost(self) -> float:
        return self.base


class SyntheticExecutor(Executor):
    """Executor protocol over a `SyntheticObjective`; counts what it was asked to measure."""

    def __init__(self, objective: SyntheticObjective, repeats: int = 3) -> None:
        self.objective, self.repeats = objective, repeats
        self.submitted: list[int] = []  # config indices, in order
        self.batches: list[int] = []  # batch sizes
        self.closed = False

    def submit(self, inputs: Sequence[MeasureInput]) -> list[MeasureResult]:
        """A result per input: the cost with +-1% spread over repeats, or a COMPILE failure."""
        out = []
        for inp in inputs:
            self.submitted.append(inp.config.index)
            if self.objective.fails(inp.config):
                out.append(MeasureResult.failure(ErrorKind.COMPILE, "synthetic failure"))
                continue
            c = self.objective.cost(inp.config)
            spread = np.linspace(0.99, 1.01, self.repeats) if self.repeats > 1 else [1.0]
            out.append(MeasureResult(costs=tuple(float(c * s) for s in spread)))
        self.batches.append(len(inputs))
        return out

    def close(self) -> None:
        self.closed = True


def synthetic_records(objective: SyntheticObjective, workload: Any, target: Any,
                      configs: Sequence["Config"]) -> list[dict[str, Any]]:
    """Exported-record dicts (the JSON-lines form) of ``configs`` measured synthetically."""
    results = SyntheticExecutor(objective).submit(
        [MeasureInput(workload, target, c) for c in configs])
    flops = workload.flops()
    return [{
        "workload": workload.to_dict(), "target": target.key, "config": cfg.to_dict(),
        "costs": list(res.costs), "cost": res.cost if res.ok else None,
        "gflops": flops / res.cost / 1e9 if res.ok else None, "error": res.error.value,
        "error_msg": res.error_msg,
    } for cfg, res in zip(configs, results)]
