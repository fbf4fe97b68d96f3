"""`--prepacked` on the command line: the form is tuned and looked up apart from the usual
one, and refused where there is no constant operand."""
from __future__ import annotations

import json

from tests.cli.test_cli import TASK, db, run, synthetic  # noqa: F401


def test_prepacked_records_are_their_own(capsys, db, synthetic) -> None:  # noqa: F811
    code, out, err = run(capsys, "tune", *TASK, "--prepacked", "--trials", "8", "--tuner",
                         "random")
    assert code == 0, err
    code, out, _ = run(capsys, "best", *TASK, "--prepacked")
    assert code == 0 and out.startswith("matmul(M=64,N=64,K=64) prepacked on llvm")
    assert json.loads(out.splitlines()[-1])["knobs"]
    code, _, err = run(capsys, "best", *TASK)
    assert code == 1 and "no valid record for matmul(M=64,N=64,K=64)" in err
    code, out, _ = run(capsys, "trials", *TASK, "--prepacked")
    assert code == 0 and "8 trials" in out and "prepacked" in out


def test_prepacked_without_a_constant_operand_is_a_usage_error(capsys, db) -> None:  # noqa: F811
    code, _, err = run(capsys, "tune", "max_pool2d", "-p", "N=1", "-p", "C=4", "-p", "H=8",
                       "-p", "W=8", "-p", "R=3", "-p", "S=3", "-p", "stride=1", "-p", "pad=1",
                       "--prepacked")
    assert code == 2 and "has no constant operand to prepack" in err
    # a depthwise conv's weight is prepacked only in a blocked layout
    code, _, err = run(capsys, "tune", "depthwise_conv2d", "-p", "N=1", "-p", "C=4", "-p", "H=8",
                       "-p", "W=8", "-p", "R=3", "-p", "S=3", "-p", "stride=1", "-p", "pad=1",
                       "--prepacked")
    assert code == 2 and "prepacked form in a blocked layout only" in err
