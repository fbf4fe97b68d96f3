"""`--layout` on the command line: the blocked form is looked up apart from NCHW, and a
channel count the block does not divide is a usage error naming it."""
from __future__ import annotations

from tests.cli.test_cli import db, run  # noqa: F401

CONV = ["conv2d", "-p", "N=1", "-p", "C=16", "-p", "H=8", "-p", "W=8", "-p", "K=16",
        "-p", "R=3", "-p", "S=3", "-p", "stride=1", "-p", "pad=1"]


def test_layout_names_its_own_records(capsys, db) -> None:  # noqa: F811
    code, _, err = run(capsys, "best", *CONV, "--layout", "NCHW8c")
    assert code == 1 and "no valid record for conv2d(" in err and " NCHW8c" in err


def test_layout_the_channels_do_not_fit_is_a_usage_error(capsys, db) -> None:  # noqa: F811
    code, _, err = run(capsys, "best", *CONV, "--layout", "NCHW32c")
    assert code == 2 and "needs C=16 to be a multiple of 32" in err
    code, _, err = run(capsys, "best", *CONV, "--layout", "NWHC")
    assert code == 2 and "unknown layout 'NWHC'" in err


def tiny_resnet():
    """A model spec for the CLI: (model, example inputs)."""
    import torch

    from tests.frontend.frontend_nets import TinyResNet, randomize_bn

    torch.manual_seed(0)
    return randomize_bn(TinyResNet()), (torch.randn(1, 3, 32, 32),)


def test_bench_model_runs_the_blocked_layouts(capsys, db) -> None:  # noqa: F811
    code, out, err = run(capsys, "bench-model", "tests.cli.test_cli_layout:tiny_resnet",
                         "--layout", "auto", "--repeat", "2")
    assert code == 0, err
    diff = float(out.split("max abs diff")[1])
    assert diff < 1e-4, out
    code, _, err = run(capsys, "bench-model", "tests.cli.test_cli_layout:tiny_resnet",
                       "--layout", "nhwc")
    assert code == 2 and "invalid choice: 'nhwc'" in err
