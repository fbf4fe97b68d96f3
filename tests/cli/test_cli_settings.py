"""Settings: defaults, the AUTOTUNE_ environment, and MeasureOptions built from them."""
from __future__ import annotations

import pytest
from pydantic import ValidationError

from autotune.job_options import MEASURE_FIELDS, MeasureOverrides
from autotune.measure import MeasureOptions
from autotune.settings import Settings


def test_defaults(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)  # no .env here
    for name in Settings.model_fields:
        monkeypatch.delenv(f"AUTOTUNE_{name.upper()}", raising=False)
    s = Settings()
    assert (s.db_url, s.host, s.port, s.max_concurrent_jobs) == (
        "sqlite:///autotune.db", "127.0.0.1", 8000, 2)
    assert s.require_key_for_reads is False
    defaults = MeasureOptions()
    assert all(getattr(s, name) == getattr(defaults, name) for name in MEASURE_FIELDS)


def test_environment_and_env_file(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    (tmp_path / ".env").write_text("AUTOTUNE_PORT=9100\n")
    monkeypatch.setenv("AUTOTUNE_DB_URL", "postgresql://db/autotune")
    monkeypatch.setenv("AUTOTUNE_REPEAT", "7")
    monkeypatch.setenv("AUTOTUNE_REQUIRE_KEY_FOR_READS", "true")
    s = Settings()
    assert s.db_url == "postgresql://db/autotune" and s.port == 9100 and s.require_key_for_reads
    opts = MeasureOptions.from_settings(s, MeasureOverrides(run_timeout=3.0))
    assert isinstance(opts, MeasureOptions) and opts.repeat == 7 and opts.run_timeout == 3.0


def test_bad_values_are_rejected(monkeypatch):
    monkeypatch.setenv("AUTOTUNE_PORT", "0")
    with pytest.raises(ValidationError, match="port"):
        Settings()


def test_a_measurement_setting_past_its_bound_is_one_line_naming_it(monkeypatch, capsys,
                                                                     tmp_path):
    from autotune.cli import main

    monkeypatch.setenv("AUTOTUNE_RUN_TIMEOUT", "1e9")  # was accepted, then overflowed poll()
    code = main(["tune", "matmul", "-p", "M=64", "-p", "N=64", "-p", "K=64", "--trials", "1",
                 "--db", f"sqlite:///{tmp_path / 'cli.db'}"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1
    assert "AUTOTUNE_RUN_TIMEOUT" in err[0] and "600" in err[0]
