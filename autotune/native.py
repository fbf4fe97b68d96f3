"""The modules compiled to C with mypyc, and the check that they match their sources.

Scheduling, lowering and loop-AST feature extraction run for every candidate config the cost
model scores; compiled, they run about twice as fast (benchmarks/features.py). ``setup.py`` builds
them when mypyc and a C compiler are available (``AUTOTUNE_PURE=1`` skips that) and records
the SHA-256 of each source in ``_native.json`` beside the package. A compiled module shadows
its ``.py``, so an edited source would silently not run: ``check()`` (called when
``autotune.ir`` is imported) refuses stale builds instead.

Stdlib only, and runnable as a script (``setup.py`` and the Makefile read it before the
package's dependencies exist)::

    python autotune/native.py --sources   # the compiled sources, one per line
    python autotune/native.py --status    # compiled / pure / stale (which sources changed)
    python autotune/native.py --clean     # remove the build: run the pure-Python sources
"""
from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

# Paths relative to the repository root (the package's parent). Each must type-check
# under mypy: mypyc trusts the annotations at run time.
SOURCES = (
    "autotune/ir/expr.py",
    "autotune/ir/stmt.py",
    "autotune/ir/analysis.py",
    "autotune/ir/visitor.py",
    "autotune/schedule/compute.py",
    "autotune/schedule/schedule.py",
    "autotune/schedule/lower.py",
    "autotune/costmodel/nest.py",
    "autotune/costmodel/footprint.py",
    "autotune/costmodel/features.py",
)
MANIFEST = "_native.json"  # in the package directory
# mypyc's shared runtime library is the module "<GROUP>__mypyc": inside the package, where
# an editable install finds it (a top-level module beside the package it may not map)
GROUP = "autotune._native"


def _root() -> Path:
    return Path(__file__).resolve().parent.parent


def digests(root: Path | None = None) -> dict[str, str]:
    """SHA-256 of each compiled source as it is on disk now."""
    root = root or _root()
    return {s: hashlib.sha256((root / s).read_bytes()).hexdigest() for s in SOURCES}


def _modules(root: Path) -> dict[str, list[Path]]:
    """Each compiled source's extension files present beside it."""
    return {s: sorted((root / s).parent.glob(Path(s).stem + ".*.so")) for s in SOURCES}


def _runtime(root: Path) -> list[Path]:
    return sorted((root / "autotune").glob(GROUP.split(".")[-1] + "__mypyc.*.so"))


def built(root: Path | None = None) -> list[Path]:
    """The compiled extension files present in ``root``'s package (modules and runtime)."""
    root = root or _root()
    return [p for files in _modules(root).values() for p in files] + _runtime(root)


def status(root: Path | None = None) -> str:
    """"compiled", "pure" (no build), or "stale: <why>" (sources changed since the build, or
    a partial build). Sources are hashed only when there is a build to compare them with."""
    root = root or _root()
    manifest = root / "autotune" / MANIFEST
    modules, runtime = _modules(root), _runtime(root)
    if not manifest.exists():
        return "stale: build without manifest" if runtime or any(modules.values()) else "pure"
    missing = [s for s, files in modules.items() if not files]
    if missing or not runtime:
        return "stale: incomplete build (" + ", ".join(missing or ["mypyc runtime"]) + ")"
    recorded = json.loads(manifest.read_text())
    now = digests(root)
    changed = [s for s in SOURCES if recorded.get(s) != now[s]]
    return "stale: " + ", ".join(changed) if changed else "compiled"


def check(root: Path | None = None) -> None:
    """Raise ImportError when compiled modules do not match their sources."""
    state = status(root)
    if state.startswith("stale"):
        raise ImportError(
            "autotune: the mypyc-compiled modules are out of date "
            f"({state.removeprefix('stale: ')})."
            " Rebuild them with `make install` (or `pip install -e .`), or run the pure-Python"
            " sources after `python autotune/native.py --clean`.")


def write_manifest(package_dir: Path, root: Path | None = None) -> None:
    """Record the sources a build was made from (``setup.py`` calls this after compiling)."""
    (package_dir / MANIFEST).write_text(json.dumps(digests(root), indent=1) + "\n")


def clean(root: Path | None = None) -> list[Path]:
    """Delete the compiled modules and the manifest; returns what was removed."""
    root = root or _root()
    gone = built(root)
    manifest = root / "autotune" / MANIFEST
    if manifest.exists():
        gone.append(manifest)
    for p in gone:
        p.unlink()
    return gone


def main(argv: list[str]) -> int:
    if argv == ["--sources"]:
        print("\n".join(SOURCES))
    elif argv == ["--status"]:
        print(status())
    elif argv == ["--clean"]:
        for p in clean():
            print(f"removed {p}")
    else:
        print("usage: python autotune/native.py --sources | --status | --clean", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
