"""`Executor`: the one seam tuners measure through; `LocalExecutor`: builder pool + runner.

On a CPU target the device is the building CPU, so a batch is built first and timed after
(the pool idles while timing). On a GPU target timing starts as soon as the first build is
done and later builds overlap it. One LocalExecutor may be shared by several threads (the
service's jobs): CPU batches take turns whole; GPU batches take turns on builder and device
separately, so one job's builds overlap another's timing. CPU batches also hold the host's
`HostLock`, so that no other autotune process of this host computes while they time.
Every result records who measured it (`autotune.measure.provenance`).
"""
from __future__ import annotations

import dataclasses
import queue
import threading
import time
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from typing import (
    TYPE_CHECKING,
    Any,
    Callable,
    ContextManager,
    Iterator,
    Optional,
    Protocol,
    Sequence,
)

from autotune.measure.builder import BuildOutcome, LocalBuilder
from autotune.measure.host_lock import HostLock
from autotune.measure.options import MeasureOptions
from autotune.measure.provenance import Provenance, local_provenance, stamped
from autotune.measure.result import (
    STOP_POLL_S,
    MeasureInput,
    MeasureResult,
    ShouldStop,
    check_stop,
)
from autotune.measure.runner import LocalRunner

if TYPE_CHECKING:
    from autotune.codegen.backend import Artifact
    from autotune.target import Target


class Executor(Protocol):
    """Measures batches of candidates; results come back in input order, failures as
    results with an error kind. ``submit`` is the seam; the other methods have defaults
    that an executor overrides where it knows better (implementations subclass this)."""

    def submit(self, inputs: Sequence[MeasureInput]) -> list[MeasureResult]: ...

    def close(self) -> None:
        """Let go of processes and devices (default: nothing held)."""

    def host_work(self) -> ContextManager[Any]:
        """Held by the search loop while it computes on the host (tuner set-up, search, model
        updates), so that no other job times a kernel on this host's cores meanwhile."""
        return nullcontext()

    def preferred_batch(self) -> int:
        """The smallest batch that keeps every device busy (0: no preference)."""
        return 0

    def pinned(self) -> ContextManager["Executor"]:
        """An executor measuring on one device only (the final re-timing compares there)."""
        return nullcontext(self)

    def for_job(self, *, job_id: int, on_wait: Optional[Callable[[Optional[str]], None]] = None,
                should_stop: Optional[Callable[[], bool]] = None) -> "Executor":
        """This executor as one job sees it: one that can say why the job waits
        (``on_wait``) and stop waiting when ``should_stop`` (default: itself)."""
        return self


@dataclass(frozen=True)
class BatchStats:
    """Wall-clock split of one batch (on GPU targets build and run overlap)."""

    n: int
    n_built: int
    n_ok: int
    build_s: float
    run_s: float
    total_s: float


class LocalExecutor(Executor):
    """Builds in a warm pool of spawned processes and times in one device-owning process.

    A ``builder`` or ``runner`` given is used as is (and closed with the executor); else
    they are made from ``options``. ``last_stats`` is the calling thread's last batch.
    ``provenance`` is stamped on every result (default: this host, as ``local:<host>``).
    """

    def __init__(self, target: "Target", options: Optional[MeasureOptions] = None,
                 builder: Optional[LocalBuilder] = None,
                 runner: Optional[LocalRunner] = None,
                 provenance: Optional[Provenance] = None) -> None:
        options = options or MeasureOptions()
        self.target, self.options = target, options
        self.provenance = provenance or local_provenance(target)
        self.builder = builder or LocalBuilder(options.n_build_workers, options.build_timeout)
        self.runner = runner or LocalRunner(target, options)
        self.pipelined = target.kind == "cuda"  # builds may overlap timing: not the same chip
        self._device_lock = threading.Lock()
        self._local = threading.local()

    @property
    def last_stats(self) -> Optional[BatchStats]:
        return getattr(self._local, "stats", None)

    def submit(self, inputs: Sequence[MeasureInput]) -> list[MeasureResult]:
        """Build and time ``inputs``; failed builds are not run. Thread-safe."""
        return self._submit(inputs, None)

    def for_job(self, *, job_id: int, on_wait: Optional[Callable[[Optional[str]], None]] = None,
                should_stop: ShouldStop = None) -> Executor:
        """With ``should_stop``, one whose batches (the final re-timing's included) are given
        up within STOP_POLL_S of it saying so: `MeasureStopped`, and the build workers and
        runner busy with the batch killed (the next batch starts fresh ones)."""
        return self if should_stop is None else _JobExecutor(self, should_stop)

    def _submit(self, inputs: Sequence[MeasureInput],
                should_stop: ShouldStop) -> list[MeasureResult]:
        for inp in inputs:
            if inp.target != self.target:
                raise ValueError(f"LocalExecutor: input target {inp.target} differs from the "
                                 f"executor's {self.target}")
        if not inputs:
            return []
        if self.pipelined:
            return stamped(self._submit_pipelined(inputs, should_stop), self.provenance)
        # CPU: nothing else of ours, in this process or another, runs while a kernel is timed
        with holding(self._device_lock, should_stop), _host_lock(should_stop):
            t0 = time.perf_counter()
            built = _build_once(self.builder, inputs, should_stop)
            t1 = time.perf_counter()
            results = [None if _is_artifact(b) else b for b in built]
            todo = [(i, b) for i, b in enumerate(built) if _is_artifact(b)]
            runs = self.runner.run([(inputs[i], art) for i, art in todo],  # type: ignore[misc]
                                   should_stop)
            for (i, art), res in zip(todo, runs):
                results[i] = _with_build_s(res, art)  # type: ignore[arg-type]
            t2 = time.perf_counter()
        self._record(results, len(todo), t1 - t0, t2 - t1, t2 - t0)  # type: ignore[arg-type]
        return stamped(results, self.provenance)  # type: ignore[arg-type]  # all slots filled

    def _submit_pipelined(self, inputs: Sequence[MeasureInput],
                          should_stop: ShouldStop) -> list[MeasureResult]:
        """Time each artifact as soon as it is built, while the pool builds the rest."""
        t0 = time.perf_counter()
        done: queue.Queue = queue.Queue()
        build_end = [t0]

        def build_all() -> None:
            try:
                for pair in self.builder.build_iter(inputs, should_stop):
                    done.put(pair)
            except BaseException as err:  # surfaced in the submitting thread
                done.put(err)
            build_end[0] = time.perf_counter()
            done.put(None)

        thread = threading.Thread(target=build_all, name="autotune-build-feed", daemon=True)
        thread.start()
        results: list[Optional[MeasureResult]] = [None] * len(inputs)
        order: list[tuple[int, "Artifact"]] = []

        def artifacts() -> Iterator[tuple[MeasureInput, "Artifact"]]:
            while (pair := done.get()) is not None:
                if isinstance(pair, BaseException):
                    raise pair
                i, outcome = pair
                if _is_artifact(outcome):
                    order.append((i, outcome))  # type: ignore[arg-type]
                    yield inputs[i], outcome  # type: ignore[misc]
                else:
                    results[i] = outcome  # type: ignore[assignment]

        run_start: Optional[float] = None
        for k, res in enumerate(self.runner.run_iter(artifacts(), should_stop)):
            run_start = run_start or time.perf_counter() - res.run_s
            i, art = order[k]
            results[i] = _with_build_s(res, art)
        thread.join()
        t2 = time.perf_counter()
        out = [r for r in results if r is not None]
        self._record(out, len(order), build_end[0] - t0, t2 - (run_start or t2), t2 - t0)
        return out

    def _record(self, results: list[MeasureResult], n_built: int, build_s: float, run_s: float,
                total_s: float) -> None:
        self._local.stats = BatchStats(n=len(results), n_built=n_built,
                                       n_ok=sum(r.ok for r in results),
                                       build_s=build_s, run_s=run_s, total_s=total_s)

    def warm_up(self) -> None:
        """Start the build workers and the runner now, not during the first batch."""
        self.builder.warm_up()
        self.runner.warm_up()

    def close(self) -> None:
        """Stop the builder pool and the runner process."""
        self.builder.close()
        self.runner.close()

    def __enter__(self) -> "LocalExecutor":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _JobExecutor(Executor):
    """One job's view of a `LocalExecutor`: its batches stop with the job (`for_job`)."""

    def __init__(self, inner: LocalExecutor, should_stop: Callable[[], bool]) -> None:
        self.inner, self.should_stop = inner, should_stop

    def submit(self, inputs: Sequence[MeasureInput]) -> list[MeasureResult]:
        return self.inner._submit(inputs, self.should_stop)

    def close(self) -> None:
        """Nothing: the view owns no process (its executor's owner closes that)."""
        return None

    def host_work(self) -> ContextManager[Any]:
        return self.inner.host_work()

    def preferred_batch(self) -> int:
        return self.inner.preferred_batch()


@contextmanager
def holding(lock: threading.Lock, should_stop: ShouldStop) -> Iterator[None]:
    """``lock`` held for the block; with ``should_stop``, the wait for it is given up
    (`MeasureStopped`) once that says so."""
    while not lock.acquire(timeout=-1 if should_stop is None else STOP_POLL_S):
        check_stop(should_stop, "waiting for the device")
    try:
        yield
    finally:
        lock.release()


@contextmanager
def _host_lock(should_stop: ShouldStop) -> Iterator[None]:
    lock = HostLock()
    lock.acquire(should_stop)
    try:
        yield
    finally:
        lock.release()


def _build_once(builder: LocalBuilder, inputs: Sequence[MeasureInput],
                should_stop: ShouldStop = None) -> list[BuildOutcome]:
    """``builder.build(inputs)``, building a config that comes more than once in the batch
    (the re-timing's interleaved rounds, A B C A B C) once; its artifact is timed each time."""
    first: dict[object, int] = {}  # build key -> its place in `unique`
    unique: list[MeasureInput] = []
    where: list[int] = []
    for position, inp in enumerate(inputs):
        index = getattr(inp.config, "index", None)  # (configs of test doubles may have none)
        key = (inp.workload.key, index) if index is not None else position
        if key not in first:
            first[key] = len(unique)
            unique.append(inp)
        where.append(first[key])
    built = builder.build(unique, should_stop)
    return [built[i] for i in where]


def _is_artifact(outcome: BuildOutcome) -> bool:
    return not isinstance(outcome, MeasureResult)


def _with_build_s(result: MeasureResult, artifact: "Artifact") -> MeasureResult:
    return dataclasses.replace(result, build_s=float(getattr(artifact, "build_s", 0.0)))
