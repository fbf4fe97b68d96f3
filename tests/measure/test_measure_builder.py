"""LocalBuilder: timeouts, crashes and exceptions in build workers become typed failures."""
from __future__ import annotations

import pytest

from autotune.codegen.backend import Artifact
from autotune.measure import ErrorKind, LocalBuilder, MeasureInput, MeasureResult
from tests.measure.measure_fakes import CopyWorkload, fake_build

WL = CopyWorkload(32)


def _inputs(*modes: str) -> list[MeasureInput]:
    return [MeasureInput(WL, None, m) for m in modes]


@pytest.fixture(scope="module")
def builder():
    with LocalBuilder(n_workers=2, timeout=1.0, build_fn=fake_build) as b:
        yield b


def test_failures_are_typed_and_order_is_kept(builder):
    modes = ("a", "invalid", "compile_error", "build_hang", "b", "build_crash", "c")
    out = builder.build(_inputs(*modes))
    assert [o.source for o in out if isinstance(o, Artifact)] == ["a", "b", "c"]
    fails = {modes[i]: o for i, o in enumerate(out) if isinstance(o, MeasureResult)}
    assert fails["invalid"].error is ErrorKind.INSTANTIATION
    assert fails["invalid"].error_msg == "tile 7 does not divide 256"
    assert fails["compile_error"].error is ErrorKind.COMPILE
    assert "RuntimeError: codegen exploded" in fails["compile_error"].error_msg
    assert fails["build_hang"].error is ErrorKind.BUILD_TIMEOUT
    assert fails["build_crash"].error is ErrorKind.COMPILE
    assert "build worker died (signal 6)" in fails["build_crash"].error_msg


def test_pool_keeps_working_after_losing_workers(builder):
    builder.build(_inputs("build_hang", "build_crash"))
    out = builder.build(_inputs(*"abcdef"))
    assert [o.source for o in out] == list("abcdef")


def test_build_iter_yields_every_index_once(builder):
    pairs = list(builder.build_iter(_inputs("a", "invalid", "b")))
    assert sorted(i for i, _ in pairs) == [0, 1, 2]
    assert builder.build([]) == []


def test_abandoned_batch_does_not_leak_into_the_next(builder):
    builder.warm_up()
    it = builder.build_iter(_inputs("invalid", "build_hang", "build_hang"))
    next(it)
    it.close()  # two workers still busy with hanging builds: replaced
    out = builder.build(_inputs("x", "y"))
    assert [o.source for o in out] == ["x", "y"]


def _phantom_build_fn():
    """A build function whose module exists only in this process: workers cannot import it."""
    import sys
    import types

    mod = types.ModuleType("autotune_phantom_builds")
    exec("def build(workload, target, config):\n    return None\n", mod.__dict__)
    sys.modules[mod.__name__] = mod
    return mod.build


def test_workers_that_cannot_start_stop_the_batch_with_the_reason():
    from autotune.measure import MeasureUnavailable

    with LocalBuilder(n_workers=1, timeout=1.0, build_fn=_phantom_build_fn()) as b:
        with pytest.raises(MeasureUnavailable, match="No module named 'autotune_phantom_builds'"):
            b.build(_inputs("a", "b"))
