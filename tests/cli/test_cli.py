"""The `autotune` command through cli.main([...]) and once through the installed entry point."""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

import autotune
from autotune import api, cli
from autotune.measure import MeasureUnavailable
from autotune.measure.capability import why_not_measurable
from autotune.search.synthetic import SyntheticExecutor, SyntheticObjective
from autotune.target import Target

TASK = ["matmul", "-p", "M=64", "-p", "N=64", "-p", "K=64"]


@pytest.fixture
def db(tmp_path, monkeypatch):
    url = f"sqlite:///{tmp_path / 'cli.db'}"
    monkeypatch.setenv("AUTOTUNE_DB_URL", url)  # the default --db comes from Settings
    return url


@pytest.fixture
def synthetic(monkeypatch):
    """The CLI's executor measures a synthetic objective instead of the CPU."""
    made = []

    def local_executor(target, options, *, settings):
        from autotune.ops import workload
        made.append(options)
        space = autotune.config_space(workload("matmul", M=64, N=64, K=64), target)
        return SyntheticExecutor(SyntheticObjective(space, seed=2, fail_rate=0.1))

    monkeypatch.setattr(api, "default_executor", local_executor)
    return made


def run(capsys, *argv):
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_ops_lists_every_operator(capsys):
    code, out, _ = run(capsys, "ops")
    assert code == 0
    for op in ("matmul", "batch_matmul", "conv2d", "depthwise_conv2d"):
        assert op in out
    assert "dilation=1" in out and "bias, scale_shift, residual, relu, relu6" in out
    rows = {line.split()[0]: line for line in out.splitlines()[1:] if line.split()}
    assert "groups" in rows["group_conv2d"] and "float16" not in rows["group_conv2d"]
    assert "float32,float16,bfloat16" in rows["conv2d"]
    assert "float32,float16,bfloat16" in rows["depthwise_conv2d"]
    assert "float16" not in rows["max_pool2d"]
    assert "llvm,cuda" in rows["conv2d"] and " llvm " in rows["max_pool2d"]
    assert "(none for max_pool2d, avg_pool2d, global_avg_pool2d, channel_mul, " \
        "channel_shuffle)" in out


POOL = ["max_pool2d", "-p", "N=1", "-p", "C=8", "-p", "H=16", "-p", "W=16", "-p", "R=3",
        "-p", "S=3", "-p", "stride=2"]


@pytest.mark.parametrize("extra, message", [
    (["--epilogue", "relu"], "max_pool2d: takes no epilogue"),
    (["--target", "cuda -arch=sm_80"], "max_pool2d has kernels for llvm targets only"),
    (["-p", "pad=2"], "'pad'=2 exceeds half the window"),
])
def test_max_pool2d_tasks_are_refused_with_the_reason(capsys, db, extra, message):
    pad = [] if "pad=2" in extra else ["-p", "pad=1"]
    code, _, err = run(capsys, "best", *POOL, *pad, *extra)
    assert code == 2 and message in err
    code, _, err = run(capsys, "best", *POOL, "-p", "pad=1")  # a valid task: no record yet
    assert code == 1 and "no valid record for max_pool2d(" in err


def test_a_dtype_is_part_of_the_task(capsys, db, synthetic):
    # float32 records of a shape are not float16's: the half workload has none on cuda
    assert run(capsys, "tune", *TASK, "--trials", "8", "--tuner", "random")[0] == 0
    code, _, err = run(capsys, "best", *TASK, "--dtype", "float16", "--target", "cuda")
    assert code == 1 and "no valid record for matmul(M=64,N=64,K=64):float16 on cuda" in err
    code, out, _ = run(capsys, "trials", *TASK, "--dtype", "float16", "--target", "cuda")
    assert code == 0 and "matmul(M=64,N=64,K=64):float16 on cuda -arch=sm_90a: 0 trials" in out


def test_tune_then_best_trials_export_import(capsys, db, synthetic, tmp_path):
    code, out, err = run(capsys, "tune", *TASK, "--trials", "40", "--tuner", "ga", "--seed", "3",
                         "--tuner-option", "pop_size=16", "--tuner-option", "selection=roulette")
    assert code == 0, err
    assert "40 trials measured (stopped: budget)" in out and "GFLOP/s" in out
    assert re.search(r"Best: config \d+, [\d.]+ GFLOP/s \([\d.]+ ms\), its re-timed figure\. "
                     r"The progress showed first measurements", out), out
    assert re.search(r"The best runs [\d.]+x as fast as the template's default config", out)
    assert json.loads(out.strip().splitlines()[-1])["knobs"]
    assert "autotune: 32/40 trials" in err and "autotune: 40/40 trials" in err  # not a TTY
    assert synthetic[0].repeat == 5  # measurement options come from Settings

    code, out, _ = run(capsys, "best", *TASK, "--json")
    best = json.loads(out)
    assert code == 0 and best["gflops"] > 0 and "index" in best["config"]

    code, out, _ = run(capsys, "trials", *TASK, "--sort", "gflops", "--limit", "5")
    lines = out.strip().splitlines()
    assert code == 0 and "40 trials" in lines[0]
    assert lines[1].split()[:3] == ["id", "config", "GFLOP/s"]
    assert float(lines[2].split()[2]) == pytest.approx(best["gflops"], abs=0.006)
    assert "showing 5 of 40" in lines[-1]

    path = tmp_path / "out.jsonl.gz"
    code, out, _ = run(capsys, "export", "-o", str(path))
    assert code == 0 and "exported 40 records" in out
    fresh = f"sqlite:///{tmp_path / 'fresh.db'}"
    code, out, _ = run(capsys, "import", "--db", fresh, str(path))
    assert code == 0 and "imported 40 new records" in out
    code, out, _ = run(capsys, "best", *TASK, "--json", "--db", fresh)
    assert json.loads(out) == best


def test_tune_early_stopping_flag(capsys, db, synthetic, monkeypatch):
    monkeypatch.setenv("AUTOTUNE_REPEAT", "2")
    code, out, _ = run(capsys, "tune", *TASK, "--trials", "500", "--early-stopping", "16",
                       "--batch-size", "8", "--tuner", "ga")
    assert code == 0 and "(stopped: early_stopping)" in out
    assert synthetic[0].repeat == 2  # AUTOTUNE_REPEAT reaches the executor


def test_tuners_lists_options_from_the_service_table(capsys):
    from autotune.search.registry import describe_tuners

    code, out, _ = run(capsys, "tuners")
    assert code == 0
    assert "xgb (default):" in out and "ga:" in out
    pop = next(line.split() for line in out.splitlines() if line.split()[:1] == ["pop_size"])
    assert pop[1:3] == ["32", "2..4096"]
    assert "tournament|roulette" in out
    code, out, _ = run(capsys, "tuners", "--json")
    assert code == 0 and json.loads(out) == describe_tuners()


def test_run_is_gone_serve_demo_replaces_it(capsys):
    code, _, err = run(capsys, "run")
    assert code == 2 and "invalid choice: 'run'" in err


@pytest.mark.parametrize("argv,code,message", [
    (["tune", "matmull", "-p", "M=1"], 2, "unknown op 'matmull'"),
    (["tune", "matmul", "-p", "M64"], 2, "bad -p 'M64': expected NAME=VALUE"),
    (["tune", "matmul", "-p", "M=big"], 2, "bad -p M=big"),
    (["tune", "matmul", "-p", "M=0", "-p", "N=1", "-p", "K=1"], 2, "'M'=0 must be an integer >= 1"),
    (["tune", *TASK, "--target", "tpu"], 2, "unknown kind 'tpu'"),
    (["tune", *TASK, "--tuner", "magic"], 2, "invalid choice: 'magic'"),
    (["tune", *TASK, "--tuner", "ga", "--tuner-option", "pop_size=1"], 2,
     "option 'pop_size' must be >= 2"),
    (["tune", *TASK, "--trials", "0"], 2, "--trials must be >= 1"),
    (["tune", *TASK, "--dtype", "float16"], 2,
     "matmul(M=64,N=64,K=64):float16: dtype 'float16' is not supported on llvm (CPU) targets"),
    (["best", *TASK, "--dtype", "bfloat16"], 2, "is not supported on llvm (CPU) targets"),
    (["tune", "max_pool2d", "-p", "N=1", "-p", "C=4", "-p", "H=8", "-p", "W=8", "-p", "R=3",
      "-p", "S=3", "-p", "stride=1", "-p", "pad=1", "--dtype", "float16"], 2,
     "dtype 'float16' is not supported for max_pool2d"),
    (["tune", *TASK, "--dtype", "float64"], 2, "invalid choice: 'float64'"),
    # database URLs: one line naming the URL and the fix, for every command and serve
    (["best", *TASK, "--db", "nosuchdialect://x"], 2,
     "database URL 'nosuchdialect://x': dialect 'nosuchdialect' is not supported; use sqlite:///"),
    (["tune", *TASK, "--db", "mysql://x@y/z"], 2, "dialect 'mysql' is not supported"),
    (["serve", "--db", "sqllite:"], 2, "'sqllite' is not supported (did you mean sqlite?)"),
    (["export", "--db", "sqlite:/dir/x.db", "-o", "x.jsonl"], 2,
     "'sqlite:/dir/x.db' is malformed: write sqlite:////dir/x.db (three slashes, then the "
     "path), or the plain path /dir/x.db"),
    (["best", *TASK, "--db", "sqlite:///nonexistent/dir/x.db"], 2,
     "directory nonexistent/dir does not exist (relative to the current directory"),
    (["apikey", "create", "--db", "/nonexistent/dir/x.db"], 2,
     "directory /nonexistent/dir does not exist; create it first (mkdir -p /nonexistent/dir)"),
    (["serve", "--db", "postgresql+psycopg2://u@h/d"], 2,
     "its driver 'psycopg2' is not installed"),
    (["best", *TASK, "--db", "postgresql://u@127.0.0.1:9/x"], 1, "database error"),
    (["import", "--db", "sqlite:///:memory:", "/nonexistent.jsonl"], 1, "No such file"),
    (["frobnicate"], 2, "invalid choice: 'frobnicate'"),
])
def test_user_errors_print_one_line(capsys, db, argv, code, message):
    got, out, err = run(capsys, *argv)
    assert got == code
    assert err.startswith("autotune: error: ") and err.count("\n") == 1, err
    assert message in err and "Traceback" not in err


@pytest.mark.parametrize("spec", ["llvm -mcpu=nonsense-cpu", "llvm -mcpu=skylake-avx512",
                                  "cuda -arch=sm_90"])
def test_tune_refuses_a_target_this_host_cannot_measure(capsys, tmp_path, spec):
    """Exit 2 and one line before anything is recorded, with the reason `autotune.tune`
    (and the service's submit) give: the one check, `capability.measure_refusal`."""
    target = Target(spec)
    reason = why_not_measurable(target)
    if reason is None:
        pytest.skip(f"this host can measure {spec}")
    db = tmp_path / "refused.db"
    code, out, err = run(capsys, "tune", *TASK, "--target", spec, "--db", f"sqlite:///{db}")
    assert code == 2 and err.count("\n") == 1 and not out, err
    assert f"autotune: error: this host cannot measure {target.key}: {reason}" in err
    with pytest.raises(MeasureUnavailable) as raised:
        autotune.tune(autotune.workload("matmul", M=64, N=64, K=64), target, trials=4,
                      db=f"sqlite:///{db}", progress=False)
    assert err.strip().endswith(str(raised.value))
    assert not db.exists()


def test_best_without_records_exits_1(capsys, db):
    code, _, err = run(capsys, "best", *TASK)
    assert code == 1 and "no valid record for matmul(M=64,N=64,K=64)" in err


def test_help_mentions_every_command(capsys):
    code, out, _ = run(capsys, "--help")
    assert code == 0
    for cmd in cli.COMMANDS:
        assert cmd.name in out


def test_installed_entry_point():
    exe = Path(sys.executable).with_name("autotune")
    ok = subprocess.run([str(exe), "ops"], capture_output=True, text=True, timeout=60)
    assert ok.returncode == 0 and "conv2d" in ok.stdout
    bad = subprocess.run([str(exe), "best", "nosuchop"], capture_output=True, text=True,
                         timeout=60)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "Traceback" not in bad.stderr
