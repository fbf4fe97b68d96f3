"""Target parsing, host detection, keys and CUDA limits."""
from __future__ import annotations

import os
import pickle
import re
import sys
import types

import pytest

from autotune.target import (
    CUDA_ARCHS,
    CudaLimits,
    Target,
    host_cpu,
    read_device_limits,
    vector_bits_of,
)
from autotune.target.isa import EXTENSIONS


def test_host_detection_matches_llvmlite(monkeypatch):
    import llvmlite.binding as llvm

    monkeypatch.delenv("AUTOTUNE_HOST_CPU", raising=False)  # as make test-avx2 sets it
    llvm.initialize_native_target()
    t = Target("llvm")
    assert t.kind == "llvm" and t.cuda is None and t.arch == ""
    assert t.mcpu == llvm.get_host_cpu_name()
    assert t.features == llvm.get_host_cpu_features().flatten()
    assert t.cores == len(os.sched_getaffinity(0))
    assert t.vector_bits == vector_bits_of(t.features) and t.vector_lanes == t.vector_bits // 32
    assert host_cpu() is host_cpu()  # detected once, then cached


def test_a_forced_host_cpu_is_taken_with_llvms_features_for_it(monkeypatch):
    """AUTOTUNE_HOST_CPU=haswell: `llvm` is an AVX2 CPU of 16 vector registers on any
    x86-64 host with AVX2 (make test-avx2); a CPU whose ISA this host lacks is refused."""
    from autotune.target.cpu_facts import facts_of
    from autotune.target.isa import probe_trusted

    monkeypatch.delenv("AUTOTUNE_HOST_CPU", raising=False)
    real = Target("llvm")
    monkeypatch.setenv("AUTOTUNE_HOST_CPU", "haswell")
    if "avx2" not in probe_trusted(real.mcpu, real.features).isa:
        with pytest.raises(ValueError, match="AUTOTUNE_HOST_CPU=haswell: this machine's CPU"):
            Target("llvm")
        return
    forced = Target("llvm")
    assert forced.key == f"llvm -mcpu=haswell -cores={real.cores} -vector-bits=256"
    assert forced == Target("llvm -mcpu=haswell") and host_cpu()[0] == "haswell"
    assert facts_of(forced).vector_registers == 16 and facts_of(forced).fma
    monkeypatch.setenv("AUTOTUNE_HOST_CPU", "no-such-cpu")
    with pytest.raises(ValueError, match="does not know the processor 'no-such-cpu'"):
        Target("llvm")
    monkeypatch.setenv("AUTOTUNE_HOST_CPU", "")  # empty: detected
    assert Target("llvm") == real


def test_key_round_trip_and_equality():
    t = Target("llvm")
    base = f"llvm -mcpu={t.mcpu} -cores={t.cores} -vector-bits={t.vector_bits}"
    assert t.key == (f"{base} -mattr={t.isa_diff}" if t.isa_diff else base)
    assert str(t) == t.key and Target(t.key) == t and hash(Target(t.key)) == hash(t)
    assert Target(t.key).features == t.features
    assert Target("llvm -cores=1") != t or t.cores == 1
    assert pickle.loads(pickle.dumps(t)) == t
    assert t != "llvm" and len({t, Target("llvm"), Target("cuda")}) == 2
    with pytest.raises(AttributeError):
        t.cores = 3  # type: ignore[misc]


def test_options_override_detection():
    t = Target("llvm -mcpu=skylake-avx512 -cores=4")
    assert (t.mcpu, t.cores, t.vector_bits, t.vector_lanes) == ("skylake-avx512", 4, 512, 16)
    assert t.key == "llvm -mcpu=skylake-avx512 -cores=4 -vector-bits=512"
    if host_cpu()[0] != "skylake-avx512":
        assert t.features == ""  # another CPU: LLVM's defaults for it, not the host's flags
    assert Target("llvm -mcpu=haswell").vector_bits == 256
    assert Target("llvm -mcpu=generic-unknown").vector_bits == 128
    assert Target("llvm -vector-bits=256").vector_bits == 256
    m = Target("llvm -mcpu=x86-64 -mattr=+avx2,+fma")
    assert m.features == "+avx2,+fma" and m.vector_bits == 256


@pytest.mark.parametrize(
    "features, bits",
    [("+avx512f,+avx2", 512), ("-avx512f,+avx2,+fma", 256), ("+avx512fp16,-avx512f,+avx2", 256),
     ("+sse4.2,-avx", 128), ("", 128)],
)
def test_vector_bits_of(features, bits):
    assert vector_bits_of(features) == bits


def test_cuda_targets():
    t = Target("cuda")  # a Hopper GPU, with its wgmma kernels
    assert t.kind == "cuda" and t.arch == "sm_90a" and t.key == "cuda -arch=sm_90a" == str(t)
    assert Target(t.key) == t and t.cores == 0 and t.vector_lanes == 0
    assert CUDA_ARCHS == ("sm_80", "sm_86", "sm_89", "sm_90", "sm_90a")
    for arch in CUDA_ARCHS:
        limits = Target(f"cuda -arch={arch}").cuda
        assert isinstance(limits, CudaLimits) and limits.arch == arch
        assert limits.max_threads_per_block == 1024 and limits.warp_size == 32


@pytest.mark.parametrize(
    "arch, optin, sms, threads_per_sm",
    [("sm_80", 166912, 108, 2048), ("sm_86", 101376, 84, 1536), ("sm_89", 101376, 128, 1536),
     ("sm_90", 232448, 132, 2048)],
)
def test_cuda_limits_table(monkeypatch, arch, optin, sms, threads_per_sm):
    monkeypatch.setitem(sys.modules, "pycuda", None)  # import fails -> table values
    limits = read_device_limits.__wrapped__(arch)
    assert limits.from_device is False
    assert limits.max_shared_per_block_optin == optin and limits.multiprocessors == sms
    assert limits.max_threads_per_sm == threads_per_sm
    assert limits.max_shared_per_block == 49152 and limits.max_block_dim == (1024, 1024, 64)
    assert limits.regs_per_thread == 255 and limits.regs_per_block == 65536


def _fake_pycuda(major: int, minor: int) -> types.ModuleType:
    names = ["COMPUTE_CAPABILITY_MAJOR", "COMPUTE_CAPABILITY_MINOR", "MAX_THREADS_PER_BLOCK",
             "MAX_BLOCK_DIM_X", "MAX_BLOCK_DIM_Y", "MAX_BLOCK_DIM_Z", "MAX_GRID_DIM_X",
             "MAX_GRID_DIM_Y", "MAX_GRID_DIM_Z", "WARP_SIZE", "MAX_SHARED_MEMORY_PER_BLOCK",
             "MAX_SHARED_MEMORY_PER_BLOCK_OPTIN", "MAX_REGISTERS_PER_BLOCK",
             "MULTIPROCESSOR_COUNT", "MAX_THREADS_PER_MULTIPROCESSOR"]
    attrs = dict(zip(names, [major, minor, 1024, 1024, 1024, 64, 7, 8, 9, 32, 49152, 99999,
                             65536, 66, 2048]))
    driver = types.ModuleType("pycuda.driver")
    driver.device_attribute = types.SimpleNamespace(**{n: n for n in names})
    driver.init = lambda: None
    driver.Device = lambda index: types.SimpleNamespace(get_attributes=lambda: attrs)
    return driver


def test_device_limits_read_from_pycuda(monkeypatch):
    package = types.ModuleType("pycuda")
    package.driver = _fake_pycuda(8, 0)
    monkeypatch.setitem(sys.modules, "pycuda", package)
    monkeypatch.setitem(sys.modules, "pycuda.driver", package.driver)
    limits = read_device_limits.__wrapped__("sm_80")
    assert limits.from_device and limits.multiprocessors == 66 and limits.max_grid_dim == (7, 8, 9)
    assert limits.max_shared_per_block_optin == 99999
    # A device of another arch must not lend its limits to this one.
    assert read_device_limits.__wrapped__("sm_90").from_device is False


@pytest.mark.parametrize(
    "spec, message",
    [
        ("rocm", "unknown kind 'rocm'"),
        ("", "expected a spec"),
        ("cuda -arch=sm_42", "unknown arch 'sm_42'; known: sm_80, sm_86, sm_89, sm_90"),
        ("llvm -foo=1", "unknown option '-foo=1'"),
        ("llvm mcpu=skylake", "unknown option 'mcpu=skylake'"),
        ("cuda -mcpu=skylake", "unknown option '-mcpu=skylake' for kind 'cuda'"),
        ("llvm -cores=0", "'-cores'"),
        ("llvm -cores=two", "'-cores'"),
        ("llvm -mcpu", "'-mcpu' needs a value"),
        ("llvm -vector-bits=96", "'-vector-bits'"),
    ],
)
def test_bad_specs(spec, message):
    with pytest.raises(ValueError, match=message):
        Target(spec)


# -- issue 16, item 6: bounded specs, keys that name the ISA, what this host can measure --

@pytest.mark.parametrize("spec, words", [
    ("llvm -cores=0", "positive integer"), ("llvm -cores=1025", "at most 1024"),
    ("llvm " + "-cores=2 " * 40, "too long"), ("llvm -mattr=avx2", "+feature"),
    ("llvm -mcpu=a;b", "letters, digits"),
])
def test_specs_are_bounded(spec, words):
    with pytest.raises(ValueError, match=re.escape(words)):
        Target(spec)


def test_key_names_features_that_differ_from_the_cpus_defaults():
    host = Target("llvm")
    # LLVM's defaults for the host's CPU name usually cover what it has (keys of old records
    # kept), but not always: one VM reported rocketlake with AVX512-FP16 on top.
    assert all(f[0] in "+-" and f[1:] in EXTENSIONS for f in host.isa_diff.split(",") if f)
    assert "-mattr" not in Target("llvm -mcpu=haswell").key
    t = Target("llvm -mcpu=x86-64 -mattr=+avx2,+fma")
    assert t.key.endswith(" -mattr=+avx,+avx2,+fma") and t.vector_bits == 256
    assert Target(t.key) == t and Target(t.key).key == t.key  # round trip
    assert t != Target("llvm -mcpu=x86-64 -vector-bits=256")  # not the same code any more
    off = Target("llvm -mcpu=skylake-avx512 -mattr=-avx512f")
    assert off.key.endswith("-mattr=-avx512f,-avx512bw,-avx512dq") and off.vector_bits == 256
    with pytest.raises(ValueError, match="does not know the processor"):
        Target("llvm -mcpu=nonsense-cpu -mattr=+avx2")


def test_this_host_measures_its_own_target_only():
    from autotune.measure.capability import why_not_measurable
    from autotune.target.isa import probe, probe_trusted

    assert why_not_measurable(Target("llvm")) is None
    assert why_not_measurable(Target(Target("llvm").key)) is None
    assert "cores" in why_not_measurable(Target(f"llvm -cores={host_cores_plus_one()}"))
    assert "does not know" in why_not_measurable(Target("llvm -mcpu=nonsense-cpu"))
    host = probe_trusted(*host_cpu()).isa
    lacking = [cpu for cpu in ("graniterapids", "sapphirerapids", "skylake-avx512", "haswell")
               if not probe(cpu, "").isa <= host]
    if not lacking:
        pytest.skip("this host's CPU has every probed ISA extension")
    assert "lacks" in why_not_measurable(Target(f"llvm -mcpu={lacking[0]}"))


def host_cores_plus_one() -> int:
    return len(os.sched_getaffinity(0)) + 1


@pytest.mark.skipif(os.path.exists("/dev/nvidiactl"), reason="this host may have a GPU")
def test_cuda_is_not_measurable_without_a_gpu():
    from autotune.measure.capability import why_not_measurable

    assert why_not_measurable(Target("cuda")) is not None
