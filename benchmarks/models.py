"""End-to-end latency of ResNet-18 and MobileNet-V2 (batch 1, fp32, eval): torch eager,
torch.compile (inductor), and autotune after whole-model budgets of trials.

    python benchmarks/models.py --trials 1000,3000 --models resnet18,mobilenetv2
    python benchmarks/models.py --trials 64 --models resnet18      # a short smoke run
    python benchmarks/models.py --target "cuda -arch=sm_90" --trials 128 --models resnet18

On a CUDA target the model, its inputs and autotune's kernels run on the GPU, and torch's
columns are fp32 (TF32 off). Budgets are totals: a later one continues the run in --db.
The models are also CLI model specs: `autotune tune-model benchmarks.models:resnet18`.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any, Callable

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


# --- the models -------------------------------------------------------------------------

class BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.downsample = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                            nn.BatchNorm2d(cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return self.relu(y + (x if self.downsample is None else self.downsample(x)))


class ResNet18(nn.Module):
    def __init__(self, classes: int = 1000) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        layers, cin = [], 64
        for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
            layers.append(nn.Sequential(BasicBlock(cin, cout, stride), BasicBlock(cout, cout, 1)))
            cin = cout
        self.layer1, self.layer2, self.layer3, self.layer4 = layers
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(512, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


def conv_bn(cin: int, cout: int, k: int, stride: int, groups: int = 1,
            act: bool = True) -> list[nn.Module]:
    layers: list[nn.Module] = [nn.Conv2d(cin, cout, k, stride, (k - 1) // 2, groups=groups,
                                         bias=False), nn.BatchNorm2d(cout)]
    return layers + ([nn.ReLU6(inplace=True)] if act else [])


class InvertedResidual(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int, expand: int) -> None:
        super().__init__()
        mid = cin * expand
        self.use_res = stride == 1 and cin == cout
        layers = conv_bn(cin, mid, 1, 1) if expand != 1 else []
        layers += conv_bn(mid, mid, 3, stride, groups=mid) + conv_bn(mid, cout, 1, 1, act=False)
        self.conv = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.conv(x) if self.use_res else self.conv(x)


class MobileNetV2(nn.Module):
    SETTINGS = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1),
                (6, 160, 3, 2), (6, 320, 1, 1))

    def __init__(self, classes: int = 1000) -> None:
        super().__init__()
        layers: list[nn.Module] = [*conv_bn(3, 32, 3, 2)]
        cin = 32
        for t, c, n, s in self.SETTINGS:
            for i in range(n):
                layers.append(InvertedResidual(cin, c, s if i == 0 else 1, t))
                cin = c
        layers += conv_bn(cin, 1280, 1, 1)
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(1280, classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(x).mean((2, 3)))


def _init(model: nn.Module) -> nn.Module:
    """Random weights and BatchNorm statistics (no download), in eval mode."""
    g = torch.Generator().manual_seed(0)
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.copy_(torch.randn(m.num_features, generator=g) * 0.1)
            m.running_var.copy_(torch.rand(m.num_features, generator=g) + 0.5)
    return model.eval()


def resnet18() -> tuple[nn.Module, tuple[torch.Tensor]]:
    torch.manual_seed(0)
    return _init(ResNet18()), (torch.randn(1, 3, 224, 224),)


def mobilenetv2() -> tuple[nn.Module, tuple[torch.Tensor]]:
    torch.manual_seed(0)
    return _init(MobileNetV2()), (torch.randn(1, 3, 224, 224),)


MODELS: dict[str, Callable[[], tuple[nn.Module, tuple[torch.Tensor]]]] = {
    "resnet18": resnet18, "mobilenetv2": mobilenetv2}


# --- timing -----------------------------------------------------------------------------

def latency(call: Callable[[], Any], repeat: int) -> float:
    """Median seconds per call after warm-up (a GPU's work included: each call is synced)."""
    from autotune.frontend.cli import median_time

    def synced() -> None:
        call()
        torch.cuda.synchronize()

    with torch.no_grad():
        return median_time(synced if torch.cuda.is_initialized() else call, repeat, warmup=5)


def inductor(model: nn.Module, inputs: tuple[torch.Tensor, ...], repeat: int) -> str:
    try:
        compiled = torch.compile(model)
        with torch.no_grad():
            compiled(*inputs)
        return f"{latency(lambda: compiled(*inputs), repeat) * 1e3:8.3f} ms"
    except Exception as exc:  # no C++ compiler, an unsupported platform, ...
        first = str(exc).strip().splitlines()[0][:160] if str(exc).strip() else ""
        return f"failed: {type(exc).__name__}: {first}"


def breakdown(compiled: nn.Module, model_inputs: tuple[torch.Tensor, ...], repeat: int) -> None:
    """Per kernel group: autotune's time against torch running the same folded layer."""
    from autotune.frontend.runtime import kernel_modules

    seen: dict[Any, list[Any]] = {}
    captured: dict[int, tuple[torch.Tensor, ...]] = {}
    hooks = [m.register_forward_pre_hook(lambda mod, args: captured.setdefault(id(mod), args))
             for m in kernel_modules(compiled)]
    with torch.no_grad():
        compiled(*model_inputs)
    for h in hooks:
        h.remove()
    for m in kernel_modules(compiled):
        seen.setdefault(m.workload, []).append(m)
    rows = []
    for wl, mods in seen.items():
        args = captured[id(mods[0])]
        ours = latency(lambda: mods[0](*args), repeat)
        theirs = latency(lambda: mods[0].forward_torch(*args), repeat)
        rows.append((len(mods) * ours, len(mods), ours, theirs, str(wl), mods[0].place))
    print(f"    {'x':>3} {'autotune ms':>11} {'torch ms':>9} {'speedup':>7}  layer")
    for total, n, ours, theirs, name, place in sorted(rows, reverse=True):
        print(f"    {n:3d} {ours * 1e3:11.4f} {theirs * 1e3:9.4f} {theirs / ours:6.2f}x  "
              f"{place}: {name}")
    print(f"    sum over layers: autotune {sum(r[0] for r in rows) * 1e3:.3f} ms, torch "
          f"{sum(r[1] * r[3] for r in rows) * 1e3:.3f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="resnet18,mobilenetv2")
    parser.add_argument("--trials", default="1000,3000",
                        help="total budgets, comma-separated, each continuing the last")
    parser.add_argument("--db", default="sqlite:///benchmarks/data/models.db")
    parser.add_argument("--target", default="llvm",
                        help='target spec: llvm (this CPU) or e.g. "cuda -arch=sm_90"')
    parser.add_argument("--repeat", type=int, default=30)
    parser.add_argument("--no-breakdown", action="store_true")
    args = parser.parse_args()

    import autotune

    target = autotune.Target(args.target)
    device = torch.device("cuda" if target.kind == "cuda" else "cpu")
    if target.kind == "cuda":
        if not torch.cuda.is_available():
            sys.exit(f"benchmarks/models.py: target {target.key} needs a CUDA GPU; torch "
                     f"finds none")
        torch.backends.cuda.matmul.allow_tf32 = False  # the fp32 baseline
        torch.backends.cudnn.allow_tf32 = False
        where = f"{torch.cuda.get_device_name()}, fp32 (TF32 off)"
    else:
        where = f"{torch.get_num_threads()} threads"
    print(f"target {target.key}; torch {torch.__version__}, {where}")
    budgets = [int(b) for b in args.trials.split(",") if b.strip()]
    for name in args.models.split(","):
        model, inputs = MODELS[name]()
        model, inputs = model.to(device), tuple(x.to(device) for x in inputs)
        tasks = autotune.extract(model, inputs)
        print(f"\n{name}: {len(tasks.tasks)} tasks, {sum(t.weight for t in tasks.tasks)} "
              f"kernels, {len(tasks.unsupported)} unsupported, "
              f"{tasks.flops() / 1e9:.2f} GFLOP in kernels")
        eager = latency(lambda: model(*inputs), args.repeat)
        print(f"  torch eager      {eager * 1e3:8.3f} ms")
        print(f"  torch.compile    {inductor(model, inputs, args.repeat)}")
        for budget in budgets:
            t0 = time.monotonic()
            result = autotune.tune_model(model, inputs, trials=budget, target=target, db=args.db)
            minutes = (time.monotonic() - t0) / 60
            compiled = autotune.compile_model(model, inputs, target=target, db=args.db)
            ours = latency(lambda: compiled(*inputs), args.repeat)
            with torch.no_grad():
                want = model(*inputs)
                err = ((compiled(*inputs) - want).abs().max() / want.abs().max()).item()
            est = result.estimated_latency_s
            print(f"  autotune @{budget:5d} {ours * 1e3:8.3f} ms  ({eager / ours:.2f}x eager; "
                  f"{result.trials} trials in {minutes:.1f} min this call, {result.trials_done} "
                  f"in all; kernels' estimate {'-' if est is None else f'{est * 1e3:.3f}'} ms; "
                  f"max rel diff {err:.1e})")
            if not args.no_breakdown:
                breakdown(compiled, inputs, max(5, args.repeat // 3))


if __name__ == "__main__":
    main()
