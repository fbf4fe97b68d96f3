"""`--layout` on the command line: the blocked form is looked up apart from NCHW, and a
channel count the block does not divide is a usage error naming it."""
from __future__ import annotations

from tests.test_cli import db, run  # noqa: F401

CONV = ["conv2d", "-p", "N=1", "-p", "C=16", "-p", "H=8", "-p", "W=8", "-p", "K=16",
        "-p", "R=3", "-p", "S=3", "-p", "stride=1", "-p", "pad=1"]


def test_layout_names_its_own_records(capsys, db) -> None:  # noqa: F811
    code, _, err = run(capsys, "best", *CONV, "--layout", "NCHW8c")
    assert code == 1 and "no valid record for conv2d(" in err and " NCHW8c" in err


def test_layout_the_channels_do_not_fit_is_a_usage_error(capsys, db) -> None:  # noqa: F811
    code, _, err = run(capsys, "best", *CONV, "--layout", "NCHW32c")
    assert code == 2 and "needs C=16 to be a multiple of 32" in err
    code, _, err = run(capsys, "best", *CONV, "--layout", "NHWC")
    assert code == 2 and "unknown layout 'NHWC'" in err
