"""Digests of the generated code (LLVM IR before O3, CUDA C before nvcc) and of the cost
model's feature row of every operator and template, for the default config and a seeded
sample of valid ones: run it before and after a change meant to keep code generation (and
what the cost model sees) as it was, and compare.

    python scripts/codegen_digest.py                 # one line per case: digest, case
    python scripts/codegen_digest.py --against main  # the tree against a commit: differences

``--against`` unpacks the commit's package into a temporary directory and runs this script
there (as pure Python, from that source), on this machine, so both sides see the same host
CPU and cache sizes. Nothing is compiled, so no nvcc or GPU is needed.
"""
from __future__ import annotations

import argparse
import hashlib
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Iterator

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = 4  # valid configs drawn per workload and target, beside the default

CPU_TARGETS = ("llvm -cores=2", "llvm -mcpu=haswell -cores=2")
CUDA_TARGETS = ("cuda -arch=sm_80", "cuda -arch=sm_90", "cuda -arch=sm_90a")
CONV = dict(N=1, C=16, H=14, W=14, K=32, R=3, S=3, stride=1, pad=1)
CONV_ODD = dict(N=2, C=5, H=9, W=13, K=6, R=3, S=3, stride=2, pad=1)
DW = dict(N=1, C=16, H=15, W=15, R=3, S=3, stride=2, pad=1)
# (op, params, epilogue, dtype, target kinds)
CASES: tuple[tuple[str, dict, tuple[str, ...], str, tuple[str, ...]], ...] = (
    ("matmul", dict(M=64, N=96, K=80), (), "float32", ("llvm", "cuda")),
    ("matmul", dict(M=13, N=37, K=11), ("bias", "relu"), "float32", ("llvm", "cuda")),
    ("matmul", dict(M=1, N=512, K=256), ("bias",), "float32", ("llvm",)),  # GEMV
    ("matmul", dict(M=64, N=64, K=64, prepacked=True), ("bias",), "float32", ("llvm",)),
    ("batch_matmul", dict(B=2, M=24, N=40, K=16), ("scale_shift",), "float32",
     ("llvm", "cuda")),
    ("conv2d", CONV, ("bias", "residual", "relu"), "float32", ("llvm", "cuda")),
    ("conv2d", CONV_ODD, ("scale_shift", "silu"), "float32", ("llvm", "cuda")),
    ("conv2d", dict(CONV, prepacked=True), ("bias", "relu6"), "float32", ("llvm",)),
    ("conv2d", dict(CONV, layout="NCHW8c"), ("bias", "relu"), "float32", ("llvm",)),
    ("depthwise_conv2d", DW, ("bias", "relu6"), "float32", ("llvm", "cuda")),
    ("depthwise_conv2d", dict(DW, multiplier=2, stride=1), ("hardswish",), "float32",
     ("llvm", "cuda")),
    ("max_pool2d", dict(N=1, C=8, H=16, W=16, R=3, S=3, stride=2, pad=1), (), "float32",
     ("llvm",)),
    ("matmul", dict(M=100, N=136, K=200), ("bias", "gelu"), "float16", ("cuda",)),
    ("matmul", dict(M=256, N=256, K=512), ("residual",), "bfloat16", ("cuda",)),
    ("batch_matmul", dict(B=2, M=70, N=72, K=128), ("bias", "relu"), "float16", ("cuda",)),
    ("conv2d", dict(CONV, C=32), ("bias", "relu"), "float16", ("cuda",)),
    ("conv2d", dict(N=1, C=16, H=9, W=13, K=24, R=3, S=3, stride=1, pad=1, layout="NHWC"),
     ("scale_shift", "residual", "relu6"), "float16", ("cuda",)),
    ("depthwise_conv2d", DW, ("bias",), "bfloat16", ("cuda",)),
)


def cases() -> Iterator[tuple[str, str]]:
    """(case name, generated source or feature row) of every case its target accepts."""
    import numpy as np

    import autotune
    from autotune import driver
    from autotune.costmodel.features import extract

    for op, params, epilogue, dtype, kinds in CASES:
        wl = autotune.workload(op, epilogue=list(epilogue), dtype=dtype, **params)
        for spec in (t for kind in kinds for t in (CPU_TARGETS if kind == "llvm"
                                                   else CUDA_TARGETS)):
            target = autotune.Target(spec)
            try:
                sp = driver.config_space(wl, target)
            except ValueError:  # WorkloadError too
                continue  # a dtype or layout this target refuses
            rng = np.random.default_rng(0)
            drawn = [c for c in sp.sample(rng, 40 * SAMPLES) if sp.invalid_reason(c) is None]
            configs = [sp.default(), *drawn[:SAMPLES]]
            for cfg in configs:
                name = f"{driver.kernel_family(wl, target)}: {wl} [{target.key}] #{cfg.index}"
                try:
                    yield name, driver.source(wl, target, cfg)
                    row = np.asarray(list(extract(driver.lower(wl, target, cfg))), np.float64)
                    yield f"features of {name}", row.tobytes().hex()
                except driver.InvalidConfig as e:
                    yield name, f"invalid: {e}"


def digests() -> dict[str, str]:
    return {name: hashlib.sha256(src.encode()).hexdigest()[:16] for name, src in cases()}


def _run_at(rev: str) -> dict[str, str]:
    """This script's digests as the package at ``rev`` generates them."""
    with tempfile.TemporaryDirectory() as tmp:
        archive = subprocess.run(["git", "archive", rev, "autotune"], cwd=ROOT, check=True,
                                 capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", tmp], input=archive, check=True)
        env = {**os.environ, "PYTHONPATH": tmp, "AUTOTUNE_PURE": "1"}
        out = subprocess.run([sys.executable, __file__, "--here", tmp], env=env, check=True,
                             capture_output=True, text=True).stdout
    pairs = (line.split(" ", 1) for line in out.splitlines())
    return {name: digest for digest, name in pairs}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--against", metavar="REV", help="compare with the code of this commit")
    p.add_argument("--here", help=argparse.SUPPRESS)  # the package root --against unpacked
    args = p.parse_args(argv)
    if args.here:
        import autotune
        assert Path(autotune.__file__).is_relative_to(args.here), autotune.__file__
    now = digests()
    if not args.against:
        for name, digest in now.items():
            print(digest, name)
        return 0
    then = _run_at(args.against)
    differ = sorted(n for n in now.keys() | then.keys() if now.get(n) != then.get(n))
    for name in differ:
        print(f"DIFFERS {then.get(name, '-')} -> {now.get(name, '-')} {name}")
    code = [n for n in now if not n.startswith("features of ")]
    kinds = {k: sum(k in n for n in code) for k in ("[llvm", "[cuda")}
    print(f"{len(code)} kernels ({kinds['[llvm']} LLVM IR, {kinds['[cuda']} CUDA C) and "
          f"{len(now) - len(code)} feature rows: {len(now) - len(differ)} of {len(now)} "
          f"identical to {args.against}, {len(differ)} differ")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
