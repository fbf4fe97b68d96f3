"""`DatabaseProbe`: /health's view of the database, read from a thread of its own."""
from __future__ import annotations

import time
from pathlib import Path

from autotune.db import Database
from autotune.service.probe import DatabaseProbe


def test_the_probe_sees_the_database_go_away_and_readings_grow_stale(tmp_path: Path) -> None:
    path = tmp_path / "db.sqlite"
    db = Database.open(f"sqlite:///{path}")
    probe = DatabaseProbe(db, every_s=0.05)
    try:
        assert probe.problem() is None and probe.reading.revision
        # A database that cannot be read any more: the file becomes a directory.
        db.dispose()
        path.unlink()
        path.mkdir()
        deadline = time.monotonic() + 5
        while probe.problem() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert (probe.problem() or "").startswith("database unreachable: ")
    finally:
        probe.close()
    # No reading for longer than allowed (the probe thread stopped): down as well.
    assert "no answer from the database" in (probe.problem(stale_s=0.0) or "")
