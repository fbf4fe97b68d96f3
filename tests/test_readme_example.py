"""The README's library example runs exactly as written: from a file without a main guard,
and piped to ``python -`` (measurement workers must not re-import ``__main__``)."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"


def library_example() -> str:
    """The first python block under the README's '## Library' heading."""
    text = README.read_text()
    section = text[text.index("\n## Library\n"):]
    found = re.search(r"```python\n(.*?)```", section, re.S)
    assert found is not None, "README's Library section has no python block"
    return found.group(1)


def check_output(out: str) -> None:
    lines = out.splitlines()
    gflops = float(lines[0].split()[0])
    assert gflops > 0
    assert float(lines[1]) < 1e-3  # max abs error of the tuned kernel against numpy
    assert lines[2].startswith("BestRecord(")
    assert "define" in out  # the IR's head


@pytest.mark.slow
@pytest.mark.parametrize("how", ["file", "stdin"])
def test_readme_library_example_runs_as_written(how: str, tmp_path: Path) -> None:
    code = library_example()
    assert "__main__" not in code  # the point: no guard
    if how == "file":
        script = tmp_path / "example.py"
        script.write_text(code)
        run = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True,
                             text=True, timeout=600)
    else:
        run = subprocess.run([sys.executable, "-"], input=code, cwd=tmp_path,
                             capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    check_output(run.stdout)
    assert (tmp_path / "autotune.db").exists()  # the documented default database
