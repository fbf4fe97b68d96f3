"""`peak_flops`: more FLOP/s than a target can possibly compute, an upper bound on its peak.

A record whose cost is below ``flops / peak_flops(target, dtype)`` claims a kernel faster
than the device: it is not a measurement (an import refuses it). The bound is generous on
purpose, so that no real measurement, on any part of the target's kind, ever reaches it:

- a CPU core retires at most two FMAs of its full vector width a cycle (two FMA pipes, as
  Intel's since Haswell; many have fewer), each 2 FLOPs per float32 lane, at no more than
  7 GHz (above every shipping boost clock, 6.2 GHz); times the target's cores and lanes;
- a GPU multiprocessor does at most, per cycle, 256 float32 FLOPs on its CUDA cores (128
  FMA lanes) or, in half precision on its tensor cores, the dense rate of its arch's
  fastest part (sm_80: 2048, sm_86 and sm_89: 1024, sm_90: 4096; A100, RTX 3090, L40 and
  H100 datasheets), at no more than 3 GHz, on the largest part of its arch (SMs below).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from autotune.target import Target

CPU_FMA_PIPES = 2
CPU_MAX_HZ = 7.0e9
GPU_MAX_HZ = 3.0e9
GPU_FLOAT32_FLOPS_PER_SM_CYCLE = 256
# Dense half-precision tensor-core FLOPs per multiprocessor and cycle, by arch.
GPU_HALF_FLOPS_PER_SM_CYCLE = {"sm_80": 2048, "sm_86": 1024, "sm_89": 1024, "sm_90": 4096}
# Multiprocessors of the largest part of each arch (A100, A40/RTX 3090 Ti, L40, full GH100).
GPU_MAX_SMS = {"sm_80": 108, "sm_86": 84, "sm_89": 144, "sm_90": 144}


def peak_flops(target: "Target", dtype: str = "float32") -> float:
    """An upper bound on the FLOP/s ``target`` computes in ``dtype`` (see the module)."""
    if target.kind == "cuda":
        sms = max(GPU_MAX_SMS.get(target.arch, 0),
                  target.cuda.multiprocessors if target.cuda is not None else 0)
        per_cycle = (GPU_FLOAT32_FLOPS_PER_SM_CYCLE if dtype == "float32"
                     else GPU_HALF_FLOPS_PER_SM_CYCLE.get(
                         target.arch, max(GPU_HALF_FLOPS_PER_SM_CYCLE.values())))
        return float(sms * per_cycle * GPU_MAX_HZ)
    lanes = max(target.vector_bits // 32, 1)
    return float(max(target.cores, 1) * lanes * CPU_FMA_PIPES * 2 * CPU_MAX_HZ)
