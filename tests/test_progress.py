"""Progress of a tuning loop: the rich bar (the CLI's and the library's in a terminal) and
the library's INFO line per batch when stderr is no terminal."""
from __future__ import annotations

import io
import logging
import os
import pty
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import autotune
from autotune.search import Progress
from autotune.search.display import BatchLog, ProgressDisplay, library_progress
from autotune.search.synthetic import SyntheticExecutor, SyntheticObjective

REPO = Path(__file__).resolve().parents[1]
ANSI = re.compile(r"\x1b\[[0-9;?]*[a-zA-Z]")


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_display_draws_a_rich_bar_on_a_tty() -> None:
    stream = Tty()
    bar = ProgressDisplay(stream)
    bar(Progress(5, 10, 12.5, None, 1, ()))
    first = stream.getvalue()
    bar(Progress(10, 10, 13.0, None, 2, ()))
    bar.finish()
    first, text = (ANSI.sub("", t) for t in (first, stream.getvalue()))
    assert "5/10 trials" in first and "best 12.50 GFLOP/s" in first and "errors 1" in first
    assert "10/10 trials" in text and "best 13.00 GFLOP/s" in text and "errors 2" in text
    assert "ETA" in text and text.endswith("\n")
    drawn = stream.getvalue()
    bar.finish()  # a second finish draws nothing
    assert stream.getvalue() == drawn


def test_library_draws_only_on_a_terminal_and_when_asked() -> None:
    assert isinstance(library_progress(True, "x", Tty()), ProgressDisplay)
    assert isinstance(library_progress(False, "x", Tty()), BatchLog)
    assert isinstance(library_progress(True, "x", io.StringIO()), BatchLog)


def test_tune_logs_an_info_line_per_batch_without_a_terminal(
        caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]) -> None:
    wl = autotune.workload("matmul", M=64, N=64, K=64)
    space = autotune.config_space(wl, autotune.Target("llvm"))
    executor = SyntheticExecutor(SyntheticObjective(space, seed=1))
    with caplog.at_level(logging.INFO, logger="autotune"):
        autotune.tune(wl, "llvm", trials=12, tuner="random", batch_size=4, db=None,
                      executor=executor)  # stderr is pytest's capture: not a terminal
    lines = [r.getMessage() for r in caplog.records if r.name == "autotune"]
    batches = [line for line in lines if re.search(r": \d+/12 trials  best", line)]
    assert len(batches) == 3, lines
    assert lines[0].startswith(f"tune {wl}: 4/12 trials  best ") and "GFLOP/s" in lines[0]
    assert "12/12 trials" in batches[-1]
    # then the result in words: the re-timing, the best and the default
    said = lines[len(batches):]
    assert said[0] == f"tune {wl}: 12 trials measured (stopped: budget); errors: none"
    assert any("the template's default config" in line for line in said), said
    assert "trials" not in capsys.readouterr().err  # nothing drawn


SCRIPT = textwrap.dedent("""
    import sys, autotune
    from autotune.measure import LocalExecutor, MeasureOptions
    wl = autotune.workload("matmul", M=32, N=32, K=32)
    # a short timing protocol: the bar is under test, not the kernels
    exe = LocalExecutor(autotune.Target("llvm"), MeasureOptions(repeat=3, min_repeat_ms=5))
    try:
        for progress in (False, True):
            print(f"<{progress}>", file=sys.stderr, flush=True)
            autotune.tune(wl, trials=8, tuner="random", batch_size=4, db=None, executor=exe,
                          progress=progress)
            print(f"</{progress}>", file=sys.stderr, flush=True)
    finally:
        exe.close()
""")


@pytest.mark.timeout(300)
def test_tune_draws_a_bar_on_a_terminal_unless_told_not_to(tmp_path: Path) -> None:
    """A real terminal (a pty as stderr) and real measurements."""
    master, slave = pty.openpty()
    env = {**os.environ, "COLUMNS": "120", "TERM": "xterm"}
    proc = subprocess.Popen([sys.executable, "-c", SCRIPT], cwd=tmp_path, env=env,
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=slave)
    os.close(slave)
    chunks = []
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(master)
    assert proc.wait(timeout=60) == 0, b"".join(chunks)[-3000:]
    raw = b"".join(chunks).decode(errors="replace")
    off = raw[raw.index("<False>"):raw.index("</False>")]
    on = raw[raw.index("<True>"):raw.index("</True>")]
    assert "trials" not in off and "\x1b[" not in off  # progress=False: nothing drawn
    assert "\x1b[" in on  # the terminal got a redrawn bar
    assert re.search(r"8/8 trials\s+best \d+\.\d\d GFLOP/s", ANSI.sub("", on)), on
