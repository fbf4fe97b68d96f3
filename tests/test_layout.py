"""The tests are a package: helpers import as ``tests.<dir>.<module>``, never by bare name
(a bare name depends on which directory pytest put on sys.path first)."""
from __future__ import annotations

import re
from pathlib import Path

import autotune

TESTS = Path(__file__).resolve().parent
HELPERS = {p.stem for p in TESTS.rglob("*.py")
           if not p.stem.startswith(("test_", "__")) and p.stem != "conftest"}


def test_every_test_directory_is_a_package() -> None:
    dirs = {p.parent for p in TESTS.rglob("test_*.py")} | {TESTS}
    assert [d for d in dirs if not (d / "__init__.py").exists()] == []


def test_helpers_are_imported_by_their_package_name() -> None:
    bare = re.compile(rf"^\s*(from|import) ({'|'.join(sorted(HELPERS))}|test_\w+)\b", re.M)
    offenders = [f"{p.relative_to(TESTS)}: {m.group(0).strip()}" for p in TESTS.rglob("*.py")
                 for m in bare.finditer(p.read_text())]
    assert offenders == []


def test_one_public_name_for_the_config_space() -> None:
    from autotune import api, driver

    wl, target = autotune.workload("matmul", M=8, N=8, K=8), autotune.Target("llvm")
    assert autotune.config_space is driver.config_space
    assert autotune.config_space(wl, target).size > 1
    assert not hasattr(driver, "space") and not hasattr(api, "space_of")
