"""Which ISA extensions LLVM's code generator uses for a CPU name and feature string.

llvmlite cannot list the features LLVM enables for ``-mcpu=X``, so we ask its instruction
selection instead: a small module whose functions each compile to a telltale instruction
exactly when one extension is on (``vaddps %zmm`` for avx512f, ``shlx`` for bmi2, ...). The
probed extensions are the ones LLVM picks by itself from plain IR, i.e. those that decide
whether generated code runs on a CPU. Names and feature strings that come from users are
compiled in a child process: LLVM aborts the whole process on some of them (an unknown CPU
name leaves a 64-bit target without ``+64bit``).
"""
from __future__ import annotations

import functools
import json
import re
import subprocess
import sys
from dataclasses import dataclass
from typing import Optional

# (extension, function signature, body, instruction that shows it), in key order.
_PROBES: tuple[tuple[str, str, str, str], ...] = (
    ("avx", "<8 x float> @p_avx(<8 x float> %a, <8 x float> %b)",
     "%r = fadd <8 x float> %a, %b\n  ret <8 x float> %r", r"vaddps\s+%ymm"),
    ("avx2", "<8 x i32> @p_avx2(<8 x i32> %a, <8 x i32> %b)",
     "%r = add <8 x i32> %a, %b\n  ret <8 x i32> %r", r"vpaddd\s+%ymm"),
    ("fma", "<4 x float> @p_fma(<4 x float> %a, <4 x float> %b, <4 x float> %c)",
     "%r = call <4 x float> @llvm.fma.v4f32(<4 x float> %a, <4 x float> %b, <4 x float> %c)\n"
     "  ret <4 x float> %r", r"vfmadd"),
    ("avx512f", "<16 x float> @p_avx512f(<16 x float> %a, <16 x float> %b)",
     "%r = fadd <16 x float> %a, %b\n  ret <16 x float> %r", r"vaddps\s+%zmm"),
    ("avx512bw", "<64 x i8> @p_avx512bw(<64 x i8> %a, <64 x i8> %b)",
     "%r = add <64 x i8> %a, %b\n  ret <64 x i8> %r", r"vpaddb\s+%zmm"),
    ("avx512dq", "<8 x i64> @p_avx512dq(<8 x i64> %a, <8 x i64> %b)",
     "%r = mul <8 x i64> %a, %b\n  ret <8 x i64> %r", r"vpmullq"),
    ("avx512fp16", "<32 x half> @p_avx512fp16(<32 x half> %a, <32 x half> %b)",
     "%r = fadd <32 x half> %a, %b\n  ret <32 x half> %r", r"vaddph"),
    ("bmi2", "i64 @p_bmi2(i64 %a, i64 %b)", "%r = shl i64 %a, %b\n  ret i64 %r", r"shlx"),
    ("popcnt", "i64 @p_popcnt(i64 %a)",
     "%r = call i64 @llvm.ctpop.i64(i64 %a)\n  ret i64 %r", r"popcnt"),
    ("lzcnt", "i64 @p_lzcnt(i64 %a)",
     "%r = call i64 @llvm.ctlz.i64(i64 %a, i1 false)\n  ret i64 %r", r"lzcnt"),
)
EXTENSIONS: tuple[str, ...] = tuple(p[0] for p in _PROBES)

# 512-bit vectors stay whole (as our generated code asks for them on AVX-512).
_MODULE = "\n".join(
    [f"define {sig} #0 {{\n  {body}\n}}" for _, sig, body, _ in _PROBES]
    + ["declare <4 x float> @llvm.fma.v4f32(<4 x float>, <4 x float>, <4 x float>)",
       "declare i64 @llvm.ctpop.i64(i64)", "declare i64 @llvm.ctlz.i64(i64, i1)",
       'attributes #0 = { nounwind "prefer-vector-width"="512" '
       '"min-legal-vector-width"="512" }', ""])

# The child: assembly of the module for (cpu, features) on stdout; LLVM's warnings on stderr.
_CHILD = ("import json, sys\nimport llvmlite.binding as llvm\n"
          "llvm.initialize_native_target(); llvm.initialize_native_asmprinter()\n"
          "a = json.load(sys.stdin)\n"
          "tm = llvm.Target.from_triple(llvm.get_process_triple()).create_target_machine("
          "cpu=a['cpu'], features=a['features'], opt=1)\n"
          "sys.stdout.write(tm.emit_assembly(llvm.parse_assembly(a['ir'])))\n")
_CHILD_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class IsaProbe:
    """The probed extensions LLVM uses for a (cpu, features) pair, or why it could not say."""

    isa: frozenset[str]
    error: Optional[str] = None

    def diff(self, base: "IsaProbe") -> str:
        """``+x,-y``: the extensions on here and off in ``base`` and the reverse, key order."""
        return ",".join([f"+{e}" for e in EXTENSIONS if e in self.isa and e not in base.isa]
                        + [f"-{e}" for e in EXTENSIONS if e in base.isa and e not in self.isa])


def _isa_of(asm: str) -> frozenset[str]:
    found = set()
    for name, _, _, pattern in _PROBES:
        body = re.search(rf"^p_{name}:(.*?)^\.Lfunc_end", asm, re.S | re.M)
        if body and re.search(pattern, body.group(1)):
            found.add(name)
    return frozenset(found)


@functools.lru_cache(maxsize=8)
def probe_trusted(cpu: str, features: str) -> IsaProbe:
    """Probe in this process: only for LLVM's own host CPU name and feature string (or ''),
    which cannot abort it."""
    import llvmlite.binding as llvm

    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    tm = llvm.Target.from_triple(llvm.get_process_triple()).create_target_machine(
        cpu=cpu, features=features, opt=1)
    return IsaProbe(_isa_of(tm.emit_assembly(llvm.parse_assembly(_MODULE))))


@functools.lru_cache(maxsize=128)
def probe(cpu: str, features: str) -> IsaProbe:
    """Probe any (cpu, features) in a child process; ``error`` names an unknown CPU or
    feature, or how the child failed."""
    try:
        done = subprocess.run([sys.executable, "-I", "-c", _CHILD], capture_output=True,
                              text=True, timeout=_CHILD_TIMEOUT_S,
                              input=json.dumps({"cpu": cpu, "features": features,
                                                "ir": _MODULE}))
    except (OSError, subprocess.TimeoutExpired) as err:
        return IsaProbe(frozenset(), f"could not ask LLVM about -mcpu={cpu}: {err}")
    unknown = re.findall(r"'([^']*)' is not a recognized (processor|feature)", done.stderr)
    if unknown:
        name, what = unknown[0]
        option = "-mcpu" if what == "processor" else "-mattr"
        return IsaProbe(frozenset(), f"LLVM does not know the {what} {name!r} ({option})")
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
        return IsaProbe(frozenset(), f"LLVM cannot generate code for -mcpu={cpu}"
                                     f"{' -mattr=' + features if features else ''}: {last}")
    return IsaProbe(_isa_of(done.stdout))
