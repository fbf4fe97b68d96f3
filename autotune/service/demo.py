"""The demo of `make run` (`autotune serve --demo`): a small CNN tuned as a model run.

`demo_cnn` is the model (seven convolutions, a global average pool and a classifier: eight
distinct tasks, one conv run twice); `DemoRun` tunes it with ``autotune tune-model`` in a
child process beside the service, so that the dashboard shows its jobs, the run and the
local worker live.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from typing import IO, Any, Optional

from autotune.settings import Settings

DEMO_MODEL = "autotune.service.demo:demo_cnn"
DEMO_NAME = "DemoCNN"  # the model's class name: its model run's name
# About three minutes on two cores (eight tasks; about 1.5 s a trial with the tuner's work).
DEMO_TRIALS = 128


def demo_cnn() -> tuple[Any, Any]:
    """``(model, example_inputs)``: a small CNN (ResNet-like stem and blocks, a depthwise
    separable block, a linear classifier) on one 3x32x32 image, weights and BatchNorm
    statistics fixed by a seed."""
    import torch
    from torch import nn

    def conv(cin: int, cout: int, k: int, stride: int = 1, groups: int = 1) -> list[nn.Module]:
        return [nn.Conv2d(cin, cout, k, stride, k // 2, groups=groups, bias=False),
                nn.BatchNorm2d(cout), nn.ReLU(inplace=True)]

    class DemoCNN(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.features = nn.Sequential(
                *conv(3, 16, 3), *conv(16, 32, 3, 2),  # 32x32, then 16x16
                *conv(32, 32, 3, groups=32), *conv(32, 64, 1),  # depthwise separable
                *conv(64, 64, 3, 2), *conv(64, 64, 3), *conv(64, 64, 3),  # 8x8, twice alike
                nn.AdaptiveAvgPool2d(1), nn.Flatten())
            self.classifier = nn.Linear(64, 10)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.classifier(self.features(x))

    torch.manual_seed(0)
    model = DemoCNN().eval()
    for m in model.modules():  # BatchNorm statistics of a trained model, not the identity
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.uniform_(-0.5, 0.5)
            m.running_var.uniform_(0.5, 1.5)
    return model, (torch.randn(1, 3, 32, 32),)


def demo_done(settings: Settings, trials: int) -> bool:
    """Whether the database already holds a finished demo run of at least ``trials``."""
    from autotune.db import Database

    db = Database.open(settings.db_url)
    try:
        found, _ = db.list_runs(limit=1000)
    finally:
        db.dispose()
    return any(r.name == DEMO_NAME and r.state == "done" and r.budget >= trials
               for r in found)


# `autotune` in the child, Ctrl-C restored: a service started from a shell's background
# (`cmd &` without job control) inherits SIGINT ignored, and the run would then outlive the
# `stop` that interrupts it, killed unrecorded after its timeout
_TAKES_SIGINT = ("import signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
                 "from autotune.cli import main; sys.exit(main(sys.argv[1:]))")


class DemoRun:
    """``autotune tune-model`` of `demo_cnn` in a child process, appending its lines to the
    file ``log``; a run stopped earlier continues where it stopped."""

    def __init__(self, settings: Settings, trials: int, log: str) -> None:
        # The database URL goes by the environment, not the command line (which `ps` shows).
        # Unbuffered: forked measurement processes must not inherit (and write again) lines.
        env = {**os.environ, "AUTOTUNE_DB_URL": settings.db_url, "PYTHONUNBUFFERED": "1"}
        if settings.ray_address:  # measured where the service's jobs are
            env["AUTOTUNE_RAY_ADDRESS"] = settings.ray_address
        self._log: IO[str] = open(log, "a")
        # A process group of its own: a terminal's Ctrl-C reaches the service alone, which
        # stops the run with one SIGINT (`stop`). Two (the terminal's, then the service's)
        # could land while the run records itself cancelled and leave it "running".
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _TAKES_SIGINT, "tune-model", DEMO_MODEL,
             "--trials", str(trials)],
            env=env, stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT,
            process_group=0)

    def stop(self, timeout: float = 15.0) -> Optional[int]:
        """Interrupt the run (it records itself as cancelled) and wait for it; killed after
        ``timeout`` seconds. Its exit status."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()
        return self.proc.returncode
