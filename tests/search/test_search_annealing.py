"""The annealing optimizer on its own: it climbs, keeps its chains, honours a budget."""
import numpy as np

from autotune.search.annealing import Annealer
from autotune.space import Choice, ConfigSpace, Split


def make_space() -> ConfigSpace:
    return ConfigSpace([Split("ti", 256, 3), Split("tj", 256, 3), Choice("u", [0, 1, 2, 3])])


def objective(configs) -> np.ndarray:
    """Best at ti inner 8, tj inner 32, u 2; u == 3 is invalid (-inf)."""
    out = []
    for c in configs:
        if c["u"] == 3:
            out.append(-np.inf)
            continue
        out.append(-abs(np.log2(c["ti"][2] / 8)) - abs(np.log2(c["tj"][2] / 32))
                   - abs(c["u"] - 2) - 0.1 * abs(np.log2(c["ti"][1])))
    return np.asarray(out)


def test_chains_climb_to_the_optimum_and_persist():
    sp = make_space()
    ann = Annealer(sp, np.random.default_rng(0), n_chains=16, steps=40)
    ann.seed([])
    assert len(ann.chains) == 16
    start = objective(ann.chains).max()
    found = ann.run(objective, keep=10, admissible=lambda i: True)
    assert len(found) == 10 and [s for s, _ in found] == sorted((s for s, _ in found),
                                                                 reverse=True)
    assert found[0][0] > start and found[0][0] >= -0.5
    assert all(c["u"] != 3 for c in ann.chains)  # invalid points are never accepted
    ends = list(ann.chains)
    ann.seed([])  # already full: the chains stay where they stopped
    assert ann.chains == ends


def test_admissible_filter_and_budget():
    sp = make_space()
    ann = Annealer(sp, np.random.default_rng(1), n_chains=8, steps=50)
    ann.seed([sp.get(0), sp.get(0), sp.get(5)])
    assert [c.index for c in ann.chains[:2]] == [0, 5]
    calls = []

    def afford(proposals):
        calls.append(len(proposals))
        return len(calls) <= 3

    found = ann.run(objective, keep=1000, admissible=lambda i: i % 2 == 0, afford=afford)
    assert len(calls) == 4  # the 4th step was refused
    assert all(c.index % 2 == 0 for _, c in found) and len(found) <= 8 * 4
