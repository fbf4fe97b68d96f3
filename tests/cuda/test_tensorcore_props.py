"""Property: every valid tensor-core config, on odd shapes (tails in every GEMM dimension,
padded, strided and dilated convs), float16 or bfloat16, with any epilogue, runs in the
execution model without a violation and matches the reference within the dtype's
tolerance. Hypothesis draws workloads and configs (derandomized, bounded)."""
from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import autotune
from autotune import driver
from autotune.ops import Workload
from autotune.ops.dtypes import dtype_info
from tests.cuda.tensorcore_cases import DTYPES, EPILOGUES, target

_dim = st.integers(1, 150)


@st.composite
def workloads(draw) -> Workload:
    op = draw(st.sampled_from(["matmul", "batch_matmul", "conv2d"]))
    if op == "matmul":
        params = dict(M=draw(_dim), N=draw(_dim), K=draw(_dim))
    elif op == "batch_matmul":
        small = st.integers(1, 60)
        params = dict(B=draw(st.integers(1, 3)), M=draw(small), N=draw(small), K=draw(small))
    else:
        params = dict(N=draw(st.integers(1, 2)), C=draw(st.integers(1, 24)),
                      H=draw(st.integers(3, 15)), W=draw(st.integers(3, 15)),
                      K=draw(st.integers(1, 40)), R=draw(st.sampled_from([1, 3, 5])),
                      S=draw(st.sampled_from([1, 3])), stride=draw(st.integers(1, 2)),
                      pad=draw(st.integers(0, 2)), dilation=draw(st.integers(1, 2)))
    dtype = draw(st.sampled_from(DTYPES))
    try:
        return autotune.workload(op, epilogue=draw(st.sampled_from(EPILOGUES)), dtype=dtype,
                                 **params)
    except ValueError:  # a kernel larger than the padded input
        assume(False)
        raise


@settings(max_examples=150, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(wl=workloads(), seed=st.integers(0, 2**31 - 1), default=st.booleans())
def test_configs_run_clean_and_match_the_reference(wl, seed, default):
    sp = driver.config_space(wl, target("sm_90"))
    if default:
        cfg = sp.default()
    else:
        valid = [c for c in sp.sample(np.random.default_rng(seed), 40) if sp.is_valid(c)]
        assume(valid)
        cfg = valid[0]
    err = autotune.simulate_cuda(wl, cfg, target("sm_90"), seed=seed % 7)
    assert err <= dtype_info(wl.dtype).rtol, f"{wl} {dict(cfg)}: error {err}"
