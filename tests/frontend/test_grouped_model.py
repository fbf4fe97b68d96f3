"""Grouped convolutions in a compiled model: each runs as a `group_conv2d` kernel, blocked
where a block of channels fits in one group, in NCHW with transforms around it where not,
and the model matches torch."""
from __future__ import annotations

import warnings

import pytest
import torch

import autotune
from autotune.frontend.layouts import channel_block, transforms
from autotune.frontend.runtime import compile_model, kernel_modules
from tests.frontend.frontend_nets import TinyResNeXt, randomize_bn

LLVM = autotune.Target("llvm")
LANES = LLVM.vector_lanes


def _model() -> tuple[torch.nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    return randomize_bn(TinyResNeXt()), torch.randn(1, 3, 16, 16)


@pytest.mark.parametrize("layout", ["nchw", "auto"])
def test_grouped_convs_run_on_kernels_and_match_torch(layout: str) -> None:
    model, x = _model()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # no records: default configs
        compiled = compile_model(model, (x,), target=LLVM, db=None, layout=layout)
    grouped = {m.place: m.workload for m in kernel_modules(compiled)
               if m.workload.op == "group_conv2d"}
    assert set(grouped) == {"wide.grouped.0", "narrow.grouped.0"}
    assert grouped["wide.grouped.0"].dim("groups") == 4
    assert grouped["narrow.grouped.0"].epilogue == ("bias", "relu")  # BN folded, ReLU fused
    if layout == "auto":
        # a grouped conv reads the block its producer wrote when that block divides a
        # group's channels, and writes a block of a group's output channels: the wide
        # block's groups of 16 take one; those of 4 take none from a producer of 8 or 16
        wide = channel_block(16, LANES)
        assert grouped["wide.grouped.0"].block == wide
        narrow = channel_block(4, LANES) if 4 % channel_block(32, LANES) == 0 else 1
        assert grouped["narrow.grouped.0"].block == narrow
        if wide > 1 and narrow == 1:
            assert transforms(compiled)  # to NCHW around the narrow grouped conv
    with torch.no_grad():
        want, got = model(x), compiled(x)
    assert torch.allclose(got, want, rtol=1e-4, atol=1e-4 * want.abs().max().item())
