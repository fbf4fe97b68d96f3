"""The final re-timing (`autotune.search.retime`, run by tune_loop): one window timing its
members interleaved, re-timed figures kept apart from first measurements, a noisy window
measured again or set aside, and one ranking for the loop's result, the job and the store."""
from __future__ import annotations

import dataclasses

import pytest

from autotune.measure.result import ErrorKind, MeasureResult
from autotune.search import retime, tune_loop
from autotune.search.explain import lines
from autotune.search.retime import RETIME_ATTEMPTS, RETIME_ROUNDS
from autotune.search.synthetic import SyntheticObjective
from tests.search.search_cases import SlowDefaultFirst, SlowRetiming, make_space

TRIALS = 32


@pytest.fixture(autouse=True)
def short_pauses(monkeypatch: pytest.MonkeyPatch) -> None:
    # The pause before measuring a noisy window again lets a real slow moment pass; the
    # fake executor's slowness lasts a number of batches, not seconds.
    monkeypatch.setattr(retime, "RETIME_PAUSE_S", 0.01)


def _records(db, wl, target):
    return {r.config_index: r for r in db.trials_for(wl, target)}


def _fastest(db, wl, target):
    """The fastest first measurement recorded, and its config index."""
    valid = [r for r in db.trials_for(wl, target) if r.ok]
    best = min(valid, key=lambda r: (r.cost, r.id))
    return best.cost, best.config_index


def test_a_window_times_its_members_interleaved_and_keeps_first_measurements(
        wl, target, space, objective, db):
    executor = SlowRetiming(objective, after=TRIALS, slow=0)
    result = tune_loop(wl, target, space, executor, tuner="ga", trials=TRIALS, db=db)
    assert result.trials == TRIALS and len(result.history) == TRIALS  # re-runs are no trials
    members = [r.config_index for r in result.retimed]
    assert len(members) == 4
    assert executor.late_batches == [members * RETIME_ROUNDS]  # A B C D A B C D ..., one batch
    records = _records(db, wl, target)
    valid = sorted((r for r in records.values() if r.ok), key=lambda r: (r.cost, r.id))
    # the 3 fastest by first measurement, and the default (measured first) after them
    assert members == [r.config_index for r in valid[:3]] + [space.default().index]
    for member in result.retimed:
        record = records[member.config_index]
        assert record.costs == pytest.approx([objective.cost(space.get(member.config_index))
                                              * s for s in (0.99, 1.0, 1.01)])
        assert record.retimed_cost == pytest.approx(member.retimed_cost)
        assert record.extra["retime"]["status"] == "ok"
        assert len(record.extra["retime"]["costs"]) == 3 * RETIME_ROUNDS
    assert all(r.retimed_cost is None for i, r in records.items() if i not in members)
    best = db.best(wl, target)
    assert best.config_index == result.best_config.index
    assert best.ranked_cost == pytest.approx(result.best_cost)


def test_a_slow_window_is_measured_again_never_pooled(wl, target, space, objective, db):
    job = db.create_job(workload=wl, target=target, tuner="ga", trials=TRIALS, options={})
    executor = SlowRetiming(objective, after=TRIALS, slow=1)  # 2x slow on the first attempt
    result = tune_loop(wl, target, space, executor, tuner="ga", trials=TRIALS, db=db,
                       job_id=job.id)
    assert len(executor.late_batches) == 2
    assert {(r.status, r.attempts) for r in result.retimed} == {("ok", 2)}
    assert result.retimed[0].ratio == pytest.approx(1.0)
    fastest, index = _fastest(db, wl, target)
    # The winner's figure is its re-timed one in the quiet attempt: neither the slow
    # attempt's nor a median pooled with its first measurement (1.5x slow here).
    assert result.best_config.index == index
    assert result.best_cost == pytest.approx(fastest)
    best = db.best(wl, target)
    assert best.config_index == index and best.ranked_cost == pytest.approx(fastest)
    assert db.get_job(job.id).best_gflops == pytest.approx(best.ranked_gflops)
    assert result.best_gflops == pytest.approx(best.ranked_gflops)


def test_a_window_slow_on_every_attempt_is_set_aside(wl, target, space, objective, db):
    job = db.create_job(workload=wl, target=target, tuner="ga", trials=TRIALS, options={})
    executor = SlowRetiming(objective, after=TRIALS, slow=99)
    result = tune_loop(wl, target, space, executor, tuner="ga", trials=TRIALS, db=db,
                       job_id=job.id)
    assert len(executor.late_batches) == RETIME_ATTEMPTS
    assert {(r.status, r.attempts) for r in result.retimed} == {("noisy", RETIME_ATTEMPTS)}
    assert result.retimed[0].ratio == pytest.approx(2.0)
    records = _records(db, wl, target)
    assert all(r.retimed_cost is None for r in records.values())  # no figure changed
    for member in result.retimed:
        assert records[member.config_index].extra["retime"]["status"] == "noisy"
    # Nothing was re-timed on a trusted footing: first measurements rank, among themselves.
    fastest, index = _fastest(db, wl, target)
    assert result.best_config.index == index and result.best_cost == pytest.approx(fastest)
    assert db.best(wl, target).ranked_cost == pytest.approx(fastest)
    assert db.get_job(job.id).best_gflops == pytest.approx(wl.flops() / fastest / 1e9)


def test_the_window_ranks_by_re_timed_figures_only(wl, target, space, objective, db):
    class Lucky(SlowRetiming):
        """The fastest first measurement was a lucky one: it re-times 1.3x slower."""

        def submit(self, inputs):
            results = super().submit(inputs)
            if not self.late_batches:
                return results
            lucky = inputs[0].config.index  # the window's first member: fastest first
            return [dataclasses.replace(r, costs=tuple(1.3 * c for c in r.costs))
                    if i.config.index == lucky else r for i, r in zip(inputs, results)]

    result = tune_loop(wl, target, space, Lucky(objective, after=TRIALS, slow=0), tuner="ga",
                       trials=TRIALS, db=db)
    lucky, second = result.retimed[0], result.retimed[1]
    assert lucky.retimed_cost == pytest.approx(1.3 * lucky.first_cost)
    assert lucky.first_cost < second.first_cost < lucky.retimed_cost  # so it loses
    assert result.best_config.index == second.config_index
    assert db.best(wl, target).config_index == second.config_index


class Busy(SlowRetiming):
    """A busy host slows the window's first member (a parallel kernel, say) ``factor`` times
    in the given rounds of the first ``slow`` late batches; the others run as they did."""

    def __init__(self, objective, *, rounds, factor, **kwargs):
        super().__init__(objective, factor=1.0, **kwargs)  # nothing else slowed
        self.rounds, self.busy = rounds, factor

    def submit(self, inputs):
        results = super().submit(inputs)
        if not self.late_batches or len(self.late_batches) > self.slow:
            return results
        first = inputs[0].config.index
        picks = [k for k, i in enumerate(inputs) if i.config.index == first]
        for r in self.rounds:
            k = picks[r]
            results[k] = dataclasses.replace(
                results[k], costs=tuple(self.busy * c for c in results[k].costs))
        return results


def test_a_round_caught_by_a_busy_moment_does_not_decide(wl, target, space, objective, db):
    executor = Busy(objective, rounds=(1, 2), factor=5.0, after=TRIALS, slow=1)
    result = tune_loop(wl, target, space, executor, tuner="ga", trials=TRIALS, db=db)
    head = result.retimed[0]
    assert (head.status, head.attempts) == ("ok", 1)
    # two of its three rounds ran 5x slow: the median of its repeats would say so
    assert sorted(head.costs)[len(head.costs) // 2] == pytest.approx(5 * head.first_cost,
                                                                     rel=0.02)
    assert head.retimed_cost == pytest.approx(head.first_cost, rel=0.02)  # its fast round
    assert result.best_config.index == head.config_index


def test_one_member_far_slower_than_its_first_measurement_is_noise(wl, target, space,
                                                                   objective, db):
    # every round of one member 4x slow: the median over the members (1.0x) hides it
    executor = Busy(objective, rounds=(0, 1, 2), factor=4.0, after=TRIALS, slow=1)
    result = tune_loop(wl, target, space, executor, tuner="ga", trials=TRIALS, db=db)
    assert len(executor.late_batches) == 2  # measured again
    assert {(r.status, r.attempts) for r in result.retimed} == {("ok", 2)}
    fastest, index = _fastest(db, wl, target)
    assert result.best_config.index == index
    assert result.best_cost == pytest.approx(fastest, rel=0.02)


def test_a_wrong_answer_on_re_timing_disqualifies(wl, target, space, objective, db):
    class Flaky(SlowRetiming):
        def submit(self, inputs):
            results = super().submit(inputs)
            if self.late_batches:  # the window: its first member answers wrong once
                results[0] = MeasureResult.failure(ErrorKind.WRONG_ANSWER, "flaky")
            return results

    result = tune_loop(wl, target, space, Flaky(objective, after=TRIALS, slow=0), tuner="ga",
                       trials=TRIALS, db=db)
    bad = result.retimed[0]
    assert bad.disqualified and bad.error == "wrong_answer" and bad.retimed_cost is None
    assert result.best_config.index == result.retimed[1].config_index
    # the database no longer offers it: best() and build() never hand it out
    record = _records(db, wl, target)[bad.config_index]
    assert record.error == "wrong_answer" and "on re-timing: flaky" in record.error_msg
    assert db.best(wl, target).config_index == result.best_config.index


def test_a_later_window_puts_the_last_winner_against_the_new_top(wl, target, space,
                                                                  objective, db):
    first = tune_loop(wl, target, space, SlowRetiming(objective, after=TRIALS, slow=0),
                      tuner="ga", trials=TRIALS, db=db, seed=0)
    executor = SlowRetiming(objective, after=TRIALS, slow=0)
    second = tune_loop(wl, target, space, executor, tuner="ga", trials=TRIALS, db=db, seed=1)
    members = [r.config_index for r in second.retimed]
    assert members[0] == first.best_config.index  # the incumbent, the top 3, the default
    assert len(members) == 5 and members[-1] == space.default().index
    assert executor.late_batches == [members * RETIME_ROUNDS]
    # Only the latest window's members keep a re-timed figure: the earlier window's others
    # were never compared with the new ones.
    figured = {i for i, r in _records(db, wl, target).items() if r.retimed_cost is not None}
    assert figured == set(members)
    assert db.best(wl, target).config_index == second.best_config.index


def test_without_a_store_the_result_follows_the_same_rule(wl, target, space, objective):
    executor = SlowRetiming(objective, after=TRIALS, slow=1)
    result = tune_loop(wl, target, space, executor, tuner="ga", trials=TRIALS)
    winner = min(result.retimed, key=lambda r: r.retimed_cost)
    assert result.best_config.index == winner.config_index
    assert result.best_cost == winner.retimed_cost
    assert winner.retimed_cost == pytest.approx(winner.first_cost)  # the quiet attempt's


def test_the_window_always_holds_the_default_so_tuning_never_loses_to_it(wl, target, db):
    """The default's first measurement ran 50x slow (a busy host): ranked by first
    measurements it would miss the window, and the run would hand out a slower config."""
    optimum = SyntheticObjective(make_space(), seed=3).optimum
    space = make_space(default=optimum)  # the default is the fastest config there is
    objective = SyntheticObjective(space, seed=3)
    executor = SlowDefaultFirst(objective)
    result = tune_loop(wl, target, space, executor, tuner="ga", trials=TRIALS, db=db)
    default = space.default().index
    assert executor.submitted[0] == default  # measured first, and slowed
    members = [r.config_index for r in result.retimed]
    assert len(members) == 4 and members[-1] == default  # the top 3, then the default
    assert result.best_config.index == default and result.best_retimed
    assert result.best_cost == pytest.approx(objective.best_cost)
    assert result.beat_default is False and result.speedup == pytest.approx(1.0)
    assert db.best(wl, target).config_index == default
    said = "\n".join(lines(result))
    assert "Nothing beat the template's default config in 32 trials" in said
    assert f"config {default} (the default)'s first measurement took 50.00x as long" in said
    assert repr(result).startswith("TuneResult(best ") and "the default" in repr(result)


def test_a_window_that_beats_the_default_says_by_how_much(wl, target, space, objective, db):
    result = tune_loop(wl, target, space, SlowRetiming(objective, after=TRIALS, slow=0),
                       tuner="ga", trials=TRIALS, db=db)
    default = space.default()
    assert result.beat_default and result.default_index == default.index
    assert result.default_cost == pytest.approx(objective.cost(default))  # in the window
    assert result.speedup == pytest.approx(objective.cost(default) / result.best_cost)
    assert f"The best runs {result.speedup:.2f}x as fast as the template's default" in \
        "\n".join(lines(result))
