"""CPU code generation: a ``PrimFunc`` to LLVM IR text, object code, or a ``CpuKernel``.

Entry ABI: ``void <name>(ptr args)`` where ``args`` points to an array of data pointers,
one per PrimFunc argument (inputs, then the output) followed by one per workspace, each
64-byte aligned float32 storage. The entry loads them and calls an always-inlined body
whose pointer parameters are ``noalias align 64``.
"""
from __future__ import annotations

from typing import Any, Mapping

from autotune.codegen.llvm.emit import Env, FunctionEmitter, LoopEmitter
from autotune.codegen.llvm.jit import emit_object, host_layout
from autotune.codegen.llvm.parallel import emit_parallel
from autotune.codegen.llvm.text import PTR, ModuleBuilder, sanitize
from autotune.codegen.llvm.vector import emit_vectorized
from autotune.ir.expr import FLOAT
from autotune.ir.stmt import Allocate, ForKind, PrimFunc, walk_stmts

# Loops that become more than a serial loop: SIMD operations, and a GOMP_parallel region
LOOPS: Mapping[ForKind, LoopEmitter] = {ForKind.VECTORIZED: emit_vectorized,
                                         ForKind.PARALLEL: emit_parallel}


def function_attributes(target: Any) -> str:
    """Attributes every generated function carries: CPU, features, vector width."""
    attrs = ["nounwind"]
    if getattr(target, "mcpu", ""):
        attrs.append(f'"target-cpu"="{target.mcpu}"')
    if getattr(target, "features", ""):
        attrs.append(f'"target-features"="{target.features}"')
    if getattr(target, "vector_bits", 0) == 512:
        # without these LLVM splits <16 x float> into 256-bit halves on many AVX-512 CPUs
        attrs += ['"prefer-vector-width"="512"', '"min-legal-vector-width"="512"']
    return " ".join(attrs)


def entry_name(func: PrimFunc) -> str:
    """Symbol of the kernel's entry function."""
    return sanitize(func.name)


def _check_dtypes(func: PrimFunc) -> None:
    local = [s.buffer for s in walk_stmts(func.body) if isinstance(s, Allocate)]
    for b in (*func.args, *func.workspaces, *local):
        if b.dtype != FLOAT:
            raise ValueError(f"buffer {b.name!r} has dtype {b.dtype}; the llvm target "
                             f"supports {FLOAT} data only")


def build_module(func: PrimFunc, target: Any) -> ModuleBuilder:
    """Lower ``func`` into a module of textual functions (entry, body, outlined regions)."""
    _check_dtypes(func)
    mb = ModuleBuilder(function_attributes(target))
    name = mb.unique_name(entry_name(func))
    buffers = (*func.args, *func.workspaces)
    entry = mb.function(name, [(PTR, "", "args")])
    body = mb.function(mb.unique_name(name + ".body"),
                       [(PTR, "noalias align 64", b.name) for b in buffers],
                       linkage="internal", inline=True)
    env = Env(bufs=dict(zip(buffers, body.params)))
    FunctionEmitter(mb, body, env, target, LOOPS).visit(func.body)

    args = entry.params[0]
    ptrs = []
    for i, b in enumerate(buffers):
        slot = entry.emit(PTR, f"getelementptr inbounds ptr, {args}, i64 {i}", "slot")
        ptrs.append(entry.emit(PTR, f"load ptr, {slot}, align 8", b.name))
    entry.do(f"call void @{body.name}({', '.join(map(str, ptrs))})")
    return mb


def generate_llvm_ir(func: PrimFunc, target: Any) -> str:
    """The textual LLVM IR module for ``func`` (unoptimized, as fed to the optimizer)."""
    return build_module(func, target).render(*host_layout())


def compile_llvm_object(func: PrimFunc, target: Any) -> tuple[str, bytes]:
    """Generate and optimize (O3) ``func``; returns (LLVM IR text, host object code), a
    picklable pair that ``runtime.load_cpu_kernel`` turns into a kernel elsewhere."""
    text = generate_llvm_ir(func, target)
    return text, emit_object(text, target)


