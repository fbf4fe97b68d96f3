"""`CpuFacts`: what CPU schedules' defaults are derived from (vector width, registers, caches).

Cache sizes are read from the host (sysfs, then sysconf) only when the target is the host's
CPU; another CPU gets typical sizes. They never enter `Target.key`, so records stay valid.
"""
from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from pathlib import Path

from autotune.target import Target, host_cpu

_SYSFS_CACHE = Path("/sys/devices/system/cpu/cpu0/cache")
# Typical per-core L1d / L2 and shared L3 of recent x86 parts, for CPUs we cannot read.
_DEFAULT_CACHES = (32 * 1024, 1024 * 1024, 16 * 1024 * 1024)
_SYSCONF = ("SC_LEVEL1_DCACHE_SIZE", "SC_LEVEL2_CACHE_SIZE", "SC_LEVEL3_CACHE_SIZE")


@dataclass(frozen=True)
class CpuFacts:
    """A CPU target's vector width, vector register count, FMA (None: not known for a CPU
    other than the host's), cache sizes (bytes), cores and LLVM CPU name (``mcpu``: where
    cores of one width still prefer different loop nests).

    The number of FMA pipes is not a fact here: it decides how many independent accumulators
    hide the FMA latency (latency x pipes, 8-10 on current x86), and every register tile
    `register_tile` picks already holds 12 (16 registers) or 24 (32 registers)."""

    vector_bits: int
    vector_registers: int
    fma: bool | None
    l1d: int
    l2: int
    l3: int
    cores: int
    mcpu: str = ""

    @property
    def lanes(self) -> int:
        """float32 lanes per vector register."""
        return self.vector_bits // 32

    @property
    def zen(self) -> bool:
        """An AMD Zen core (LLVM's ``znver*``)."""
        return self.mcpu.startswith("znver")

    def describe(self) -> str:
        """One line for logs and benchmark headers."""
        fma = {True: "FMA", False: "no FMA", None: "FMA unknown"}[self.fma]
        return (f"{self.vector_bits}-bit vectors x {self.vector_registers} registers, {fma}, "
                f"L1d {self.l1d // 1024}K L2 {self.l2 // 1024}K L3 {self.l3 // 1024}K, "
                f"{self.cores} cores")


def facts_of(target: Target) -> CpuFacts:
    """The facts of an LLVM target: caches of this machine when it is the target's CPU."""
    if target.kind != "llvm":
        raise ValueError(f"cpu facts: {target.key} is not a CPU target")
    # AVX-512 doubles the architectural vector registers (zmm0-31); SSE/AVX have 16.
    registers = 32 if target.vector_bits >= 512 else 16
    l1d, l2, l3 = host_caches() if target.mcpu == host_cpu()[0] else _DEFAULT_CACHES
    return CpuFacts(target.vector_bits, registers, has_fma(target.features), l1d, l2, l3,
                    target.cores, target.mcpu or "")


def has_fma(features: str) -> bool | None:
    """Whether an LLVM feature string turns on fused multiply-add (FMA3, or AVX-512F, which
    has its own); None for an empty string (another CPU's features are not known here)."""
    if not features:
        return None
    enabled = {f[1:] for f in features.split(",") if f.startswith("+")}
    return bool(enabled & {"fma", "avx512f"})


@functools.lru_cache(maxsize=1)
def host_caches() -> tuple[int, int, int]:
    """(L1d, L2, L3) bytes of this machine: sysfs, else sysconf, else typical sizes."""
    found = _sysfs_caches() or {}
    sizes = []
    for level, (name, default) in enumerate(zip(_SYSCONF, _DEFAULT_CACHES), start=1):
        size = found.get(level) or _sysconf(name) or default
        sizes.append(size)
    return sizes[0], sizes[1], sizes[2]


def _sysfs_caches() -> dict[int, int] | None:
    """Data/unified cache size per level from cpu0's sysfs entries."""
    try:
        sizes: dict[int, int] = {}
        for index in sorted(_SYSFS_CACHE.glob("index*")):
            if (index / "type").read_text().strip() == "Instruction":
                continue
            level = int((index / "level").read_text())
            sizes[level] = parse_size((index / "size").read_text())
        return sizes
    except (OSError, ValueError):
        return None


def parse_size(text: str) -> int:
    """Bytes of a sysfs size such as '32K', '8192K' or '1M'."""
    text = text.strip().upper()
    scale = {"K": 1024, "M": 1024**2, "G": 1024**3}.get(text[-1:], 1)
    return int(text.rstrip("KMG")) * scale


def _sysconf(name: str) -> int:
    try:
        return max(0, int(os.sysconf(name)))
    except (ValueError, OSError, AttributeError):
        return 0
