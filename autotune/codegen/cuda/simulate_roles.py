"""Warp-specialized kernels in the execution model: a block's warpgroups run as coroutines.

A producer warpgroup and its consumers synchronise only through mbarriers, so a block's
threads cannot run in lockstep from one ``__syncthreads()`` to the next as the model runs
other kernels: the producer would wait for consumers that have not started. ``Roles`` runs
the kernel body once per warpgroup (the lanes of that warpgroup in every block of the chunk,
in lockstep with each other) as a greenlet, and switches between them: a coroutine runs
until it blocks (an mbarrier wait not yet satisfied, a ``setmaxnreg`` the register file
cannot grant yet, a block barrier) or yields (after completing an mbarrier phase, so that
the threads waiting on it run before the one that released them goes on); then the next
one that can go on runs, in round-robin order. A block barrier is passed once every live
coroutine waits at one. When none can go on, the caller's ``stuck`` names why.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, NamedTuple, Sequence

import numpy as np
from greenlet import getcurrent, greenlet


class Stuck(NamedTuple):
    """What a blocked coroutine waits for, when nothing can go on: the error ``kind`` it
    makes (``deadlock`` unless the cause is plainer), a description, and a lane of it."""

    kind: str
    message: str
    lane: int


@dataclass(frozen=True)
class Blocked:
    """Why a coroutine cannot go on: ``ready`` says when it can (None: it waits at a block
    barrier with ``mask``, released by the scheduler); ``what`` says what it waits for."""

    ready: Callable[[], bool] | None
    what: Callable[[], Stuck]
    mask: np.ndarray | None = None


class Roles:
    """The coroutines of one chunk of blocks: one per lane mask."""

    def __init__(self, masks: Sequence[np.ndarray]):
        self.masks = list(masks)
        self.blocked: list[Blocked | None] = [None] * len(self.masks)
        self.current = 0
        self._main: greenlet | None = None
        self._named: dict[int, list[int]] = {}     # named barrier -> coroutines waiting
        self._passed: dict[int, int] = {}          # named barrier -> times it released

    def run(self, body: Callable[[np.ndarray], None],
            release: Callable[[np.ndarray], None],
            stuck: Callable[[list[tuple[int, Blocked]]], Exception]) -> None:
        """Run ``body(mask)`` as one coroutine per mask until all return. ``release(union)``
        passes a block barrier that every live coroutine reached (``union``: their lanes
        there); ``stuck(waiters)`` is raised when none can go on."""
        self._main = getcurrent()
        coros = [greenlet(lambda m=m: body(m)) for m in self.masks]
        nxt = 0
        while True:
            live = [k for k, c in enumerate(coros) if not c.dead]
            if not live:
                return
            k = self._next(live, nxt)
            if k is None:
                waiting = [(i, b) for i in live if (b := self.blocked[i]) is not None]
                if all(b.ready is None for _, b in waiting):
                    union = np.logical_or.reduce([b.mask for _, b in waiting
                                                  if b.mask is not None])
                    release(union)
                    for i in live:
                        self.blocked[i] = None
                    continue
                raise stuck(waiting)
            self.current = k
            self.blocked[k] = None
            coros[k].switch()
            nxt = k + 1

    def _next(self, live: list[int], start: int) -> int | None:
        """The first coroutine from ``start`` on (round robin) that can go on."""
        order = sorted(live, key=lambda i: (i < start, i))
        for k in order:
            b = self.blocked[k]
            if b is None or (b.ready is not None and b.ready()):
                return k
        return None

    def _switch(self, blocked: Blocked | None) -> None:
        assert self._main is not None, "Roles.run is not running"
        self.blocked[self.current] = blocked
        self._main.switch()

    def block(self, ready: Callable[[], bool], what: Callable[[], Stuck]) -> None:
        """Called by the running coroutine: return once ``ready()`` (re-check after)."""
        self._switch(Blocked(ready, what))

    def barrier(self, mask: np.ndarray, what: Callable[[], Stuck]) -> None:
        """Called by the running coroutine at a block barrier (its lanes there: ``mask``):
        return once the scheduler has released it."""
        self._switch(Blocked(None, what, mask))

    def named(self, barrier: int, count: int, what: Callable[[], Stuck]) -> bool:
        """Called by the running coroutine at named barrier ``barrier`` of ``count``
        coroutines (``bar.sync``): return once that many are there. True for the one whose
        arrival released it (it runs on while the others wait to be scheduled)."""
        waiting = self._named.setdefault(barrier, [])
        waiting.append(self.current)
        if len(waiting) == count:
            self._named[barrier] = []
            self._passed[barrier] = self._passed.get(barrier, 0) + 1
            return True
        gone = self._passed.get(barrier, 0)
        self._switch(Blocked(lambda: self._passed.get(barrier, 0) > gone, what))
        return False

    def yield_(self) -> None:
        """Let the other coroutines run first; this one can go on."""
        self._switch(None)
