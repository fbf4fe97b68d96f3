"""The tuner table, option validation and make_tuner's errors."""
from __future__ import annotations

import pytest

from autotune.search import (
    DEFAULT_TUNER,
    TUNERS,
    Option,
    Tuner,
    describe_tuners,
    make_tuner,
    tuner_class,
    tuner_options,
)
from autotune.search.options import resolve_options


def test_table_names_resolve_to_tuner_classes():
    assert {"random", "grid", "ga"} <= set(TUNERS)
    for name in TUNERS:
        cls = tuner_class(name)
        assert issubclass(cls, Tuner) and cls.name == name


def test_default_is_the_model_guided_tuner_once_registered():
    assert DEFAULT_TUNER == ("xgb" if "xgb" in TUNERS else "ga")
    assert DEFAULT_TUNER in TUNERS


def test_unknown_tuner_names_the_known_ones(space):
    with pytest.raises(ValueError, match=r"unknown tuner 'anneal'.*random.*grid.*ga"):
        make_tuner("anneal", space)


def test_unknown_option_names_tuner_and_option(space):
    with pytest.raises(ValueError, match=r"tuner 'ga' has no option 'popsize'.*pop_size"):
        make_tuner("ga", space, popsize=10)
    with pytest.raises(ValueError, match="tuner 'random' has no option 'pop_size'"):
        make_tuner("random", space, pop_size=10)


@pytest.mark.parametrize("name,value,message", [
    ("pop_size", 1, "must be >= 2"),
    ("pop_size", "8", "must be int"),
    ("pop_size", True, "must be int"),
    ("selection", "best", "must be one of 'tournament', 'roulette'"),
    ("mutation_rate", 1.5, "must be <= 1.0"),
])
def test_bad_option_values(space, name, value, message):
    with pytest.raises(ValueError, match=f"option '{name}' {message}"):
        make_tuner("ga", space, **{name: value})


def test_options_get_defaults_and_ints_become_floats(space):
    t = make_tuner("ga", space, mutation_rate=1, pop_size=8)
    assert t.options["mutation_rate"] == 1.0 and isinstance(t.options["mutation_rate"], float)
    assert t.options["pop_size"] == 8
    assert t.options["selection"] == "tournament"
    with pytest.raises(TypeError):
        t.options["pop_size"] = 3  # read-only


def test_every_option_has_a_description_and_a_valid_default():
    for name in TUNERS:
        for opt in tuner_options(name):
            assert opt.description and opt.check(name, opt.default) == opt.default


def test_describe_lists_options_and_marks_the_default():
    described = {d["name"]: d for d in describe_tuners()}
    assert set(described) == set(TUNERS)
    assert described[DEFAULT_TUNER]["default"] is True
    assert "pop_size" in {o["name"] for o in described["ga"]["options"]}


def test_resolve_options_is_a_plain_function():
    table = (Option("n", "a count", 3, minimum=1),
             Option("mode", "a mode", "a", choices=("a", "b")))
    assert dict(resolve_options("t", table, {"mode": "b"})) == {"n": 3, "mode": "b"}
