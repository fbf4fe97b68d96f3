"""Generated code is made by worker processes, not by threads of the service: a stuck or
killed worker costs one answer, never the service's event loop."""
from __future__ import annotations

import asyncio
import os
import signal

from autotune import config_space
from autotune.ops import Workload
from autotune.service.sources import SourceCache, SourceError, SourceWorkers
from autotune.target import Target
from tests.spaces import valid_configs

MATMUL = Workload.from_dict({"op": "matmul", "params": {"M": 32, "N": 32, "K": 32}})


def _config(n: int) -> dict:
    """The ``n``th of four configs valid on this host."""
    return valid_configs(config_space(MATMUL, Target("llvm")), 4)[n].to_dict()


def test_sources_are_made_in_a_worker_process_and_cached() -> None:
    async def main() -> None:
        cache = SourceCache(timeout_s=60)
        try:
            ir = await cache.get(MATMUL, Target("llvm"), _config(1), "source")
            loop = await cache.get(MATMUL, Target("llvm"), _config(1), "loop")
            assert ir.error is None and "define" in (ir.text or "")
            assert loop.error is None and "for " in (loop.text or "")
            assert cache.stats()["made"] == 2
            assert (await cache.get(MATMUL, Target("llvm"), _config(1), "loop")) == loop
            assert cache.stats()["made"] == 2  # the third answer came from the cache
        finally:
            cache.close()

    asyncio.run(main())


def test_a_killed_worker_costs_one_answer_and_is_replaced() -> None:
    workers = SourceWorkers(1)
    try:
        assert "define" in workers(MATMUL, Target("llvm"), _config(0), "source")
        pid = workers._all[0].pid
        assert pid is not None and pid != os.getpid()
        os.kill(pid, signal.SIGKILL)
        try:
            workers(MATMUL, Target("llvm"), _config(2), "source")
            raise AssertionError("a dead worker answered")
        except SourceError as err:
            assert "died" in str(err)
        assert "define" in workers(MATMUL, Target("llvm"), _config(2), "source")
        assert workers._all[0].pid not in (None, pid)
    finally:
        workers.close()


def test_a_worker_over_its_limit_is_abandoned() -> None:
    workers = SourceWorkers(1, limit_s=0.001)  # no source is made that fast
    try:
        try:
            workers(MATMUL, Target("llvm"), _config(3), "source")
            raise AssertionError("answered within 1 ms")
        except SourceError as err:
            assert "abandoned" in str(err)
        assert not workers._all[0].started  # killed; the next task starts a fresh one
    finally:
        workers.close()


def test_a_failure_of_the_source_is_an_answer_not_an_exception() -> None:
    async def main() -> None:
        cache = SourceCache(timeout_s=60)
        try:
            bad = await cache.get(MATMUL, Target("llvm"), {"index": 0, "knobs": {"x": 1}},
                                  "source")
            assert bad.text is None and bad.error
        finally:
            cache.close()

    asyncio.run(main())
