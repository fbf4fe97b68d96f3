"""benchmarks/gpu_models.py without a GPU: it says why and exits 2; its models (torchvision's
ResNet-18, ResNet-50 and MobileNet-V2) extract whole on a CUDA target in every dtype it times,
so each column runs every conv, depthwise conv and linear layer on autotune's kernels."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

import autotune  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from benchmarks.gpu_models import build  # noqa: E402

LAYERS = {"resnet18": 21, "resnet50": 54, "mobilenetv2": 53}  # convs and the classifier


def test_without_a_gpu_it_says_why():
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present")
    out = subprocess.run([sys.executable, "benchmarks/gpu_models.py", "--quick"], cwd=REPO,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and "torch finds no CUDA GPU" in out.stderr


@pytest.mark.parametrize("name", list(LAYERS))
def test_every_layer_of_the_models_runs_on_autotune(name):
    for dtype in ("float32", "float16"):
        model, x = build(name, 1, dtype, device="cpu", size=64)  # small: shapes are traced
        tasks = autotune.extract(model, x, target="cuda -arch=sm_90")
        assert not tasks.unsupported, tasks.unsupported
        assert sum(t.weight for t in tasks.tasks) == LAYERS[name]
        assert {t.workload.dtype for t in tasks.tasks} == {dtype}
