"""A tuning loop's progress for people: a rich bar on a terminal, a line per batch otherwise.

`ProgressDisplay` draws it (the CLI's `autotune tune`, and `autotune.tune` in a terminal);
`BatchLog` logs it on the ``autotune`` logger; `library_progress` picks one for the library.
"""
from __future__ import annotations

import logging
import sys
from typing import IO, TYPE_CHECKING, Any, Optional, Sequence, Union

if TYPE_CHECKING:
    from autotune.search import Progress

log = logging.getLogger("autotune")


def describe(p: "Progress") -> str:
    """One batch's standing in a line: trials, best GFLOP/s, errors."""
    return f"{p.trials_done}/{p.budget} trials  best {p.best_gflops:.2f} GFLOP/s  " \
           f"errors {p.errors}"


class ProgressDisplay:
    """An ``on_batch`` callback: a rich progress bar on a terminal, one plain line per batch
    otherwise (logs and pipes want lines, not redraws)."""

    def __init__(self, stream: IO[str], prefix: str = "autotune") -> None:
        from rich.console import Console

        self.stream, self.prefix = stream, prefix
        self.console = Console(file=stream)
        self._bar: Any = None
        self._task: Any = None

    @property
    def is_terminal(self) -> bool:
        return self.console.is_terminal

    def __call__(self, p: "Progress") -> None:
        if not self.is_terminal:
            self.stream.write(f"{self.prefix}: {describe(p)}\n")
            self.stream.flush()
            return
        if self._bar is None:
            self._start(p.budget)
        self._bar.update(self._task, total=p.budget, completed=min(p.trials_done, p.budget),
                         best=p.best_gflops, errors=p.errors)
        self._bar.refresh()

    def _start(self, budget: int) -> None:
        from rich import progress as rp

        self._bar = rp.Progress(rp.BarColumn(), rp.MofNCompleteColumn(), rp.TextColumn("trials"),
                                rp.TextColumn("best {task.fields[best]:.2f} GFLOP/s"),
                                rp.TextColumn("errors {task.fields[errors]}"),
                                rp.TextColumn("ETA"), rp.TimeRemainingColumn(),
                                console=self.console, auto_refresh=False)
        self._task = self._bar.add_task("tune", total=budget, best=0.0, errors=0)
        self._bar.start()

    def finish(self) -> None:
        """Leave the final bar on screen (a no-op when nothing was drawn)."""
        if self._bar is not None:
            self._bar.stop()
            self._bar = None

    def summary(self, lines: Sequence[str]) -> None:
        """The result in words (`autotune.search.explain.lines`), under the bar."""
        self.finish()
        self.stream.write("".join(f"{line}\n" for line in lines))
        self.stream.flush()


class BatchLog:
    """An ``on_batch`` callback: one INFO line per batch on the ``autotune`` logger."""

    def __init__(self, label: str) -> None:
        self.label = label

    def __call__(self, p: "Progress") -> None:
        log.info("tune %s: %s", self.label, describe(p))

    def finish(self) -> None:
        """Nothing to tidy (as `ProgressDisplay.finish`)."""

    def summary(self, lines: Sequence[str]) -> None:
        """The result in words, a line each."""
        for line in lines:
            log.info("tune %s: %s", self.label, line)


def library_progress(progress: bool, label: str,
                     stream: Optional[IO[str]] = None) -> Union[ProgressDisplay, BatchLog]:
    """What `autotune.tune` shows: a `ProgressDisplay` on ``stream`` (default: stderr) when
    ``progress`` is on and the stream is a terminal, else a `BatchLog`."""
    if progress:
        display = ProgressDisplay(stream or sys.stderr)
        if display.is_terminal:
            return display
    return BatchLog(label)
