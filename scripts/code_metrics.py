"""Structural counts of the package, for the before/after table of docs/architecture.md.

    python scripts/code_metrics.py            # the working tree
    python scripts/code_metrics.py --rev main # a commit, read through git
    python scripts/code_metrics.py --list     # and name every finding

What is counted, over ``autotune/**.py`` (the Alembic migrations aside):

- long functions: every ``def`` (methods and nested ones too) spanning more than 50 lines,
  from its ``def`` line to its last;
- private imports: a name with one leading underscore taken from another autotune module,
  by ``from autotune.x import _name`` or as ``module._name`` of an imported autotune module;
- statement recursions: a function that tests a statement against two or more of the loop
  IR's compound nodes (Seq, For, Allocate, IfThenElse) and calls itself;
- in-function imports: ``import`` statements inside a function (outside ``TYPE_CHECKING``).
  One that defers a heavy or optional package (``HEAVY``: one the importing module does not
  load already, directly or through the autotune modules it imports at its top; or a code
  generator, ``OPTIONAL_OWN``) is counted apart from the rest, which could be imported at
  the top (or break an import cycle).
"""
from __future__ import annotations

import argparse
import ast
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LONG = 50
COMPOUND = {"Seq", "For", "Allocate", "IfThenElse"}
# third-party packages slow to import, or optional extras: worth deferring to first use
# (numpy too: about 0.1 s, which `autotune --help` need not pay)
HEAVY = {"numpy", "torch", "ray", "xgboost", "llvmlite", "pycuda", "sqlalchemy", "alembic",
         "fastapi", "starlette", "uvicorn", "httpx", "rich", "pydantic", "pydantic_settings",
         "psycopg", "onnxruntime", "openvino", "torchvision"}
# the code generators: a process loads the one its target kind needs
OPTIONAL_OWN = ("autotune.codegen.llvm", "autotune.codegen.cuda")


@dataclass
class Findings:
    long_functions: list[str] = field(default_factory=list)
    private_imports: list[str] = field(default_factory=list)
    recursions: list[str] = field(default_factory=list)
    deferred: list[tuple[str, str, list[str]]] = field(default_factory=list)  # (where, in, of)
    top: dict[str, set[str]] = field(default_factory=dict)  # module -> top-level imports
    heavy_imports: list[str] = field(default_factory=list)
    light_imports: list[str] = field(default_factory=list)


def sources(rev: str | None) -> dict[str, str]:
    """Module path -> source of every counted file, in the tree or at ``rev``."""
    if rev is None:
        paths = [p.relative_to(ROOT).as_posix() for p in (ROOT / "autotune").rglob("*.py")]
        read = lambda p: (ROOT / p).read_text()  # noqa: E731
    else:
        out = subprocess.run(["git", "ls-tree", "-r", "--name-only", rev, "autotune"],
                             cwd=ROOT, check=True, capture_output=True, text=True).stdout
        paths = [p for p in out.split() if p.endswith(".py")]
        read = lambda p: subprocess.run(  # noqa: E731
            ["git", "show", f"{rev}:{p}"], cwd=ROOT, check=True, capture_output=True,
            text=True).stdout
    return {p: read(p) for p in sorted(paths) if "/migrations/" not in p}


def module_name(path: str) -> str:
    parts = path[:-3].split("/")
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _is_type_checking(node: ast.If) -> bool:
    t = node.test
    return (isinstance(t, ast.Name) and t.id == "TYPE_CHECKING") or (
        isinstance(t, ast.Attribute) and t.attr == "TYPE_CHECKING")


def lazy_exports(tree: ast.Module) -> dict[str, str]:
    """A package's names exported lazily by its ``__getattr__``: the string values of its
    module-level ``_EXPORTS`` dict ("module" or "module:attribute")."""
    for node in tree.body:
        if not (isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name)
                and node.targets[0].id == "_EXPORTS" and isinstance(node.value, ast.Dict)):
            continue
        out = {}
        for k, v in zip(node.value.keys, node.value.values):
            if isinstance(k, ast.Constant) and isinstance(v, ast.Constant):
                out[str(k.value)] = str(v.value).partition(":")[0]
        return out
    return {}


class _Scan(ast.NodeVisitor):
    def __init__(self, path: str, modules: set[str], found: Findings,
                 lazy: dict[str, dict[str, str]]):
        self.path, self.modules, self.found, self.lazy = path, modules, found, lazy
        self.module = module_name(path)
        self.stack: list[str] = []
        self.module_aliases: dict[str, str] = {}  # local name -> autotune module

    def _where(self, line: int, what: str) -> str:
        return f"{self.path}:{line} {what}"

    def visit_If(self, node: ast.If) -> None:
        if _is_type_checking(node):
            for s in node.orelse:
                self.visit(s)
            return
        self.generic_visit(node)

    def _function(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        qual = ".".join([*self.stack, node.name])
        span = (node.end_lineno or node.lineno) - node.lineno + 1
        if span > LONG:
            self.found.long_functions.append(self._where(node.lineno, f"{qual} ({span} lines)"))
        if self._recurses(node):
            self.found.recursions.append(self._where(node.lineno, qual))
        self.stack.append(node.name)
        self.generic_visit(node)
        self.stack.pop()

    visit_FunctionDef = visit_AsyncFunctionDef = _function

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self.stack.append(node.name)
        self.generic_visit(node)
        self.stack.pop()

    @staticmethod
    def _recurses(node: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
        tested: set[str] = set()
        calls_itself = False
        for x in ast.walk(node):
            if isinstance(x, ast.Call) and isinstance(x.func, ast.Name):
                if x.func.id == "isinstance" and len(x.args) == 2:
                    kinds = x.args[1].elts if isinstance(x.args[1], ast.Tuple) else [x.args[1]]
                    tested |= {k.id for k in kinds if isinstance(k, ast.Name)} & COMPOUND
                calls_itself |= x.func.id == node.name
            elif isinstance(x, ast.Call) and isinstance(x.func, ast.Attribute):
                calls_itself |= (x.func.attr == node.name and isinstance(x.func.value, ast.Name)
                                 and x.func.value.id in ("self", "cls"))
        return calls_itself and len(tested) >= 2

    def _own(self, module: str) -> bool:
        return module == "autotune" or module.startswith("autotune.")

    def visit_Import(self, node: ast.Import) -> None:
        for a in node.names:
            if self._own(a.name) and a.asname:
                self.module_aliases[a.asname] = a.name
        self._in_function(node, [a.name for a in node.names])

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        base = node.module or ""
        if node.level:
            pkg = self.module.split(".")
            if not self.path.endswith("__init__.py"):
                pkg = pkg[:-1]
            base = ".".join(pkg[:len(pkg) - node.level + 1] + ([base] if base else []))
        names = []
        for a in node.names:
            full = f"{base}.{a.name}"
            if self._own(base) and full in self.modules:
                self.module_aliases[a.asname or a.name] = full
                names.append(full)
                continue
            names.append(self.lazy.get(base, {}).get(a.name, base))
            if self._own(base) and _private(a.name) and base != self.module:
                self.found.private_imports.append(
                    self._where(node.lineno, f"{a.name} from {base}"))
        self._in_function(node, sorted(set(names)))

    def _in_function(self, node: ast.stmt, names: list[str]) -> None:
        if any(isinstance(p, (ast.FunctionDef, ast.AsyncFunctionDef)) for p in self._parents):
            self.found.deferred.append((self._where(node.lineno, ", ".join(names)),
                                        self.module, names))
        else:
            self.found.top.setdefault(self.module, set()).update(names)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        if (_private(node.attr) and isinstance(node.value, ast.Name)
                and node.value.id in self.module_aliases
                and self.module_aliases[node.value.id] != self.module):
            self.found.private_imports.append(self._where(
                node.lineno, f"{node.attr} of {self.module_aliases[node.value.id]}"))
        self.generic_visit(node)

    def generic_visit(self, node: ast.AST) -> None:
        self._parents.append(node)
        super().generic_visit(node)
        self._parents.pop()

    _parents: list[ast.AST]

    def run(self, tree: ast.Module) -> None:
        self._parents = []
        self.visit(tree)


def _loads(module: str, top: dict[str, set[str]]) -> set[str]:
    """The third-party top-level packages that importing ``module`` loads (its packages'
    ``__init__`` included), through autotune's own top-level imports."""
    seen: set[str] = set()
    heavy: set[str] = set()
    todo = [module]
    while todo:
        m = todo.pop()
        parts = m.split(".")
        for name in (".".join(parts[:i]) for i in range(1, len(parts) + 1)):
            if name in seen:
                continue
            seen.add(name)
            if name == "autotune" or name.startswith("autotune."):
                todo.extend(top.get(name, ()))
            else:
                heavy.add(parts[0])
    return heavy & HEAVY


def _optional(name: str, importer: str) -> bool:
    """Whether ``name`` is part of a code generator that ``importer`` is not part of."""
    return any(name.startswith(p) and not importer.startswith(p) for p in OPTIONAL_OWN)


def scan(files: dict[str, str]) -> Findings:
    found = Findings()
    modules = {module_name(p) for p in files}
    trees = {path: ast.parse(text, path) for path, text in files.items()}
    lazy = {module_name(p): lazy_exports(t) for p, t in trees.items() if p.endswith("__init__.py")}
    for path, tree in trees.items():
        _Scan(path, modules, found, lazy).run(tree)
    for where, module, names in found.deferred:
        already = _loads(module, found.top)
        heavy = any(_loads(n, found.top) - already or _optional(n, module) for n in names)
        (found.heavy_imports if heavy else found.light_imports).append(where)
    return found


ROWS = (
    ("functions over 50 lines", "long_functions"),
    ("private names imported across modules", "private_imports"),
    ("hand-written statement recursions", "recursions"),
    ("in-function imports deferring a heavy or optional package", "heavy_imports"),
    ("in-function imports of anything else", "light_imports"),
)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rev", help="a git commit to measure instead of the working tree")
    p.add_argument("--list", action="store_true", help="name every finding")
    args = p.parse_args(argv)
    found = scan(sources(args.rev))
    print(f"| measure ({args.rev or 'working tree'}) | count |\n|---|---|")
    for label, attr in ROWS:
        print(f"| {label} | {len(getattr(found, attr))} |")
    if args.list:
        for label, attr in ROWS:
            print(f"\n{label}:")
            for item in getattr(found, attr):
                print(f"  {item}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
