"""scripts/gpu-check.sh's arguments and what it does on a host without a GPU (nvidia-smi is
replaced by a stand-in where a GPU must be pretended or denied), and benchmarks/gpu.py there.
Nothing is installed into this environment: wheels go to the script's temporary folder."""
from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from autotune.codegen.cuda.nvcc import find_nvcc

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "gpu-check.sh"


def run(*args: str, smi: str | None = None, tmp: Path | None = None,
        timeout: float = 120, python: str = sys.executable) -> subprocess.CompletedProcess:
    """The script with ``args``; ``smi``: the body of a stand-in nvidia-smi put first on PATH;
    ``python``: the interpreter it runs ($PYTHON)."""
    env = dict(os.environ, PYTHON=python)
    if smi is not None:
        assert tmp is not None
        bin_dir = tmp / "bin"
        bin_dir.mkdir(exist_ok=True)
        (bin_dir / "nvidia-smi").write_text("#!/bin/sh\n" + smi)
        (bin_dir / "nvidia-smi").chmod(0o755)
        env["PATH"] = f"{bin_dir}{os.pathsep}{env['PATH']}"
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True,
                          env=env, timeout=timeout, cwd=tmp or REPO)


def wheel(folder: Path, name: str, files: dict[str, str]) -> Path:
    """A minimal pure-Python wheel of ``name`` 0.0.1 holding ``files``."""
    dist = f"{name}-0.0.1.dist-info"
    path = folder / f"{name}-0.0.1-py3-none-any.whl"
    meta = {f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.0.1\n",
            f"{dist}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
                             "Tag: py3-none-any\n"}
    with zipfile.ZipFile(path, "w") as z:
        for arc, text in {**files, **meta}.items():
            z.writestr(arc, text)
        z.writestr(f"{dist}/RECORD", "".join(f"{a},,\n" for a in [*files, *meta])
                   + f"{dist}/RECORD,,\n")
    return path


def test_help_and_bad_arguments():
    shown = run("--help")
    assert shown.returncode == 0 and "scripts/gpu-check.sh [WHEEL_DIR]" in shown.stdout
    two = run("a", "b")
    assert two.returncode == 2 and "at most one argument" in two.stderr
    assert run("--frobnicate").returncode == 2


def test_wheel_dir_is_validated_first(tmp_path: Path):
    missing = run(str(tmp_path / "nope"))
    assert missing.returncode == 2 and "is not a directory" in missing.stderr
    empty = run(str(tmp_path))
    assert empty.returncode == 2 and "holds no .whl files" in empty.stderr


def test_without_a_gpu_it_stops_before_installing(tmp_path: Path):
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    (wheels / "pycuda-1.0-cp312-cp312-linux_x86_64.whl").write_text("not a wheel")
    # what nvidia-smi prints, with status 6, on a host whose driver finds no GPU
    out = run(str(wheels), smi='echo "No devices were found"; exit 6\n', tmp=tmp_path)
    assert out.returncode == 2, out.stderr
    assert "no GPU: nvidia-smi lists none (No devices were found)" in out.stderr
    assert "installing" not in out.stdout  # the broken wheel was never handed to pip


def test_wheels_go_to_a_folder_of_their_own_on_the_path(tmp_path: Path):
    if find_nvcc() is None:
        pytest.skip("nvcc not found: the script stops before installing")
    if subprocess.run([sys.executable, "-m", "pip", "--version"], capture_output=True,
                      timeout=60).returncode != 0:
        pytest.skip(f"{sys.executable} has no pip to install wheels with")
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    # a pycuda without its driver module: found first on the path, so the check names it
    wheel(wheels, "pycuda", {"pycuda/__init__.py": "STANDIN = True\n"})
    # a wheel for another platform is skipped, not the end of the install
    (wheels / "otherpkg-1.0-cp27-cp27mu-linux_armv7l.whl").write_text("never read")
    out = run(str(wheels), smi='echo "0, NVIDIA H100 80GB HBM3, 9.0"\n', tmp=tmp_path)
    assert out.returncode == 3, out.stdout + out.stderr
    assert "target cuda -arch=sm_90" in out.stdout and "installing from" in out.stdout
    assert "no wheel of otherpkg installs here; skipped" in out.stderr
    assert "missing modules: pycuda.driver (ModuleNotFoundError: No module named " \
           "'pycuda.driver')" in out.stderr
    site = out.stdout.split(" into ")[1].split(":")[0]
    assert not Path(site).exists()  # removed at exit
    import importlib.util
    spec = importlib.util.find_spec("pycuda")
    assert spec is None or "STANDIN" not in Path(spec.origin or "").read_text()


def _gpu_bench(monkeypatch):
    """benchmarks/gpu.py as a module."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("gpu_bench", REPO / "benchmarks" / "gpu.py")
    bench = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "gpu_bench", bench)  # its dataclasses look it up
    spec.loader.exec_module(bench)
    return bench


def test_gpu_benchmark_budget_starts_a_workload_only_if_the_longest_so_far_fits(monkeypatch):
    bench = _gpu_bench(monkeypatch)
    now = [100.0]
    budget = bench.Budget(60, clock=lambda: now[0])
    assert budget.allows_another()
    now[0] += 20
    budget.took(20)      # 40 s left, the longest 20: another may start
    assert budget.allows_another()
    now[0] += 25
    budget.took(25)      # 15 s left, the longest 25: none may
    assert not budget.allows_another()
    assert bench.Budget(None, clock=lambda: 1e9).allows_another()
    # by op: a long matmul (8192^3 took the H100 run's budget) does not keep a conv out
    budget = bench.Budget(100, clock=lambda: now[0])
    now[0] += 10
    budget.took(10, "matmul")
    now[0] += 60
    budget.took(60, "matmul")  # 30 s left: no other matmul of up to 60 s fits
    assert not budget.allows_another("matmul")
    assert budget.allows_another("conv2d")  # judged by the quickest so far, 10 s
    now[0] += 12
    budget.took(12, "conv2d")
    now[0] += 7                # 11 s left
    assert not budget.allows_another("conv2d") and not budget.allows_another("matmul")
    out = subprocess.run([sys.executable, "benchmarks/gpu.py", "--budget", "0"], cwd=REPO,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and "--budget: 0 s; expected a positive" in out.stderr


def test_gpu_benchmark_without_a_gpu_says_why():
    from autotune.codegen.cuda.runtime import NoCudaDevice, cuda_device
    try:
        cuda_device(0)
        pytest.skip("a CUDA device is present")
    except NoCudaDevice as e:
        reason = str(e)
    out = subprocess.run([sys.executable, "benchmarks/gpu.py", "--trials", "4"], cwd=REPO,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and f"needs a CUDA GPU: {reason}" in out.stderr
    # torch's column, in its own process: JSON, n/a (None) without a GPU
    child = subprocess.run([sys.executable, "benchmarks/gpu.py", "--torch-baseline", "fp32",
                            "--labels", '["matmul 1024^3"]'], cwd=REPO, capture_output=True,
                           text=True, timeout=120)
    assert child.returncode == 0 and child.stdout.strip() == '{"matmul 1024^3": null}'


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_gpu_benchmark_in_a_half_dtype_without_a_gpu_says_why(dtype):
    from autotune.codegen.cuda.runtime import NoCudaDevice, cuda_device
    try:
        cuda_device(0)
        pytest.skip("a CUDA device is present")
    except NoCudaDevice as e:
        reason = str(e)
    helped = subprocess.run([sys.executable, "benchmarks/gpu.py", "--help"], cwd=REPO,
                            capture_output=True, text=True, timeout=120)
    assert helped.returncode == 0 and "--dtype {float32,float16,bfloat16}" in helped.stdout
    out = subprocess.run([sys.executable, "benchmarks/gpu.py", "--dtype", dtype, "--trials",
                          "4"], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and f"needs a CUDA GPU: {reason}" in out.stderr
    # torch in the same dtype, in its own process: n/a (None) without a GPU
    child = subprocess.run([sys.executable, "benchmarks/gpu.py", "--torch-baseline", dtype,
                            "--dtype", dtype, "--labels", '["conv2d 64x56x56 k64 3x3"]'],
                           cwd=REPO, capture_output=True, text=True, timeout=120)
    assert child.returncode == 0, child.stderr
    assert child.stdout.strip() == '{"conv2d 64x56x56 k64 3x3": null}'


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_gpu_benchmark_hands_torch_the_same_values_in_the_same_dtype(dtype, monkeypatch):
    # torch's inputs are the workload's storage arrays reinterpreted (bfloat16: uint16 bits)
    torch = pytest.importorskip("torch")
    import numpy as np

    from autotune.ops import workload
    from autotune.ops.dtypes import to_float32

    bench = _gpu_bench(monkeypatch)
    a = workload("matmul", M=8, N=8, K=8, dtype=dtype).random_args(0)[0]
    t = bench._tensor(torch, a, dtype, torch.device("cpu"))
    assert t.dtype == getattr(torch, dtype)
    np.testing.assert_array_equal(t.float().numpy(), to_float32(a, dtype))
    assert {c.workload.dtype for c in bench.cases(dtype)} == {dtype}


def test_each_step_runs_under_its_cap_and_benchmarks_get_a_budget_within_it(tmp_path: Path):
    """With a stand-in interpreter that logs its arguments, every step runs in order and each
    benchmark is told to plan to end 15 s inside its step's cap."""
    if find_nvcc() is None:
        pytest.skip("nvcc not found: the script stops before running any step")
    log = tmp_path / "calls.log"
    python = tmp_path / "python"
    python.write_text('#!/bin/sh\n[ "$1" = "-c" ] && exit 1\n'  # no xdist
                      '[ "$1" = "-" ] && { cat >/dev/null; exit 0; }\n'  # nothing missing
                      f'echo "$*" >> {log}\n')
    python.chmod(0o755)
    out = run(smi='echo "0, NVIDIA H100 80GB HBM3, 9.0"\n', tmp=tmp_path, python=str(python))
    assert out.returncode == 0, out.stdout + out.stderr
    calls = log.read_text().splitlines()
    assert calls[0].startswith("-m pytest") and "@BUDGET@" not in calls[0]
    assert calls[1].endswith("--dtype float16 --trials 8 --budget 135")
    assert "--arch sm_90a" in calls[1]
    assert calls[2] == "benchmarks/gpu_models.py --quick --layout auto"
    assert calls[3].endswith("--only matmul --trials 8 --budget 45")
    assert calls[4] == "benchmarks/gpu.py --arch sm_90 --trials 8 --budget 45"
    assert out.stdout.count(": passed in") == 5
