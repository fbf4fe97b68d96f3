"""Grouped convolutions in a compiled model: each runs as a `group_conv2d` kernel, blocked
where a block of channels fits in one group, in NCHW after a transform where not, and the
model matches torch."""
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
    assert grouped["wide.grouped.0"].dim("groups") == 8
    assert grouped["narrow.grouped.0"].epilogue == ("bias", "relu")  # BN folded, ReLU fused
    if layout == "auto":
        # a grouped conv writes a block of a group's output channels, and its producer a
        # block of a group's input channels where one fits (8 of a 16-lane host's 16):
        # groups of 8 channels take one, groups of 4 a block of 4 only where that is half
        # the lanes (AVX2)
        wide, narrow = channel_block(8, LANES), channel_block(4, LANES)
        assert grouped["wide.grouped.0"].block == wide
        assert grouped["narrow.grouped.0"].block == narrow
        layouts = {m.place: m.workload.layout for m in kernel_modules(compiled)}
        for block, reduce in ((wide, "wide.reduce.0"), (narrow, "narrow.reduce.0")):
            if block > 1:
                assert layouts[reduce].endswith(f"NCHW{block}c"), layouts[reduce]
        # the excitation's gate in the block of the data it scales: no transform there;
        # the one transform, where there is one, reads the narrow grouped conv's input
        assert layouts["wide.se.fc2"].endswith(f"NCHW{wide}c"), layouts["wide.se.fc2"]
        assert len(transforms(compiled)) == (narrow == 1)
        if wide > 1 and narrow == 1:
            assert transforms(compiled)  # to NCHW around the narrow grouped conv
    with torch.no_grad():
        want, got = model(x), compiled(x)
    assert torch.allclose(got, want, rtol=1e-4, atol=1e-4 * want.abs().max().item())
