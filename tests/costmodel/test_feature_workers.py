"""FeatureWorkers: the same rows as one process, and nothing lost when a worker dies or hangs."""
import logging
import os
import signal
import time

import numpy as np
import pytest

import autotune
from autotune.costmodel import workers as workers_mod
from autotune.costmodel.cache import FeatureCache, features_for
from autotune.costmodel.workers import MIN_CHUNK, FeatureWorkers, auto_workers, chunk_rows, cut
from autotune.driver import config_space
from autotune.target import Target

TARGET = Target("llvm -mcpu=skylake-avx512 -cores=2")
CONV = autotune.workload("conv2d", N=1, C=16, H=14, W=14, K=32, R=3, S=3, stride=1, pad=1)


@pytest.fixture
def pool():
    w = FeatureWorkers(1, chunk=4, min_batch=8)
    w.start(wait=True)
    yield w
    w.close()


def _configs(n, seed=0):
    return config_space(CONV, TARGET).sample(np.random.default_rng(seed), n)


def _slow_local(indices):
    """The caller's rows, slowly (50 ms a row, far slower than a worker even on a busy host):
    the workers must take their share of the batch."""
    time.sleep(0.05 * len(indices))
    return chunk_rows(CONV, TARGET, indices)


def _same(a, b):
    return a.shape == b.shape and np.array_equal(a, b, equal_nan=True)


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie still answers signal 0
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[1][0] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.serial  # the worker must win a share of the batch against the caller
def test_pooled_rows_are_the_rows_of_one_process(pool):
    configs = _configs(120)
    alone = features_for(CONV, TARGET, configs, "ast", FeatureCache(200))
    assert np.isnan(alone).all(axis=1).any()  # failing configs are in the batch too
    for _ in range(5):  # a busy host may let the caller take every chunk before the worker
        shared = features_for(CONV, TARGET, configs, "ast", FeatureCache(200), workers=pool)
        assert np.array_equal(alone, shared, equal_nan=True)
        if pool.stats["by_workers"]:
            break
    assert pool.stats["by_workers"] > 0


def test_workers_take_a_share_when_the_caller_is_busy(pool):
    indices = [c.index for c in _configs(40)]
    rows = pool.rows(CONV, TARGET, indices, _slow_local)
    assert _same(rows, chunk_rows(CONV, TARGET, indices))
    assert pool.stats["by_workers"] >= 12  # of 40: a share, though another test loads the host


def test_small_batches_start_no_process():
    w = FeatureWorkers(2, min_batch=48)
    configs = _configs(20)
    features_for(CONV, TARGET, configs, "ast", FeatureCache(50), workers=w)
    assert w.pids == [] and w.stats["batches"] == 0


def test_a_killed_worker_loses_no_row_and_is_replaced(pool, caplog):
    indices = [c.index for c in _configs(40, seed=1)]
    expect = chunk_rows(CONV, TARGET, indices)
    (pid,) = pool.pids
    os.kill(pid, signal.SIGKILL)
    with caplog.at_level(logging.WARNING, logger=workers_mod.__name__):
        rows = pool.rows(CONV, TARGET, indices, _slow_local)
    assert _same(rows, expect)
    assert pool.deaths == 1 and "feature worker lost" in caplog.text
    again = pool.rows(CONV, TARGET, indices, _slow_local)  # a new worker starts
    assert _same(again, expect)
    assert pool.pids and pool.pids != [pid]


def test_a_hung_worker_does_not_hold_the_batch(pool):
    indices = [c.index for c in _configs(40, seed=2)]
    (pid,) = pool.pids
    os.kill(pid, signal.SIGSTOP)
    try:
        t0 = time.monotonic()
        rows = pool.rows(CONV, TARGET, indices, _slow_local)
        assert time.monotonic() - t0 < 10  # (HANG_S is 60: the caller took its chunks back)
        assert _same(rows, chunk_rows(CONV, TARGET, indices))
    finally:
        pool.close()  # kills it even while stopped
    deadline = time.monotonic() + 5
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(pid)


def test_an_error_in_a_worker_is_raised_by_the_caller(pool):
    size = config_space(CONV, TARGET).size

    def local(indices):
        return chunk_rows(CONV, TARGET, indices)

    with pytest.raises((ValueError, IndexError)):
        pool.rows(CONV, TARGET, [size + k for k in range(20)], local)
    # the pool still works after it
    indices = [c.index for c in _configs(20, seed=3)]
    assert len(pool.rows(CONV, TARGET, indices, local)) == 20


def test_close_and_collection_end_the_processes():
    w = FeatureWorkers(1)
    w.start(wait=True)
    (pid,) = w.pids
    w.close()
    assert w.pids == [] and not _alive(pid)
    w = FeatureWorkers(1)
    w.start(wait=True)
    (pid,) = w.pids
    del w  # an owner that forgot close()
    deadline = time.monotonic() + 5
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(pid)


def test_auto_workers_leaves_a_core_to_the_caller():
    cores = len(os.sched_getaffinity(0))
    assert auto_workers() == max(0, min(cores - 1, workers_mod.MAX_AUTO))
    with pytest.raises(ValueError, match="n >= 0"):
        FeatureWorkers(-1)


@pytest.mark.parametrize("n,size,parties", [(300, 16, 2), (300, 16, 4), (50, 16, 2), (7, 16, 2),
                                            (40, 4, 2), (1, 16, 1)])
def test_chunks_cover_the_batch_and_shrink_towards_its_end(n, size, parties):
    chunks = cut(n, size, parties)
    assert [i for s in chunks for i in range(n)[s]] == list(range(n))
    lengths = [s.stop - s.start for s in chunks]
    assert max(lengths) <= size
    assert lengths == sorted(lengths, reverse=True)
    assert min(lengths[:-1], default=MIN_CHUNK) >= min(MIN_CHUNK, size)
    if n >= 4 * size * parties:  # a long batch starts with full chunks and ends with short ones
        assert lengths[0] == size and lengths[-1] <= MIN_CHUNK
