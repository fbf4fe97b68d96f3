"""A tuning run's result in plain words: which figure is the best and why it differs from
the first measurement, how it compares with the template's default config, and whether the
measurements look noisy. `autotune tune` prints `lines`; `TuneResult`'s repr is `short`."""
from __future__ import annotations

from typing import TYPE_CHECKING, Optional

from autotune.search.retime import NOISE_RATIO, RETIME_ROUNDS

if TYPE_CHECKING:
    from autotune.search.result import TuneResult
    from autotune.search.retime import Retimed


def short(result: "TuneResult") -> str:
    """One line: the best, against the default, and the trials."""
    ran = f"{result.trials} trials, stopped: {result.stopped}"
    if not result.ok:
        return f"no valid config; {ran}"
    figure = "re-timed" if result.best_retimed else "first measurement"
    best = (f"best {result.best_gflops:.2f} GFLOP/s ({figure}), config "
            f"{result.best_config.index if result.best_config is not None else '?'}")
    if result.beat_default is False:
        return f"{best}: the default, nothing beat it; {ran}"
    if result.speedup is not None:
        return f"{best}: {result.speedup:.2f}x the default; {ran}"
    return f"{best}; {ran}"


def lines(result: "TuneResult") -> list[str]:
    """What `autotune tune` prints after the run, one sentence a line."""
    errors = ", ".join(f"{kind} {n}" for kind, n in sorted(result.errors.items())) or "none"
    out = [f"{result.trials} trials measured (stopped: {result.stopped}); errors: {errors}"]
    window = _window(result)
    if window:
        out.append(window)
    if not result.ok:
        return out
    out.append(_best(result))
    versus = _versus_default(result)
    if versus:
        out.append(versus)
    noise = noisy(result)
    if noise:
        out.append(f"The measurements look noisy: {noise}. Tune again on a quieter host, or "
                   f"raise AUTOTUNE_REPEAT and AUTOTUNE_MIN_REPEAT_MS.")
    return out


def noisy(result: "TuneResult") -> Optional[str]:
    """Why the run's measurements look noisy, or None: a re-timing window set aside as
    noisy, or a config that re-timed much faster than its first measurement (a busy moment
    slowed that one)."""
    if not result.retimed:
        return None
    head = result.retimed[0]
    if head.status == "noisy" and head.ratio is not None:
        return (f"the re-timing ran {head.ratio:.2f}x as long as the first measurements on "
                f"each of {head.attempts} attempts")
    slowed = [(r.first_cost / r.retimed_cost, r) for r in result.retimed
              if r.retimed_cost and not r.disqualified
              and r.first_cost > NOISE_RATIO * r.retimed_cost]
    if not slowed:
        return None
    times, member = max(slowed, key=lambda pair: pair[0])
    return (f"config {_name(result, member)}'s first measurement took {times:.2f}x as long as "
            f"it did when re-timed")


def _name(result: "TuneResult", member: "Retimed") -> str:
    return (f"{member.config_index} (the default)" if member.config_index == result.default_index
            else str(member.config_index))


def _window(result: "TuneResult") -> Optional[str]:
    if not result.retimed:
        return None
    flops = _flops(result)
    head = result.retimed[0]
    cells = ", ".join(
        f"{_name(result, r)} {flops / r.first_cost / 1e9:.2f} -> "
        + (f"{flops / r.retimed_cost / 1e9:.2f}" if r.retimed_cost and flops else r.error)
        for r in result.retimed)
    said = (f"Re-timed {len(result.retimed)} configs side by side, {RETIME_ROUNDS} interleaved "
            f"rounds each (config: GFLOP/s first -> re-timed, the fastest round): {cells}.")
    ratio = f"{head.ratio:.2f}x" if head.ratio is not None else "?"
    if head.status == "ok":
        return (f"{said} They ran {ratio} as long as at their first measurements, so these "
                "figures rank them.")
    if head.status == "noisy":
        return (f"{said} Set aside: they ran {ratio} as long as at their first measurements "
                f"(more than {NOISE_RATIO}x) on each of {head.attempts} attempts, a busy "
                "host; no figure changes.")
    return f"{said} Set aside: no config ran validly in it."


def _best(result: "TuneResult") -> str:
    index = result.best_config.index if result.best_config is not None else "?"
    best = (f"Best: config {index}, {result.best_gflops:.2f} GFLOP/s "
            f"({result.best_cost * 1e3:.4f} ms)")
    if not result.best_retimed:
        return f"{best}, its first measurement."
    if all(r.config_index != index for r in result.retimed):
        return f"{best}, its re-timed figure from an earlier run's window."
    shown = f" (the fastest, {result.history[-1][2]:.2f})" if result.history else ""
    return (f"{best}, its re-timed figure. The progress showed first measurements{shown}: "
            "a kernel timed again runs faster or slower with the host's load, so the best "
            "is the fastest of the candidates timed side by side.")


def _versus_default(result: "TuneResult") -> Optional[str]:
    if result.beat_default is None or result.default_gflops is None:
        return None
    if not result.beat_default:
        return (f"Nothing beat the template's default config in {result.trials} trials: "
                f"it stays the best ({result.default_gflops:.2f} GFLOP/s).")
    return (f"The best runs {result.speedup:.2f}x as fast as the template's default config "
            f"({result.default_gflops:.2f} GFLOP/s on the same footing).")


def _flops(result: "TuneResult") -> float:
    return result.best_gflops * 1e9 * result.best_cost if result.ok else 0.0
