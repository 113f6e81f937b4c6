"""Fair mode from Python: threads (each with its own client) are served in arrival order, each
grant handed on by the previous holder's release with no try after it; asyncio tasks too."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import List, Tuple

import pytest

import ferrolock
from conftest import RedisServer, hold_key


def queue_len(redis: RedisServer, name: str) -> int:
    reply = redis.command("LLEN", hold_key(name) + ":queue")
    return int(reply.strip().lstrip(b":"))


def evalsha_calls(redis: RedisServer) -> int:
    info = redis.command("INFO", "commandstats").decode()
    for line in info.splitlines():
        if line.startswith("cmdstat_evalsha:"):
            return int(line.split("calls=")[1].split(",")[0])
    return 0


def handoff(redis: RedisServer, name: str, fair: bool, k: int = 4) -> Tuple[List[int], int]:
    """A holder, then ``k`` waiting threads started one after another; their order of grants and
    the EVALSHA calls from the holder's release on. Leases of 2 s: a longer one is handed over as
    a 2 s offer that the new holder's watchdog confirms with one more script call."""
    holder = ferrolock.Client.connect(redis.url).lock(name, ttl=2, fair=fair)
    held = holder.acquire(wait=0)
    order: List[int] = []
    threads = []
    for i in range(k):
        lock = ferrolock.Client.connect(redis.url).lock(name, ttl=2, fair=fair)

        def work(i: int = i, lock: ferrolock.Lock = lock) -> None:
            with lock.acquire(wait=20):
                order.append(i)
                time.sleep(0.005)

        t = threading.Thread(target=work)
        t.start()
        threads.append(t)
        deadline = time.monotonic() + 5
        if fair:
            while queue_len(redis, name) != i + 1:
                assert time.monotonic() < deadline, "the waiter never queued"
                time.sleep(0.002)
        else:
            time.sleep(0.1)
    before = evalsha_calls(redis)
    held.release()
    for t in threads:
        t.join(30)
    return order, evalsha_calls(redis) - before


def test_threads_are_served_in_arrival_order_without_another_try(redis: RedisServer, name: str) -> None:
    order, calls = handoff(redis, name, fair=True)
    assert order == [0, 1, 2, 3]
    assert calls == 5, f"{calls} scripts for 5 releases: a waiter tried again"
    # Control: without fair mode each grant costs its waiter a try after the release.
    _, calls = handoff(redis, name + ":control", fair=False)
    assert calls >= 9, f"control: {calls} scripts"


def test_async_tasks_take_turns(redis: RedisServer, name: str) -> None:
    async def main() -> List[int]:
        got: List[int] = []

        async def worker(i: int) -> None:
            lock = (await ferrolock.AsyncClient.connect(redis.url)).lock(name, ttl=10, fair=True)
            for _ in range(10):
                async with lock:
                    got.append(i)
                    await asyncio.sleep(0.001)

        await asyncio.gather(*(worker(i) for i in range(4)))
        return got

    got = asyncio.run(main())
    assert len(got) == 40
    repeats = sum(1 for a, b in zip(got[4:], got[5:]) if a == b)
    assert repeats == 0, f"a releaser barged ahead of the queue: {got}"


def test_fair_mode_is_refused_with_redlock(redis: RedisServer, name: str) -> None:
    redlock = ferrolock.Redlock.connect([redis.url])
    with pytest.raises(ferrolock.InvalidConfigError):
        redlock.lock(name, fair=True)
    redlock.lock(name, fair=False)  # control


def test_every_task_of_a_fair_lock_queues(redis: RedisServer, name: str) -> None:
    """Each task of one fair ``AsyncLock`` gets a core handle of its own: every one of them, not
    only the first, waits in the server's queue."""
    async def body() -> None:
        client = await ferrolock.AsyncClient.connect(redis.url)
        lock = client.lock(name, ttl=10, fair=True)
        held = await lock.acquire(wait=0)
        waiters = [asyncio.create_task(lock.acquire(wait=10)) for _ in range(2)]
        deadline = time.monotonic() + 5
        while queue_len(redis, name) != 2:
            assert time.monotonic() < deadline, f"queued: {queue_len(redis, name)} of 2 waiting tasks"
            await asyncio.sleep(0.005)
        await held.release()
        # In the order they are granted: the tasks may have queued in either order (one's first
        # try can find the channel subscribed by the other and queue first), and the second is
        # granted only when the first releases.
        for w in asyncio.as_completed(waiters):
            await (await w).release()  # the task has ended: its hold is whoever's kept it

    asyncio.run(asyncio.wait_for(body(), 20))


def test_a_cancelled_fair_acquire_leaves_the_queue(redis: RedisServer, name: str) -> None:
    """Cancelling an awaitable acquire stops the core's wait: a fair waiter leaves the server's
    queue at once, instead of staying in line (and taking the lock after the holder)."""
    async def body() -> None:
        client = await ferrolock.AsyncClient.connect(redis.url)
        holder = await client.lock(name, ttl=5, fair=True).acquire(wait=0)
        waiter = asyncio.create_task(client.lock(name, ttl=5, fair=True).acquire())
        deadline = time.monotonic() + 5
        while queue_len(redis, name) != 1:
            assert time.monotonic() < deadline, "the waiter never queued"
            await asyncio.sleep(0.005)
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        deadline = time.monotonic() + 3
        while queue_len(redis, name) != 0:
            assert time.monotonic() < deadline, "a cancelled waiter is still queued"
            await asyncio.sleep(0.01)
        await holder.release()

    asyncio.run(asyncio.wait_for(body(), 20))
