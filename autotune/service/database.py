"""`ServiceDatabase`: the service's `Database`, with its write transactions taken in turn.

The service writes from several threads at once (request handlers and job workers). On SQLite
a deferred transaction that reads and then writes fails at once with "database is locked"
when another connection committed in between (WAL snapshot conflict), and no busy timeout
helps. Serialising this process's writes removes the conflict; reads stay concurrent.
"""
from __future__ import annotations

import functools
import threading
from typing import Any, Callable, TypeVar

from autotune.db import Database

F = TypeVar("F", bound=Callable[..., Any])

# Database methods that write (each is one transaction).
WRITE_METHODS = ("add_trials", "create_job", "set_job_state", "update_job_progress",
                 "create_api_key", "revoke_api_key", "import_jsonl", "update_trial_costs")


def _serialised(method: F) -> F:
    @functools.wraps(method)
    def call(self: "ServiceDatabase", *args: Any, **kwargs: Any) -> Any:
        with self.write_lock:
            return method(self, *args, **kwargs)
    return call  # type: ignore[return-value]


class ServiceDatabase(Database):
    """A `Database` whose writing methods hold ``write_lock`` (see the module docstring)."""

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.write_lock = threading.RLock()


for _name in WRITE_METHODS:
    if hasattr(Database, _name):
        setattr(ServiceDatabase, _name, _serialised(getattr(Database, _name)))
