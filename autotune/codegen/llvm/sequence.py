"""One native function calling kernel entries in order, each on its own pointer array: a
run of a compiled model's consecutive kernels is one call from Python. The arrays are
read when the sequence runs, so pointers set in them beforehand take effect."""
from __future__ import annotations

import ctypes
from typing import Any, Sequence

from autotune.codegen.llvm.jit import emit_object, load_object
from autotune.codegen.llvm.text import PTR

_NAME = "autotune_sequence"
_RUN = ctypes.CFUNCTYPE(None)


def sequence_ir(calls: Sequence[tuple[int, int]]) -> str:
    """The IR of ``void autotune_sequence()`` calling each (entry, pointer array) address
    pair in order, as ``entry(array)``."""
    lines = [f"define void @{_NAME}() {{", "entry:"]
    for entry, args in calls:
        lines.append(f"  call void inttoptr (i64 {entry} to {PTR})({PTR} inttoptr (i64 {args} "
                     f"to {PTR}))")
    lines += ["  ret void", "}"]
    return "\n".join(lines) + "\n"


class CallSequence:
    """``calls`` (entry address, pointer array address) compiled into one native function;
    ``keep`` holds whatever those addresses point into (kernels, arrays) for its lifetime."""

    def __init__(self, calls: Sequence[tuple[int, int]], target: Any, keep: Any) -> None:
        self._engine = load_object(emit_object(sequence_ir(calls), target), target)
        self._run = _RUN(self._engine.get_function_address(_NAME))
        self._keep = keep
        self.length = len(calls)

    def __call__(self) -> None:
        self._run()
