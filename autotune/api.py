"""The library API: `tune` a workload, fetch its `best` record, `build` its best kernel.

Workloads may be given as `Workload`, wire dict or JSON; targets as `Target` or spec string;
databases as URL or `Database`. A URL is opened (and migrated) for the call and closed after.
Defaults that `Settings` defines (database URL, measurement options, Ray address, lease) are
read from the environment (``AUTOTUNE_*``) at each call.
"""
from __future__ import annotations

import enum
import math
import threading
import warnings
from contextlib import contextmanager
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path
from typing import (
    TYPE_CHECKING,
    Any,
    Callable,
    Iterable,
    Iterator,
    Mapping,
    NamedTuple,
    Optional,
    Union,
)

from sqlalchemy.engine import make_url

from autotune import driver
from autotune.cluster.factory import make_executor
from autotune.db import Database, TrialRecord
from autotune.db.lease import HeldJob, LeaseKeeper, OwnedStore, held_job, new_owner
from autotune.db.url import checked_url, normalize_url
from autotune.driver import config_space
from autotune.job_options import JobOptions, MeasureOverrides
from autotune.measure.capability import measure_refusal
from autotune.measure.options import MeasureOptions
from autotune.measure.replay import ReplayExecutor
from autotune.measure.result import MeasureUnavailable
from autotune.ops import Workload
from autotune.records import record_from_json
from autotune.search import (
    DEFAULT_BATCH_SIZE,
    DEFAULT_TUNER,
    Progress,
    TuneResult,
    TuningSession,
    explain,
)
from autotune.search.display import library_progress
from autotune.search.loop import drive
from autotune.search.registry import tuner_options as options_table
from autotune.search.store import TrialStore
from autotune.settings import Settings
from autotune.space import Config
from autotune.target import Target

if TYPE_CHECKING:
    from autotune.codegen.kernel import Kernel
    from autotune.measure import MeasureOptions
    from autotune.search.loop import Executor

__all__ = ["SETTINGS_DB", "BestRecord", "NoTunedScheduleWarning", "ServiceError", "TuneResult",
           "best", "build", "build_cache_info", "clear_build_cache", "tune"]


class _FromSettings(enum.Enum):
    DB_URL = "AUTOTUNE_DB_URL"


# The default ``db``: the database at ``Settings().db_url``, read when the call is made.
SETTINGS_DB = _FromSettings.DB_URL

WorkloadArg = Union[Workload, Mapping[str, Any], str]
TargetArg = Union[Target, str]
DbArg = Union[str, Database, None, _FromSettings]


class NoTunedScheduleWarning(UserWarning):
    """`build` found no tuned record and used the template's default config."""


class ServiceError(RuntimeError):
    """The REST service could not answer a `best(url=...)` query."""


@dataclass(frozen=True)
class BestRecord:
    """The best valid record of a workload on a target: its config, and the cost (s) and
    GFLOP/s it is ranked by (its re-timed figure when a re-timing window ranked it)."""

    config: Config
    cost: float
    gflops: float
    record: TrialRecord

    def __repr__(self) -> str:
        figure = "re-timed" if self.record.retimed_cost is not None else "first measurement"
        return (f"BestRecord(config {self.config.index}, {self.gflops:.2f} GFLOP/s, "
                f"{self.cost * 1e3:.4f} ms, {figure})")


def as_workload(workload: WorkloadArg) -> Workload:
    """A `Workload` from itself, its wire dict or its JSON (ValueError naming the bad field)."""
    if isinstance(workload, Workload):
        return workload
    if isinstance(workload, (str, Mapping)):
        return Workload.from_json(workload)
    raise TypeError(f"workload: expected a Workload, dict or JSON string, "
                    f"got {type(workload).__name__}")


def as_target(target: TargetArg) -> Target:
    """A `Target` from itself or its spec string."""
    return target if isinstance(target, Target) else Target(target)


@contextmanager
def open_database(db: DbArg, *, create: bool = True) -> Iterator[Optional[Database]]:
    """The `Database` for a URL (opened and migrated, disposed after) or the one given;
    `SETTINGS_DB` is the URL of ``Settings().db_url``. With ``create=False`` a SQLite file
    that does not exist yields None instead of being made."""
    if db is SETTINGS_DB:
        db = Settings().db_url
    if db is None or isinstance(db, Database):
        yield db
        return

    checked_url(db)  # DatabaseUrlError: one line naming the URL and the fix
    if not create and _missing_sqlite_file(db):
        yield None
        return
    database = Database.open(db) if create else Database(db)
    try:
        yield database if create or database.revision() is not None else None
    finally:
        database.dispose()


def _missing_sqlite_file(url: str) -> bool:
    parsed = make_url(normalize_url(url))
    name = parsed.database or ""
    return (parsed.get_backend_name() == "sqlite" and name not in ("", ":memory:")
            and not name.startswith("file:") and not Path(name).expanduser().exists())


# --- tune ------------------------------------------------------------------------------

def tune(workload: WorkloadArg, target: TargetArg = "llvm", *, trials: int = 200,
         tuner: Optional[str] = None, db: DbArg = SETTINGS_DB,
         early_stopping: Optional[int] = None, batch_size: int = DEFAULT_BATCH_SIZE,
         seed: int = 0, measure_options: Optional["MeasureOptions"] = None,
         executor: Optional["Executor"] = None,
         callbacks: Iterable[Callable[[Progress], Optional[bool]]] = (), transfer: bool = True,
         job_id: Optional[int] = None, owner: Optional[str] = None,
         tuner_options: Optional[Mapping[str, Any]] = None, progress: bool = True) -> TuneResult:
    """Search ``workload``'s schedule space on ``target`` and record every trial in ``db``.

    ``tuner`` defaults to DEFAULT_TUNER; ``transfer`` goes to tuners with that option. Without
    ``job_id`` a job is created, held under a lease (`autotune.db.lease`; the job stops when
    it is cancelled elsewhere, e.g. through a service) and its state kept; with one, only its
    progress is updated and its recorded trials count toward ``trials``, and with ``owner``
    (the lease holder of ``job_id``) each write checks that it still holds the job
    (`autotune.db.lease.LeaseLost` otherwise). ``executor`` defaults to one measuring with
    ``measure_options`` (default: the settings'), on the Ray cluster of ``Settings().ray_address``
    when set, else on this host, and closed at the end; a ReplayExecutor restricts the search
    to its pool. ``db`` defaults to `SETTINGS_DB`; ``db=None`` records nothing. With
    ``progress`` on and stderr a terminal, a progress bar is drawn there; otherwise each batch
    is an INFO line on the ``autotune`` logger. See `autotune.search.tune_loop` for the loop's
    rules.
    """
    wl, tgt = as_workload(workload), as_target(target)
    name = tuner or DEFAULT_TUNER
    opts = tuner_options_of(name, tuner_options, transfer)

    config_space(wl, tgt)  # no template, or a dtype the target refuses: fail before any job
    if executor is None:
        check_measurable(tgt)
        measure_options = measure_options or MeasureOptions.from_settings(Settings())
    # The job's contract, checked before anything runs (a ValueError names the field).
    job = JobOptions(tuner=name, trials=trials, batch_size=batch_size, seed=seed,
                     early_stopping=early_stopping, transfer=transfer, tuner_options=opts,
                     measure=measure_options.overrides() if measure_options is not None
                     else MeasureOverrides())
    with open_database(db) as database, \
            _attached_job(database, wl, tgt, job, job_id, owner) as attached:
        exe = executor if executor is not None else default_executor(tgt, measure_options)
        try:
            result = _run_session(wl, tgt, job, attached, exe, callbacks, progress)
        finally:
            if executor is None:
                exe.close()
        if attached.held is not None:
            attached.held.end("cancelled" if result.stopped == "callback" else "done")
        return result


@dataclass(frozen=True)
class _AttachedJob:
    """Where a `tune` call writes its trials (None: nowhere), its job's id, and the job
    when this call holds it (None: its caller holds it, or there is none)."""

    store: Optional[TrialStore]
    job_id: Optional[int]
    held: Optional[HeldJob]


@contextmanager
def _attached_job(database: Optional[Database], workload: Workload, target: Target,
                  job: JobOptions, job_id: Optional[int], owner: Optional[str]
                  ) -> Iterator[_AttachedJob]:
    """The one way `tune` holds or attaches to a job: without ``job_id``, a new job held
    here under a lease for the block; with one, writes fenced by its ``owner`` (the
    caller holds it) or, without an owner, straight to ``database``."""
    if database is None or job_id is not None:
        store: Optional[TrialStore] = database
        if database is not None and job_id is not None and owner is not None:
            store = OwnedStore(database, job_id, owner)
        yield _AttachedJob(store, job_id, None)
        return
    lease_s = Settings().job_lease_s  # read now: the environment may change
    owner = new_owner()
    created = database.create_job(workload=workload, target=target, tuner=job.tuner,
                                  trials=job.trials, owner=owner, lease_s=lease_s,
                                  options=job.to_json())
    keeper = LeaseKeeper(database, owner, lease_s).start()
    try:
        with held_job(keeper, created.id) as held:
            yield _AttachedJob(held.store, created.id, held)
    finally:
        keeper.stop()


def _run_session(workload: Workload, target: Target, job: JobOptions, attached: _AttachedJob,
                 executor: "Executor", callbacks: Iterable[Callable[[Progress], Optional[bool]]],
                 progress: bool) -> TuneResult:
    """Drive the job's `TuningSession` on ``executor`` to its end, drawing its progress."""
    held = attached.held
    if held is not None:
        # A job held here stops its batch in flight once cancelled (from anywhere).
        executor = executor.for_job(job_id=held.job_id,
                                    should_stop=lambda: held.stopping() is not None)
        callbacks = (*callbacks, held.callback)
    shown = library_progress(progress, str(workload))
    try:
        with tuning_session(workload, target, executor, trials=job.trials, tuner=job.tuner,
                            tuner_options=dict(job.tuner_options), seed=job.seed,
                            db=attached.store, batch_size=job.batch_size,
                            early_stopping=job.early_stopping,
                            job_id=attached.job_id) as session:
            result = drive(session, executor, (*callbacks, shown))
        shown.summary(explain.lines(result))
    finally:
        shown.finish()
    return result


def tuner_options_of(tuner: str, options: Optional[Mapping[str, Any]],
                     transfer: bool) -> dict[str, Any]:
    """``options`` of ``tuner``, with ``transfer`` for a tuner that has that option."""
    opts = dict(options or {})
    if any(opt.name == "transfer" for opt in options_table(tuner)):
        opts.setdefault("transfer", transfer)
    return opts


def tuning_session(workload: Workload, target: Target, executor: "Executor", *, trials: int,
                   tuner: str, tuner_options: Mapping[str, Any], seed: int,
                   db: Optional[TrialStore], batch_size: int = DEFAULT_BATCH_SIZE,
                   early_stopping: Optional[int] = None,
                   job_id: Optional[int] = None) -> TuningSession:
    """The `TuningSession` of one job measured on ``executor`` (whose host lock it holds
    while it computes; a `ReplayExecutor` restricts it to its pool): `tune` drives one, and
    a model run steps one per task."""
    return TuningSession(workload, target, config_space(workload, target), trials=trials,
                         tuner=tuner, tuner_options=tuner_options, seed=seed, db=db,
                         batch_size=batch_size, early_stopping=early_stopping, job_id=job_id,
                         pool=_replay_pool(executor, workload), host_work=executor.host_work)


def _replay_pool(executor: Any, workload: Workload) -> Optional[frozenset[int]]:
    return executor.indices_for(workload) if isinstance(executor, ReplayExecutor) else None


def check_measurable(target: Target, settings: Optional[Settings] = None) -> None:
    """Fail now, with `MeasureUnavailable`, on a target this host cannot measure (a CUDA one
    without nvcc or a GPU of its arch, a CPU one with an ISA extension this CPU lacks):
    every trial would be recorded as failed. ``settings`` (default: read now) say whether a
    Ray cluster measures instead (`measure.capability.measure_refusal`)."""
    reason = measure_refusal(target, ray_address=(settings or Settings()).ray_address)
    if reason:
        raise MeasureUnavailable(reason)


def default_executor(target: Target, measure_options: Optional["MeasureOptions"] = None, *,
                     settings: Optional[Settings] = None) -> "Executor":
    """An executor measuring with ``measure_options`` (default: the settings'): on the Ray
    cluster of ``settings.ray_address`` when set, else on this host. ``settings`` default to
    ``Settings()``, read now."""
    settings = settings or Settings()
    options = measure_options or MeasureOptions.from_settings(settings)
    return make_executor(target, options, ray_address=settings.ray_address)


# --- best ------------------------------------------------------------------------------

def best(workload: WorkloadArg, target: TargetArg = "llvm", *, db: DbArg = SETTINGS_DB,
         url: Optional[str] = None, timeout: float = 10.0) -> Optional[BestRecord]:
    """The best valid record of ``workload`` on ``target``, or None when there is none.

    Records whose config is not one of the template's space (of another version of it, as
    one-row matmuls' were) are skipped, with a warning that counts them: the best of the
    others is the answer. With ``url``, asks the REST service (GET {url}/api/v1/best; 404
    means none) instead of ``db``.
    """
    wl, tgt = as_workload(workload), as_target(target)
    skipped: list[str] = []
    found: Optional[tuple[TrialRecord, Config]] = None
    if url is not None:
        record = _remote_best(url, wl, tgt, timeout)
        found = None if record is None else _valid(record, wl, tgt, skipped)
    else:
        with open_database(db, create=False) as database:
            if database is not None:
                found = first_valid(database, wl, tgt, skipped)
    if skipped:
        warnings.warn(f"autotune.best: skipped {len(skipped)} record(s) of {wl} on {tgt.key} "
                      f"that are not configs of its template's space (first: {skipped[0]})"
                      + ("" if found is None else f"; the best of the others is config "
                                                  f"{found[1].index}"), stacklevel=2)
    if found is None:
        return None
    record, config = found
    cost = float(record.ranked_cost)  # type: ignore[arg-type]  # valid: it has one
    return BestRecord(config, cost, wl.flops() / cost / 1e9, record)


def first_valid(database: Database, workload: Workload, target: Target,
                skipped: list[str]) -> Optional[tuple[TrialRecord, Config]]:
    """The first record of the ranking (`Database.top`) whose config is one of the
    space's, and that config, reading the ranking a page at a time (each 8x the last); why
    each record before it is not goes to ``skipped`` (what `best` and GET /best answer)."""
    seen, k = 0, 8
    while True:
        ranked = database.top(workload, target, k)
        for record in ranked[seen:]:
            found = _valid(record, workload, target, skipped)
            if found is not None:
                return found
        if len(ranked) < k:
            return None
        seen, k = len(ranked), k * 8


def _valid(record: TrialRecord, workload: Workload, target: Target,
           skipped: list[str]) -> Optional[tuple[TrialRecord, Config]]:
    if record.ranked_cost is None:
        return None
    try:
        return record, _config_of(record, workload, target)
    except ValueError as exc:  # the space changed since: tune again
        skipped.append(f"config {record.config_index}: {exc}")
        return None


def _config_of(record: TrialRecord, workload: Workload, target: Target) -> Config:
    """The record's config, validated against the space when this host knows the template."""
    try:
        space = config_space(workload, target)
    except (ValueError, ImportError):
        return Config.from_json(record.config)
    return Config.from_json(record.config, space)


def _remote_best(url: str, workload: Workload, target: Target,
                 timeout: float) -> Optional[TrialRecord]:
    import httpx

    endpoint = url.rstrip("/") + "/api/v1/best"
    try:
        response = httpx.get(endpoint, params={"workload": workload.to_json(),
                                               "target": target.key}, timeout=timeout)
    except httpx.HTTPError as exc:
        raise ServiceError(f"cannot reach the autotune service at {url}: {exc}") from exc
    if response.status_code == 404:
        return None
    if response.status_code != 200:
        raise ServiceError(f"autotune service at {url} answered {response.status_code}: "
                           f"{response.text[:200]}")
    try:
        body = response.json()
        record = record_from_json(body.get("record", body), workload_key=workload.key,
                                  target_key=target.key)
        retimed = body.get("retimed_cost")
        if retimed is None:
            return record
        if not (isinstance(retimed, (int, float)) and 0 < retimed < math.inf):
            raise ValueError(f"retimed_cost must be a positive number of seconds; got {retimed!r}")
        return replace(record, retimed_cost=float(retimed))
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        raise ServiceError(f"autotune service at {url} sent an unexpected body: {exc}") from exc


# --- build -----------------------------------------------------------------------------

class CacheInfo(NamedTuple):
    """Counters of the in-process kernel cache of `build`."""

    hits: int
    misses: int
    size: int


class _KernelCache:
    """Compiled kernels by (workload key, target key, config index); thread-safe."""

    def __init__(self) -> None:
        self._kernels: dict[tuple[str, str, int], "Kernel"] = {}
        self._lock = threading.Lock()
        self.hits = self.misses = 0

    def get(self, key: tuple[str, str, int], make: Callable[[], "Kernel"]) -> "Kernel":
        with self._lock:
            kernel = self._kernels.get(key)
            if kernel is not None:
                self.hits += 1
                return kernel
            self.misses += 1
        kernel = make()  # outside the lock: compiles take a while and may run in parallel
        with self._lock:
            return self._kernels.setdefault(key, kernel)

    def info(self) -> CacheInfo:
        with self._lock:
            return CacheInfo(self.hits, self.misses, len(self._kernels))


@lru_cache(maxsize=1)
def _kernel_cache() -> _KernelCache:
    # Made on first use, not at import.
    return _KernelCache()


def build_cache_info() -> CacheInfo:
    """Hits, misses and size of `build`'s kernel cache."""
    return _kernel_cache().info()


def clear_build_cache() -> None:
    """Drop every cached kernel and reset the counters."""
    _kernel_cache.cache_clear()


def build(workload: WorkloadArg, target: TargetArg = "llvm", *, db: DbArg = SETTINGS_DB,
          url: Optional[str] = None) -> "Kernel":
    """A kernel compiled from the best record, or from the default config with a warning.

    The record lookup runs on every call (it is cheap and the best may change); the compiled
    kernel is cached in-process by (workload, target, config index), so repeats do not compile.
    """
    wl, tgt = as_workload(workload), as_target(target)
    wl.check_target(tgt)  # before the record lookup, whose space check would swallow it
    config = chosen_config(wl, tgt, db=db, url=url)

    def make() -> "Kernel":
        return driver.compile(wl, tgt, config)

    return _kernel_cache().get((wl.key, tgt.key, config.index), make)


def chosen_config(workload: WorkloadArg, target: TargetArg = "llvm", *,
                  db: DbArg = SETTINGS_DB, url: Optional[str] = None) -> Config:
    """The config `build` compiles: the best record's, else the default (with a
    `NoTunedScheduleWarning`)."""
    wl, tgt = as_workload(workload), as_target(target)
    found = best(wl, tgt, db=db, url=url)
    if found is not None:
        return found.config

    config = config_space(wl, tgt).default()
    warnings.warn(f"autotune.build: no tuned schedule for {wl} on {tgt.key}; using the "
                  f"default config (index {config.index})", NoTunedScheduleWarning,
                  stacklevel=3)
    return config
