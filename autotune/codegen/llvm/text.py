"""A tiny textual LLVM IR builder: typed values, basic blocks, one function at a time.

We write IR text ourselves (rather than through ``llvmlite.ir``) because we need fast-math
flags, string function attributes, aligned allocas and opaque pointers, all plain text.
"""
from __future__ import annotations

import re
import struct
from dataclasses import dataclass, field

I1, I32, I64, F32, PTR = "i1", "i32", "i64", "float", "ptr"
FAST = "reassoc nsz arcp contract"  # no nnan/ninf: padding and user data may hold inf


@dataclass(frozen=True)
class Val:
    """An SSA value or constant: its LLVM type text and its reference text."""

    ty: str
    ref: str

    @property
    def lanes(self) -> int:
        """Vector lane count, 0 for scalars."""
        m = re.match(r"<(\d+) x ", self.ty)
        return int(m.group(1)) if m else 0

    @property
    def elem(self) -> str:
        """Scalar element type (the type itself for scalars)."""
        return self.ty[self.ty.index(" x ") + 3:-1] if self.lanes else self.ty

    def __str__(self) -> str:
        return f"{self.ty} {self.ref}"


def vec_ty(elem: str, lanes: int) -> str:
    return f"<{lanes} x {elem}>"


def float_lit(x: float) -> str:
    """LLVM spells float constants as the hex of the double holding the rounded float."""
    f32 = struct.unpack("<f", struct.pack("<f", x))[0]
    return "0x%016X" % struct.unpack("<Q", struct.pack("<d", f32))[0]


def const_int(x: int, ty: str = I64) -> Val:
    return Val(ty, str(int(x)))


def const_float(x: float) -> Val:
    return Val(F32, float_lit(x))


def const_bool(x: bool) -> Val:
    return Val(I1, "true" if x else "false")


def const_vec(elem: str, values: list[int]) -> Val:
    """A constant integer vector such as the lane ids ``<0, 1, ..., W-1>``."""
    body = ", ".join(f"{elem} {v}" for v in values)
    return Val(vec_ty(elem, len(values)), f"<{body}>")


def sanitize(name: str) -> str:
    """A valid LLVM local/global name; never all digits (LLVM reserves those)."""
    name = re.sub(r"[^A-Za-z0-9_.]", "_", name) or "v"
    return "v" + name if name[0].isdigit() else name


@dataclass
class Block:
    label: str
    lines: list[str] = field(default_factory=list)
    terminated: bool = False


class FunctionBuilder:
    """Accumulates one function's blocks; allocas go to a dedicated entry block."""

    def __init__(self, name: str, params: list[tuple[str, str, str]], attrs_ref: str,
                 linkage: str = ""):
        # params: (type, param attributes, name)
        self.name = name
        self.linkage = linkage
        self.attrs_ref = attrs_ref
        self._counter = 0
        self._used: set[str] = {"entry"}
        self.params = [Val(ty, "%" + self.fresh(n)) for ty, _, n in params]
        self._param_attrs = [a for _, a, _ in params]
        self.entry = Block("entry")
        self.blocks: list[Block] = []
        self.cur = self.new_block("body")
        self.entry.lines.append(f"br label %{self.cur.label}")
        self.entry.terminated = True
        self._allocas: list[str] = []

    # -- names and blocks ------------------------------------------------------------
    def fresh(self, hint: str = "t") -> str:
        base = sanitize(hint)
        name = base
        while name in self._used:
            self._counter += 1
            name = f"{base}.{self._counter}"
        self._used.add(name)
        return name

    def new_block(self, hint: str) -> Block:
        b = Block(self.fresh(hint))
        self.blocks.append(b)
        return b

    def set_block(self, b: Block) -> None:
        self.cur = b

    def emit(self, ty: str, text: str, hint: str = "t") -> Val:
        """Append ``%x = <text>`` to the current block and return ``%x`` typed ``ty``."""
        ref = "%" + self.fresh(hint)
        self.cur.lines.append(f"{ref} = {text}")
        return Val(ty, ref)

    def do(self, text: str) -> None:
        """Append an instruction without a result."""
        self.cur.lines.append(text)

    def br(self, target: Block) -> None:
        if not self.cur.terminated:
            self.cur.lines.append(f"br label %{target.label}")
            self.cur.terminated = True

    def cond_br(self, cond: Val, then: Block, other: Block) -> None:
        self.cur.lines.append(f"br i1 {cond.ref}, label %{then.label}, label %{other.label}")
        self.cur.terminated = True

    def alloca(self, ty: str, align: int, hint: str) -> Val:
        """An alloca in the entry block, so SROA/mem2reg can promote it."""
        ref = "%" + self.fresh(hint)
        self._allocas.append(f"{ref} = alloca {ty}, align {align}")
        return Val(PTR, ref)

    # -- rendering -------------------------------------------------------------------
    def render(self) -> str:
        if not self.cur.terminated:
            self.do("ret void")
            self.cur.terminated = True
        params = ", ".join(f"{p.ty}{' ' + a if a else ''} {p.ref}"
                           for p, a in zip(self.params, self._param_attrs))
        link = f"{self.linkage} " if self.linkage else ""
        out = [f"define {link}void @{self.name}({params}) {self.attrs_ref} {{",
               "entry:", *("  " + s for s in self._allocas + self.entry.lines)]
        for b in self.blocks:
            assert b.terminated, f"block {b.label} of {self.name} has no terminator"
            out.append(f"{b.label}:")
            out.extend("  " + s for s in b.lines)
        out.append("}")
        return "\n".join(out)


class ModuleBuilder:
    """Functions, declarations and the one attribute group all our functions share."""

    def __init__(self, fn_attrs: str):
        self.fn_attrs = fn_attrs
        self.functions: list[FunctionBuilder] = []
        self.declares: dict[str, str] = {}
        self._names: set[str] = set()

    def unique_name(self, hint: str) -> str:
        base, name, n = sanitize(hint), sanitize(hint), 0
        while name in self._names:
            n += 1
            name = f"{base}.{n}"
        self._names.add(name)
        return name

    def function(self, name: str, params: list[tuple[str, str, str]],
                 linkage: str = "", inline: bool = False) -> FunctionBuilder:
        fb = FunctionBuilder(name, params, "#1" if inline else "#0", linkage)
        self.functions.append(fb)
        return fb

    def declare(self, name: str, text: str) -> str:
        """Register ``declare ...`` text once; returns ``@name``."""
        self.declares.setdefault(name, text)
        return "@" + name

    def render(self, triple: str, datalayout: str) -> str:
        head = [f'target triple = "{triple}"']
        if datalayout:
            head.insert(0, f'target datalayout = "{datalayout}"')
        body = [f.render() for f in self.functions]
        attrs = [f"attributes #0 = {{ {self.fn_attrs} }}",
                 f"attributes #1 = {{ alwaysinline {self.fn_attrs} }}"]
        return "\n\n".join(["\n".join(head), *body, "\n".join(self.declares.values()),
                            "\n".join(attrs)]) + "\n"
