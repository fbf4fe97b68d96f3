"""The runner's side: load each artifact, check it against the reference, time it.

Per task ``(artifact, workload, options)`` it replies ``("started",)`` once the workload's
data is ready (the parent's run timeout starts then), then ``("result", MeasureResult)``.
"""
from __future__ import annotations

import os
import time
from multiprocessing.connection import Connection
from typing import Any, Callable

from autotune.measure.build_worker import describe
from autotune.measure.correctness import WorkloadData, check_output, workload_dtype
from autotune.measure.options import MeasureOptions
from autotune.measure.result import ErrorKind, MeasureResult
from autotune.measure.timing import CacheFlusher, kernel_timer, time_repeats
from autotune.process.child import child_setup, tasks

LoadFn = Callable[[Any, Any], Any]
_BUDGET_SHARE = 0.8  # of run_timeout: stop repeating in time to answer before the parent kills


def serve(conn: Connection, target: Any, load_fn: LoadFn) -> None:
    """Runner main loop; leaves with ``os._exit`` so no kernel thread pool outlives its code."""
    child_setup()
    data, flusher = WorkloadData(), CacheFlusher()
    for artifact, workload, options in tasks(conn):
        try:
            data.prepare(workload, options.seed)
        except Exception as err:
            msg = f"inputs or reference failed: {describe(err)}"
            conn.send(("result", MeasureResult.failure(ErrorKind.RUNTIME, msg)))
            continue
        conn.send(("started",))
        result = measure(artifact, workload, target, options, load_fn, data, flusher)
        conn.send(("result", result))
    conn.close()
    os._exit(0)  # skip interpreter teardown: JIT engines and OpenMP pools die with us


def measure(artifact: Any, workload: Any, target: Any, options: MeasureOptions,
            load_fn: LoadFn, data: WorkloadData, flusher: CacheFlusher) -> MeasureResult:
    """Load, check, time one candidate; every failure becomes a typed result."""
    deadline = time.perf_counter() + options.run_timeout * _BUDGET_SHARE
    try:
        kernel = load_fn(artifact, target)
    except Exception as err:
        return MeasureResult.failure(ErrorKind.RUNTIME, f"load failed: {describe(err)}")
    args, ref = data.fresh_args(workload, options.seed)
    try:
        kernel(*args)
    except Exception as err:
        return MeasureResult.failure(ErrorKind.RUNTIME, describe(err))
    if options.check_correctness:
        wrong = check_output(args[-1], ref, options.rtol, options.atol,
                             workload_dtype(workload))
        if wrong:
            return MeasureResult.failure(ErrorKind.WRONG_ANSWER, wrong)
    flush = flusher if options.flush_cache and getattr(target, "kind", "llvm") == "llvm" else None
    try:
        timing = time_repeats(kernel_timer(kernel, args), number=options.number,
                              repeat=options.repeat, min_repeat_s=options.min_repeat_ms / 1e3,
                              warmup=options.warmup, deadline=deadline, flush=flush)
    except Exception as err:
        return MeasureResult.failure(ErrorKind.RUNTIME, describe(err))
    extra: dict[str, Any] = {"number": timing.number}
    if timing.truncated:
        extra["truncated"] = True
    return MeasureResult(costs=timing.costs, extra=extra)
