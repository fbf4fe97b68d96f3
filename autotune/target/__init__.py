"""`Target`: the device kernels are generated for and timed on (host CPU or a CUDA GPU).

`Target("llvm")` detects the host CPU with llvmlite; `Target("cuda -arch=sm_90")` carries
the GPU's limits. `key` is the stable string the tuning database stores; it names the ISA
extensions that decide what runs (``-mattr=``) only where they differ from LLVM's defaults
for the CPU (see `autotune.target.isa`), so the keys of default targets never changed.
"""
from __future__ import annotations

import functools
import os
import re
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Mapping, Optional

from autotune.target.isa import EXTENSIONS, probe, probe_trusted

KINDS: tuple[str, ...] = ("llvm", "cuda")
# A bare "cuda" is a Hopper GPU (H100, H200) with its arch-specific instructions: half
# GEMMs take the wgmma kernels there. Other GPUs (and wmma on Hopper) name their arch.
DEFAULT_CUDA_ARCH = "sm_90a"
_LLVM_OPTIONS = ("mcpu", "mattr", "cores", "vector-bits")
_CUDA_OPTIONS = ("arch",)
_VECTOR_BITS = (128, 256, 512)
MAX_CORES = 1024
MAX_SPEC_CHARS = 256  # the longest key (-mattr of every probed extension) is ~200
_NAME = re.compile(r"[A-Za-z0-9_.-]+")
_MATTR = re.compile(r"[+-][A-Za-z0-9_.-]+(,[+-][A-Za-z0-9_.-]+)*")

# Vector width of CPUs named with -mcpu but not the host, whose features we cannot query.
_CPU_VECTOR_BITS: Mapping[str, int] = MappingProxyType(
    {
        **dict.fromkeys(
            ("skylake-avx512", "cascadelake", "cooperlake", "cannonlake", "icelake-client",
             "icelake-server", "tigerlake", "rocketlake", "sapphirerapids", "emeraldrapids",
             "graniterapids", "znver4", "znver5", "x86-64-v4"),
            512,
        ),
        **dict.fromkeys(
            ("haswell", "broadwell", "skylake", "alderlake", "raptorlake", "meteorlake",
             "arrowlake", "znver1", "znver2", "znver3", "x86-64-v3"),
            256,
        ),
    }
)


@dataclass(frozen=True)
class CudaLimits:
    """Per-device CUDA limits a schedule must respect (memory sizes in bytes)."""

    arch: str
    max_threads_per_block: int = 1024
    max_block_dim: tuple[int, int, int] = (1024, 1024, 64)
    max_grid_dim: tuple[int, int, int] = (2**31 - 1, 65535, 65535)
    warp_size: int = 32
    max_shared_per_block: int = 49152
    max_shared_per_block_optin: int = 49152
    regs_per_thread: int = 255
    regs_per_block: int = 65536
    multiprocessors: int = 1
    max_threads_per_sm: int = 2048
    from_device: bool = False  # True when read from a real GPU, False for table values


# Table values for each supported arch: opt-in shared memory from the CUDA programming
# guide; SM counts of one representative part (A100, RTX 3090-class, RTX 4090, H100/H200).
_CUDA_TABLE: Mapping[str, CudaLimits] = MappingProxyType(
    {
        "sm_80": CudaLimits("sm_80", max_shared_per_block_optin=166912, multiprocessors=108),
        "sm_86": CudaLimits(
            "sm_86", max_shared_per_block_optin=101376, multiprocessors=84, max_threads_per_sm=1536
        ),
        "sm_89": CudaLimits(
            "sm_89", max_shared_per_block_optin=101376, multiprocessors=128, max_threads_per_sm=1536
        ),
        "sm_90": CudaLimits("sm_90", max_shared_per_block_optin=232448, multiprocessors=132),
        # Hopper's arch-specific target: sm_90 plus wgmma and setmaxnreg (the same devices)
        "sm_90a": CudaLimits("sm_90a", max_shared_per_block_optin=232448, multiprocessors=132),
    }
)
CUDA_ARCHS: tuple[str, ...] = tuple(_CUDA_TABLE)


def host_cpu() -> tuple[str, str]:
    """(cpu name, LLVM feature string) that `llvm` targets take as this host's: the machine's,
    or the CPU that ``AUTOTUNE_HOST_CPU`` names (`Settings.host_cpu`)."""
    from autotune.settings import Settings

    return _host_cpu(Settings().host_cpu or "")


@functools.lru_cache(maxsize=4)
def _host_cpu(forced: str) -> tuple[str, str]:
    import llvmlite.binding as llvm  # deferred: importing this module must stay cheap

    llvm.initialize_native_target()
    name, features = llvm.get_host_cpu_name(), llvm.get_host_cpu_features().flatten()
    if not forced:
        return name, features

    found = probe(forced, "")  # a user's name: probed in a child (LLVM aborts on some)
    if found.error:
        raise ValueError(f"AUTOTUNE_HOST_CPU: {found.error}")
    missing = sorted(found.isa - probe_trusted(name, features).isa)
    if missing:
        raise ValueError(f"AUTOTUNE_HOST_CPU={forced}: this machine's CPU ({name}) lacks "
                         f"{', '.join(missing)}, which code for {forced} uses")
    # The probed extensions spelled out, so the vector width and FMA read from the string.
    return forced, ",".join(("+" if ext in found.isa else "-") + ext for ext in EXTENSIONS)


def host_cores() -> int:
    """CPU cores this process may run on."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def vector_bits_of(features: str) -> int:
    """Widest float vector register the LLVM feature string enables."""
    enabled = {flag[1:] for flag in features.split(",") if flag.startswith("+")}
    if "avx512f" in enabled:
        return 512
    if "avx2" in enabled or "avx" in enabled:
        return 256
    return 128


def device_arch(arch: str) -> str:
    """The compute capability that runs ``arch``'s code: ``sm_90`` for ``sm_90a`` (an
    arch-specific target runs on that one capability only)."""
    return arch.removesuffix("a")


@functools.lru_cache(maxsize=None)
def read_device_limits(arch: str) -> CudaLimits:
    """Limits of CUDA device 0 via pycuda when it is present and matches `arch`,
    else the table values for `arch`."""
    table = _CUDA_TABLE[arch]
    try:
        import pycuda.driver as cuda

        cuda.init()
        attrs = cuda.Device(0).get_attributes()
        a = cuda.device_attribute
        device = f"sm_{attrs[a.COMPUTE_CAPABILITY_MAJOR]}{attrs[a.COMPUTE_CAPABILITY_MINOR]}"
        if device != device_arch(arch):
            return table  # the GPU here is another arch: its limits would mislead
        return CudaLimits(
            arch=arch,
            max_threads_per_block=attrs[a.MAX_THREADS_PER_BLOCK],
            max_block_dim=_xyz(attrs, a, "MAX_BLOCK_DIM"),
            max_grid_dim=_xyz(attrs, a, "MAX_GRID_DIM"),
            warp_size=attrs[a.WARP_SIZE],
            max_shared_per_block=attrs[a.MAX_SHARED_MEMORY_PER_BLOCK],
            max_shared_per_block_optin=attrs.get(
                a.MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, table.max_shared_per_block_optin
            ),
            regs_per_thread=table.regs_per_thread,  # not a device attribute; fixed by the ISA
            regs_per_block=attrs[a.MAX_REGISTERS_PER_BLOCK],
            multiprocessors=attrs[a.MULTIPROCESSOR_COUNT],
            max_threads_per_sm=attrs[a.MAX_THREADS_PER_MULTIPROCESSOR],
            from_device=True,
        )
    except Exception:  # ImportError, no driver, no device: any of them means "use the table"
        return table


def _xyz(attrs: Mapping[Any, int], names: Any, prefix: str) -> tuple[int, int, int]:
    """A pycuda (x, y, z) attribute triple."""
    x, y, z = (int(attrs[getattr(names, f"{prefix}_{axis}")]) for axis in "XYZ")
    return (x, y, z)


def _parse(spec: str) -> tuple[str, dict[str, str]]:
    """Split 'kind -name=value ...' into the kind and its options."""
    if isinstance(spec, str) and len(spec) > MAX_SPEC_CHARS:
        raise ValueError(f"target: spec too long ({len(spec)} characters; at most "
                         f"{MAX_SPEC_CHARS})")
    if not isinstance(spec, str) or not spec.split():
        raise ValueError(f"target: expected a spec like 'llvm' or 'cuda -arch=sm_90', got {spec!r}")
    kind, *tokens = spec.split()
    if kind not in KINDS:
        raise ValueError(f"target: unknown kind {kind!r}; known: {', '.join(KINDS)}")
    known = _LLVM_OPTIONS if kind == "llvm" else _CUDA_OPTIONS
    options: dict[str, str] = {}
    for token in tokens:
        name, eq, value = token.lstrip("-").partition("=")
        if not token.startswith("-") or name not in known:
            raise ValueError(
                f"target: unknown option {token!r} for kind {kind!r}; "
                f"known: {', '.join('-' + o for o in known)}"
            )
        if not eq or not value:
            raise ValueError(f"target: option '-{name}' needs a value, as in -{name}=...")
        pattern = _MATTR if name == "mattr" else _NAME
        if not pattern.fullmatch(value):
            form = "+feature,-feature,..." if name == "mattr" else "letters, digits, . _ -"
            raise ValueError(f"target: option '-{name}' must be {form}, got {value!r}")
        options[name] = value
    return kind, options


def _positive_int(name: str, value: str, maximum: Optional[int] = None) -> int:
    if not value.isdigit() or int(value) < 1:
        raise ValueError(f"target: option '-{name}' must be a positive integer, got {value!r}")
    if maximum is not None and int(value) > maximum:
        raise ValueError(f"target: option '-{name}' must be at most {maximum}, got {value}")
    return int(value)


@dataclass(frozen=True, init=False, eq=False)
class Target:
    """A compilation and measurement target, immutable; equal when keys are equal.

    LLVM: `mcpu`, `features`, `cores`, `vector_bits` (detected, options override), and
    `isa_diff`: the probed ISA extensions that `features` turn on or off against LLVM's
    defaults for `mcpu` (``+x,-y``; '' for defaults). CUDA: `arch` and `cuda` limits; the
    CPU fields are ''/0 there.
    """

    kind: str
    mcpu: str = ""
    features: str = ""
    cores: int = 0
    vector_bits: int = 0
    arch: str = ""
    cuda: Optional[CudaLimits] = field(default=None)
    isa_diff: str = ""

    def __init__(self, spec: str = "llvm") -> None:
        kind, options = _parse(spec)
        values: dict[str, Any] = {"kind": kind, "mcpu": "", "features": "", "cores": 0,
                                  "vector_bits": 0, "arch": "", "cuda": None, "isa_diff": ""}
        if kind == "llvm":
            values.update(_llvm_fields(options))
        else:
            arch = options.get("arch", DEFAULT_CUDA_ARCH)
            if arch not in _CUDA_TABLE:
                raise ValueError(f"target: unknown arch {arch!r}; known: {', '.join(CUDA_ARCHS)}")
            values.update(arch=arch, cuda=read_device_limits(arch))
        for name, value in values.items():
            object.__setattr__(self, name, value)

    @property
    def vector_lanes(self) -> int:
        """float32 lanes per vector register (0 for CUDA)."""
        return self.vector_bits // 32

    @property
    def key(self) -> str:
        """Stable database key; `Target(t.key) == t` on the same host."""
        if self.kind == "cuda":
            return f"cuda -arch={self.arch}"
        key = f"llvm -mcpu={self.mcpu} -cores={self.cores} -vector-bits={self.vector_bits}"
        return f"{key} -mattr={self.isa_diff}" if self.isa_diff else key

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Target) and self.key == other.key

    def __hash__(self) -> int:
        return hash(self.key)

    def __str__(self) -> str:
        return self.key

    def __repr__(self) -> str:
        return f"Target({self.key!r})"


def _host_isa_diff() -> str:
    """How the host's ISA differs from LLVM's defaults for its CPU name (a VM that hides
    AVX-512, or one that adds AVX512-FP16): the host's key names it. Both strings come from
    LLVM, so they are safe to probe in this process."""
    name, features = host_cpu()
    return probe_trusted(name, features).diff(probe_trusted(name, ""))


def _llvm_fields(options: Mapping[str, str]) -> dict[str, Any]:
    """CPU fields from host detection, overridden by the spec's options."""
    host_name, host_features = host_cpu()
    mcpu = options.get("mcpu", host_name)
    isa_diff, probed_bits = "", 0
    if "mattr" in options:
        features = options["mattr"]
        # User input: probed in a child process (LLVM aborts on some names and features).
        found = probe(mcpu, features)
        base = probe_trusted(mcpu, "") if mcpu == host_name else probe(mcpu, "")
        error = found.error or base.error
        if error:
            raise ValueError(f"target: {error}")
        isa_diff = found.diff(base)
        probed_bits = 512 if "avx512f" in found.isa else 256 if "avx" in found.isa else 128
        if mcpu == host_name and isa_diff == _host_isa_diff():
            features = host_features  # this host's own key (a VM's CPU beyond its name)
    elif mcpu == host_name:
        features = host_features
        isa_diff = _host_isa_diff()
    else:
        # Another CPU's features are unknown here: leave them to LLVM's defaults for mcpu.
        features = ""
    if "vector-bits" in options:
        bits = _positive_int("vector-bits", options["vector-bits"])
        if bits not in _VECTOR_BITS:
            raise ValueError(
                f"target: option '-vector-bits' must be one of {_VECTOR_BITS}, got {bits}"
            )
    elif probed_bits:
        bits = probed_bits
    elif features:
        bits = vector_bits_of(features)
    else:
        bits = _CPU_VECTOR_BITS.get(mcpu, 128)
    cores = (_positive_int("cores", options["cores"], MAX_CORES) if "cores" in options
             else host_cores())
    return {"mcpu": mcpu, "features": features, "cores": cores, "vector_bits": bits,
            "isa_diff": isa_diff}
