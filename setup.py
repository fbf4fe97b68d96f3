"""Build hook: compile the cost model's hot path (autotune/native.py lists it) with mypyc.

Everything else about the package is in pyproject.toml. Without mypyc or a working C
compiler, or with ``AUTOTUNE_PURE=1``, the package installs as pure Python.
"""
from __future__ import annotations

import os
import runpy
import sys
from pathlib import Path

from setuptools import setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent
native = runpy.run_path(str(ROOT / "autotune" / "native.py"))


class NativeBuild(build_ext):
    """Compile the mypyc extensions; on a compiler failure warn and stay pure Python."""

    def run(self) -> None:
        try:
            super().run()
        except Exception as err:  # noqa: BLE001 - any compiler failure means "no native build"
            print(f"autotune: mypyc build failed, installing pure Python: {err}", file=sys.stderr)
            for ext in self.extensions:
                path = Path(self.get_ext_fullpath(ext.name))
                path.unlink(missing_ok=True)
            return
        package_dir = Path(self.get_ext_fullpath("autotune.ir.expr")).parent.parent
        native["write_manifest"](package_dir, ROOT)


def _pure(why: str) -> list:
    """No extensions; an earlier in-place build would shadow the sources, so it goes too."""
    print(f"autotune: {why}, installing pure Python", file=sys.stderr)
    native["clean"](ROOT)
    return []


def extensions() -> list:
    if os.environ.get("AUTOTUNE_PURE") == "1":
        return _pure("AUTOTUNE_PURE=1")
    try:
        from mypyc.build import mypycify
    except ImportError:
        return _pure("mypyc not available")
    old = os.getcwd()
    os.chdir(ROOT)  # mypyc resolves paths and reads pyproject.toml's [tool.mypy] from here
    try:
        # the modules they import are type-checked for their signatures, not for errors
        return mypycify(["--follow-imports=silent", *native["SOURCES"]], opt_level="3",
                        group_name=native["GROUP"])
    except (Exception, SystemExit) as err:  # mypy reports type errors by exiting
        return _pure(f"mypyc cannot compile the hot path ({err!r})")
    finally:
        os.chdir(old)


setup(ext_modules=extensions(), cmdclass={"build_ext": NativeBuild})
