"""The sync ``Lock`` as a state machine (hypothesis): random tries, short waits, releases of any
level in any order (``Held.release``) or of the innermost (``lock.release``), extensions, calls
through released and force-unlocked levels and ``force_unlock``, by three owners: two ``Lock``
objects in this thread and one of them in another thread. After every step the server must be
where a model says: who holds, how deep, with which fence (growing with every fresh grant).
The core has the same property (core/tests/properties.rs); this one covers the binding's own
bookkeeping: per-thread owners, the stack behind ``lock.release()``, ``Held`` objects."""

from __future__ import annotations

import itertools
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Dict, List, Optional, Tuple

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

import ferrolock
from conftest import RedisServer

OWNERS = 3  # 0, 1: two Lock objects used from this thread; 2: lock 0 used from another thread
LIVE, RELEASED, STALE = "live", "released", "stale"
_names = itertools.count()


class LockModel(RuleBasedStateMachine):
    client: ferrolock.Client
    other: ThreadPoolExecutor
    counts: Dict[str, int]

    @initialize()
    def start(self) -> None:
        self.name = f"py-model:{next(_names)}"
        first = self.client.lock(self.name, ttl=60)
        self.locks = [first, self.client.lock(self.name, ttl=60), first]
        # Per owner: every Held it got, with what the model says it is.
        self.levels: List[List[List[Any]]] = [[] for _ in range(OWNERS)]
        self.holder: Optional[int] = None
        self.depth = 0
        self.fence = 0
        self.top = 0

    def on(self, owner: int, fn: Callable[[], Any]) -> Any:
        """Run ``fn`` as ``owner``: owner 2 in the other thread. Returns its result or exception."""

        def call() -> Any:
            try:
                return fn()
            except ferrolock.LockError as e:
                return e

        return self.other.submit(call).result(30) if owner == 2 else call()

    def granted(self, owner: int, held: ferrolock.Held) -> None:
        if self.holder == owner:
            assert held.fence == self.fence, "a re-entry keeps the fence"
            self.depth += 1
            self.counts["reentries"] += 1
        else:
            assert held.fence > self.top, f"fence {held.fence} after {self.top}"
            self.holder, self.depth, self.fence, self.top = owner, 1, held.fence, held.fence
            for level in self.levels[owner]:
                if level[1] == LIVE:
                    level[1] = STALE
        assert held.count == self.depth
        self.levels[owner].append([held, LIVE])

    def released(self, level: List[Any]) -> None:
        level[1] = RELEASED
        self.depth -= 1
        if self.depth == 0:
            self.holder = None

    @rule(owner=st.integers(0, OWNERS - 1), wait=st.booleans())
    def take(self, owner: int, wait: bool) -> None:
        lock = self.locks[owner]
        r = self.on(owner, (lambda: lock.acquire(wait=0.01)) if wait else lock.try_acquire)
        free = self.holder is None or self.holder == owner
        if isinstance(r, ferrolock.Held):
            assert free, f"granted while owner {self.holder} holds"
            self.granted(owner, r)
        elif wait:
            assert isinstance(r, ferrolock.AcquireTimeoutError) and not free, repr(r)
            self.counts["timeouts"] += 1
        else:
            assert r is None and not free, repr(r)

    @rule(owner=st.integers(0, OWNERS - 1), k=st.integers(0, 7), extend=st.booleans())
    def release_or_extend_one(self, owner: int, k: int, extend: bool) -> None:
        if not self.levels[owner]:
            return
        level = self.levels[owner][k % len(self.levels[owner])]
        held: ferrolock.Held = level[0]
        r = self.on(owner, (lambda: held.extend(60)) if extend else held.release)
        if level[1] == LIVE:
            assert not isinstance(r, ferrolock.LockError), repr(r)
            if not extend:
                self.released(level)
        else:
            assert isinstance(r, (ferrolock.LostError, ferrolock.NotHeldError)), f"{level[1]} level: {r!r}"
            if level[1] == STALE:
                self.counts["stale calls"] += 1
                if not extend:
                    level[1] = RELEASED  # a release that fails for good gives the level up

    @rule(owner=st.integers(0, OWNERS - 1))
    def release_innermost(self, owner: int) -> None:
        lock = self.locks[owner]
        r = self.on(owner, lock.release)
        undone = [level for level in self.levels[owner] if level[1] != RELEASED]
        if not undone:
            assert isinstance(r, ferrolock.NotHeldError), repr(r)
        elif undone[-1][1] == LIVE:
            assert not isinstance(r, ferrolock.LockError), repr(r)
            self.released(undone[-1])
        else:
            # A force-unlocked level on top: reported, and given up.
            assert isinstance(r, ferrolock.LostError), repr(r)
            undone[-1][1] = RELEASED
            self.counts["stale calls"] += 1

    @rule()
    def force_unlock(self) -> None:
        self.client.force_unlock(self.name)
        if self.holder is not None:
            for level in self.levels[self.holder]:
                if level[1] == LIVE:
                    level[1] = STALE
        self.holder, self.depth = None, 0

    @invariant()
    def the_server_agrees(self) -> None:
        if not hasattr(self, "name"):
            return
        info = self.client.inspect(self.name)
        if self.holder is None:
            assert info is None, f"model: free; server: {info!r}"
        else:
            assert info is not None, "model: held; server: free"
            assert (info.count, info.fence) == (self.depth, self.fence)
        self.counts["steps"] += 1

    def teardown(self) -> None:
        if hasattr(self, "name"):
            self.client.force_unlock(self.name)


def test_the_sync_lock_matches_its_model(redis: RedisServer) -> None:
    client = ferrolock.Client.connect(redis.url)
    counts = {"steps": 0, "reentries": 0, "timeouts": 0, "stale calls": 0}
    with ThreadPoolExecutor(1) as other:
        LockModel.client, LockModel.other, LockModel.counts = client, other, counts
        run: Any = LockModel.TestCase
        run.settings = settings(
            max_examples=60, stateful_step_count=25, deadline=None, suppress_health_check=list(HealthCheck)
        )
        run().runTest()
    client.close()
    # Control: the sequences reach re-entries, timed-out waits and stale levels.
    assert counts["steps"] > 300 and counts["reentries"] > 10, counts
    assert counts["timeouts"] > 5 and counts["stale calls"] > 3, counts
