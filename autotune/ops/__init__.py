"""Operator compute definitions: workloads, shapes, flop counts and numpy references.

Pure numpy; nothing here imports the rest of autotune.
"""
from autotune.ops.conv2d import conv_out_size
from autotune.ops.dtypes import DTYPE_INFO, HALF_DTYPES, dtype_info, op_dtypes
from autotune.ops.epilogue import EPILOGUE_STAGES, canonical_epilogue
from autotune.ops.registry import OPS, op_spec
from autotune.ops.spec import OpSpec, ParamSpec, ParamValue
from autotune.ops.workload import (
    DTYPES,
    PREPACKABLE_OPS,
    ArgSpec,
    Workload,
    WorkloadError,
    aligned_empty,
    prepackable,
    workload,
)

__all__ = [
    "DTYPES",
    "DTYPE_INFO",
    "HALF_DTYPES",
    "EPILOGUE_STAGES",
    "OPS",
    "PREPACKABLE_OPS",
    "ArgSpec",
    "OpSpec",
    "ParamSpec",
    "ParamValue",
    "Workload",
    "WorkloadError",
    "aligned_empty",
    "canonical_epilogue",
    "conv_out_size",
    "dtype_info",
    "op_dtypes",
    "op_spec",
    "prepackable",
    "workload",
]
