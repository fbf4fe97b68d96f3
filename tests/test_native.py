"""The mypyc build of the hot path: stale builds are refused, and compiled code computes
exactly what the pure-Python sources compute."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from autotune import native

REPO = Path(native.__file__).resolve().parent.parent


def _fake_tree(tmp_path: Path) -> Path:
    for src in native.SOURCES:
        dst = tmp_path / src
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO / src, dst)
    return tmp_path


def test_status_follows_the_build_and_its_sources(tmp_path):
    root = _fake_tree(tmp_path)
    assert native.status(root) == "pure"
    native.check(root)  # nothing built: nothing to refuse

    native.write_manifest(root / "autotune", root)
    assert native.status(root).startswith("stale: incomplete build (autotune/ir/expr.py, ")
    suffix = ".cpython-311-x86_64-linux-gnu.so"
    # empty files stand in for the build: status reads only names and hashes
    for src in native.SOURCES:
        (root / src).with_suffix(suffix).write_bytes(b"")
    assert native.status(root) == "stale: incomplete build (mypyc runtime)"
    runtime = root / "autotune" / ("_native__mypyc" + suffix)
    runtime.write_bytes(b"")
    assert native.status(root) == "compiled"
    native.check(root)

    (root / "autotune/schedule/lower.py").write_text("# edited\n")
    assert native.status(root) == "stale: autotune/schedule/lower.py"
    with pytest.raises(ImportError, match="out of date.*lower.py.*make install"):
        native.check(root)

    removed = native.clean(root)
    assert runtime in removed and len(removed) == len(native.SOURCES) + 2
    assert native.status(root) == "pure"


def test_ci_runs_the_compiled_build():
    """CI must exercise what users run: the build, not a silent pure-Python fallback."""
    state = native.status()
    if os.environ.get("CI") != "true" and state == "pure":
        pytest.skip("pure-Python install (AUTOTUNE_PURE=1 or no C compiler)")
    assert state == "compiled"
    import autotune.ir.expr
    import autotune.schedule.lower
    assert autotune.ir.expr.__file__.endswith(".so")
    assert autotune.schedule.lower.__file__.endswith(".so")


_DUMP = """
import json, sys
import numpy as np
import autotune
from autotune.costmodel.cache import features_for
from autotune.driver import InvalidConfig
from autotune.ir.stmt import format_func
from autotune.target import Target
out, (op, params, target) = sys.argv[1], json.loads(sys.argv[2])
wl, t = autotune.workload(op, **params), Target(target)
configs = autotune.config_space(wl, t).sample(np.random.default_rng(3), 40)
texts = []
for c in configs:
    try:
        texts.append(format_func(autotune.lower(wl, t, c)))
    except InvalidConfig as e:
        texts.append("invalid: " + str(e))
np.save(out, features_for(wl, t, configs, "ast"))
open(out + ".txt", "w").write("\\n#####\\n".join(texts))
"""


@pytest.mark.parametrize("case", [
    ("conv2d", {"N": 1, "C": 32, "H": 14, "W": 14, "K": 32, "R": 3, "S": 3, "stride": 1,
                "pad": 1, "epilogue": ["bias", "relu"]}, "llvm"),
    ("matmul", {"M": 96, "N": 80, "K": 40}, "cuda"),
    ("matmul", {"M": 200, "N": 136, "K": 128, "dtype": "float16"}, "cuda -arch=sm_90a"),
    ("depthwise_conv2d", {"N": 1, "C": 16, "H": 15, "W": 15, "R": 3, "S": 3, "stride": 2,
                          "pad": 1}, "llvm"),
])
def test_compiled_and_pure_sources_agree(tmp_path, case):
    """Lowered ASTs and feature rows of the same configs, from a copy of the sources without
    the build and from the build (mypyc trusts annotations: a wrong one changes results)."""
    if native.status() != "compiled":
        pytest.skip("no compiled build to compare")
    pure = tmp_path / "pure"
    shutil.copytree(REPO / "autotune", pure / "autotune",
                    ignore=shutil.ignore_patterns("*.so", "__pycache__", native.MANIFEST))
    script = tmp_path / "dump.py"
    script.write_text(_DUMP)
    outs = {}
    for name, path in (("pure", str(pure)), ("compiled", "")):
        out = tmp_path / f"{name}.npy"
        subprocess.run([sys.executable, str(script), str(out), json.dumps(case)], check=True,
                       env={**os.environ, "PYTHONPATH": path}, cwd=tmp_path)
        outs[name] = (np.load(out), Path(f"{out}.txt").read_text())
    probe = subprocess.run(
        [sys.executable, "-c", "import autotune.ir.expr as e; print(e.__file__)"],
        env={**os.environ, "PYTHONPATH": str(pure)}, cwd=tmp_path, capture_output=True,
        text=True, check=True)
    assert probe.stdout.strip().endswith(".py")  # the pure run really ran the sources
    assert outs["pure"][1] == outs["compiled"][1]
    assert np.array_equal(outs["pure"][0], outs["compiled"][0], equal_nan=True)
