"""The interface every code generator implements: loop AST to artifact, artifact to kernel."""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional, Protocol

from autotune.ir.stmt import PrimFunc

if TYPE_CHECKING:
    from autotune.codegen.kernel import Kernel
    from autotune.target import Target


@dataclass(frozen=True)
class Artifact:
    """A compiled PrimFunc as plain, picklable data: what a builder hands a runner."""

    func: PrimFunc  # its attrs carry what loading needs (e.g. the CUDA launch config)
    target_key: str
    source: str  # human-readable generated code (LLVM IR, CUDA C)
    binary: bytes  # object code, cubin
    build_s: float  # seconds spent producing it
    # a prepacked workload's packing kernel, run once per constant operand; ``func`` reads
    # the operand as this one writes it (`autotune.schedule.prepack`)
    pack: Optional["Artifact"] = None


class Backend(Protocol):
    """Compiles a lowered ``PrimFunc`` for one target kind and loads the result;
    ``compile`` and ``load`` may run in different processes."""

    kind: str  # the ``Target.kind`` this backend serves

    def source(self, func: PrimFunc, target: Target) -> str:
        """The generated source, without compiling it (cheap; needs no device)."""
        ...

    def compile(self, func: PrimFunc, target: Target) -> Artifact:
        """Generate and compile ``func``. Raises on failure."""
        ...

    def load(self, artifact: Artifact, target: Target) -> Kernel:
        """A kernel callable on arrays in this process, from what ``compile`` returned."""
        ...
