"""nvcc builds the wgmma template's kernels for sm_90a (default and sampled configs of
every op and dtype, ragged shapes, epilogues) into the instructions meant: TMA bulk tensor
copies completing on mbarriers, warpgroup MMAs, setmaxnreg under a register cap, TMA
descriptors as the leading ``__grid_constant__`` parameters; and the launch and the
descriptors' encoding say what the host must pass."""
from __future__ import annotations

import pytest

import autotune
from autotune import driver
from autotune.codegen.cuda.compiler import CudaBinary, compile_cuda_batch, generate_cuda
from autotune.codegen.cuda.nvcc import arch_flags
from autotune.codegen.cuda.passes import TensorMapSpec
from autotune.codegen.cuda.tensormap import encode_args
from autotune.schedule.templates.cuda_wgmma import tiling
from tests.cuda.wgmma_cases import DTYPES, OPS, sample_valid, target, workloads

PER_WORKLOAD = 2


def test_sampled_configs_compile_without_spills(nvcc):
    funcs, labels = [], []
    for i, (op, dt) in enumerate((op, dt) for op in OPS for dt in DTYPES):
        for wl in workloads(op, dt):
            sp = driver.config_space(wl, target())
            for cfg in [sp.default(), *sample_valid(wl, PER_WORKLOAD, seed=5 + i)]:
                funcs.append(driver.lower(wl, target(), cfg))
                labels.append(f"{wl} {dict(cfg)}")
    results = compile_cuda_batch(funcs, target())
    failed = [(label, r) for label, r in zip(labels, results) if isinstance(r, Exception)]
    assert not failed, f"{len(failed)} failed; first: {failed[0][0]}\n{failed[0][1]}"
    for label, r in zip(labels, results):
        assert isinstance(r, CudaBinary)
        res = r.resources
        assert res.spill_stores == res.spill_loads == res.stack_bytes == 0, (label, res)


def test_the_source_has_the_hopper_instructions_and_descriptor_parameters():
    wl = workloads("batch_matmul", "bfloat16")[0]
    func = driver.lower(wl, target())
    src, launch = generate_cuda(func, target())
    head = src[src.index('extern "C"'):].split("{")[0]
    assert head.count("const __grid_constant__ at_tensor_map") == 2
    assert head.index("at_tensor_map") < head.index("__nv_bfloat16*")  # descriptors first
    assert "__launch_bounds__(" in head and ", 1)" in head             # setmaxnreg's cap
    for text in ("cp.async.bulk.tensor.3d", "mbarrier.try_wait.parity",
                 "mbarrier.arrive.expect_tx", "wgmma.mma_async.sync.aligned.m64n",
                 ".f32.bf16.bf16", "wgmma.commit_group", "setmaxnreg.inc", "setmaxnreg.dec"):
        assert text in src, text
    assert launch.dynamic_shared_bytes > 0 and launch.shared_bytes == 0
    bm = tiling(driver.config_space(wl, target()).default()).bm
    assert launch.tensor_maps == (
        TensorMapSpec(0, "bfloat16", wl.arg_specs[0].shape, (1, bm, 64), 128),
        TensorMapSpec(1, "bfloat16", wl.arg_specs[1].shape, (1, 64, 64), 128),
    )


def test_descriptor_encoding_is_innermost_first_with_byte_strides():
    a = encode_args(TensorMapSpec(0, "float16", (3, 200, 72), (1, 128, 64), 128))
    assert a.dims == (72, 200, 3)
    assert a.strides == (72 * 2, 72 * 200 * 2)
    assert a.box == (64, 128, 1)
    assert (a.data_type, a.swizzle) == (6, 3)  # CU_TENSOR_MAP_DATA_TYPE_FLOAT16, SWIZZLE_128B
    assert encode_args(TensorMapSpec(1, "bfloat16", (64, 8), (64, 8), 0)).data_type == 9


@pytest.mark.parametrize("arch, flags", [
    ("sm_90a", ["-gencode=arch=compute_90a,code=sm_90a"]),  # not -arch=: see arch_flags
    ("sm_90", ["-arch=sm_90"]),
])
def test_arch_specific_targets_compile_by_gencode(arch, flags):
    assert arch_flags(arch) == flags


def test_the_epilogue_stores_column_pairs_where_they_are_aligned():
    """Two adjacent half outputs of a thread go out as one 4-byte store where the row
    length is even (every GEMM here: N is a multiple of 8), and as two stores where an
    NHWC conv's K is odd; split-K's float32 partials go out as float2."""
    def source(wl):
        return generate_cuda(driver.lower(wl, target()), target())[0]
    even = source(workloads("matmul", "float16")[0])
    assert "reinterpret_cast<__half2*>(&out[" in even
    odd = autotune.workload("conv2d", N=1, C=16, H=7, W=7, K=15, R=3, S=3, stride=1, pad=1,
                            dtype="bfloat16", layout="NHWC")
    odd_src = source(odd)
    assert "__nv_bfloat162" not in odd_src and "__float2bfloat16_rn(" in odd_src
    split = autotune.workload("matmul", M=64, N=64, K=2048, dtype="bfloat16")
    assert driver.config_space(split, target()).default()["split_k"] > 1
    assert "reinterpret_cast<float2*>(&split_partials[" in source(split)


def test_a_tma_kernel_refuses_an_unaligned_argument_before_launching():
    from autotune.codegen.cuda.launcher import DeviceKernel
    spec = TensorMapSpec(0, "float16", (64, 64), (64, 64), 128)
    dk = DeviceKernel(b"", "k", (1, 1, 1), (128, 1, 1), 0, 2, [], tensor_maps=(spec,))
    with pytest.raises(TypeError, match="argument 1 is not 16-byte aligned"):
        dk.launch([1 << 20, (1 << 20) + 2])
