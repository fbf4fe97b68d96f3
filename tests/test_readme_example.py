"""The README runs as written: its library example from a file without a main guard and
piped to ``python -`` (measurement workers must not re-import ``__main__``); every `autotune`
command it shows parses with the real CLI, every URL path it names is served, and its
service examples run in a fresh shell against a real server."""
from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.service.service_helpers import SHORT_TIMING

README = Path(__file__).resolve().parents[1] / "README.md"


def python_block(heading: str) -> str:
    """The first python block under the README's ``## heading``."""
    text = README.read_text()
    section = text[text.index(f"\n## {heading}\n"):]
    found = re.search(r"```python\n(.*?)```", section, re.S)
    assert found is not None, f"README's {heading} section has no python block"
    return found.group(1)


def library_example() -> str:
    return python_block("Library")


def check_output(out: str) -> None:
    lines = out.splitlines()
    gflops = float(lines[0].split()[0])
    assert gflops > 0
    assert float(lines[1]) < 1e-3  # max abs error of the tuned kernel against numpy
    assert lines[2].startswith("BestRecord(")
    assert "define" in out  # the IR's head


def short_timing() -> dict[str, str]:
    """The environment with a short timing protocol: the examples run as written, their
    kernels' timings are not under test."""
    return {**os.environ, **SHORT_TIMING}


@pytest.mark.slow
@pytest.mark.parametrize("how", ["file", "stdin"])
def test_readme_library_example_runs_as_written(how: str, tmp_path: Path) -> None:
    code = library_example()
    assert "__main__" not in code  # the point: no guard
    if how == "file":
        script = tmp_path / "example.py"
        script.write_text(code)
        run = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True,
                             text=True, timeout=600, env=short_timing())
    else:  # the point here is `python -`, not the budget: a quarter of it
        assert "trials=64" in code
        run = subprocess.run([sys.executable, "-"], input=code.replace("trials=64", "trials=16"),
                             cwd=tmp_path, capture_output=True, text=True, timeout=600,
                             env=short_timing())
    assert run.returncode == 0, run.stderr[-3000:]
    check_output(run.stdout)
    assert (tmp_path / "autotune.db").exists()  # the documented default database


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_readme_models_example_runs_from_any_directory(tmp_path: Path) -> None:
    """The Models example with a model of its own (no module of this repository), run in
    an empty directory, with a smaller budget."""
    pytest.importorskip("torch")
    code = python_block("Models")
    assert "trials=200" in code and "benchmarks" not in code
    run = subprocess.run([sys.executable, "-"], input=code.replace("trials=200", "trials=8"),
                         cwd=tmp_path, capture_output=True, text=True, timeout=600,
                         env=short_timing())
    assert run.returncode == 0, run.stderr[-3000:]
    out = run.stdout
    # extract lists what tune_model tunes on this CPU: the pool, and the prepacked forms
    assert "max_pool2d(" in out and " prepacked" in out, out
    error = re.search(r"tensor\(([-+.e\d]+)\)\s*$", out)
    assert error is not None and float(error.group(1)) < 1e-3, out[-500:]
    assert "are already in the database" not in run.stderr  # a fresh database
    assert "re-timing task" in run.stderr  # its progress


# --- the shell examples --------------------------------------------------------------------

SHELL_OPERATORS = set("();<>|&")


def shell_blocks() -> list[tuple[str, str]]:
    """(section heading, text) of every fenced block of the README that is not Python."""
    text = README.read_text()
    blocks = []
    for found in re.finditer(r"^```(\w*)\n(.*?)^```", text, re.S | re.M):
        if found.group(1) != "python":
            heading = re.findall(r"^#+ (.*)$", text[:found.start()], re.M)[-1]
            blocks.append((heading, found.group(2)))
    return blocks


def autotune_commands(block: str) -> list[list[str]]:
    """The argument lists of every `autotune ...` command in a shell block (after a prompt,
    inside ``$(...)``, in a pipeline or behind `docker compose exec`)."""
    commands = []
    for line in block.replace("\\\n", " ").splitlines():
        lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
        lexer.whitespace_split, lexer.commenters = True, "#"
        tokens = list(lexer)
        for i, token in enumerate(tokens):
            if token == "autotune" or token.endswith("/bin/autotune"):
                argv = []
                for arg in tokens[i + 1:]:
                    if set(arg) <= SHELL_OPERATORS:
                        break
                    argv.append(arg)
                commands.append(argv)
    return commands


def test_the_readme_shows_commands() -> None:
    commands = [c for _, block in shell_blocks() for c in autotune_commands(block)]
    assert len(commands) >= 15 and ["apikey", "create", "--db", "sqlite:///autotune.db"] in commands


def test_every_autotune_command_in_the_readme_parses() -> None:
    """Each command's subcommand and flags parse with the real CLI, and its operator and
    parameters name a workload."""
    from autotune import cli

    parser = cli.build_parser()
    for heading, block in shell_blocks():
        for argv in autotune_commands(block):
            try:
                args = parser.parse_args(argv)
            except SystemExit:
                pytest.fail(f"README ({heading}): autotune {shlex.join(argv)} does not parse")
            if hasattr(args, "op"):
                cli.common.task_of(args)  # a usage error names what is wrong


def readme_paths() -> set[str]:
    """URL paths the README names: in URLs of the local service and as `/...` in backticks."""
    text = README.read_text()
    paths = set(re.findall(r"http://(?:127\.0\.0\.1|localhost):8000(/[^\s'\"`)]*)", text))
    paths |= set(re.findall(r"`(/[^`\s]*)`", text))
    return {re.sub(r"\$\w+|\{\w+\}", "1", p.split("?")[0]) for p in paths}


def test_every_url_path_in_the_readme_is_served() -> None:
    from starlette.routing import Match

    from autotune.service.main import create_app
    from autotune.settings import Settings

    routes = create_app(Settings(db_url="sqlite://")).routes
    paths = readme_paths()
    assert {"/api/v1/jobs", "/api/v1/health", "/"} <= paths
    for path in sorted(paths):
        scope = {"type": "http", "path": path, "method": "GET", "root_path": ""}
        assert any(r.matches(scope)[0] is not Match.NONE for r in routes), \
            f"README names {path}, which the service does not serve"


def _service_block() -> str:
    blocks = [b for heading, b in shell_blocks() if heading == "Service and dashboard"]
    assert len(blocks) == 1
    return blocks[0]


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_the_service_examples_run_as_written(tmp_path: Path) -> None:
    """The curl block, in a fresh shell (no virtualenv on PATH) of the directory where the
    service runs, against a real `autotune serve` (on a free port instead of 8000)."""
    from tests.service.service_helpers import Server

    if shutil.which("curl") is None:
        if os.environ.get("CI") == "true":
            pytest.fail("curl is not installed")
        pytest.skip("curl is not installed")
    venv = Path(sys.prefix)  # the virtualenv running the tests, as the README's .venv
    assert (venv / "bin" / "activate").exists(), "the tests must run in a virtualenv"
    (tmp_path / ".venv").symlink_to(venv)
    server = Server("sqlite:///autotune.db", tmp_path, {"AUTOTUNE_EVENT_STREAM_LIFETIME_S": "3"})
    server.start()
    venv_bin = str(Path(sys.executable).parent)
    path = os.pathsep.join(d for d in os.environ["PATH"].split(os.pathsep)
                           if d and Path(d).resolve() != Path(venv_bin).resolve())
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    try:
        script = _service_block().replace("127.0.0.1:8000", f"127.0.0.1:{server.port}")
        run = subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=tmp_path,
                             env={**env, "PATH": path}, capture_output=True, text=True,
                             timeout=240)
    finally:
        server.stop()
    assert run.returncode == 0, run.stderr[-3000:] + server.log()[-3000:]
    job = re.search(r"^submitted job (\d+)$", run.stdout, re.M)
    assert job is not None, run.stdout[:2000]
    assert f'"id":{job.group(1)},' in run.stdout.replace(" ", "")  # GET /jobs/$JOB
    assert "event: " in run.stdout  # the event stream
    assert script.rstrip().splitlines()[-1].startswith("curl -N --max-time ")  # it comes last
    assert '"status":"ok"' in run.stdout.replace(" ", "")  # /api/v1/health
