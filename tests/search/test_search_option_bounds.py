"""Every number a tuner option takes has an upper bound, and only finite floats pass (issue 16)."""
from __future__ import annotations

import math

import pytest

from autotune.search import TUNERS, describe_tuners
from autotune.search.options import Option, resolve_options
from autotune.search.registry import tuner_options


def _numeric(opt: Option) -> bool:
    return type(opt.default) in (int, float) and opt.choices is None


def test_every_numeric_option_is_bounded() -> None:
    numeric = [(name, opt) for name in TUNERS for opt in tuner_options(name) if _numeric(opt)]
    assert {"ga", "xgb"} <= {name for name, _ in numeric}
    for name, opt in numeric:
        assert opt.minimum is not None and opt.maximum is not None, (name, opt.name)
        assert opt.minimum <= opt.default <= opt.maximum, (name, opt.name)
        with pytest.raises(ValueError, match=f"option '{opt.name}' must be <= "):
            resolve_options(name, tuner_options(name), {opt.name: opt.maximum + 1})


def test_described_options_show_their_bounds() -> None:
    options = {o["name"]: o for t in describe_tuners() if t["name"] == "xgb"
               for o in t["options"]}
    assert options["workers"]["minimum"] == -1 and options["workers"]["maximum"] >= 3
    assert options["subsample"]["maximum"] == 1.0


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf, 10**400],
                         ids=["nan", "inf", "-inf", "int-beyond-float"])
def test_float_options_take_only_finite_numbers(value: float) -> None:
    opt = Option("rate", "a rate", 0.5, minimum=0.0)
    with pytest.raises(ValueError, match="option 'rate' must be a finite float"):
        opt.check("t", value)
    assert opt.check("t", 3) == 3.0
