"""The final re-timing: the best config so far and the top candidates timed again, together.

One *window* measures its members interleaved, ``RETIME_ROUNDS`` rounds of all of them in
one batch (A B C D A B C D ...), so a slow moment of the machine falls on every member
alike, and ranks them by their *re-timed* figure: the fastest of their rounds' medians in
the window (noise only ever slows a kernel down, and a parallel kernel far more than a
serial one: a round caught by a busy moment must not decide). A re-timed figure is never
pooled with, nor ranked against, a first measurement.

The members are the incumbent (the latest accepted window's winner, when an earlier run
left one, so a new window's winner has beaten it on the same footing), the template's
default config when it has a valid record (a first measurement slowed by a busy moment
must not keep it out: a tuned kernel is never slower than the untuned one), and the ``k``
fastest other valid configs by first measurement.

A window whose median slowdown (re-timed / first cost over its members) exceeds
``NOISE_RATIO``, or in which one member ran ``OUTLIER_RATIO`` times slower than its first
measurement, ran in a slow moment: it is measured again, after a pause, up to
``RETIME_ATTEMPTS`` times, and set aside (``status="noisy"``, no figure changes) if every
attempt was noisy. A window where no member has a valid round is set aside too
(``status="failed"``). A round that crashes or answers wrong disqualifies its config.
"""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, replace
from typing import Any, Callable, Mapping, Optional, Sequence

from autotune.measure.executor import Executor
from autotune.measure.result import ErrorKind, MeasureInput, MeasureResult
from autotune.ops import Workload
from autotune.space import Config
from autotune.target import Target

# Challengers in the window (the incumbent joins them).
DEFAULT_RETIME = 3
# Interleaved rounds, each measuring every member once (its repeats' median); a member's
# figure is the fastest of its rounds.
RETIME_ROUNDS = 3
# A window is noise when its members ran this many times slower than their first
# measurements (median over the members). The slow moment of issue 29 was 2x; of four
# 32-trial matmul 256^3 jobs on a shared 2-core host, three windows were 0.98-1.01x (the
# fourth, 91x on every attempt, was set aside).
NOISE_RATIO = 1.5
# One member this many times slower than its first measurement is noise too: a first
# measurement is itself a median of repeats, so it is not that lucky, while a busy host
# slows a parallel kernel (libgomp's spinning threads losing the CPU) far more than a
# serial one, which a median over the members hides (on a busy 2-core host a parallel
# config first measured at 0.20 ms ran 32 ms in two of its three rounds).
OUTLIER_RATIO = 3.0
# Attempts at a noisy window before it is set aside, and the pause before attempt n
# (n - 1 times this): a slow moment (another process, a frequency drop) often passes.
RETIME_ATTEMPTS = 3
RETIME_PAUSE_S = 1.0

# Re-run failures that mean the kernel itself is broken, not the moment it ran in.
DISQUALIFY = frozenset({ErrorKind.WRONG_ANSWER, ErrorKind.RUNTIME})


@dataclass(frozen=True)
class Retimed:
    """One member of a re-timing window; costs in seconds.

    ``retimed_cost`` is the fastest of its rounds' medians in the window (None when no round
    of it was valid; ``costs``: every repeat of its rounds); ``first_cost`` its first
    measurement's, never pooled with it. ``status``: ``ok`` (the window was accepted: its
    figures rank its members), ``noisy`` (on every attempt the window ran ``ratio`` times
    slower than its members' first measurements, past `retime.NOISE_RATIO`, or one member
    past `retime.OUTLIER_RATIO`: set aside, it changes no figure) or ``failed`` (no member
    had a valid round: set aside too).
    """

    config_index: int
    first_cost: float
    retimed_cost: Optional[float]
    costs: tuple[float, ...] = ()
    error: str = "none"  # a failed round's error kind ("none" when every round was valid)
    error_msg: str = ""
    disqualified: bool = False  # a round crashed or answered wrong: the record stops being valid
    status: str = "ok"
    attempts: int = 1  # how many times the window was measured (noisy ones measured again)
    ratio: Optional[float] = None  # the window's median re-timed / first cost over its members
    measured_by: Optional[Mapping[str, Any]] = None

    def record(self) -> Mapping[str, Any]:
        """What its record keeps in ``extra["retime"]``."""
        out: dict[str, Any] = {"status": self.status, "attempts": self.attempts,
                               "ratio": self.ratio, "first_cost": self.first_cost,
                               "retimed_cost": self.retimed_cost, "costs": list(self.costs)}
        if self.error != "none":
            out["error"], out["error_msg"] = self.error, self.error_msg
        if self.measured_by is not None:
            out["measured_by"] = dict(self.measured_by)
        return out


Record = Callable[[Sequence[Retimed], bool], Any]  # (members, accepted): writes a window


@dataclass(frozen=True)
class Candidate:
    """A valid config and its first measurement's repeats."""

    config: Config
    first: tuple[float, ...]

    @property
    def first_cost(self) -> float:
        return statistics.median(self.first)


@dataclass(frozen=True)
class Standing:
    """The best config by the one ranking: ``retimed`` says whether ``cost`` is a
    re-timed figure (a window's winner) or a first measurement."""

    config: Optional[Config]
    cost: float
    retimed: bool


def run_window(workload: Workload, target: Target, executor: Executor,
               candidates: Sequence[Candidate], incumbent: Optional[tuple[Candidate, float]],
               k: int, record: Optional[Record] = None, default: Optional[Config] = None
               ) -> tuple[tuple[Retimed, ...], Standing]:
    """Re-time (see the module docstring) ``incumbent`` ((candidate, re-timed cost) of the
    latest accepted window's winner, if any), the ``default`` config when it is one of the
    ``candidates`` (last), and the ``k`` fastest other ``candidates`` by first measurement;
    ``record`` writes the window. Returns its members and the standing after it (what the
    database's ranking says once ``record`` wrote it)."""
    ranked = sorted(candidates, key=lambda c: c.first_cost)  # stable: ties keep their order
    standing = _initial(ranked, incumbent)
    held = None if incumbent is None else incumbent[0].config.index
    challengers = [c for c in ranked if c.config.index != held][:k]
    if not challengers:
        return (), standing
    members = ([incumbent[0]] if incumbent is not None else []) + challengers
    if default is not None and all(m.config.index != default.index for m in members):
        members += [c for c in ranked if c.config.index == default.index][:1]
    found = _measure_window(workload, target, executor, members)
    accepted = found[0].status == "ok"
    if record is not None:
        record(found, accepted)
    figures = [(r.retimed_cost, i) for i, r in enumerate(found)
               if r.retimed_cost is not None and not r.disqualified]
    if accepted and figures:
        cost, i = min(figures)
        return tuple(found), Standing(members[i].config, cost, True)
    disqualified = {r.config_index for r in found if r.disqualified}
    if standing.config is not None and standing.config.index in disqualified:
        standing = _initial([c for c in ranked if c.config.index not in disqualified], None)
    return tuple(found), standing


def _initial(ranked: Sequence[Candidate], incumbent: Optional[tuple[Candidate, float]]
             ) -> Standing:
    if incumbent is not None:
        return Standing(incumbent[0].config, incumbent[1], True)
    if ranked:
        return Standing(ranked[0].config, ranked[0].first_cost, False)
    return Standing(None, float("inf"), False)


def _measure_window(workload: Workload, target: Target, executor: Executor,
                    members: Sequence[Candidate]) -> list[Retimed]:
    """Measure ``members`` interleaved, again while the window is noisy; one `Retimed` each."""
    out: list[Retimed] = []
    for attempt in range(1, RETIME_ATTEMPTS + 1):
        if attempt > 1:
            time.sleep(RETIME_PAUSE_S * (attempt - 1))
        inputs = [MeasureInput(workload, target, m.config)
                  for _ in range(RETIME_ROUNDS) for m in members]
        results = list(executor.submit(inputs))
        if len(results) != len(inputs):
            raise RuntimeError(f"executor returned {len(results)} results for "
                               f"{len(inputs)} inputs")
        n = len(members)
        per = [results[i::n] for i in range(n)]  # member i's rounds, in order
        out = [_member(m, rounds, attempt) for m, rounds in zip(members, per)]
        ratios = [r.retimed_cost / m.first_cost for m, r in zip(members, out)
                  if r.retimed_cost is not None and not r.disqualified]
        ratio = statistics.median(ratios) if ratios else None
        noisy = ratio is not None and (ratio > NOISE_RATIO or max(ratios) > OUTLIER_RATIO)
        status = "failed" if ratio is None else "noisy" if noisy else "ok"
        out = [replace(r, ratio=ratio, status=status) for r in out]
        if status != "noisy":
            break
    return out


def _member(member: Candidate, rounds: Sequence[MeasureResult], attempt: int) -> Retimed:
    """One member's figure (the fastest of its valid rounds' medians) from its rounds."""
    costs = tuple(c for res in rounds if res.ok for c in res.costs)
    fastest = min((res.cost for res in rounds if res.ok), default=None)
    failed = [res for res in rounds if not res.ok]
    worst = next((res for res in failed if res.error in DISQUALIFY),
                 failed[0] if failed else None)
    by = next((res.extra["measured_by"] for res in rounds if "measured_by" in res.extra), None)
    disqualified = worst is not None and worst.error in DISQUALIFY
    return Retimed(int(member.config.index), member.first_cost,
                   fastest if not disqualified else None, costs,
                   worst.error.value if worst is not None else "none",
                   worst.error_msg if worst is not None else "", disqualified,
                   attempts=attempt, measured_by=by)


