"""Config: a frozen mapping with an index; JSON round trips."""
from __future__ import annotations

import json
import pickle

import pytest

from autotune.space import Annotate, Choice, Config, ConfigSpace, Reorder, Split


@pytest.fixture
def space():
    return ConfigSpace(
        [
            Split("tile_m", 96, 3),
            Reorder("order", [("i", "j"), ("j", "i")]),
            Annotate("ann", ["none", "unroll", "vectorize"]),
            Choice("depth", [0, 8, 32]),
        ],
        name="mm",
    )


def test_mapping_protocol(space):
    cfg = space.get(17)
    assert cfg.index == 17
    assert list(cfg) == ["tile_m", "order", "ann", "depth"]
    assert len(cfg) == 4 and "ann" in cfg and "nope" not in cfg
    assert cfg["depth"] == dict(cfg)["depth"]
    with pytest.raises(KeyError):
        cfg["nope"]
    with pytest.raises(AttributeError):
        cfg.index = 3  # frozen


def test_equality_and_hash(space):
    a, b = space.get(5), space.get(5)
    assert a == b and hash(a) == hash(b) and a is not b
    assert a != space.get(6)
    assert len({a, b, space.get(6)}) == 2
    # Same items in another order still compare equal.
    other = Config(5, tuple(reversed(a.names)), tuple(reversed(a.knob_values)))
    assert other == a and hash(other) == hash(a)
    assert Config(4, a.names, a.knob_values) != a
    assert a != dict(a)  # a Config equals only Configs


def test_json_round_trip_with_and_without_space(space):
    cfg = space.get(len(space) - 3)
    text = cfg.to_json()
    assert " " not in text
    obj = json.loads(text)
    assert obj["index"] == cfg.index
    assert obj["knobs"]["tile_m"] == list(cfg["tile_m"])
    assert list(obj) == sorted(obj) and list(obj["knobs"]) == sorted(obj["knobs"])
    loose = Config.from_json(text)
    assert loose == cfg and loose["tile_m"] == cfg["tile_m"]
    assert isinstance(loose["order"], tuple)
    strict = Config.from_json(text, space)
    assert strict == cfg and list(strict) == list(cfg)
    assert Config.from_json(cfg.to_dict(), space) == cfg
    # Without an index, a space re-derives it.
    assert Config.from_json({"knobs": obj["knobs"]}, space) == cfg


def test_from_json_validates_against_space(space):
    obj = space.get(3).to_dict()
    with pytest.raises(ValueError, match="'ann'"):
        Config.from_json({**obj, "knobs": {**obj["knobs"], "ann": "parallel"}}, space)
    with pytest.raises(ValueError, match="'depth'"):
        knobs = dict(obj["knobs"])
        del knobs["depth"]
        Config.from_json({"index": 3, "knobs": knobs}, space)
    with pytest.raises(ValueError, match="'extra'"):
        Config.from_json({"index": 3, "knobs": {**obj["knobs"], "extra": 1}}, space)
    with pytest.raises(ValueError, match="index"):
        Config.from_json({**obj, "index": 4}, space)
    with pytest.raises(ValueError):
        Config.from_json({"knobs": obj["knobs"]})  # no index, no space
    with pytest.raises(ValueError):
        Config.from_json('{"index": 1}')


def test_pickle(space):
    cfg = space.get(11)
    back = pickle.loads(pickle.dumps(cfg))
    assert back == cfg and space.index_of(back) == 11


def test_constructor_checks():
    with pytest.raises(ValueError):
        Config(0, ("a", "b"), (1,))
    with pytest.raises(ValueError):
        Config(0, ("a", "a"), (1, 2))
    assert repr(Config(2, ("a",), ((1, 2),))) == "Config(index=2, a=(1, 2))"
