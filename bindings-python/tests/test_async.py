"""The behaviour scenarios with the asyncio API (each test runs its own event loop)."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any, Awaitable, Callable, List, Optional

import pytest

import ferrolock
from conftest import RedisServer, hold_key


def run(redis: RedisServer, body: Callable[[ferrolock.AsyncClient], Awaitable[Any]]) -> Any:
    async def main() -> Any:
        client = await ferrolock.AsyncClient.connect(redis.url)
        return await asyncio.wait_for(body(client), 20)

    return asyncio.run(main())


def test_async_with_and_reentry(redis: RedisServer, name: str) -> None:
    async def body(client: ferrolock.AsyncClient) -> None:
        lock = client.lock(name, ttl=5)
        async with lock as outer:
            async with lock as inner:  # same task: re-entry
                assert inner.count == 2 and inner.fence == outer.fence
            assert outer.count == 1
            info = await client.inspect(name)
            assert info is not None and info.count == 1
        assert outer.state == "released"
        assert await client.inspect(name) is None

    run(redis, body)


def test_other_task_contends(redis: RedisServer, name: str) -> None:
    async def body(client: ferrolock.AsyncClient) -> None:
        lock = client.lock(name, ttl=5)
        held = await lock.acquire()

        async def other() -> Optional[ferrolock.AsyncHeld]:
            return await lock.try_acquire()

        assert await asyncio.create_task(other()) is None  # same object, another task
        with pytest.raises(ferrolock.AcquireTimeoutError):
            await asyncio.create_task(lock.acquire(wait=0.2))
        await held.release()

    run(redis, body)


def test_task_cannot_release_another_tasks_hold(redis: RedisServer, name: str) -> None:
    async def body(client: ferrolock.AsyncClient) -> None:
        lock = client.lock(name, ttl=5)
        held = await lock.acquire()

        async def intruder() -> List[type]:
            errs: List[type] = []
            for call in (lock.release, held.release):
                try:
                    await call()
                except ferrolock.LockError as e:
                    errs.append(type(e))
            return errs

        assert await asyncio.create_task(intruder()) == [ferrolock.NotHeldError] * 2
        info = await client.inspect(name)
        assert info is not None and info.fence == held.fence
        await held.release()

    run(redis, body)


def test_the_hold_of_an_ended_task_is_released_by_whoever_kept_it(redis: RedisServer, name: str) -> None:
    # A hold acquired in a task of its own and returned (create_task, or asyncio.wait_for's
    # inner task on Python 3.11): the task has ended, so the task that kept the hold may release
    # it. It got NotHeldError, and the hold was renewed for as long as it was kept.
    async def body(client: ferrolock.AsyncClient) -> None:
        lock = client.lock(name, ttl=5)
        held = await asyncio.create_task(lock.acquire())
        await held.release()
        assert await client.inspect(name) is None

    run(redis, body)


def test_b9_expired_task_release_fails_and_keeps_the_new_hold(redis: RedisServer, name: str) -> None:
    """One lock object shared by two tasks with expiry in between: A's release must fail."""

    async def body(client: ferrolock.AsyncClient) -> None:
        lock = client.lock(name, ttl=0.3, renew=False)
        a_has_it = asyncio.Event()
        b_has_it = asyncio.Event()
        out: dict = {}

        async def task_a() -> None:
            await lock.acquire()
            a_has_it.set()
            await b_has_it.wait()
            try:
                await lock.release()
            except ferrolock.LockError as e:
                out["a"] = e

        async def task_b() -> None:
            await a_has_it.wait()
            held = await lock.acquire(wait=2)  # after A's lease ran out
            out["b_fence"] = held.fence
            b_has_it.set()
            await asyncio.sleep(0.1)
            info = await client.inspect(name)
            out["after"] = info
            await held.release()

        await asyncio.gather(task_a(), task_b())
        assert isinstance(out["a"], ferrolock.LostError)
        assert out["after"] is not None and out["after"].fence == out["b_fence"]

    run(redis, body)


def test_event_loop_not_blocked(redis: RedisServer, name: str) -> None:
    async def body(client: ferrolock.AsyncClient) -> None:
        holder = await client.lock(name, ttl=5).acquire()
        ticks = 0

        async def ticker() -> None:
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0.01)

        t = asyncio.create_task(ticker())

        async def waiter() -> None:
            with pytest.raises(ferrolock.AcquireTimeoutError):
                await client.lock(name, ttl=5).acquire(wait=0.5)

        await asyncio.create_task(waiter())
        t.cancel()
        assert ticks >= 20, ticks
        await holder.release()

    run(redis, body)


def test_a_cancelled_release_still_releases(redis: RedisServer, name: str) -> None:
    async def body(client: ferrolock.AsyncClient) -> None:
        lock = client.lock(name, ttl=10)
        releasing = asyncio.Event()
        seen: List[Any] = []

        async def holder() -> None:
            held = await lock.acquire()
            seen.append(held)
            # The release script is held back until the cancel has landed (unpaused below).
            redis.command("CLIENT", "PAUSE", "10000", "WRITE")
            releasing.set()
            try:
                await held.release()
            except asyncio.CancelledError:
                seen.append(lock.held)  # this task holds nothing any more
                raise

        task = asyncio.create_task(holder())
        await releasing.wait()
        await asyncio.sleep(0.05)
        task.cancel()
        try:
            with pytest.raises(asyncio.CancelledError):
                await task
        finally:
            redis.command("CLIENT", "UNPAUSE")
        assert seen[1:] == [None]
        deadline = time.monotonic() + 3
        while await client.inspect(name) is not None and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        # Before: the release was dropped after it was sent, the guard read released, and the
        # key stayed for the rest of its 10 s lease.
        assert await client.inspect(name) is None, "a cancelled release left the lock taken"
        assert seen[0].state == "released"

    run(redis, body)


def test_a_release_cancelled_before_it_started_still_releases(redis: RedisServer, name: str) -> None:
    # The cancel lands before the runtime first polls the release: it used to abort the release
    # unstarted, leaving the hold taken and renewed by the watchdog for as long as it lived.
    async def body(client: ferrolock.AsyncClient) -> None:
        lock = client.lock(name)  # watchdog-renewed
        for _ in range(200):  # the window is a few microseconds wide: 14-56 % of tries hit it
            ready = asyncio.Event()
            box: List[Any] = []

            async def worker() -> None:
                held = await lock.acquire()
                box.append(held)
                ready.set()
                await held.release()  # no await before it: the cancel comes at this one

            task = asyncio.create_task(worker())
            await ready.wait()
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            deadline = time.monotonic() + 3
            while await client.inspect(name) is not None and time.monotonic() < deadline:
                await asyncio.sleep(0.01)
            assert await client.inspect(name) is None, "a cancelled release left the lock taken"
            assert box[0].state == "released"

    run(redis, body)


def test_a_release_retried_after_a_cancel_reports_the_first(redis: RedisServer, name: str) -> None:
    # A release given up on and called again is told how the first one ended (the retry used to
    # raise NotHeldError while that release was still on its way, and could yet fail).
    async def body(client: ferrolock.AsyncClient) -> None:
        lock = client.lock(name, ttl=10)
        box: List[Any] = []

        async def holder() -> None:
            box.append(await lock.acquire())
            redis.command("CLIENT", "PAUSE", "10000", "WRITE")  # holds the release back
            await box[0].release()

        task = asyncio.create_task(holder())
        try:
            while not box:
                await asyncio.sleep(0.01)
            await asyncio.sleep(0.05)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            # The holding task has ended: anyone may release its hold.
            retry = asyncio.ensure_future(box[0].release())
            await asyncio.sleep(0.1)
            assert not retry.done(), "the retry did not wait for the release on its way"
        finally:
            redis.command("CLIENT", "UNPAUSE")
        assert await retry is None
        with pytest.raises(ferrolock.NotHeldError):
            await box[0].release()
        assert await client.inspect(name) is None

    run(redis, body)


def test_cancelled_acquire_leaves_nothing(redis: RedisServer, name: str) -> None:
    async def body(client: ferrolock.AsyncClient) -> None:
        holder = await client.lock(name, ttl=5).acquire()
        waiter = asyncio.create_task(client.lock(name, ttl=5).acquire())
        await asyncio.sleep(0.1)
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        await holder.release()
        await asyncio.sleep(0.2)
        assert await client.inspect(name) is None  # the cancelled waiter took nothing
        # Cancel in flight many times: no ghost hold may remain.
        for _ in range(30):
            t = asyncio.create_task(client.lock(name, ttl=5).acquire())
            await asyncio.sleep(0)
            t.cancel()
            try:
                held = await t
                await held.release()
            except asyncio.CancelledError:
                pass
        deadline = time.monotonic() + 2
        while await client.inspect(name) is not None and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        assert await client.inspect(name) is None

    run(redis, body)


def test_async_extend_and_expire(redis: RedisServer, name: str) -> None:
    async def body(client: ferrolock.AsyncClient) -> None:
        held = await client.lock(name, ttl=0.3).acquire()
        await held.extend(1.0)
        await asyncio.sleep(0.4)
        assert held.state == "held"
        await held.release()
        short = await client.lock(name, ttl=0.2).acquire()
        await asyncio.sleep(0.3)
        assert short.lost
        with pytest.raises(ferrolock.LostError):
            await short.extend(1)

    run(redis, body)


def test_async_lost_lock(redis: RedisServer, name: str) -> None:
    async def body(client: ferrolock.AsyncClient) -> None:
        fired = threading.Event()
        held = await client.lock(name, ttl=0.6, renew=True).acquire()
        held.on_lost(lambda err: fired.set())
        redis.command("DEL", hold_key(name))
        deadline = time.monotonic() + 3
        while not fired.is_set() and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        assert fired.is_set() and held.lost
        with pytest.raises(ferrolock.LostError):
            held.ensure()

    run(redis, body)


def test_async_fences_increase(redis: RedisServer, name: str) -> None:
    async def body(client: ferrolock.AsyncClient) -> None:
        lock = client.lock(name, ttl=5)
        fences: List[int] = []

        async def worker() -> None:
            for _ in range(5):
                async with lock as held:
                    fences.append(held.fence)
                    await asyncio.sleep(0.001)

        await asyncio.gather(*(worker() for _ in range(4)))  # 4 tasks contend on one object
        assert len(fences) == 20
        assert all(a < b for a, b in zip(fences, fences[1:]))

    run(redis, body)


def test_async_decorator(redis: RedisServer, name: str) -> None:
    async def body(client: ferrolock.AsyncClient) -> None:
        inside = 0
        peak = 0

        @client.locked(name, ttl=5)
        async def critical() -> None:
            nonlocal inside, peak
            inside += 1
            peak = max(peak, inside)
            await asyncio.sleep(0.01)
            inside -= 1

        await asyncio.gather(*(critical() for _ in range(5)))
        assert peak == 1

    run(redis, body)


def test_sync_client_decorates_async_functions(redis: RedisServer, name: str) -> None:
    client = ferrolock.Client.connect(redis.url)

    @client.locked(name, ttl=5)
    async def critical() -> int:
        info = client.inspect(name)  # a blocking call is fine here: it is a test
        return info.count if info else 0

    assert asyncio.run(critical()) == 1


def test_cancelled_as_the_grant_arrives_leaves_no_hold(redis: RedisServer, name: str) -> None:
    # The grant is delivered (the native future has its result) but the task is cancelled before
    # it resumes, as asyncio.wait_for can do: the grant must be handed back, not left to its lease.
    async def body(client: ferrolock.AsyncClient) -> None:
        task = asyncio.create_task(client.lock(name, ttl=10).acquire())
        await asyncio.sleep(0)  # the task starts and waits for the native acquire
        time.sleep(0.3)  # block the loop: the grant is queued for it meanwhile
        await asyncio.sleep(0)  # the loop sets the result; the task is scheduled, not yet run
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        # Without the hand-back this times out: the grant holds the lock for its 10 s lease.
        other = await client.lock(name, ttl=5).acquire(wait=2)
        await other.release()

    run(redis, body)


def test_a_grant_its_closed_loop_never_receives_is_released(redis: RedisServer, name: str) -> None:
    # An awaitable acquire still waiting when its event loop is closed (a loop in a thread torn
    # down, or left with tasks pending): the core keeps waiting and takes the lock once it is
    # free, and the grant cannot reach the closed loop. It used to be dropped, which only stops
    # renewal: the lock stayed taken by nobody for its whole lease (30 s here). It is released.
    holder = ferrolock.Client.connect(redis.url)
    held = holder.lock(name).acquire(wait=0)
    loop = asyncio.new_event_loop()

    async def start() -> "asyncio.Future[Any]":
        client = await ferrolock.AsyncClient.connect(redis.url)
        task = asyncio.ensure_future(client.lock(name).acquire())
        await asyncio.sleep(0.3)  # waiting on the holder
        return task

    loop.run_until_complete(start())
    loop.close()
    first = held.fence
    held.release()
    # The waiting acquire takes the lock (a fence above the holder's); then it must be handed
    # back, not kept for its 30 s lease.
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        info = holder.inspect(name)
        if info is not None and info.fence > first:
            break
        time.sleep(0.005)
    while holder.inspect(name) is not None and time.monotonic() < deadline:
        time.sleep(0.05)
    info = holder.inspect(name)
    assert info is None, f"a grant nobody received holds the lock for its lease: {info}"
    holder.close()


def test_async_decorator_passes_ttl_and_wait(redis: RedisServer, name: str) -> None:
    async def body(client: ferrolock.AsyncClient) -> None:
        @client.locked(name, ttl=2, wait=0.2)
        async def critical() -> Optional[float]:
            info = await client.inspect(name)
            return info.ttl if info else None

        ttl = await critical()
        assert ttl is not None and 0 < ttl <= 2  # the given lease, not the 30 s watchdog one
        holder = await client.lock(name, ttl=5).acquire(wait=0)
        with pytest.raises(ferrolock.AcquireTimeoutError):
            await asyncio.wait_for(critical(), 5)  # a call that ignored wait=0.2 times out here
        await holder.release()

    run(redis, body)


def test_async_with_releases_when_the_body_raises(redis: RedisServer, name: str) -> None:
    async def body(client: ferrolock.AsyncClient) -> None:
        lock = client.lock(name, ttl=5)
        with pytest.raises(ZeroDivisionError):
            async with lock as held:
                async with lock:
                    1 / 0
        assert held.state == "released" and lock.held is None
        assert await client.inspect(name) is None

    run(redis, body)


def test_a_released_async_hold_is_not_lost(redis: RedisServer, name: str) -> None:
    async def body(client: ferrolock.AsyncClient) -> None:
        held = await client.lock(name, ttl=5).acquire()
        await held.release()
        assert held.state == "released" and not held.lost

    run(redis, body)
