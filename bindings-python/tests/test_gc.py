"""A hold that is garbage-collected without release stops renewing and its lease runs out (README,
DESIGN §6), also when an ``on_lost`` callback refers back to the hold: the callable belongs to the
native guard, where the cycle collector sees it (``__traverse__``/``__clear__``), not to a closure
inside the Rust core, where a bound method of the object holding the hold made a cycle nothing
could collect (the hold was renewed for as long as the client lived)."""

from __future__ import annotations

import asyncio
import gc
import threading
import time
import weakref
from typing import Any, List, Optional

import pytest

import ferrolock
from conftest import RedisServer, hold_key

LEASE = 0.6  # watchdog_ttl: renewed every 0.2 s while referenced
RUNS_OUT = 5 * LEASE  # how long another client may wait for the collected hold's lease to end


class Worker:
    """The everyday shape of the cycle: an object that keeps its hold and registers its own bound
    method (worker -> held -> native guard -> callback -> worker)."""

    def __init__(self, held: Any, callback: str, lost: List[Any]) -> None:
        self.held = held
        self.lost = lost
        if callback == "bound_method":
            held.on_lost(self.on_lost)
        elif callback == "lambda":
            held.on_lost(lambda err: lost.append((held, err)))  # closes over the hold itself
        else:
            assert callback == "none"

    def on_lost(self, err: ferrolock.LockError) -> None:
        self.lost.append(err)


def assert_taken_once_run_out(redis: RedisServer, name: str, after: str) -> None:
    """Another client gets ``name`` within ``RUNS_OUT``: nothing renews it any more."""
    other = ferrolock.Client.connect(redis.url)
    try:
        held = other.lock(name, ttl=5).acquire(wait=RUNS_OUT)
    except ferrolock.AcquireTimeoutError:
        pytest.fail(f"still held {RUNS_OUT} s after {after} (info {other.inspect(name)!r})")
    held.release()
    other.close()


def assert_renewed_then_collected(redis: RedisServer, name: str, make: Any, lost: List[Any]) -> None:
    """``make()`` acquires ``name`` (watchdog lease ``LEASE``) and returns the one reference to
    the object keeping the hold; it is dropped and collected, then another client must get the
    lock once the lease has run out."""
    worker: Optional[Worker] = make()
    assert worker is not None
    ref = weakref.ref(worker)
    time.sleep(2 * LEASE)  # past the first lease: only the watchdog keeps it
    info = ferrolock.Client.connect(redis.url).inspect(name)
    assert info is not None and info.fence == worker.held.fence, "the watchdog did not renew the hold"
    del worker
    gc.collect()
    assert_taken_once_run_out(redis, name, "the hold was collected: renewed after GC")
    assert ref() is None, "the object holding the hold was not collected"
    assert lost == [], "a collected hold's on_lost callback ran"


@pytest.mark.parametrize("callback", ["none", "bound_method", "lambda"])
def test_collected_hold_with_on_lost_cycle_stops_renewing(redis: RedisServer, name: str,
                                                          callback: str) -> None:
    # "none" is the control: the same hold without a callback.
    client = ferrolock.Client.connect(redis.url, watchdog_ttl=LEASE)  # alive for the whole test
    lost: List[Any] = []

    def make() -> Worker:
        return Worker(client.lock(name).acquire(wait=0), callback, lost)

    assert_renewed_then_collected(redis, name, make, lost)
    client.close()


@pytest.mark.parametrize("callback", ["none", "bound_method"])
def test_collected_async_hold_with_on_lost_cycle_stops_renewing(redis: RedisServer, name: str,
                                                                callback: str) -> None:
    lost: List[Any] = []
    holders: List[Worker] = []
    ready, done = threading.Event(), threading.Event()

    async def body() -> None:
        client = await ferrolock.AsyncClient.connect(redis.url, watchdog_ttl=LEASE)
        holders.append(Worker(await client.lock(name).acquire(wait=0), callback, lost))
        ready.set()
        while not done.is_set():  # the client stays open (and its watchdog running) meanwhile
            await asyncio.sleep(0.02)
        client.close()

    loop_thread = threading.Thread(target=asyncio.run, args=(body(),))
    loop_thread.start()
    try:
        assert ready.wait(5)
        assert_renewed_then_collected(redis, name, holders.pop, lost)
    finally:
        done.set()
        loop_thread.join(5)


def test_on_lost_cycle_still_fires_while_referenced(redis: RedisServer, name: str) -> None:
    """The callable held by the guard is still called once, with a ``LostError``, when the
    referenced hold is lost (here: its key deleted behind its back); a collection meanwhile does
    not take it."""
    client = ferrolock.Client.connect(redis.url, watchdog_ttl=LEASE)
    lost: List[Any] = []
    worker = Worker(client.lock(name).acquire(wait=0), "bound_method", lost)
    gc.collect()
    assert redis.command("DEL", hold_key(name)).startswith(b":1")
    deadline = time.monotonic() + 3
    while not lost and time.monotonic() < deadline:
        time.sleep(0.02)
    time.sleep(0.2)
    assert len(lost) == 1 and isinstance(lost[0], ferrolock.LostError)
    assert worker.held.lost
    worker.held.on_lost(worker.on_lost)  # already lost: called at once
    deadline = time.monotonic() + 3
    while len(lost) < 2 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert len(lost) == 2 and isinstance(lost[1], ferrolock.LostError)
    client.close()


def _runs_out_without_the_collector(redis: RedisServer, name: str, end_owner: Any) -> None:
    """``end_owner()`` takes ``name`` (watchdog lease ``LEASE``) and ends whatever owns the
    hold, keeping no reference to it. With the cycle collector off, the hold must stop renewing
    at once (reference counts alone free it): another client gets the lock once the lease ran
    out. Before, a hold referred back to its owner, and the cycle kept renewing it until the
    collector ran; with it off, for good."""
    gc.disable()
    try:
        end_owner()
        assert_taken_once_run_out(redis, name, "its owner ended, with no collection: still renewed")
    finally:
        gc.enable()


def test_the_hold_of_an_ended_thread_stops_renewing_without_the_collector(redis: RedisServer, name: str) -> None:
    client = ferrolock.Client.connect(redis.url, watchdog_ttl=LEASE)
    lock = client.lock(name)  # kept: only the thread ends

    def end_owner() -> None:
        t = threading.Thread(target=lambda: lock.acquire(wait=0))  # ends holding
        t.start()
        t.join()
        time.sleep(2 * LEASE)  # the watchdog would have renewed it twice by now
    _runs_out_without_the_collector(redis, name, end_owner)
    # Control: a live thread's hold, not referenced either, is still renewed (its Lock keeps it).
    lock.acquire(wait=0)
    time.sleep(2 * LEASE)
    assert client.inspect(name) is not None
    lock.release()
    client.close()


def test_the_hold_of_a_dropped_lock_stops_renewing_without_the_collector(redis: RedisServer, name: str) -> None:
    client = ferrolock.Client.connect(redis.url, watchdog_ttl=LEASE)

    def end_owner() -> None:
        client.lock(name).acquire(wait=0)  # neither the Lock nor the Held kept
        time.sleep(2 * LEASE)
    _runs_out_without_the_collector(redis, name, end_owner)
    # A Held kept after its Lock was dropped: renewed, and its own thread may still release it.
    held = client.lock(name).acquire(wait=0)
    time.sleep(2 * LEASE)
    assert client.inspect(name) is not None
    errors: List[BaseException] = []

    def other_thread() -> None:
        try:
            held.release()
        except ferrolock.NotHeldError as e:
            errors.append(e)
    t = threading.Thread(target=other_thread)
    t.start()
    t.join()
    assert len(errors) == 1, "another thread released a hold whose Lock was dropped"
    held.release()
    assert client.inspect(name) is None
    client.close()


def test_the_hold_of_an_ended_task_stops_renewing_without_the_collector(redis: RedisServer, name: str) -> None:
    done = threading.Event()

    async def body() -> None:
        client = await ferrolock.AsyncClient.connect(redis.url, watchdog_ttl=LEASE)
        lock = client.lock(name)

        async def take() -> None:
            await lock.acquire(wait=0)  # the task ends holding

        await asyncio.create_task(take())
        while not done.is_set():  # the client and the Lock stay; only the task is gone
            await asyncio.sleep(0.02)
        client.close()

    loop_thread = threading.Thread(target=asyncio.run, args=(body(),))

    def end_owner() -> None:
        loop_thread.start()
        time.sleep(2 * LEASE)
    try:
        _runs_out_without_the_collector(redis, name, end_owner)
    finally:
        done.set()
        loop_thread.join(5)


# "Garbage collection never releases a lock" from the other side: the tests above bound how late
# a dropped hold frees the lock; these check it is not freed early (deleted in Redis at the
# drop), which they could not see (mutation review of the bindings). Go and Node test the same.
DROP_TTL = 4.0  # a fixed lease: "still taken 0.5 s after the drop" is unambiguous


def test_a_dropped_hold_is_not_released(redis: RedisServer, name: str) -> None:
    client = ferrolock.Client.connect(redis.url)
    lock = client.lock(name, ttl=DROP_TTL, renew=False)
    fence: List[int] = []
    t = threading.Thread(target=lambda: fence.append(lock.acquire().fence))  # nobody keeps the Held
    t.start()
    t.join()
    gc.collect()
    time.sleep(0.5)  # a release at the drop would have landed by now
    info = client.inspect(name)
    assert info is not None and info.fence == fence[0], "a dropped Held released the lock in Redis"
    client.close()


def test_a_dropped_async_hold_is_not_released(redis: RedisServer, name: str) -> None:
    async def body() -> None:
        client = await ferrolock.AsyncClient.connect(redis.url)
        lock = client.lock(name, ttl=DROP_TTL, renew=False)

        async def take() -> int:
            return (await lock.acquire()).fence  # the task ends holding; the AsyncHeld is dropped

        fence = await asyncio.create_task(take())
        gc.collect()
        await asyncio.sleep(0.5)
        info = await client.inspect(name)
        assert info is not None and info.fence == fence, "a dropped AsyncHeld released the lock in Redis"
        client.close()

    asyncio.run(body())
