"""nvcc as a compiler: CUDA C source to a cubin, with ptxas's per-kernel resource report."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Sequence

NVCC_TIMEOUT_S = 300.0


class CudaCompileError(RuntimeError):
    """nvcc failed (or is missing); the message carries the compiler log."""


@dataclass(frozen=True)
class Resources:
    """What ptxas reports for one kernel (bytes, except registers and barriers)."""

    registers: int = 0
    shared_bytes: int = 0
    stack_bytes: int = 0
    spill_stores: int = 0
    spill_loads: int = 0
    barriers: int = 0

    def to_dict(self) -> dict[str, int]:
        return asdict(self)


def find_nvcc() -> str | None:
    """Path of nvcc from PATH, else from $CUDA_HOME or /usr/local/cuda; None if absent."""
    found = shutil.which("nvcc")
    if found:
        return found
    for root in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if root and (Path(root) / "bin" / "nvcc").is_file():
            return str(Path(root) / "bin" / "nvcc")
    return None


def nvcc_cubin(source: str, arch: str, options: Sequence[str] = ("-O3",),
               timeout: float = NVCC_TIMEOUT_S) -> tuple[bytes, str]:
    """Compile ``source`` for ``arch`` (e.g. "sm_90"); returns (cubin, ptxas log)."""
    nvcc = find_nvcc()
    if nvcc is None:
        raise CudaCompileError("nvcc not found: install the CUDA toolkit or set CUDA_HOME")
    with tempfile.TemporaryDirectory(prefix="autotune_nvcc_") as tmp:
        src, out = Path(tmp) / "kernel.cu", Path(tmp) / "kernel.cubin"
        src.write_text(source)
        cmd = [nvcc, "-cubin", *arch_flags(arch), *options, "-Xptxas", "-v", "-o",
               str(out), str(src)]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise CudaCompileError(f"nvcc timed out after {timeout:.0f} s") from None
        log = proc.stdout + proc.stderr
        if proc.returncode != 0 or not out.is_file():
            raise CudaCompileError(f"nvcc failed (exit {proc.returncode}):\n{_trim(log)}")
        return out.read_bytes(), log


def arch_flags(arch: str) -> list[str]:
    """nvcc's flags for machine code of ``arch`` alone: an arch-specific target (sm_90a,
    whose wgmma and setmaxnreg no other arch has) by ``-gencode``, since nvcc 13.0's
    ``-arch=sm_90a`` also runs a plain sm_90 pass that refuses them."""
    if arch.endswith("a"):
        return [f"-gencode=arch=compute_{arch[3:]},code={arch}"]
    return [f"-arch={arch}"]


_ENTRY = re.compile(r"Compiling entry function '([^']+)'")
_FIELDS = {
    "stack_bytes": re.compile(r"(\d+) bytes stack frame"),
    "spill_stores": re.compile(r"(\d+) bytes spill stores"),
    "spill_loads": re.compile(r"(\d+) bytes spill loads"),
    "registers": re.compile(r"Used (\d+) registers"),
    "barriers": re.compile(r"used (\d+) barriers"),
    "shared_bytes": re.compile(r"(\d+) bytes smem"),
}


def parse_ptxas(log: str) -> dict[str, Resources]:
    """Per-kernel resources from ``-Xptxas -v`` output (fields absent from the log are 0)."""
    found: dict[str, dict[str, int]] = {}
    current: dict[str, int] | None = None
    for line in log.splitlines():
        m = _ENTRY.search(line)
        if m:
            current = found.setdefault(m.group(1), {})
            continue
        if current is None:
            continue
        for name, pattern in _FIELDS.items():
            f = pattern.search(line)
            if f:
                current[name] = int(f.group(1))
    return {k: Resources(**v) for k, v in found.items()}


def _trim(log: str, limit: int = 6000) -> str:
    """The compiler log without ptxas's info chatter, capped in length."""
    lines = [ln for ln in log.splitlines() if "ptxas info" not in ln and "bytes stack" not in ln]
    text = "\n".join(lines)
    return text if len(text) <= limit else text[:limit] + "\n..."
