"""`compile_model(layout="auto")`: convs whose channels the vector lanes divide run in
NCHW[lanes]c, chained without transforms; transforms only where a chain starts or ends."""
from __future__ import annotations

import warnings
from pathlib import Path

import pytest
import torch

import autotune
from autotune.db import Database
from autotune.driver import config_space
from autotune.frontend import layouts
from autotune.frontend.layouts import LayoutTransform, transforms
from autotune.frontend.runtime import compile_model, kernel_modules, plan_model
from autotune.measure import MeasureResult
from tests.frontend.frontend_nets import TinyMobileNet, TinyResNet, randomize_bn

LLVM = autotune.Target("llvm")
LANES = LLVM.vector_lanes


def _model() -> tuple[torch.nn.Module, tuple[torch.Tensor]]:
    torch.manual_seed(0)
    return randomize_bn(TinyResNet()), (torch.randn(1, 3, 32, 32),)


def _compiled(db: str | None = None, layout: str = "auto") -> torch.nn.Module:
    model, inputs = _model()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # no records: default configs
        return compile_model(model, inputs, target=LLVM, db=db, layout=layout)


def _check(compiled: torch.nn.Module) -> None:
    model, inputs = _model()
    with torch.no_grad():
        want, got = model(*inputs), compiled(*inputs)
    assert torch.allclose(got, want, rtol=1e-4, atol=1e-4 * want.abs().max().item())


@pytest.mark.skipif(16 % LANES != 0, reason="TinyResNet's 16-channel layers need lanes | 16")
def test_blocked_chain_matches_torch_with_two_transforms() -> None:
    compiled = _compiled()
    layouts = {m.place: m.workload.layout for m in kernel_modules(compiled)
               if m.kind == "conv"}
    # the stem (3 input channels) stays NCHW; every other conv is blocked
    assert layouts.pop("stem.0") == "NCHW"
    assert set(layouts.values()) == {f"NCHW{LANES}c"} and len(layouts) == 7
    # the max-pool runs autotune's kernel in NCHW, between the stem and the blocked chain
    (pool,) = [m for m in kernel_modules(compiled) if m.kind == "pool"]
    assert (pool.place, pool.workload.layout) == ("stem.3", "NCHW")
    # one into the blocked layout after the max-pool, one out of it before the avg-pool
    steps = transforms(compiled)
    assert [t.to_blocked for t in steps] == [True, False]
    modules = dict(compiled.named_modules())
    into = next(n for n in compiled.graph.nodes if modules.get(str(n.target)) is steps[0])
    assert modules[str(into.args[0].target)] is pool
    _check(compiled)
    # other shapes fall back to torch, the blocked layers unblocking and reblocking
    model, _ = _model()
    x = torch.randn(1, 3, 40, 40)
    with torch.no_grad():
        assert torch.allclose(compiled(x), model(x), rtol=1e-4, atol=1e-4)


def test_nchw_layout_has_no_transforms() -> None:
    compiled = _compiled(layout="nchw")
    assert transforms(compiled) == []
    assert all(m.workload.layout == "NCHW" for m in kernel_modules(compiled))


@pytest.mark.skipif(16 % LANES != 0, reason="TinyResNet's 16-channel layers need lanes | 16")
def test_records_choose_nchw_where_it_is_faster(tmp_path: Path) -> None:
    model, inputs = _model()
    url = f"sqlite:///{tmp_path / 'layouts.db'}"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        planned = plan_model(model, inputs, target=LLVM, db=None, layout="auto")
    plan = {p.places[0]: p.workload for p in planned}
    # layer2.conv1 (16 -> 32, stride 2): NCHW much faster than blocked in the records
    blocked_wl = plan["layer2.conv1"]
    plain_wl = autotune.workload("conv2d", epilogue=blocked_wl.epilogue, prepacked=True,
                                 **dict(blocked_wl.param_items))
    db = Database.open(url)
    for wl, cost in ((plain_wl, 1e-6), (blocked_wl, 1e-3)):
        cfg = config_space(wl, LLVM).default()
        db.add_trials(wl, LLVM, None, [(cfg, MeasureResult(costs=(cost,)))], wl.flops())
    db.dispose()
    compiled = _compiled(db=url)
    layouts = {m.place: m.workload.layout for m in kernel_modules(compiled)}
    assert layouts["layer2.conv1"] == "NCHW"
    assert layouts["layer2.conv2"] == f"NCHW{LANES}c"
    # its input comes from a blocked layer: one more transform, out of the blocked layout
    # (shared with nothing else) and one into it for its output's blocked reader
    assert len(transforms(compiled)) == 4
    _check(compiled)


def test_auto_on_cuda_blocks_nothing() -> None:
    """On cuda, "auto" means channels-last convs where Hopper's half kernels take them
    (tests/cuda/test_cuda_channels_last.py): a float32 model's stay NCHW, never blocked."""
    model, inputs = _model()
    plan = plan_model(model, inputs, target="cuda -arch=sm_90", db=None, layout="auto")
    assert {k.workload.layout for k in plan} == {"NCHW"}
    with pytest.raises(ValueError, match="layout='blocked'"):
        plan_model(model, inputs, target=LLVM, db=None, layout="blocked")


def test_extract_auto_gives_the_blocked_forms() -> None:
    model, inputs = _model()
    tasks = autotune.extract(model, inputs, target=LLVM, layout="auto")
    convs = [t.workload for t in tasks.tasks if t.workload.op == "conv2d"]
    assert {wl.layout for wl in convs} == {"NCHW", f"NCHW{LANES}c"}
    assert isinstance(LayoutTransform(LANES, True), torch.nn.Module)


@pytest.mark.parametrize("convs_per_transform", [2, 0.5])
def test_mobilenet_chains_split_by_depthwise_convs_stay_nchw(monkeypatch, convs_per_transform
                                                              ) -> None:
    """The projections and expansions of TinyMobileNet link into one chain of 4 convs that
    would need 5 transforms: under the default rule (2 convs per transform) it stays NCHW;
    with the bar lowered it runs blocked, with the transforms worked out by hand for 16
    lanes: on a host of other lanes, compiled for an AVX-512 CPU and not run."""
    monkeypatch.setattr(layouts, "CONVS_PER_TRANSFORM", convs_per_transform)
    torch.manual_seed(0)
    model, inputs = randomize_bn(TinyMobileNet()), (torch.randn(1, 3, 32, 32),)
    target = LLVM if LANES == 16 else autotune.Target("llvm -mcpu=skylake-avx512 -cores=2")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        compiled = compile_model(model, inputs, target=target, db=None, layout="auto")
    blocked = [m.place for m in kernel_modules(compiled) if m.workload.layout != "NCHW"]
    if convs_per_transform == 2:
        assert blocked == [] and transforms(compiled) == []
    else:
        # the first expand conv reads the stem (3 channels) and feeds a depthwise conv:
        # alone, it stays NCHW; each projection feeds the next block's expansion
        assert blocked == ["blocks.0.block.6", "blocks.1.block.0", "blocks.1.block.6",
                           "blocks.2.block.0"]
        # into: block 0's projection (its input and its residual), block 1's projection;
        # out of: the expansions of blocks 1 and 2 before their depthwise convs
        assert sorted(t.to_blocked for t in transforms(compiled)) == [False, False, True,
                                                                       True, True]
    if target != LLVM:
        return
    with torch.no_grad():
        want, got = model(*inputs), compiled(*inputs)
    assert torch.allclose(got, want, rtol=1e-4, atol=1e-4 * want.abs().max().item())
