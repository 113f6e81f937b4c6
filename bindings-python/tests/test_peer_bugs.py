"""Regression tests for the peers' bugs B8 and B9 (../shared/RELIABILITY.md, "Known bugs of the peers").

B8 (redis/redis-py #656, #3535, #3540): the owner token lived in thread-local storage, so a release
from another thread failed, or failed with a misleading error. B9 (NoneGG/aredis #119): asyncio
tasks on one thread shared that thread-local token, so task A released task B's lock.

What the binding documents (bindings-python/README.md, "Owners"): a sync ``Lock`` is owned per
thread, an ``AsyncLock`` per task; releasing from a thread or task that does not hold it raises
``NotHeldError`` and deletes nothing; ``held.release()`` after the lease ran out raises
``LostError`` and deletes nothing of the next owner.

Already covered elsewhere, so not repeated here:
- B8, one ``Lock`` object, ``lock.release()`` and ``held.release()`` from another thread raise
  ``NotHeldError`` and the fence is unchanged: test_sync.py::test_release_from_another_thread_is_not_held_b8.
- B8 for tasks, same ``AsyncLock`` object from another task: test_async.py::test_task_cannot_release_another_tasks_hold.
- B9, one ``AsyncLock``, two tasks, expiry in between, A's ``lock.release()`` raises ``LostError``
  and inspect afterwards shows B's fence:
  test_async.py::test_b9_expired_task_release_fails_and_keeps_the_new_hold.

Added here: the error message (not only its type), owner/count/ttl unchanged (a re-entered hold, so
a wrong decrement would show even where nothing is deleted), releases through a *different* lock
object (same and other thread/task, other client, a stale ``Held`` of an earlier grant), B9 through
A's ``AsyncHeld`` object with B re-entered, the controls (B's hold is what inspect reports *before*
A's attempt; the owner's own release succeeds), and B9 for threads sharing one sync ``Lock``.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any, Awaitable, Callable, Dict, List, Optional

import pytest

import ferrolock
from conftest import RedisServer


@pytest.fixture
def client(redis: RedisServer) -> ferrolock.Client:
    return ferrolock.Client.connect(redis.url)


def run_async(redis: RedisServer, body: Callable[[ferrolock.AsyncClient], Awaitable[Any]]) -> Any:
    async def main() -> Any:
        client = await ferrolock.AsyncClient.connect(redis.url)
        return await asyncio.wait_for(body(client), 10)

    return asyncio.run(main())


def in_thread(fn: Callable[[], Any]) -> Any:
    """Run ``fn`` in a new thread and return its result (re-raising what it raised)."""
    out: Dict[str, Any] = {}

    def target() -> None:
        try:
            out["value"] = fn()
        except BaseException as e:  # noqa: BLE001 - re-raised in the caller's thread
            out["error"] = e

    t = threading.Thread(target=target)
    t.start()
    t.join(10)
    assert not t.is_alive(), "the thread did not finish"
    if "error" in out:
        raise out["error"]
    return out["value"]


def catch(call: Callable[[], Any]) -> Optional[BaseException]:
    try:
        call()
    except BaseException as e:  # noqa: BLE001 - returned for the asserts
        return e
    return None


def assert_not_held(e: Optional[BaseException], who: str) -> None:
    """Exactly ``NotHeldError`` (code 300, NOT_HELD), whose message names the thread/task as the
    reason, never a misleading "lost"/"expired"/"unlocked" (redis-py #3535/#3540)."""
    assert e is not None, "the release should have raised"
    assert type(e) is ferrolock.NotHeldError, repr(e)
    assert e.code == 300 and e.name == "NOT_HELD"
    msg = str(e).lower()
    assert who in msg, msg
    for misleading in ("lost", "expired", "unlocked", "no longer"):
        assert misleading not in msg, msg


def same_holder(a: Optional[ferrolock.LockInfo], b: Optional[ferrolock.LockInfo]) -> None:
    assert a is not None and b is not None
    assert (b.owner, b.fence, b.count) == (a.owner, a.fence, a.count)


# ---------------------------------------------------------------------------------------------
# B8: release from another thread / through another lock object
# ---------------------------------------------------------------------------------------------


def test_b08_other_thread_release_says_so_and_changes_nothing(client: ferrolock.Client, name: str) -> None:
    lock = client.lock(name, ttl=5)
    outer = lock.acquire()
    inner = lock.acquire()  # re-entered: a wrong decrement would show as count 1, not as a delete
    before = client.inspect(name)
    assert before is not None and before.count == 2 and before.fence == outer.fence

    errors = in_thread(lambda: [catch(lock.release), catch(inner.release), catch(outer.release)])

    for e in errors:
        assert_not_held(e, "thread")
    after = client.inspect(name)
    same_holder(before, after)
    assert after is not None and after.ttl is not None and after.ttl > 4  # not shortened either
    assert outer.state == "held" and inner.count == 2

    # Control: the same calls from the owning thread succeed, level by level.
    inner.release()
    info = client.inspect(name)
    assert info is not None and info.count == 1 and info.fence == before.fence
    lock.release()
    assert client.inspect(name) is None


def test_b08_other_lock_object_release_is_not_held_and_deletes_nothing(
    redis: RedisServer, client: ferrolock.Client, name: str
) -> None:
    # A stale Held from an earlier grant by a rival object (the closest thing to a stale token).
    rival = client.lock(name, ttl=5)
    stale = rival.acquire()
    stale.release()

    lock = client.lock(name, ttl=5)
    held = lock.acquire()
    before = client.inspect(name)
    assert before is not None and before.fence == held.fence > stale.fence

    other_client_lock = ferrolock.Client.connect(redis.url).lock(name, ttl=5)
    probed = client.lock(name, ttl=5)
    assert probed.try_acquire() is None  # this object now has an owner handle, but no hold
    attempts: List[Callable[[], Any]] = [
        client.lock(name, ttl=5).release,  # a fresh object, same client, same thread
        rival.release,  # the object that held it before
        probed.release,
        other_client_lock.release,
    ]
    for call in attempts:
        assert_not_held(catch(call), "thread")
        same_holder(before, client.inspect(name))
    e = catch(stale.release)  # the earlier grant's Held: already released
    assert type(e) is ferrolock.NotHeldError, repr(e)
    same_holder(before, client.inspect(name))
    for e in in_thread(lambda: [catch(client.lock(name, ttl=5).release), catch(rival.release)]):
        assert_not_held(e, "thread")
    same_holder(before, client.inspect(name))

    held.release()  # control: the owner's release works
    assert client.inspect(name) is None


def test_b08_other_async_lock_object_release_is_not_held(redis: RedisServer, name: str) -> None:
    async def body(client: ferrolock.AsyncClient) -> None:
        lock = client.lock(name, ttl=5)
        held = await lock.acquire()
        before = await client.inspect(name)
        assert before is not None and before.fence == held.fence

        rival = client.lock(name, ttl=5)
        with pytest.raises(ferrolock.NotHeldError) as same_task:
            await rival.release()  # same task, different object
        assert_not_held(same_task.value, "task")
        same_holder(before, await client.inspect(name))

        async def intruder() -> Optional[BaseException]:
            assert await rival.try_acquire() is None  # control: the lock is really taken
            try:
                await rival.release()
            except BaseException as e:  # noqa: BLE001 - returned for the asserts
                return e
            return None

        assert_not_held(await asyncio.create_task(intruder()), "task")
        same_holder(before, await client.inspect(name))

        await held.release()  # control: the owner's release works
        assert await client.inspect(name) is None

    run_async(redis, body)


# ---------------------------------------------------------------------------------------------
# B9: one lock object, two owners, the first one's lease runs out before it releases
# ---------------------------------------------------------------------------------------------


def test_b09_task_release_after_expiry_fails_and_new_holder_keeps_it(redis: RedisServer, name: str) -> None:
    async def body(client: ferrolock.AsyncClient) -> None:
        lock = client.lock(name, ttl=0.5, renew=False)  # one object for both tasks, no watchdog
        a_holds, b_holds, a_go, a_done, b_go = (asyncio.Event() for _ in range(5))
        seen: Dict[str, Any] = {}

        async def task_a() -> None:
            seen["a"] = await lock.acquire(wait=0)
            a_holds.set()
            await a_go.wait()
            try:
                await seen["a"].release()  # through A's own AsyncHeld, after its lease ran out
            except BaseException as e:  # noqa: BLE001 - checked below
                seen["a_release"] = e
            try:
                await lock.release()  # and through the shared object
            except BaseException as e:  # noqa: BLE001 - checked below
                seen["a_lock_release"] = e
            a_done.set()

        async def task_b() -> None:
            await a_holds.wait()
            b = await lock.acquire(wait=3)  # succeeds only once A's lease has run out
            await b.extend(5)  # B's own lease: long enough for the checks below
            seen["b"] = b
            seen["b_inner"] = await lock.acquire(wait=0)  # B re-enters: count 2
            b_holds.set()
            await b_go.wait()
            await seen["b_inner"].release()
            seen["b_after_inner"] = await client.inspect(name)
            await lock.release()

        ta, tb = asyncio.create_task(task_a()), asyncio.create_task(task_b())
        await a_holds.wait()
        info_a = await client.inspect(name)
        assert info_a is not None and info_a.fence == seen["a"].fence

        await b_holds.wait()
        a, b = seen["a"], seen["b"]
        # Control: before A tries, inspect reports B's hold (another owner token, a higher fence,
        # count 2), and A knows locally that its hold is gone.
        before = await client.inspect(name)
        assert before is not None
        assert before.owner != info_a.owner and before.fence == b.fence > a.fence and before.count == 2
        assert a.state == "lost" and a.lost

        a_go.set()
        await a_done.wait()
        e1, e2 = seen.get("a_release"), seen.get("a_lock_release")
        assert type(e1) is ferrolock.LostError, repr(e1)
        assert_not_held(e2, "task")  # the lost hold was forgotten: this task holds nothing now
        after = await client.inspect(name)
        same_holder(before, after)  # nothing deleted, B's count not decremented
        assert b.state == "held" and b.count == 2

        # Control: B's own releases succeed, level by level.
        b_go.set()
        await asyncio.gather(ta, tb)
        assert seen["b_after_inner"] is not None and seen["b_after_inner"].count == 1
        assert await client.inspect(name) is None
        assert b.state == "released"

    run_async(redis, body)


def test_b09_thread_release_after_expiry_fails_and_new_holder_keeps_it(client: ferrolock.Client, name: str) -> None:
    """B9 for threads: one sync Lock shared by two threads (the redis-py thread-local shape)."""
    lock = client.lock(name, ttl=0.5, renew=False)
    a_holds, a_go = threading.Event(), threading.Event()
    seen: Dict[str, Any] = {}

    def thread_a() -> None:  # stays alive until it has tried to release (thread ids are reused)
        seen["a"] = lock.acquire(wait=0)
        a_holds.set()
        a_go.wait(10)
        seen["a_release"] = catch(seen["a"].release)
        seen["a_lock_release"] = catch(lock.release)

    t = threading.Thread(target=thread_a)
    t.start()
    try:
        assert a_holds.wait(10)
        a = seen["a"]
        info_a = client.inspect(name)
        assert info_a is not None and info_a.fence == a.fence

        b = lock.acquire(wait=3)  # this thread: succeeds only once A's lease has run out
        b.extend(5)
        # Control: before A tries, inspect reports B's hold.
        before = client.inspect(name)
        assert before is not None and before.owner != info_a.owner and before.fence == b.fence > a.fence
        assert a.state == "lost"

        # A's Held released from B's thread: NotHeldError (B8), nothing deleted.
        assert_not_held(catch(a.release), "thread")
        same_holder(before, client.inspect(name))
    finally:
        a_go.set()
        t.join(10)
    assert not t.is_alive()
    assert type(seen["a_release"]) is ferrolock.LostError, repr(seen["a_release"])
    assert_not_held(seen["a_lock_release"], "thread")  # the lost hold was forgotten: A holds nothing now
    same_holder(before, client.inspect(name))
    assert b.state == "held"

    b.release()  # control: B's own release succeeds
    assert client.inspect(name) is None
