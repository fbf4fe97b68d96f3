"""Fixtures for the service tests (helpers live in service_helpers.py)."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator, Optional

import pytest

from tests.service.service_helpers import Server


@pytest.fixture
def make_server(tmp_path: Path) -> Iterator[Any]:
    """A factory of servers over a fresh SQLite database in ``tmp_path``; all stopped after."""
    servers: list[Server] = []

    def make(db_url: Optional[str] = None, **env: str) -> Server:
        server = Server(db_url or f"sqlite:///{tmp_path / 'autotune.db'}", tmp_path, env)
        servers.append(server)
        return server

    yield make
    for server in servers:
        server.stop()


