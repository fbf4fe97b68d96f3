"""mbarriers in the execution model, and the order they give between threads.

Each mbarrier (an element of a shared ``uint64`` buffer, numbered per block as a *slot*)
expects ``count`` arrivals per phase; ``arrive.expect_tx`` also raises the phase's
expected transaction bytes, which TMA copies completing on it count down. A phase completes
when its arrivals are in and its bytes have landed; the next one starts at once.
``try_wait.parity P`` returns once the latest completed phase has parity P (on a fresh
barrier, phase -1 counts as completed: parity 1 returns at once).

Order: every lane knows, per slot, how many phases completed (``know``), and per warpgroup
of its block how many wgmma groups retired (columns after the slots). An arrival hands
the arriving lane's knowledge to the barrier; a phase's completion releases all it was
handed; a wait that returns takes it. A block barrier shares knowledge among the block's
threads. Data a TMA copy brings completes with phase p of a slot: a thread may read it
once it knows p + 1 phases of that slot.

Besides ordering, a lane's own waits on a slot must follow its phases one by one: the
parity it waits on is that of the next phase it has not seen (a wait on the other parity
returns at once on the phase it saw, or skips one), except the producer's first wait on a
fresh barrier with parity 1.
"""
from __future__ import annotations

from typing import Callable, Mapping, Sequence

import numpy as np

from autotune.codegen.cuda.simulate_error import CudaExecutionError
from autotune.ir.stmt import Buffer

MAX_COUNT = (1 << 20) - 1   # arrivals per phase, and expected bytes, an mbarrier can hold

# (kind, message, lane, slot): the statement layer's error (it knows blocks and threads)
Fail = Callable[[str, str, int, int], CudaExecutionError]


class Mbarriers:
    """The mbarriers of one chunk of ``blocks`` blocks (``lanes`` threads), and each
    thread's knowledge of their phases and of its block's ``warpgroups``' wgmma groups."""

    def __init__(self, buffers: Sequence[Buffer], blocks: int, lanes: int, threads: int,
                 warpgroups: int, fail: Fail):
        n = 0
        first: dict[Buffer, int] = {}
        for b in buffers:
            first[b] = n
            n += b.size
        self.first: Mapping[Buffer, int] = first
        self.slots, self.threads, self.fail = n, threads, fail
        self._where = [(b, i) for b in buffers for i in range(b.size)]
        self.names = [f"{b.name}[{i}]" for b, i in self._where]
        width = n + warpgroups
        # per (block, slot): arrivals per phase, arrivals still missing and bytes still
        # expected in the current phase, phases completed; what arrivals handed over, and
        # what the completions so far released
        shape = (blocks, n)
        self.count: np.ndarray = np.zeros(shape, np.int64)
        self.pending: np.ndarray = np.zeros(shape, np.int64)
        self.tx: np.ndarray = np.zeros(shape, np.int64)
        self.done: np.ndarray = np.zeros(shape, np.int64)
        self.carry: np.ndarray = np.zeros((*shape, width), np.int64)
        self.released: np.ndarray = np.zeros((*shape, width), np.int64)
        # per lane: what it knows, and the phase of each slot its own last wait saw
        self.know: np.ndarray = np.zeros((lanes, width), np.int64)
        self.own: np.ndarray = np.full((lanes, max(n, 1)), -1, np.int64)
        self.completed = False  # a phase completed since the scheduler last looked

    def slot(self, buf: Buffer, index: np.ndarray) -> np.ndarray:
        return self.first[buf] + index

    def where(self, slot: int) -> tuple[Buffer, int]:
        """The buffer and element of a slot."""
        return self._where[slot]

    # ------------------------------------------------------------------ operations
    def init(self, blocks: np.ndarray, slots: np.ndarray, count: int) -> None:
        """A fresh barrier: no phase completed, nothing known of it."""
        self.count[blocks, slots] = self.pending[blocks, slots] = count
        self.tx[blocks, slots] = self.done[blocks, slots] = 0
        self.carry[blocks, slots] = self.released[blocks, slots] = 0
        own = self.own.reshape(-1, self.threads, self.own.shape[1])
        know = self.know.reshape(-1, self.threads, self.know.shape[1])
        own[blocks, :, slots] = -1
        know[blocks, :, slots] = 0

    def arrive(self, lanes: np.ndarray, blocks: np.ndarray, slots: np.ndarray,
               expect: int) -> None:
        """``lanes`` arrive (raising the expected bytes by ``expect``); a phase whose
        arrivals are in and whose bytes have landed completes, and later arrivals of the
        same statement count towards the next one."""
        np.maximum.at(self.carry, (blocks, slots), self.know[lanes])
        np.add.at(self.tx, (blocks, slots), expect)
        pairs, counts = np.unique(np.stack([blocks, slots]), axis=1, return_counts=True)
        for (b, s), k in zip(pairs.T.tolist(), counts.tolist()):
            while k:
                took = min(k, int(self.pending[b, s]))
                self.pending[b, s] -= took
                k -= took
                if self.pending[b, s]:
                    break
                if self.tx[b, s]:  # waits for bytes: no arrival belongs to it any more
                    if k:
                        k = int(np.argmax((blocks == b) & (slots == s)))
                        raise self.fail(
                            "too_many_arrivals", f"arrives on {self.names[s]} in a phase "
                            f"whose {int(self.count[b, s])} arrivals are all in (it still "
                            "waits for bytes)", int(lanes[k]), s)
                    break
                self._complete(b, s)

    def complete_tx(self, lanes: np.ndarray, blocks: np.ndarray, slots: np.ndarray,
                    nbytes: int) -> None:
        """Copies by ``lanes`` of ``nbytes`` each have landed; phases complete."""
        np.subtract.at(self.tx, (blocks, slots), nbytes)
        under = self.tx[blocks, slots] < 0
        if under.any():
            k = int(np.argmax(under))
            b, s = int(blocks[k]), int(slots[k])
            expected = int(self.tx[b, s]) + nbytes
            raise self.fail("too_few_expected_bytes", f"copies {nbytes} bytes with TMA onto "
                            f"{self.names[s]} in phase {int(self.done[b, s])}, which expects "
                            f"only {expected} more (arrive.expect_tx must announce every byte "
                            "before the copies land)", int(lanes[k]), s)
        self._settle(blocks, slots)

    def _settle(self, blocks: np.ndarray, slots: np.ndarray) -> None:
        ready = (self.pending[blocks, slots] == 0) & (self.tx[blocks, slots] == 0)
        if ready.any():
            for b, s in np.unique(np.stack([blocks[ready], slots[ready]]), axis=1).T.tolist():
                self._complete(b, s)

    def _complete(self, b: int, s: int) -> None:
        """Phase ``done`` of slot ``s`` of block ``b`` completes: it releases what its
        arrivals handed over, and the next phase starts."""
        self.done[b, s] += 1
        self.pending[b, s] = self.count[b, s]
        self.released[b, s] = np.maximum(self.released[b, s], self.carry[b, s])
        self.released[b, s, s] = self.done[b, s]
        self.completed = True

    def wait_ready(self, blocks: np.ndarray, slots: np.ndarray, parity: np.ndarray
                   ) -> np.ndarray:
        """Which waits on ``parity`` return now: the latest completed phase has it."""
        return (self.done[blocks, slots] + parity) % 2 == 1

    def check_parity(self, lanes: np.ndarray, blocks: np.ndarray, slots: np.ndarray,
                     parity: np.ndarray) -> None:
        """``wrong_parity`` where a lane waits on the parity of a phase it already saw
        rather than of the next one (save a first wait on a fresh barrier with parity 1)."""
        nxt = self.own[lanes, slots] + 1
        done = self.done[blocks, slots]
        fresh = (done == 0) & (nxt == 0) & (parity == 1)
        wrong = (parity != nxt % 2) & ~fresh
        if not wrong.any():
            return
        k = int(np.argmax(wrong))
        s, p, want = int(slots[k]), int(parity[k]), int(nxt[k])
        effect = (f"returns at once on phase {want - 1}, which it already saw"
                  if int(done[k]) == want else
                  f"skips phase {want} (completed) to wait for phase {want + 1}")
        raise self.fail("wrong_parity", f"waits on {self.names[s]} with parity {p}, but the "
                        f"next phase it has not seen is {want} (parity {want % 2}): the wait "
                        f"{effect}", int(lanes[k]), s)

    def observe(self, lanes: np.ndarray, blocks: np.ndarray, slots: np.ndarray) -> None:
        """Returned waits: the lanes saw the latest completed phase, and know what it
        released (a first wait on a fresh barrier sees nothing)."""
        done = self.done[blocks, slots]
        seen = done > 0
        lanes, blocks, slots = lanes[seen], blocks[seen], slots[seen]
        self.own[lanes, slots] = done[seen] - 1
        np.maximum.at(self.know, lanes, self.released[blocks, slots])

    def share(self, lanes: np.ndarray) -> None:
        """A block barrier: each thread of a block that passed it (``lanes``, whole blocks)
        knows what any of them knew."""
        know = self.know[lanes].reshape(-1, self.threads, self.know.shape[1])
        self.know[lanes] = np.broadcast_to(know.max(axis=1, keepdims=True),
                                           know.shape).reshape(-1, self.know.shape[1])

    def knows(self, lanes: np.ndarray, column: np.ndarray, at_least: np.ndarray
              ) -> np.ndarray:
        """Whether each lane knows value ``at_least`` of its ``column``."""
        return self.know[lanes, column] >= at_least

    # ------------------------------------------------------------------ diagnosis
    def describe(self, block: int, slot: int) -> str:
        """The state of one barrier, for a waiter's description."""
        return (f"{self.names[slot]} has completed {int(self.done[block, slot])} phases; "
                f"phase {int(self.done[block, slot])} misses "
                f"{int(self.pending[block, slot])} of {int(self.count[block, slot])} "
                f"arrivals and {int(self.tx[block, slot])} bytes")

    def starved(self, blocks: np.ndarray, slots: np.ndarray) -> int | None:
        """Index of the first barrier among ``blocks``/``slots`` whose arrivals are all in
        but whose expected bytes will not come (no copy is in flight in the model)."""
        stuck = (self.pending[blocks, slots] == 0) & (self.tx[blocks, slots] > 0)
        return int(np.argmax(stuck)) if stuck.any() else None

    def starved_any(self) -> tuple[int, int] | None:
        """(block, slot) of a barrier left starved so, or None."""
        stuck = (self.pending == 0) & (self.tx > 0)
        if not stuck.any():
            return None
        b, s = np.argwhere(stuck)[0]
        return int(b), int(s)
