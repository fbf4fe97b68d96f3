"""Half dtypes in workloads: storage form of the data, the float64 reference of the exact
values, rounding, which ops and targets take them, and the dtype in keys and names."""
from __future__ import annotations

import re
from types import SimpleNamespace

import numpy as np
import pytest

from autotune.ops import OPS, Workload, WorkloadError, aligned_empty, op_dtypes, workload
from autotune.ops.dtypes import (
    DTYPE_INFO,
    round_to,
    storage_nan,
    target_refusal,
    to_float32,
    to_storage,
)

CONV = dict(N=1, C=8, H=9, W=9, K=16, R=3, S=3, stride=1, pad=1)
STORAGE = {"float32": np.float32, "float16": np.float16, "bfloat16": np.uint16}
HALF_CASES = [
    ("matmul", dict(M=17, N=24, K=40), ["bias", "relu"]),
    ("batch_matmul", dict(B=2, M=8, N=16, K=24), ["scale_shift"]),
    ("conv2d", CONV, ["bias", "residual", "relu6"]),
]


@pytest.mark.parametrize("dtype", list(DTYPE_INFO))
@pytest.mark.parametrize("op, params, epilogue", HALF_CASES, ids=[c[0] for c in HALF_CASES])
def test_random_args_are_storage_arrays_of_dtype_values(op, params, epilogue, dtype):
    w = workload(op, epilogue=epilogue, dtype=dtype, **params)
    args = w.random_args(seed=5)
    assert len(args) == len(w.arg_specs)
    for arg, spec in zip(args, w.arg_specs):
        assert spec.dtype == dtype  # every argument, epilogue arrays and output included
        assert arg.dtype == STORAGE[dtype] and arg.shape == spec.shape
        assert arg.flags.c_contiguous and arg.ctypes.data % 64 == 0
        values = to_float32(arg, dtype)
        if spec.role == "output":
            assert np.isnan(values).all()
            continue
        # [-1, 1) rounded: a value just below 1 may round to 1
        assert (values >= -1).all() and (values <= 1).all() and (values != 0).all()
        assert values.std() > 0.3
        np.testing.assert_array_equal(round_to(values, dtype), values)  # exact in the dtype
    again = w.random_args(seed=5)
    assert all(np.array_equal(a.view(np.uint8), b.view(np.uint8)) for a, b in zip(args, again))


def test_float32_random_args_are_those_of_before_dtypes():
    # records and replay pools were measured on these inputs: the stream must not change
    w = workload("matmul", M=8, N=8, K=8)
    rng = np.random.default_rng(3)
    expected = rng.random((8, 8), dtype=np.float32) * 2 - 1
    np.testing.assert_array_equal(w.random_args(3)[0], expected)


def test_half_random_args_are_the_float32_draw_rounded():
    w32, w16 = (workload("matmul", M=8, N=8, K=8, dtype=d) for d in ("float32", "bfloat16"))
    a32, a16 = w32.random_args(1)[0], w16.random_args(1)[0]
    np.testing.assert_array_equal(to_float32(a16, "bfloat16"), round_to(a32, "bfloat16"))


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("op, params, epilogue", HALF_CASES, ids=[c[0] for c in HALF_CASES])
def test_reference_is_float64_of_the_exact_values(op, params, epilogue, dtype):
    w = workload(op, epilogue=epilogue, dtype=dtype, **params)
    w32 = workload(op, epilogue=epilogue, **params)
    args = w.random_args(seed=2)
    ref = w.reference(args)
    assert ref.dtype == np.float32 and ref.shape == w.output_shape
    # the float32 workload on the same (exactly widened) values computes the same thing
    widened = [to_float32(a, dtype).copy() for a in args[:-1]]
    np.testing.assert_array_equal(ref, w32.reference(widened))
    # and not what the unrounded float32 inputs would give: the rounding is seen
    assert not np.array_equal(ref, w32.reference(w32.random_args(seed=2)[:-1]))


def test_reference_refuses_arrays_not_in_storage_form():
    w = workload("matmul", M=4, N=4, K=4, dtype="bfloat16")
    a, b, _ = w.random_args(0)
    with pytest.raises(ValueError, match="argument 'A' is float32; a bfloat16 workload takes "
                                         "its storage form"):
        w.reference([to_float32(a, "bfloat16"), b])


@pytest.mark.parametrize("value, expected", [
    (1.0 + 2.0**-8, 1.0),                     # a tie rounds to the even neighbour (down)
    (1.0 + 3 * 2.0**-8, 1.0 + 2.0**-6),       # a tie rounds to the even neighbour (up)
    (1.0 + 2.0**-8 + 2.0**-20, 1.0 + 2.0**-7),  # above the tie: up
    (-3.0e38, -3.0e38),                       # big values stay finite and signed
])
def test_bfloat16_rounds_to_nearest_even(value, expected):
    got = float(to_float32(to_storage(np.array([value], np.float32), "bfloat16"), "bfloat16")[0])
    assert got == pytest.approx(expected, rel=2**-9, abs=0)  # within half an ulp
    assert got == float(round_to(np.array([got], np.float32), "bfloat16")[0])


@pytest.mark.parametrize("name, tie, ulp", [("bfloat16", 2.0**-8, 2.0**-7),
                                             ("float16", 2.0**-11, 2.0**-10)])
def test_float64_values_are_rounded_once(name, tie, ulp):
    """Just past a tie, float32 lands on the tie, which would round to even (down): a
    folded weight (float64) must round up, as one rounding does."""
    x = np.array([1.0 + tie + 2.0**-40, -(1.0 + tie + 2.0**-40), 1.0 + tie, 0.3, np.nan])
    got = to_float32(to_storage(x, name), name)
    assert list(got[:4]) == [1.0 + ulp, -(1.0 + ulp), 1.0, float(round_to(x[3:4], name)[0])]
    assert np.isnan(got[4])
    many = np.random.default_rng(0).uniform(-1, 1, 10_000) * 2.0**np.arange(-5, 5).repeat(1000)
    stored = to_storage(many, name)
    error = np.abs(many - to_float32(stored, name))
    for step in (-1, 1):  # no neighbour of the stored value is nearer
        other = (stored.view(np.uint16) + np.uint16(step & 0xFFFF)).view(stored.dtype)
        assert (error <= np.abs(many - to_float32(other, name))).all()


def test_storage_nan_and_aligned_empty_use_the_storage_dtype():
    for name, storage in STORAGE.items():
        array = aligned_empty((3, 5), name)
        assert array.dtype == storage and array.ctypes.data % 64 == 0
        array.fill(storage_nan(name))
        assert np.isnan(to_float32(array, name)).all()
    assert aligned_empty((2,), "float64").dtype == np.float64  # numpy names still work


def test_half_dtypes_exist_for_the_ops_with_half_kernels_only():
    assert op_dtypes("matmul") == ("float32", "float16", "bfloat16")
    assert op_dtypes("max_pool2d") == ("float32",)
    half = ["float32", "float16", "bfloat16"]
    described = {name: spec.describe()["dtypes"] for name, spec in OPS.items()}
    assert described == {"matmul": half, "batch_matmul": half, "conv2d": half,
                         "group_conv2d": ["float32"], "depthwise_conv2d": half,
                         "max_pool2d": ["float32"], "avg_pool2d": ["float32"],
                         "global_avg_pool2d": ["float32"], "channel_mul": ["float32"],
                         "channel_affine": ["float32"], "channel_shuffle": ["float32"]}
    with pytest.raises(WorkloadError) as err:
        Workload.from_dict({"op": "max_pool2d", "dtype": "bfloat16",
                            "params": dict(N=1, C=2, H=5, W=5, R=3, S=3, stride=1, pad=1)})
    assert err.value.loc == ("dtype",)
    assert "matmul, batch_matmul, conv2d, depthwise_conv2d" in str(err.value)


@pytest.mark.parametrize("dtype, kind, arch, refused", [
    ("float32", "llvm", "", None),
    ("float16", "llvm", "", "not supported on llvm (CPU) targets"),
    ("bfloat16", "llvm", "", "not supported on llvm (CPU) targets"),
    ("float16", "cuda", "sm_75", None),
    ("bfloat16", "cuda", "sm_75", "needs a cuda target of sm_80 or later"),
    ("bfloat16", "cuda", "sm_80", None),
    ("bfloat16", "cuda", "sm_90", None),
])
def test_which_targets_refuse_a_dtype(dtype, kind, arch, refused):
    reason = target_refusal(dtype, kind, arch)
    assert (reason is None) if refused is None else (refused in reason)
    w = workload("conv2d", dtype=dtype, **CONV)
    target = SimpleNamespace(kind=kind, arch=arch)
    if refused is None:
        w.check_target(target)
        return
    with pytest.raises(WorkloadError, match=re.escape(refused)) as err:
        w.check_target(target)
    assert err.value.loc == ("dtype",) and err.value.field == "dtype"


def test_dtype_is_part_of_the_key_and_the_name():
    w32, w16 = (workload("matmul", M=64, N=64, K=64, dtype=d) for d in ("float32", "float16"))
    assert w32.key != w16.key and '"dtype":"float16"' in w16.key
    assert Workload.from_json(w16.key) == w16 and hash(w16) != hash(w32)
    assert str(w32) == "matmul(M=64,N=64,K=64)"
    assert str(w16) == "matmul(M=64,N=64,K=64):float16"
