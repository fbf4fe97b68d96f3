"""The registry, not the templates, picks the variant of a workload's template: the GEMV of
a one-row matmul, the blocked conv, depthwise conv or pool of a channel-blocked layout; each
makes its loop AST through the one `Template` interface, and keeps its op's kernel family."""
from __future__ import annotations

import autotune
from autotune import driver
from autotune.schedule.templates import (
    CONV2D_BLOCKED,
    GEMV,
    WINDOW_BLOCKED,
    LoopTemplate,
    ScheduleTemplate,
    get_template,
    template_for,
)

LLVM = autotune.Target("llvm -mcpu=haswell -cores=2")
CONV = dict(N=1, C=16, H=8, W=8, K=16, R=3, S=3, stride=1, pad=1)


def test_variants_are_chosen_by_the_registry_and_keep_their_family() -> None:
    gemv = autotune.workload("matmul", M=1, N=64, K=32)
    blocked = autotune.workload("conv2d", layout="NCHW8c", **CONV)
    assert template_for(gemv, LLVM) is GEMV
    assert template_for(blocked, LLVM) is CONV2D_BLOCKED
    assert template_for(autotune.workload("matmul", M=2, N=64, K=32), LLVM).name == "cpu_matmul"
    assert template_for(autotune.workload("conv2d", **CONV), LLVM).name == "cpu_conv2d"
    assert driver.kernel_family(gemv, LLVM) == "cpu_matmul"
    assert driver.kernel_family(blocked, LLVM) == "cpu_conv2d"
    assert driver.config_space(gemv, LLVM).name == GEMV.space(gemv, LLVM).name
    assert driver.config_space(blocked, LLVM).name == CONV2D_BLOCKED.space(blocked, LLVM).name
    window = dict(N=1, C=16, H=8, W=8, R=3, S=3, stride=1, pad=1)
    for op, family in (("depthwise_conv2d", "cpu_depthwise"), ("max_pool2d", "cpu_pool")):
        wl = autotune.workload(op, layout="NCHW8c", **window)
        assert template_for(wl, LLVM) is WINDOW_BLOCKED[op]
        assert driver.kernel_family(wl, LLVM) == family
        assert template_for(autotune.workload(op, **window), LLVM).name == family


def test_each_template_makes_its_loop_ast_through_kernel() -> None:
    wl = autotune.workload("matmul", M=64, N=64, K=64, prepacked=True)
    cpu = template_for(wl, LLVM)
    assert isinstance(cpu, ScheduleTemplate)
    cfg = driver.config_space(wl, LLVM).default()
    func, pack = cpu.kernel(wl, LLVM, cfg, prepack=True)
    assert func.name == "at_matmul" and (pack is None or pack.name == "at_matmul_pack")
    half = autotune.workload("matmul", M=64, N=64, K=64, dtype="float16")
    sm90 = autotune.Target("cuda -arch=sm_90")
    tc = get_template("matmul", "cuda", "float16")
    assert isinstance(tc, LoopTemplate) and template_for(half, sm90) is tc
    func, pack = tc.kernel(half, sm90, driver.config_space(half, sm90).default(), prepack=True)
    assert pack is None and func.args[-1].dtype == "float16"
