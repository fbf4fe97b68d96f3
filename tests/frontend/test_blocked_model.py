"""`compile_model(layout="auto")`: convs, depthwise convs and max-pools run in NCHW[x]c from
the first conv (which reads the image in NCHW) to the last blocked layer, with transforms only
where a torch op or a layer in another layout reads a blocked tensor."""
from __future__ import annotations

import warnings
from pathlib import Path

import pytest
import torch

import autotune
from autotune.db import Database
from autotune.driver import config_space
from autotune.frontend.layouts import LayoutTransform, transforms
from autotune.frontend.runtime import compile_model, kernel_modules, plan_model
from autotune.measure import MeasureResult
from tests.frontend.frontend_nets import TinyMobileNet, TinyResNet, TinySENet, randomize_bn

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
def test_blocked_model_matches_torch_without_transforms() -> None:
    compiled = _compiled()
    layouts = {m.place: m.workload.layout for m in kernel_modules(compiled)}
    # the stem reads the image (3 channels) in NCHW and writes blocked channels; the
    # max-pool, every other conv and the average pool run blocked; the classifier reads
    # the pool's 1x1 output, alike in NCHW
    assert layouts.pop("stem.0") == f"NCHW>NCHW{LANES}c"
    assert layouts.pop("fc") == "NCHW"
    assert set(layouts.values()) == {f"NCHW{LANES}c"} and len(layouts) == 9
    assert transforms(compiled) == [] and compiled.forward.runs == 1
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
    # its neighbours keep theirs: layer2.conv2 reads its NCHW output blocked (a transform)
    assert layouts["layer2.conv2"] == layouts["layer2.down.0"] == f"NCHW{LANES}c"
    # one out of the blocked layout into layer2.conv1 (layer1's output, which layer2.down
    # reads blocked), one into it from layer2.conv1
    assert sorted((t.source, t.target) for t in transforms(compiled)) == [(1, LANES),
                                                                          (LANES, 1)]
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
    layouts = {t.workload.op: set() for t in tasks.tasks}
    for t in tasks.tasks:
        layouts[t.workload.op].add(t.workload.layout)
    if 16 % LANES == 0:
        assert layouts == {"conv2d": {f"NCHW>NCHW{LANES}c", f"NCHW{LANES}c"},
                           "max_pool2d": {f"NCHW{LANES}c"},
                           "global_avg_pool2d": {f"NCHW{LANES}c"}, "matmul": {"NCHW"}}


def _mobilenet_target() -> autotune.Target:
    """The host where it has 16 lanes, else an AVX-512 CPU (compiled, not run)."""
    return LLVM if LANES == 16 else autotune.Target("llvm -mcpu=skylake-avx512 -cores=2")


def test_mobilenet_runs_blocked_throughout() -> None:
    """TinyMobileNet's layers, worked out by hand for 16 lanes: blocked by 16 where 16
    divides the channels, by 8 for its 24-channel projection (written by a conv reading
    16-blocks, read by one writing them), the depthwise convs blocked and prepacked, and
    no transform (the mean is a blocked kernel whose 1x1 output the classifier reads); on a
    host of other lanes, compiled for an AVX-512 CPU and not run."""
    torch.manual_seed(0)
    model, inputs = randomize_bn(TinyMobileNet()), (torch.randn(1, 3, 32, 32),)
    target = _mobilenet_target()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        compiled = compile_model(model, inputs, target=target, db=None, layout="auto")
    layouts = {m.place: m.workload.layout for m in kernel_modules(compiled)}
    assert layouts.pop("stem.0") == "NCHW>NCHW16c"
    assert layouts.pop("blocks.2.block.6") == "NCHW16c>NCHW8c"
    assert layouts.pop("head.0") == "NCHW8c>NCHW16c"
    assert layouts.pop("fc.1") == "NCHW"
    assert set(layouts.values()) == {"NCHW16c"} and len(layouts) == 9
    assert all(m.workload.prepacked for m in kernel_modules(compiled)
               if m.workload.op == "depthwise_conv2d")
    assert transforms(compiled) == []
    if target != LLVM:
        return
    with torch.no_grad():
        want, got = model(*inputs), compiled(*inputs)
    assert torch.allclose(got, want, rtol=1e-4, atol=1e-4 * want.abs().max().item())
    # other shapes: each layer unblocks, runs torch and blocks again
    x = torch.randn(1, 3, 24, 24)
    with torch.no_grad():
        assert torch.allclose(compiled(x), model(x), rtol=1e-4, atol=1e-4)


def test_layout_transforms_between_blocks() -> None:
    x = torch.randn(2, 48, 3, 5)
    to16 = LayoutTransform(1, 16)(x)
    assert to16.shape == (2, 3, 3, 5, 16) and to16[1, 2, 0, 4, 5] == x[1, 37, 0, 4]
    to8 = LayoutTransform(16, 8)(to16)
    assert to8.shape == (2, 6, 3, 5, 8) and to8.is_contiguous()
    assert torch.equal(LayoutTransform(8, 1)(to8), x)


@pytest.mark.parametrize("layout", ["nchw", "auto"])
def test_squeeze_and_excitation_runs_as_generated_code(layout: str) -> None:
    """The pools (a module and a function) and the gate are kernels: the whole model is one
    native run, blocked without a single copying transform."""
    torch.manual_seed(0)
    model, inputs = randomize_bn(TinySENet()), (torch.randn(1, 3, 20, 20),)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        compiled = compile_model(model, inputs, target=LLVM, db=None, layout=layout)
    ops = {m.place: m.workload.op for m in kernel_modules(compiled)}
    assert ops["se.avgpool"] == ops["adaptive_avg_pool2d"] == "global_avg_pool2d"
    assert ops["mul"] == "channel_mul"
    plan = compiled.forward
    assert (plan.kernels, plan.runs) == (len(ops), 1)
    if layout == "auto" and LANES == 16:
        # the squeeze's convs read and write 1x1 pixels: the pool's output as NCHW, the
        # squeezed 8 channels blocked by 8
        assert {m.place: m.workload.layout for m in kernel_modules(compiled)} == {
            "stem.0": "NCHW>NCHW16c", "dw.0": "NCHW16c", "se.avgpool": "NCHW16c",
            "se.fc1": "NCHW>NCHW8c", "se.fc2": "NCHW8c>NCHW16c", "mul": "NCHW16c",
            "project.0": "NCHW16c", "adaptive_avg_pool2d": "NCHW16c", "fc": "NCHW"}
    assert transforms(compiled) == []
    with torch.no_grad():
        want, got = model(*inputs), compiled(*inputs)
    assert torch.allclose(got, want, rtol=1e-4, atol=1e-4 * want.abs().max().item())
    x = torch.randn(2, 3, 12, 12)  # other shapes: torch, each layer unblocked
    with torch.no_grad():
        assert torch.allclose(compiled(x), model(x), rtol=1e-4, atol=1e-4)


class FireNet(torch.nn.Module):
    """SqueezeNet's shape: a stem, ceil_mode max-pools, and fire modules whose two expand
    convs are concatenated along channels (into a conv, a pool, a torch op)."""

    def __init__(self) -> None:
        super().__init__()
        nn = torch.nn
        self.stem = nn.Sequential(nn.Conv2d(3, 32, 3, 2), nn.ReLU(),
                                  nn.MaxPool2d(3, 2, ceil_mode=True))
        self.squeeze = nn.Conv2d(32, 16, 1)
        self.left, self.right = nn.Conv2d(16, 32, 1), nn.Conv2d(16, 32, 3, padding=1)
        self.squeeze2 = nn.Conv2d(64, 16, 1)
        self.left2, self.right2 = nn.Conv2d(16, 32, 1), nn.Conv2d(16, 32, 3, padding=1)
        self.pool = nn.MaxPool2d(3, 2, ceil_mode=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.squeeze(self.stem(x)))
        x = torch.cat([torch.relu(self.left(x)), torch.relu(self.right(x))], 1)
        y = torch.relu(self.squeeze2(self.pool(x)))
        y = torch.cat([torch.relu(self.left2(y)), torch.relu(self.right2(y))], 1)
        return torch.sigmoid(y).mean((2, 3))  # a torch op reads the last concat


@pytest.mark.skipif(32 % LANES != 0, reason="FireNet's 32-channel parts need lanes | 32")
def test_channel_concats_run_blocked() -> None:
    torch.manual_seed(0)
    model, x = FireNet().eval(), torch.randn(1, 3, 35, 35)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        compiled = compile_model(model, (x,), target=LLVM, db=None)
    layouts = {m.place: m.workload.layout for m in kernel_modules(compiled)}
    # the pool and the conv reading a concat read it blocked: no transform between
    assert layouts["pool"] == layouts["squeeze2"] == f"NCHW{LANES}c"
    assert [t.extra_repr() for t in transforms(compiled)] == [f"NCHW{LANES}c to NCHW"]
    pools = [m.workload for m in kernel_modules(compiled) if m.workload.op == "max_pool2d"]
    assert len(pools) == 2 and all(p.dim("ceil_mode") == 1 for p in pools)
    with torch.no_grad():
        want = model(x)
        assert torch.allclose(compiled(x), want, rtol=1e-4, atol=1e-5)
        other = torch.randn(2, 3, 35, 35)  # the graph's own code: unblocked parts, then torch
        assert torch.allclose(compiled(other), model(other), rtol=1e-4, atol=1e-5)
    tasks = autotune.extract(model, (x,), target=LLVM, layout="auto")
    assert {t.workload.layout for t in tasks.tasks if t.workload.op == "max_pool2d"} == \
        {f"NCHW{LANES}c"}  # what tune_model tunes is what runs


class DenseNet(torch.nn.Module):
    """DenseNet's shape: each layer normalises (a batch norm no conv folds) and convolves
    the concatenation of every feature map before it."""

    def __init__(self) -> None:
        super().__init__()
        nn = torch.nn
        self.stem = nn.Conv2d(3, 32, 3, padding=1)
        self.layers = nn.ModuleList(
            nn.Sequential(nn.BatchNorm2d(32 * (i + 1)), nn.ReLU(),
                          nn.Conv2d(32 * (i + 1), 32, 3, padding=1)) for i in range(2))
        self.norm = nn.BatchNorm2d(96)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        features = [self.stem(x)]
        for layer in self.layers:
            features.append(layer(torch.cat(features, 1)))
        return torch.relu(self.norm(torch.cat(features, 1))).mean((2, 3))


@pytest.mark.skipif(32 % LANES != 0, reason="the 32-channel parts need lanes | 32")
def test_batch_norms_without_a_conv_run_as_channel_affine_kernels() -> None:
    torch.manual_seed(0)
    model, x = randomize_bn(DenseNet()), torch.randn(1, 3, 12, 12)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        compiled = compile_model(model, (x,), target=LLVM, db=None)
    affine = [m.workload for m in kernel_modules(compiled) if m.workload.op == "channel_affine"]
    # every norm, its ReLU fused, blocked like the concat it reads: no transform anywhere
    assert [(wl.dim("C"), wl.epilogue, wl.layout) for wl in affine] == \
        [(c, ("relu",), f"NCHW{LANES}c") for c in (32, 64, 96)]
    assert transforms(compiled) == []
    with torch.no_grad():
        want = model(x)
        assert torch.allclose(compiled(x), want, rtol=1e-4, atol=1e-5)
        other = torch.randn(2, 3, 12, 12)  # the graph's own code: the norms on torch
        assert torch.allclose(compiled(other), model(other), rtol=1e-4, atol=1e-5)
