"""LLVM JIT plumbing: one-time native-target and libgomp setup, O3 optimization, object
code emission, and loading that code into an MCJIT engine.

Nothing happens at import: each one-time step runs on first use, behind ``lru_cache``.
"""
from __future__ import annotations

import ctypes.util
import functools
from typing import Any

import llvmlite.binding as llvm


@functools.lru_cache(maxsize=1)
def init_native() -> None:
    """Register the host target and its assembly printer with LLVM (once per process)."""
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()


@functools.lru_cache(maxsize=1)
def load_libgomp() -> str:
    """Make libgomp's symbols visible to JIT code (once per process); returns its name.

    It stays loaded for the process lifetime, so its pool threads never outlive the code
    they run (engines are freed only when their kernels are)."""
    candidates = [ctypes.util.find_library("gomp"), "libgomp.so.1"]
    errors = []
    for lib in filter(None, candidates):
        try:
            llvm.load_library_permanently(lib)
            return lib
        except RuntimeError as exc:  # llvmlite reports a missing library this way
            errors.append(f"{lib}: {exc}")
    raise RuntimeError("libgomp (GNU OpenMP runtime) not found: " + "; ".join(errors))


def target_machine(target: Any) -> llvm.TargetMachine:
    """A fresh host target machine for ``target``'s CPU; MCJIT takes ownership of it."""
    init_native()
    tgt = llvm.Target.from_triple(llvm.get_process_triple())
    return tgt.create_target_machine(cpu=target.mcpu or "", features=target.features or "",
                                     opt=3, reloc="default", codemodel="jitdefault", jit=True)


@functools.lru_cache(maxsize=1)
def host_layout() -> tuple[str, str]:
    """(triple, data layout) of this host, for writing IR text."""
    init_native()
    tm = llvm.Target.from_triple(llvm.get_process_triple()).create_target_machine()
    return llvm.get_process_triple(), str(tm.target_data)


def optimize(mod: llvm.ModuleRef, tm: llvm.TargetMachine) -> None:
    """Run the new pass manager's O3 pipeline, vectorizers on, in place."""
    pto = llvm.PipelineTuningOptions(speed_level=3)
    pto.loop_vectorization = True
    pto.slp_vectorization = True
    pto.loop_unrolling = True
    pb = llvm.create_pass_builder(tm, pto)
    pb.getModulePassManager().run(mod, pb)


def emit_object(ir_text: str, target: Any) -> bytes:
    """Parse, verify and optimize ``ir_text``; return host object code (relocatable ELF)."""
    init_native()
    mod = llvm.parse_assembly(ir_text)
    mod.verify()
    tm = target_machine(target)
    optimize(mod, tm)
    return tm.emit_object(mod)


def load_object(binary: bytes, target: Any) -> llvm.ExecutionEngine:
    """An MCJIT engine holding ``binary`` linked into this process (libgomp resolved)."""
    init_native()
    if b"GOMP_parallel" in binary:  # an undefined symbol of the object's symbol table
        load_libgomp()
    engine = llvm.create_mcjit_compiler(llvm.parse_assembly(""), target_machine(target))
    engine.add_object_file(llvm.ObjectFileRef.from_data(binary))
    engine.finalize_object()
    return engine
