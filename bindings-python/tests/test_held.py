"""The sync owner's stack of ``Held`` levels (native since 2026-11-28, ``src/held.rs``): which
level ``lock.held`` and ``lock.release()`` see, what a failed release leaves on the stack, and
when a thread's holds are dropped."""

from __future__ import annotations

import asyncio
import gc
import os
import signal
import threading
import time
from typing import List

import pytest

import ferrolock
from conftest import RedisServer


@pytest.fixture
def client(redis: RedisServer) -> ferrolock.Client:
    return ferrolock.Client.connect(redis.url)


def test_levels_released_out_of_order(client: ferrolock.Client, name: str) -> None:
    lock = client.lock(name, ttl=5)
    a, b, c = lock.acquire(), lock.acquire(), lock.acquire()
    assert isinstance(b, ferrolock.Held) and lock.held is c and c.count == 3
    b.release()  # the middle level first
    assert lock.held is c, "releasing a middle level must leave the innermost on top"
    assert b.state == "released" and a.count == 2
    info = client.inspect(name)
    assert info is not None and info.count == 2
    lock.release()  # the innermost: c
    assert c.state == "released" and lock.held is a
    a.release()
    assert lock.held is None and client.inspect(name) is None
    with pytest.raises(ferrolock.NotHeldError):
        lock.release()


def test_lock_release_takes_the_innermost_and_other_threads_see_none(client: ferrolock.Client,
                                                                    name: str) -> None:
    lock = client.lock(name, ttl=5)
    outer = lock.acquire()
    inner = lock.acquire()
    seen: List[object] = []
    t = threading.Thread(target=lambda: seen.append(lock.held))
    t.start()
    t.join()
    assert seen == [None]  # another thread's view: it holds nothing
    lock.release()
    assert inner.state == "released" and outer.state == "held" and lock.held is outer
    lock.release()
    assert outer.state == "released" and client.inspect(name) is None


def test_a_held_outlives_its_lock_object(client: ferrolock.Client, name: str) -> None:
    """``client.lock(name).acquire()``: the ``Lock`` is gone at once, the hold still belongs to
    this thread (and only to it)."""
    held = client.lock(name, ttl=5).acquire()
    gc.collect()
    errors: List[BaseException] = []

    def other() -> None:
        try:
            held.release()
        except BaseException as e:  # noqa: BLE001 - collected for the asserts
            errors.append(e)

    t = threading.Thread(target=other)
    t.start()
    t.join()
    assert [type(e) for e in errors] == [ferrolock.NotHeldError]
    assert client.inspect(name) is not None
    held.release()
    assert client.inspect(name) is None


def test_a_transient_release_failure_keeps_the_level(servers: List[RedisServer], name: str) -> None:
    server = RedisServer()
    servers.append(server)
    client = ferrolock.Client.connect(server.url, response_timeout=0.2)
    lock = client.lock(name, ttl=5)
    held = lock.acquire()
    os.kill(server.proc.pid, signal.SIGSTOP)
    try:
        with pytest.raises(ferrolock.LockError) as e:
            held.release()
    finally:
        os.kill(server.proc.pid, signal.SIGCONT)
    assert e.value.transient, e.value
    assert lock.held is held, "a transient failure must leave the level for a retry"
    # The retry: the first release may have run once the server resumed (then the retry finds
    # the key gone: LostError); either way the level is off the stack and the lock is free.
    try:
        held.release()
    except ferrolock.LostError:
        pass
    assert lock.held is None
    deadline = time.monotonic() + 3
    while client.inspect(name) is not None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert client.inspect(name) is None


def test_a_failed_release_forgets_the_level(redis: RedisServer, client: ferrolock.Client, name: str) -> None:
    """The other side of the transient case: an error that a retry cannot mend (here the hold
    expired and another client took the lock) takes the level off the stack."""
    lock = client.lock(name, ttl=0.3)
    held = lock.acquire()
    time.sleep(0.45)
    taken = ferrolock.Client.connect(redis.url).lock(name, ttl=5).acquire(wait=1)
    with pytest.raises(ferrolock.LostError):
        held.release()
    assert lock.held is None
    taken.release()


LEASE = 0.6  # watchdog_ttl: renewed every 0.2 s while the hold lives
RUNS_OUT = 5 * LEASE


def _acquired_within(url: str, name: str, wait: float) -> bool:
    try:
        ferrolock.Client.connect(url).lock(name, ttl=5).acquire(wait=wait).release()
        return True
    except ferrolock.AcquireTimeoutError:
        return False


def test_a_threads_dropped_hold_lives_until_the_thread_ends(redis: RedisServer, name: str) -> None:
    """A hold whose ``Held`` was dropped still belongs to its thread while the thread and the
    ``Lock`` live (renewed; ``lock.held`` returns it). Once the thread has ended, its owner and
    the owner's stack are a cycle the collector frees: the hold stops renewing and its lease
    runs out. The first half is the control: collecting alone does not end a live thread's hold."""
    client = ferrolock.Client.connect(redis.url, watchdog_ttl=LEASE)
    lock = client.lock(name)  # no ttl: renewed by the watchdog
    go_on, acquired = threading.Event(), threading.Event()
    seen: List[object] = []

    def body() -> None:
        lock.acquire(wait=0)  # the Held is dropped at once
        acquired.set()
        go_on.wait(30)
        seen.append(lock.held)

    t = threading.Thread(target=body)
    t.start()
    try:
        assert acquired.wait(5)
        gc.collect()
        assert not _acquired_within(redis.url, name, RUNS_OUT), "a live thread's hold ran out"
    finally:
        go_on.set()
        t.join(5)
    assert len(seen) == 1 and isinstance(seen[0], ferrolock.Held) and seen[0].state == "held"
    del seen[:]
    time.sleep(0.1)  # the thread's state (and its threading.local dicts) is cleared as it ends
    gc.collect()
    assert _acquired_within(redis.url, name, RUNS_OUT), "an ended thread's hold is still renewed"
    client.close()


def test_the_hold_of_an_ended_thread_is_released_by_whoever_kept_it(redis: RedisServer, name: str) -> None:
    """A worker thread acquires and returns its ``Held``, then ends. Nobody could release it
    (``NotHeldError`` from every thread) while it was renewed for as long as it was kept; now
    the thread that kept it may. Control: while the worker lives, another thread may not."""
    client = ferrolock.Client.connect(redis.url)
    lock = client.lock(name, ttl=5)
    kept: List[ferrolock.Held] = []
    go_on = threading.Event()

    def worker() -> None:
        kept.append(lock.acquire(wait=0))
        go_on.wait(10)

    t = threading.Thread(target=worker)
    t.start()
    try:
        while not kept:
            time.sleep(0.01)
        with pytest.raises(ferrolock.NotHeldError):
            kept[0].release()  # the worker still owns it
    finally:
        go_on.set()
        t.join(5)
    time.sleep(0.1)  # the thread's state (and its threading.local dicts) is cleared as it ends
    kept[0].release()
    assert client.inspect(name) is None
    client.close()


def test_holds_can_be_weakly_referenced(redis: RedisServer, client: ferrolock.Client, name: str) -> None:
    # (Neither Held nor AsyncHeld could: a registry of live holds, weakref.finalize, WeakSet.)
    import asyncio
    import weakref

    with client.lock(name, ttl=5) as held:
        ref = weakref.ref(held)
        assert ref() is held

    async def main() -> None:
        aclient = await ferrolock.AsyncClient.connect(redis.url)
        async with aclient.lock(name, ttl=5) as aheld:
            assert weakref.ref(aheld)() is aheld
        aclient.close()

    asyncio.run(main())


def test_a_transient_async_release_failure_keeps_the_level(servers: List[RedisServer], name: str) -> None:
    server = RedisServer()
    servers.append(server)

    async def main() -> None:
        client = await ferrolock.AsyncClient.connect(server.url, response_timeout=0.2)
        lock = client.lock(name, ttl=5)
        held = await lock.acquire()
        os.kill(server.proc.pid, signal.SIGSTOP)
        try:
            with pytest.raises(ferrolock.LockError) as e:
                await held.release()
        finally:
            os.kill(server.proc.pid, signal.SIGCONT)
        assert e.value.transient, e.value
        assert lock.held is held, "a transient failure must leave the level for a retry"
        try:
            await lock.release()  # the retry finds the level
        except ferrolock.LostError:
            pass
        assert lock.held is None

    asyncio.run(main())
