"""The layering contract (pyproject.toml, [tool.importlinter]): it holds for the package, and
it catches an import planted to run back up a layer."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LINT = str(Path(sys.executable).with_name("lint-imports"))


def _lint(cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(cwd)}
    return subprocess.run([LINT, "--no-cache"], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=300)


def _copy(tmp_path: Path) -> Path:
    shutil.copytree(ROOT / "autotune", tmp_path / "autotune",
                    ignore=shutil.ignore_patterns("*.so", "__pycache__", "_native.json"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    return tmp_path


def test_the_package_keeps_its_layers(tmp_path):
    done = _lint(_copy(tmp_path))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "KEPT" in done.stdout


def test_an_upward_import_breaks_the_contract(tmp_path):
    root = _copy(tmp_path)
    planted = root / "autotune" / "measure" / "replay.py"
    planted.write_text(planted.read_text() + "\nfrom autotune.db import Database  # planted\n")
    done = _lint(root)
    assert done.returncode != 0
    assert "autotune.measure.replay -> autotune.db" in done.stdout
