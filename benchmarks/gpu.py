"""Kernel quality on a CUDA GPU: tuned GFLOP/s against torch (cuBLAS / cuDNN).

Tunes each workload with the best tuner available (autotune.api.tune), re-checks the best
kernel against numpy, and prints a table with torch's columns. For float32 there are two:
fp32 with TF32 off, and torch's defaults (TF32 for convolutions, fp32 for matmul). With
``--dtype float16`` or ``bfloat16`` the cases are matmuls (1024^3 to 8192^3) and ResNet-18's
3x3 convs at batch 1, in TFLOP/s (on ``--arch sm_90a`` all take the Hopper wgmma template,
the convs in NHWC), against torch in the same dtype (cuBLAS; cuDNN on channels_last
tensors), with cudnn.benchmark on throughout. torch is timed in processes of its own, one
per column: timed in the process that runs pycuda's kernels, cuDNN ran convs up to 1.6x
slower. Needs a GPU with pycuda (the 'cuda' extra) and nvcc; torch is optional (its columns
show n/a). Without a GPU it says why and exits with status 2. With ``--budget S`` it starts
no workload that would likely end past S seconds (judged by the longest of its op so far,
an op not yet run by the quickest workload) and names the ones it left out, so a capped run
ends on a complete table.

    .venv/bin/python benchmarks/gpu.py [--trials 500] [--arch sm_90] [--only matmul] [--db URL]
                                       [--dtype float32|float16|bfloat16] [--budget S]
"""
from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

import numpy as np

import autotune
from autotune.measure.correctness import check_output
from autotune.ops import Workload

# torch's columns per dtype: mode -> (header, TF32 allowed for convs and matmul; None:
# torch's default). A half mode runs torch in that dtype (TF32 does not apply).
MODES: dict[str, dict[str, tuple[str, Optional[bool]]]] = {
    "float32": {"fp32": ("torch fp32", False), "default": ("torch default", None)},
    "float16": {"float16": ("torch fp16", None)},
    "bfloat16": {"bfloat16": ("torch bf16", None)},
}
BASELINE_TIMEOUT_S = 600


@dataclass(frozen=True)
class Case:
    label: str
    workload: Workload


def cases(dtype: str = "float32", arch: str = "sm_90") -> list[Case]:
    """The float32 cases, or for a half dtype matmuls and ResNet-18's 3x3 convs (batch 1;
    NHWC on sm_90a, whose wgmma kernels read it, else NCHW)."""
    conv: dict[str, Any] = dict(N=1, R=3, S=3, stride=1, pad=1)
    if dtype != "float32" and arch == "sm_90a":
        conv["layout"] = "NHWC"
    if dtype != "float32":
        return [
            Case("matmul 1024^3", autotune.workload("matmul", M=1024, N=1024, K=1024,
                                                    dtype=dtype)),
            Case("matmul 4096^3", autotune.workload("matmul", M=4096, N=4096, K=4096,
                                                    dtype=dtype)),
            Case("matmul 8192^3", autotune.workload("matmul", M=8192, N=8192, K=8192,
                                                    dtype=dtype)),
            *(Case(f"conv2d {c}x{hw}x{hw} k{c} 3x3", autotune.workload(
                "conv2d", C=c, H=hw, W=hw, K=c, dtype=dtype, **conv))
              for c, hw in ((64, 56), (128, 28), (256, 14), (512, 7))),
        ]
    dw = dict(N=1, C=128, H=56, W=56, R=3, S=3, stride=1, pad=1)
    return [
        Case("matmul 1024^3", autotune.workload("matmul", M=1024, N=1024, K=1024)),
        Case("matmul 4096^3", autotune.workload("matmul", M=4096, N=4096, K=4096)),
        Case("conv2d 128x28x28 k128 3x3",
             autotune.workload("conv2d", C=128, H=28, W=28, K=128, **conv)),
        Case("conv2d 64x56x56 k64 3x3",
             autotune.workload("conv2d", C=64, H=56, W=56, K=64, **conv)),
        Case("depthwise 128x56x56 3x3", autotune.workload("depthwise_conv2d", **dw)),
        Case("depthwise 512x14x14 3x3", autotune.workload(
            "depthwise_conv2d", N=1, C=512, H=14, W=14, R=3, S=3, stride=1, pad=1)),
        Case("depthwise 128x56x56 3x3 +scale_shift+relu",
             autotune.workload("depthwise_conv2d", epilogue=("scale_shift", "relu"), **dw)),
    ]


def gpu_missing() -> Optional[str]:
    """Why this host cannot run the benchmark, or None."""
    from autotune.codegen.cuda.nvcc import find_nvcc
    from autotune.codegen.cuda.runtime import NoCudaDevice, cuda_device
    try:
        cuda_device(0)
    except NoCudaDevice as e:
        return str(e)
    if find_nvcc() is None:
        return "nvcc not found: install the CUDA toolkit or set CUDA_HOME"
    return None


def gpu_description() -> str:
    """The GPU's name, clocks (current / max, MHz) and driver, from nvidia-smi, else pycuda."""
    smi = shutil.which("nvidia-smi")
    fields = "name,clocks.sm,clocks.max.sm,clocks.mem,clocks.max.mem,driver_version"
    if smi is not None:
        try:
            out = subprocess.run([smi, "-i", "0", f"--query-gpu={fields}",
                                  "--format=csv,noheader,nounits"], capture_output=True,
                                 text=True, timeout=30, check=True).stdout.strip()
            name, sm, sm_max, mem, mem_max, driver = (x.strip() for x in out.split(","))
            return (f"{name}: SM clock {sm}/{sm_max} MHz, memory clock {mem}/{mem_max} MHz "
                    f"(now/max), driver {driver}")
        except (OSError, subprocess.SubprocessError, ValueError):
            pass
    from autotune.codegen.cuda.runtime import cuda_device
    cuda = cuda_device(0)
    dev, attr = cuda.Device(0), cuda.device_attribute
    try:
        return (f"{dev.name()}: SM clock {dev.get_attribute(attr.CLOCK_RATE) // 1000} MHz, "
                f"memory clock {dev.get_attribute(attr.MEMORY_CLOCK_RATE) // 1000} MHz "
                f"(max)")
    except Exception as exc:  # pycuda's own error types: clocks unknown to this driver
        return f"{dev.name()}: clocks unknown (no nvidia-smi; pycuda: {exc})"


# --- torch, in a process of its own ---------------------------------------------------

def torch_times(dtype: str, mode: str, labels: list[str], arch: str = "sm_90",
                number: int = 50) -> dict[str, Optional[float]]:
    """Seconds per call of torch's equivalent of each case (epilogue included, unfused), in
    ``mode``; None for all when torch or its GPU is missing. Runs in the child process."""
    try:
        import torch
    except ImportError:
        return {label: None for label in labels}
    if not torch.cuda.is_available():
        return {label: None for label in labels}
    tf32 = MODES[dtype][mode][1]
    if tf32 is not None:
        torch.backends.cuda.matmul.allow_tf32 = tf32
        torch.backends.cudnn.allow_tf32 = tf32
    torch.backends.cudnn.benchmark = True  # let cuDNN pick its best algorithm (every mode)
    by_label = {c.label: c.workload for c in cases(dtype, arch)}
    return {label: _time_torch(torch, _torch_call(torch, by_label[label]), number)
            for label in labels}


def _tensor(torch: Any, array: np.ndarray, dtype: str, dev: Any) -> Any:
    """A storage array (`Workload.random_args`) as a torch tensor of ``dtype`` on ``dev``."""
    if dtype == "bfloat16":  # uint16 bit patterns: reinterpreted, not converted
        return torch.from_numpy(array.view(np.int16)).view(torch.bfloat16).to(dev)
    return torch.from_numpy(array).to(dev)


def _torch_call(torch: Any, wl: Workload) -> Callable[[], Any]:
    import torch.nn.functional as F

    dev = torch.device("cuda")
    args = [_tensor(torch, a, wl.dtype, dev) for a in wl.random_args(0)[:-1]]
    if wl.layout == "NHWC":  # the same bytes, seen as NCHW tensors in channels_last
        args[:2] = [a.permute(0, 3, 1, 2) for a in args[:2]]
    elif wl.dtype != "float32" and wl.op == "conv2d":  # cuDNN's fast half kernels are NHWC
        args[:2] = [a.contiguous(memory_format=torch.channels_last) for a in args[:2]]
    p = wl.params
    if wl.op in ("matmul", "batch_matmul"):
        return lambda: args[0] @ args[1]
    groups = p["C"] if wl.op == "depthwise_conv2d" else 1
    dil = p["dilation"] if "dilation" in p else (1, 1)

    def run() -> Any:
        out = F.conv2d(args[0], args[1], stride=p["stride"], padding=p["pad"], dilation=dil,
                       groups=groups)
        if "scale_shift" in wl.epilogue:
            out = out * args[2].view(1, -1, 1, 1) + args[3].view(1, -1, 1, 1)
        if "relu" in wl.epilogue:
            out = torch.relu(out)
        return out
    return run


def _time_torch(torch: Any, run: Callable[[], Any], number: int) -> float:
    for _ in range(3):
        run()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    costs = []
    for _ in range(5):
        start.record()
        for _ in range(number):
            run()
        end.record()
        torch.cuda.synchronize()
        costs.append(start.elapsed_time(end) / 1e3 / number)
    return float(np.median(costs))


def torch_baselines(dtype: str, mode: str, labels: list[str], arch: str
                    ) -> dict[str, Optional[float]]:
    """`torch_times` in a fresh process; None for each case (and the reason on stderr) when
    that process fails."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "--torch-baseline", mode,
           "--dtype", dtype, "--arch", arch, "--labels", json.dumps(labels)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=BASELINE_TIMEOUT_S)
        if proc.returncode == 0:
            return json.loads(proc.stdout.strip().splitlines()[-1])
        why = (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1]
    except (OSError, subprocess.SubprocessError, ValueError, IndexError) as exc:
        why = f"{type(exc).__name__}: {exc}"
    print(f"torch {mode} baseline failed: {why}", file=sys.stderr)
    return {label: None for label in labels}


# --- autotune ---------------------------------------------------------------------------

def tuned(case: Case, target: autotune.Target, trials: int, db: str) -> Optional[float]:
    """Seconds per call of the best tuned kernel (re-verified against numpy), or None."""
    wl = case.workload
    result = autotune.tune(wl, target, trials=trials, db=db)
    if not result.ok:
        return None
    kernel = autotune.compile(wl, target, result.best_config)
    args = wl.random_args(1)
    kernel(*args)
    # the output in its storage form, under the larger of 1e-3 and the dtype's tolerance
    wrong = check_output(args[-1], wl.reference(args), 1e-3, 1e-3, wl.dtype)
    if wrong:
        raise AssertionError(f"{case.label}: the best kernel is wrong: {wrong}")
    return result.best_cost


def _rate(wl: Workload, seconds: Optional[float], scale: float) -> Optional[float]:
    """FLOP/s over ``scale`` (1e9: GFLOP/s, 1e12: TFLOP/s)."""
    return wl.flops() / seconds / scale if seconds else None


def seconds(text: str) -> float:
    """An argparse type: a positive number of seconds."""
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text} s; expected a positive number of seconds")
    return value


@dataclass
class Budget:
    """Seconds a run may take, from its start (None: no limit): a workload starts only while
    what is left covers the longest of its kind so far (an op not yet run: the quickest
    workload so far), so one large matmul does not keep the convs after it from running."""
    seconds: Optional[float]
    clock: Callable[[], float] = time.monotonic
    start: float = field(init=False)
    longest: dict[str, float] = field(init=False, default_factory=dict)
    quickest: float = field(init=False, default=0.0)

    def __post_init__(self) -> None:
        self.start = self.clock()

    def allows_another(self, kind: str = "") -> bool:
        if self.seconds is None:
            return True
        expected = self.longest.get(kind, self.quickest)
        return self.start + self.seconds - self.clock() > expected

    def took(self, seconds: float, kind: str = "") -> None:
        self.quickest = min(self.quickest, seconds) if self.longest else seconds
        self.longest[kind] = max(self.longest.get(kind, 0.0), seconds)


def _cols(ours: Optional[float], theirs: Optional[float]) -> str:
    if theirs is None:
        return f"{'n/a':>21} {'n/a':>6}"
    ratio = f"{ours / theirs:6.2f}" if ours else f"{'-':>6}"
    return f"{theirs:21.1f} {ratio}"


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--trials", type=int, default=500, help="trials per workload")
    ap.add_argument("--arch", default="sm_90", help="CUDA arch of the GPU, e.g. sm_80, or "
                    "sm_90a for Hopper's wgmma kernels")
    ap.add_argument("--only", default="", help="run the cases whose label contains this")
    ap.add_argument("--db", default="", help="database URL (default: a temporary SQLite file)")
    ap.add_argument("--dtype", default="float32", choices=list(MODES),
                    help="element type of the workloads (default float32); float16 and "
                         "bfloat16 run matmuls and ResNet-18's 3x3 convs against torch in the "
                         "same dtype, in TFLOP/s")
    ap.add_argument("--budget", type=seconds, default=None, metavar="S",
                    help="start no workload that would likely end past S seconds from the "
                         "start (the longest so far); name the ones left out")
    ap.add_argument("--torch-baseline", help=argparse.SUPPRESS)
    ap.add_argument("--labels", default="[]", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    budget = Budget(args.budget)
    if args.torch_baseline:  # the child process of `torch_baselines`
        print(json.dumps(torch_times(args.dtype, args.torch_baseline, json.loads(args.labels),
                                     args.arch)))
        return 0
    reason = gpu_missing()
    if reason:
        print(f"benchmarks/gpu.py needs a CUDA GPU: {reason}", file=sys.stderr)
        return 2
    target = autotune.Target(f"cuda -arch={args.arch}")
    chosen = [c for c in cases(args.dtype, args.arch) if args.only in c.label]
    if chosen:
        try:  # bfloat16 below sm_80: say so before any torch process starts
            chosen[0].workload.check_target(target)
        except ValueError as exc:
            print(f"benchmarks/gpu.py: {exc}", file=sys.stderr)
            return 2
    labels = [c.label for c in chosen]
    modes = MODES[args.dtype]
    unit, scale = ("GFLOP/s", 1e9) if args.dtype == "float32" else ("TFLOP/s", 1e12)
    print(f"GPU {gpu_description()}")
    layouts = sorted({c.workload.layout for c in chosen if c.workload.op == "conv2d"})
    print(f"target {target.key}; dtype {args.dtype}; {args.trials} trials per workload; torch "
          f"timed in processes of its own (cudnn.benchmark on)"
          + (f"; convs in {', '.join(layouts)}" if layouts else ""))
    # torch first: the child processes then have the GPU to themselves
    base = {mode: torch_baselines(args.dtype, mode, labels, args.arch) for mode in modes}
    with tempfile.TemporaryDirectory() as tmp:
        db = args.db or f"sqlite:///{Path(tmp) / 'gpu_bench.db'}"
        heads = " ".join(f"{modes[m][0] + ' ' + unit:>21} {'ratio':>6}" for m in modes)
        print(f"{'workload':45} {'autotune ' + unit:>17} {heads}")
        left_out = []
        for case in chosen:
            if not budget.allows_another(case.workload.op):
                left_out.append(case.label)
                continue
            t0 = time.monotonic()
            ours = _rate(case.workload, tuned(case, target, args.trials, db), scale)
            cols = " ".join(_cols(ours, _rate(case.workload, base[m][case.label], scale))
                            for m in modes)
            print(f"{case.label:45} {ours or 0.0:17.1f} {cols}", flush=True)
            budget.took(time.monotonic() - t0, case.workload.op)
    if left_out:
        print(f"not run within the {args.budget:g} s budget: {', '.join(left_out)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
