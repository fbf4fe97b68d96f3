"""`RayExecutor`: the `Executor` seam over a Ray cluster's measurement workers of one target.

    executor = RayExecutor(Target("llvm -mcpu=znver3 -cores=16 -vector-bits=256"),
                           address="head:6379")
    autotune.tune(workload, executor.target, executor=executor)

Batches are spread over every live worker of the target (`Dispatcher`); several executors
of one process share a `WorkerRegistry`. Host-side search holds this host's `HostLock`
(``host_work``), so it never overlaps the timing of a CPU worker on the same host.
"""
from __future__ import annotations

from contextlib import contextmanager, nullcontext
from typing import TYPE_CHECKING, Any, ContextManager, Iterator, Optional, Sequence

from autotune.cluster import ACTOR_PREFIX
from autotune.cluster.dispatch import Dispatcher, OnWait, ShouldStop
from autotune.cluster.registry import WorkerRegistry
from autotune.measure.executor import Executor
from autotune.measure.host_lock import HostLock
from autotune.measure.options import MeasureOptions
from autotune.measure.result import MeasureInput, MeasureResult

if TYPE_CHECKING:
    from autotune.target import Target


class RayExecutor(Executor):
    """Measures ``target``'s candidates on the cluster; results in input order.

    Give ``registry`` to share one between executors (it is then not closed here), or
    ``address`` (HOST:PORT; None: an already initialised Ray, or a local one) to make one.
    """

    def __init__(self, target: "Target", *, address: Optional[str] = None,
                 registry: Optional[WorkerRegistry] = None,
                 options: Optional[MeasureOptions] = None) -> None:
        self.target = target
        self._own_registry = registry is None
        self.registry = registry or WorkerRegistry(address).start()
        self.dispatcher = Dispatcher(self.registry, target.key, options)

    def submit(self, inputs: Sequence[MeasureInput], *, job: Optional[int] = None,
               on_wait: Optional[OnWait] = None,
               should_stop: Optional[ShouldStop] = None) -> list[MeasureResult]:
        """Measure ``inputs`` on the target's live workers (waits while there is none)."""
        self._check(inputs)
        return self.dispatcher.submit(inputs, job=job, on_wait=on_wait, should_stop=should_stop)

    def preferred_batch(self) -> int:
        """The smallest batch that keeps every live worker busy (two chunks each)."""
        return self.dispatcher.preferred_batch()

    def host_work(self) -> ContextManager[Any]:
        """Held while a job computes on this host: a CPU worker here never times meanwhile."""
        return HostLock() if self.target.kind == "llvm" else nullcontext()

    @contextmanager
    def pinned(self) -> Iterator["_Pinned"]:
        """An executor measuring everything on one worker (re-timing compares on one device)."""
        live = self.registry.live(self.target.key)
        yield _Pinned(self, live[0].name if live else None)

    def for_job(self, *, job_id: int, on_wait: Optional[OnWait] = None,
                should_stop: Optional[ShouldStop] = None) -> "JobExecutor":
        """This executor as one job sees it: its chunks name the job, waits are reported,
        and a wait for a worker ends once ``should_stop`` says the job stops."""
        return JobExecutor(self, job_id, on_wait, should_stop)

    def stats(self) -> dict[str, int]:
        return self.dispatcher.stats()

    def close(self) -> None:
        self.dispatcher.close()
        if self._own_registry:
            self.registry.close()

    def _check(self, inputs: Sequence[MeasureInput]) -> None:
        for inp in inputs:
            if inp.target != self.target:
                raise ValueError(f"RayExecutor: input target {inp.target} differs from the "
                                 f"executor's {self.target}")
        if len({inp.workload.key for inp in inputs}) > 1:
            raise ValueError("RayExecutor: a batch must be of one workload")

    def __enter__(self) -> "RayExecutor":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class JobExecutor(Executor):
    """A job's view of a shared `RayExecutor` (closing it leaves the executor running)."""

    def __init__(self, executor: RayExecutor, job_id: Optional[int],
                 on_wait: Optional[OnWait], should_stop: Optional[ShouldStop] = None) -> None:
        self.executor, self.job_id, self.on_wait = executor, job_id, on_wait
        self.should_stop = should_stop

    def submit(self, inputs: Sequence[MeasureInput]) -> list[MeasureResult]:
        return self.executor.submit(inputs, job=self.job_id, on_wait=self.on_wait,
                                    should_stop=self.should_stop)

    def preferred_batch(self) -> int:
        return self.executor.preferred_batch()

    def host_work(self) -> ContextManager[Any]:
        return self.executor.host_work()

    @contextmanager
    def pinned(self) -> Iterator["_Pinned"]:
        with self.executor.pinned() as pinned:
            pinned.job, pinned.on_wait = self.job_id, self.on_wait
            pinned.should_stop = self.should_stop
            yield pinned

    def close(self) -> None:
        """A no-op: the executor is shared."""


class _Pinned(Executor):
    """Submits to one worker (another one if it dies; waits if none is alive)."""

    def __init__(self, executor: RayExecutor, worker: Optional[str]) -> None:
        self.executor, self.worker = executor, worker
        self.job: Optional[int] = None
        self.on_wait: Optional[OnWait] = None
        self.should_stop: Optional[ShouldStop] = None

    def submit(self, inputs: Sequence[MeasureInput]) -> list[MeasureResult]:
        self.executor._check(inputs)
        results = self.executor.dispatcher.submit(inputs, job=self.job, pinned=True,
                                                  pin=self.worker, on_wait=self.on_wait,
                                                  should_stop=self.should_stop)
        # Later rounds stay on whichever worker measured this one.
        who = results[0].extra.get("measured_by", {}) if results else {}
        self.worker = _actor_name(who.get("worker")) or self.worker
        return results

    def close(self) -> None:
        """A no-op: the executor is shared."""


def _actor_name(worker: Optional[str]) -> Optional[str]:
    return ACTOR_PREFIX + worker if worker else None
