"""Generated code of recorded configs, made on demand and cached (configs never change).

``loop``: the scheduled loop AST (cheap, milliseconds). ``llvm``/``cuda``: the generated
source from ``driver.build``; on a CPU target that compile waits for the device lock, so it
never disturbs a timing in progress.
"""
from __future__ import annotations

import threading
from collections import OrderedDict
from typing import TYPE_CHECKING, Any, Callable, ContextManager, Mapping

if TYPE_CHECKING:
    from autotune.ops import Workload
    from autotune.target import Target

LockFor = Callable[["Target"], ContextManager[Any]]


class SourceError(Exception):
    """The source of a config could not be generated (the message says why)."""


class SourceCache:
    """An LRU of ``(workload key, target key, config index, form) -> text``."""

    def __init__(self, lock_for: LockFor, size: int = 256) -> None:
        self._lock_for, self._size = lock_for, size
        self._lock = threading.Lock()
        self._items: "OrderedDict[tuple[str, str, int, str], str]" = OrderedDict()

    def get(self, workload: "Workload", target: "Target", config: Mapping[str, Any],
            form: str) -> str:
        """The ``form`` source of ``config`` (its ``{"index", "knobs"}`` dict)."""
        key = (workload.key, target.key, int(config["index"]), form)
        with self._lock:
            if key in self._items:
                self._items.move_to_end(key)
                return self._items[key]
        text = self._make(workload, target, config, form)
        with self._lock:
            self._items[key] = text
            while len(self._items) > self._size:
                self._items.popitem(last=False)
        return text

    def _make(self, workload: "Workload", target: "Target", config: Mapping[str, Any],
              form: str) -> str:
        from autotune import driver
        from autotune.space import Config

        try:
            cfg = Config.from_json(dict(config), driver.space(workload, target))
            if form == "loop":
                return str(driver.lower(workload, target, cfg))
            lock = self._lock_for(target)
            with lock:
                return driver.build(workload, target, cfg).source
        except Exception as err:  # a config from an older space, a codegen failure...
            raise SourceError(f"{type(err).__name__}: {err}") from err
