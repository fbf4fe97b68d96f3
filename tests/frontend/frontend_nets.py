"""Small ResNet-like and MobileNet-like models built from torch.nn layers, for the tests."""
from __future__ import annotations

import torch
from torch import nn


def randomize_bn(model: nn.Module, seed: int = 0) -> nn.Module:
    """Non-trivial BatchNorm statistics, so that folding them is really tested."""
    g = torch.Generator().manual_seed(seed)
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            c = m.num_features
            m.running_mean.copy_(torch.rand(c, generator=g) - 0.5)
            m.running_var.copy_(torch.rand(c, generator=g) + 0.5)
            m.weight.data.copy_(torch.rand(c, generator=g) + 0.5)
            m.bias.data.copy_(torch.rand(c, generator=g) - 0.5)
    return model.eval()


class BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.down = None
        if stride != 1 or cin != cout:
            self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                      nn.BatchNorm2d(cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return self.relu(y + (x if self.down is None else self.down(x)))


class TinyResNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 7, 2, 3, bias=False), nn.BatchNorm2d(16),
                                  nn.ReLU(inplace=True), nn.MaxPool2d(3, 2, 1))
        self.layer1 = nn.Sequential(BasicBlock(16, 16, 1), BasicBlock(16, 16, 1))
        self.layer2 = BasicBlock(16, 32, 2)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(32, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.layer2(self.layer1(self.stem(x)))
        return self.fc(torch.flatten(self.pool(x), 1))


class InvertedResidual(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int, expand: int) -> None:
        super().__init__()
        mid = cin * expand
        self.residual = stride == 1 and cin == cout
        self.block = nn.Sequential(
            nn.Conv2d(cin, mid, 1, bias=False), nn.BatchNorm2d(mid), nn.ReLU6(inplace=True),
            nn.Conv2d(mid, mid, 3, stride, 1, groups=mid, bias=False), nn.BatchNorm2d(mid),
            nn.ReLU6(inplace=True),
            nn.Conv2d(mid, cout, 1, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.block(x)
        return x + y if self.residual else y


class TinyMobileNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, 2, 1, bias=False), nn.BatchNorm2d(16),
                                  nn.ReLU())
        self.blocks = nn.Sequential(InvertedResidual(16, 16, 1, 2), InvertedResidual(16, 16, 1, 2),
                                    InvertedResidual(16, 24, 2, 2))
        self.head = nn.Sequential(nn.Conv2d(24, 64, 1, bias=False), nn.BatchNorm2d(64), nn.ReLU())
        self.fc = nn.Sequential(nn.Dropout(0.2), nn.Linear(64, 10))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.head(self.blocks(self.stem(x)))
        return self.fc(x.mean((2, 3)))


class SqueezeExcite(nn.Module):
    """MobileNet-V3's: a global average pool, two 1x1 convs, a hard sigmoid gate."""

    def __init__(self, c: int, squeeze: int) -> None:
        super().__init__()
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc1, self.fc2 = nn.Conv2d(c, squeeze, 1), nn.Conv2d(squeeze, c, 1)
        self.relu, self.gate = nn.ReLU(), nn.Hardsigmoid()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.gate(self.fc2(self.relu(self.fc1(self.avgpool(x))))) * x


class TinySENet(nn.Module):
    """A MobileNet-V3-like stack: hardswish, a depthwise conv with squeeze-and-excitation,
    a projection, and a classifier after a mean over the pixels."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, 2, 1, bias=False), nn.BatchNorm2d(16),
                                  nn.Hardswish())
        self.dw = nn.Sequential(nn.Conv2d(16, 16, 3, 1, 1, groups=16, bias=False),
                                nn.BatchNorm2d(16), nn.ReLU())
        self.se = SqueezeExcite(16, 8)
        self.project = nn.Sequential(nn.Conv2d(16, 32, 1, bias=False), nn.BatchNorm2d(32))
        self.fc = nn.Linear(32, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.project(self.se(self.dw(self.stem(x))))
        return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1))


class ResNeXtBlock(nn.Module):
    """A bottleneck whose 3x3 conv is grouped (ResNeXt's): 1x1 -> grouped 3x3 -> 1x1 + x."""

    def __init__(self, channels: int, width: int, groups: int, se: bool = False) -> None:
        super().__init__()
        self.reduce = nn.Sequential(nn.Conv2d(channels, width, 1, bias=False),
                                    nn.BatchNorm2d(width), nn.ReLU(inplace=True))
        self.grouped = nn.Sequential(nn.Conv2d(width, width, 3, 1, 1, groups=groups,
                                               bias=False),
                                     nn.BatchNorm2d(width), nn.ReLU(inplace=True))
        self.se = SqueezeExcite(width, width // 4) if se else nn.Identity()  # RegNet-Y's
        self.expand = nn.Sequential(nn.Conv2d(width, channels, 1, bias=False),
                                    nn.BatchNorm2d(channels))
        self.relu = nn.ReLU(inplace=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.relu(self.expand(self.se(self.grouped(self.reduce(x)))) + x)


class TinyResNeXt(nn.Module):
    """A stem, two grouped bottlenecks (groups of 8 channels with squeeze-and-excitation,
    then of 4) and a classifier."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 32, 3, 2, 1, bias=False), nn.BatchNorm2d(32),
                                  nn.ReLU(inplace=True))
        self.wide = ResNeXtBlock(32, 64, groups=8, se=True)  # 8 channels a group
        self.narrow = ResNeXtBlock(32, 32, groups=8)  # 4 channels a group
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(32, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.narrow(self.wide(self.stem(x)))
        return self.fc(torch.flatten(self.pool(x), 1))


class PaddableNet(nn.Module):
    """A stem of ``c`` channels, a depthwise block with squeeze-and-excitation and a residual
    add, a 1x1 conv into ``out`` channels, then how the features leave: "linear" (mean, a
    classifier), "output" (the tensor of ``c`` channels is the model's output), "concat" (joined
    with itself along channels)."""

    def __init__(self, c: int = 40, out: int = 32, tail: str = "linear") -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, c, 3, padding=1)
        self.bn = nn.BatchNorm2d(c)
        self.dw = nn.Conv2d(c, c, 3, padding=1, groups=c, bias=False)
        self.dw_bn = nn.BatchNorm2d(c)
        self.squeeze = nn.Conv2d(c, 8, 1)
        self.excite = nn.Conv2d(8, c, 1)
        self.project = nn.Conv2d(2 * c if tail == "concat" else c, out, 1)
        self.fc = nn.Linear(out, 10)
        self.tail = tail

    def forward(self, x):
        x = torch.relu(self.bn(self.stem(x)))
        y = nn.functional.hardswish(self.dw_bn(self.dw(x)))
        gate = nn.functional.hardsigmoid(self.excite(torch.relu(self.squeeze(
            nn.functional.adaptive_avg_pool2d(y, 1)))))
        y = y * gate + x
        if self.tail == "output":
            return y
        if self.tail == "concat":
            y = torch.cat([y, y], 1)
        z = self.project(y)
        return self.fc(z.mean([2, 3]))
