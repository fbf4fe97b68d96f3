"""The GEMV template (matmul with M = 1): chosen for one-row matmuls only, its defaults
(one task per core over columns, no packing; one task for a small B; rows split too when
N is short for the cores), and real kernels against numpy at odd N and K."""
from __future__ import annotations

import numpy as np
import pytest

import autotune
from autotune import driver
from autotune.schedule.templates import cpu_gemv
from autotune.target.cpu_facts import CpuFacts

ZEN = CpuFacts(512, 32, True, 48 * 1024, 1024 * 1024, 32 * 1024**2, 2)
TARGET = autotune.Target("llvm")
ODD = [dict(N=1001, K=513), dict(N=7, K=5), dict(N=37, K=13), dict(N=130, K=67)]
EPILOGUES = [(), ("bias", "relu"), ("bias", "residual")]


def gemv(epilogue=(), **params: int) -> autotune.Workload:
    return autotune.workload("matmul", M=1, epilogue=epilogue, **params)


def default(wl: autotune.Workload, facts: CpuFacts) -> dict:
    sp = autotune.config_space(wl, autotune.Target(f"llvm -vector-bits={facts.vector_bits}"))
    return cpu_gemv.default_values(wl, facts, list(sp.knobs))


def test_one_row_matmuls_get_the_gemv_space() -> None:
    assert autotune.config_space(gemv(N=1000, K=512), TARGET).name == "cpu_gemv"
    for op, params in (("matmul", dict(M=2, N=1000, K=512)),
                       ("batch_matmul", dict(B=2, M=1, N=64, K=64))):
        assert autotune.config_space(autotune.workload(op, **params), TARGET).name != "cpu_gemv"


def test_default_is_one_column_range_per_core_walked_by_rows() -> None:
    cfg = default(gemv(N=1000, K=512), ZEN)
    assert cfg["tile_j"] == (2, 4, 128) and cfg["split_k"] == 1  # 2 tasks of 512 columns
    assert cfg["tile_k"][1] == 1 and cfg["walk"] == "rows"
    four = default(gemv(N=1000, K=512), CpuFacts(512, 32, True, 48 * 1024, 1 << 20, 32 << 20, 4))
    assert four["tile_j"][0] * four["split_k"] >= 4


def test_small_b_is_one_task_and_short_rows_split_k() -> None:
    small = default(gemv(N=128, K=64), ZEN)  # 32 KiB of B
    assert small["tile_j"][0] == 1 and small["split_k"] == 1
    many = CpuFacts(512, 32, True, 48 * 1024, 1 << 20, 32 << 20, 16)
    cfg = default(gemv(N=1000, K=1280), many)  # 62 columns per core would be short rows
    assert cfg["split_k"] > 1 and cfg["tile_j"][0] * cfg["split_k"] >= 16


def test_no_packing_pass_in_the_kernel() -> None:
    wl = gemv(N=1000, K=512, epilogue=("bias",))
    func = driver.lower(wl, TARGET)
    assert func.workspaces == ()  # B read in place: no packed copy, no partial rows
    split = dict(autotune.config_space(wl, TARGET).default()) | {"split_k": 4}
    func = driver.lower(wl, TARGET, autotune.config_space(wl, TARGET).config(split))
    assert [b.name for b in func.workspaces] == ["C_part"]


def check(wl: autotune.Workload, cfg=None, seed: int = 0) -> None:
    args = wl.random_args(seed)
    autotune.compile(wl, TARGET, cfg)(*args)
    ref = wl.reference(args)
    np.testing.assert_allclose(args[-1], ref, rtol=1e-4, atol=1e-4 * float(np.abs(ref).max()),
                               err_msg=f"{wl} {cfg}")


@pytest.mark.parametrize("params", ODD, ids=lambda p: f"N{p['N']}K{p['K']}")
def test_default_matches_numpy_at_odd_sizes(params: dict) -> None:
    for epi in EPILOGUES:
        check(gemv(epi, **params))


@pytest.mark.parametrize("params", ODD[1:], ids=lambda p: f"N{p['N']}K{p['K']}")
def test_sampled_configs_match_numpy(params: dict) -> None:
    """Every knob's values (split K with ranges that leave a tail, the panel walk, both
    vector widths) over random configs."""
    rng = np.random.default_rng(params["N"])
    seen: dict[str, set] = {"split_k": set(), "walk": set(), "vector_bits": set()}
    for n in range(24):
        wl = gemv(EPILOGUES[n % len(EPILOGUES)], **params)
        cfg = autotune.config_space(wl, TARGET).sample(rng, 1)[0]
        check(wl, cfg, seed=n)
        for name in seen:
            seen[name].add(cfg[name])
    assert len(seen["walk"]) == 2 and len(seen["split_k"]) > 1


def test_a_prepacked_b_over_l2_comes_in_panels_split_among_two_tasks_per_core() -> None:
    big = default(autotune.workload("matmul", M=1, N=1000, K=512, prepacked=True), ZEN)
    assert big["pack_b"] and big["split_k"] > 1  # 2 MB of B: cold in a model's run
    assert big["tile_j"][0] * big["split_k"] == cpu_gemv.PACKED_TASKS_PER_CORE * ZEN.cores
    small = default(autotune.workload("matmul", M=1, N=1000, K=128, prepacked=True), ZEN)
    assert small["pack_b"] and small["split_k"] == 1 and small["tile_j"][0] == ZEN.cores
    assert "pack_b" not in default(gemv(N=1000, K=512), ZEN)  # packing would cost a pass


@pytest.mark.parametrize("params", ODD, ids=lambda p: f"N{p['N']}K{p['K']}")
def test_prepacked_kernels_read_b_in_task_wide_panels_and_match_numpy(params: dict) -> None:
    """The packing kernel writes B as [N / w, K, w] panels (w: a task's columns), which
    the kernel reads in B's place; split or not, packed or not, it matches numpy."""
    from autotune.schedule.prepack import pack_operand

    wl = autotune.workload("matmul", M=1, epilogue=("bias",), prepacked=True, **params)
    sp = autotune.config_space(wl, TARGET)
    for split in sp.knob("split_k").candidates[:3]:
        for pack_b in (True, False):
            cfg = sp.config(dict(sp.default()) | {"split_k": split, "pack_b": pack_b})
            kernel = autotune.compile(wl, TARGET, cfg)
            assert (kernel.pack is not None) == pack_b
            args = wl.random_args(split)
            packed = pack_operand(wl, kernel.pack, args) if pack_b else list(args)
            if pack_b:
                width = cfg["tile_j"][1] * cfg["tile_j"][2]
                assert packed[1].shape == (-(-params["N"] // width), params["K"], width)
            kernel(*packed)
            ref = wl.reference(args)
            np.testing.assert_allclose(packed[-1], ref, rtol=1e-4,
                                       atol=1e-4 * float(np.abs(ref).max()), err_msg=str(cfg))


def test_a_record_of_the_general_matmul_space_is_ignored(tmp_path) -> None:
    """One-row matmuls had the general template's space: a database's record from then is
    not a config of this one, so `best` ignores it (saying so) and `build` takes the default
    rather than failing."""
    import io
    import json
    import warnings

    from autotune.api import NoTunedScheduleWarning
    from autotune.db import Database
    from autotune.measure import MeasureResult

    wl = gemv(N=64, K=64)
    old = {"tile_i": [1, 1, 1], "tile_j": [1, 1, 64], "tile_k": [8, 8], "order":
           ["j0", "i0", "j1", "i1"], "pack_b": False, "pack_a": False, "unroll_k": "unroll",
           "reduce_order": "k0 k1 i j", "vector_bits": 512, "parallel": 2}
    line = {"workload": wl.to_dict(), "target": TARGET.key, "config": {"index": 7, "knobs": old},
            "costs": [1e-6], "cost": 1e-6, "error": "none", "error_msg": ""}
    url = f"sqlite:///{tmp_path / 'old.db'}"
    db = Database.open(url)
    with pytest.raises(ValueError, match="field 'config': not a config of its template"):
        db.import_jsonl(io.StringIO(json.dumps(line) + "\n"))  # an import refuses it now

    class Then:  # the config as the general space of then numbered it
        index = 7

        @staticmethod
        def to_dict() -> dict:
            return line["config"]

    # a database from then holds it all the same
    db.add_trials(wl, TARGET, None, [(Then(), MeasureResult(costs=(1e-6,)))], wl.flops())
    db.dispose()
    with pytest.warns(UserWarning, match="not configs of its template's space"):
        assert autotune.best(wl, TARGET, db=url) is None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        kernel = autotune.build(wl, TARGET, db=url)
    assert {type(w.message) for w in caught} == {UserWarning, NoTunedScheduleWarning}
    args = wl.random_args(0)
    kernel(*args)
    np.testing.assert_allclose(args[-1], wl.reference(args), rtol=1e-4, atol=1e-4)
