"""The sync ``Lock`` with its methods native (``NativeLockBase``, src/held.rs, since
2026-11-28): what a Python ``Lock`` did must still hold. Each thread's owner is found in the
lock's ``threading.local`` and made on the thread's first use; a thread that holds nothing cannot
release; a dropped ``Lock`` with holds is collected; ``Lock`` stays a subclassable Python class;
fork() and ``close()`` end it as before."""

from __future__ import annotations

import gc
import inspect
import os
import threading
import time
import weakref
from typing import Any, List, Optional

import pytest

import ferrolock
from conftest import RedisServer

LEASE = 0.6  # watchdog_ttl: renewed every 0.2 s while the hold lives
RUNS_OUT = 5 * LEASE


@pytest.fixture
def client(redis: RedisServer) -> ferrolock.Client:
    return ferrolock.Client.connect(redis.url)


def _in_thread(fn: Any) -> List[Any]:
    """Run ``fn`` in a new thread; its result or exception."""
    out: List[Any] = []

    def body() -> None:
        try:
            out.append(fn())
        except BaseException as e:  # noqa: BLE001 - returned for the asserts
            out.append(e)

    t = threading.Thread(target=body)
    t.start()
    t.join(30)
    assert len(out) == 1
    return out


def test_a_thread_that_holds_nothing_cannot_release(client: ferrolock.Client, name: str) -> None:
    lock = client.lock(name, ttl=5)
    held = lock.acquire()
    lock.acquire()  # two levels: nothing another thread does may take either
    for attempt in (lock.release, lambda: lock.__exit__(None, None, None), held.release):
        [e] = _in_thread(attempt)
        assert isinstance(e, ferrolock.NotHeldError), e
    assert _in_thread(lambda: lock.held) == [None]
    info = client.inspect(name)
    assert info is not None and info.count == 2 and held.count == 2 and held.state == "held"
    lock.release()
    lock.release()
    assert client.inspect(name) is None


def test_a_new_threads_owner_is_made_on_first_use(client: ferrolock.Client, name: str) -> None:
    """The first acquire in a thread makes that thread's owner (its own token): it contends
    with the constructing thread's hold, then re-enters its own."""
    lock = client.lock(name, ttl=5)
    mine = lock.acquire()
    [e] = _in_thread(lambda: lock.acquire(wait=0))
    assert isinstance(e, ferrolock.AcquireTimeoutError), e
    [e] = _in_thread(lock.try_acquire)
    assert e is None
    with lock:
        assert mine.count == 2  # this thread re-enters
    mine.release()

    def other() -> Any:
        with lock as outer:
            with lock as inner:
                assert inner.count == 2 and lock.held is inner
            info = client.inspect(name)
            assert info is not None and info.count == 1
            return info.owner, outer.fence

    [(owner, fence)] = _in_thread(other)
    assert client.inspect(name) is None and lock.held is None
    held = lock.acquire()
    info = client.inspect(name)
    assert info is not None and info.owner != owner, "two threads shared an owner token"
    assert held.fence > fence
    held.release()


def test_many_threads_contend_on_one_lock(client: ferrolock.Client, name: str) -> None:
    lock = client.lock(name, ttl=5)
    inside: List[int] = []
    overlaps: List[int] = []

    def body() -> None:
        for _ in range(20):
            with lock:
                inside.append(1)
                if len(inside) > 1:
                    overlaps.append(len(inside))
                time.sleep(0.001)
                inside.pop()

    threads = [threading.Thread(target=body) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert overlaps == [] and client.inspect(name) is None


def test_a_dropped_lock_with_holds_is_collected(redis: RedisServer, name: str) -> None:
    """A ``Lock`` dropped while this thread holds it, its ``Held`` dropped too and an
    ``on_lost`` callback closing a cycle back to the ``Lock``: the collector frees it all and the
    hold stops renewing (a ``Lock`` that hid its ``threading.local`` from the collector would keep
    it renewed for as long as the client lived)."""
    client = ferrolock.Client.connect(redis.url, watchdog_ttl=LEASE)
    lock: Optional[ferrolock.Lock] = client.lock(name)  # no ttl: renewed by the watchdog
    assert lock is not None
    ref = weakref.ref(lock)
    held: Optional[ferrolock.Held] = lock.acquire(wait=0)
    assert held is not None
    held.on_lost(lambda e, lk=lock: lk)  # the Lock's local -> owner -> Held -> callback -> Lock
    lock.acquire()  # a second level, no reference kept
    time.sleep(2 * LEASE)
    info = client.inspect(name)
    assert info is not None and info.count == 2, "the watchdog did not renew the hold"
    del lock, held
    gc.collect()
    assert ref() is None, "the dropped Lock was not collected"
    try:
        ferrolock.Client.connect(redis.url).lock(name, ttl=5).acquire(wait=RUNS_OUT).release()
    except ferrolock.AcquireTimeoutError:
        pytest.fail("a collected Lock's hold is still renewed")
    client.close()


def test_lock_is_a_subclassable_python_class(client: ferrolock.Client, name: str) -> None:
    lock = client.lock(name, ttl=5, wait=1)
    assert isinstance(lock, ferrolock.Lock) and type(lock) is ferrolock.Lock
    assert repr(lock) == f"<ferrolock.Lock name={name!r}>" and lock.name == name
    assert ferrolock.Lock.__module__ == "ferrolock._locks"
    lock.note = "instances keep a __dict__"  # type: ignore[attr-defined]
    assert weakref.ref(lock)() is lock
    assert list(inspect.signature(ferrolock.Lock).parameters) == ["native", "name", "ttl", "wait", "renew",
                                                                  "fair"]
    for method in ("acquire", "try_acquire", "release", "held", "name"):
        assert (getattr(ferrolock.Lock, method).__doc__ or "").strip(), method

    class Named(ferrolock.Lock):
        """A subclass with an ``__init__`` of its own, as a Python base class allows."""

        def __init__(self, client: ferrolock.Client, suffix: str) -> None:
            super().__init__(client._native, name + suffix, ttl=5)
            self.suffix = suffix

        def __repr__(self) -> str:
            return f"<Named {self.suffix}>"

    sub = Named(client, ":sub")
    assert isinstance(sub, ferrolock.Lock) and repr(sub) == "<Named :sub>"
    with sub as held:
        assert held.name == name + ":sub" and sub.held is held
    assert sub.held is None and client.inspect(name + ":sub") is None


def test_an_uninitialised_lock_raises_instead_of_crashing() -> None:
    lock = ferrolock.Lock.__new__(ferrolock.Lock)
    for call in (lock.acquire, lock.try_acquire, lock.release, lambda: lock.held, lambda: lock.name):
        with pytest.raises(TypeError, match="not initialised"):
            call()


def test_bad_arguments_raise_at_construction(client: ferrolock.Client, name: str) -> None:
    with pytest.raises(ferrolock.InvalidNameError):
        client.lock("")
    with pytest.raises(ferrolock.InvalidDurationError):
        client.lock(name, ttl=-1)
    with pytest.raises(TypeError):
        client.lock(name, renew="yes")  # type: ignore[arg-type]
    with pytest.raises(ferrolock.InvalidDurationError):
        client.lock(name, wait=-1)  # (it used to fail only at the first acquire)


def test_closed_client_ends_every_thread(client: ferrolock.Client, name: str) -> None:
    lock = client.lock(name, ttl=5)
    client.close()
    with pytest.raises(ferrolock.ClosedError):
        lock.acquire()
    [e] = _in_thread(lock.acquire)  # a new thread's first use makes a handle: the client is closed
    assert isinstance(e, ferrolock.ClosedError), e


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork")
def test_fork_child_cannot_use_the_parents_lock(client: ferrolock.Client, name: str) -> None:
    lock = client.lock(name, ttl=5)
    held = lock.acquire()
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            for attempt in (lock.acquire, lock.release, held.release):
                try:
                    attempt()
                    code |= 1
                except ferrolock.ClosedError:
                    pass
            [e] = _in_thread(lock.acquire)  # this thread's first use in the child
            if not isinstance(e, ferrolock.ClosedError):
                code |= 2
        except BaseException:  # noqa: BLE001
            code |= 4
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.WEXITSTATUS(status) == 0
    info = client.inspect(name)
    assert info is not None and info.count == 1 and held.state == "held"
    held.release()


def test_acquire_reads_wait_as_a_python_method_would(client: ferrolock.Client, name: str) -> None:
    """``acquire``'s one argument, native: positional or keyword, ``None`` meaning the lock's own
    ``wait``, and a ``TypeError`` for the rest, as a Python method would."""
    lock = client.lock(name, ttl=5, wait=0.05)
    held = _in_thread(lambda: client.lock(name, ttl=5).acquire())[0]
    assert isinstance(held, ferrolock.Held)
    for call in (lock.acquire, lambda: lock.acquire(None), lambda: lock.acquire(wait=None),
                 lambda: lock.acquire(0.05), lambda: lock.acquire(wait=0.05), lambda: lock.acquire(**{})):
        t0 = time.monotonic()
        with pytest.raises(ferrolock.AcquireTimeoutError):
            call()  # None is the lock's wait (0.05 s), not "unbounded"
        assert time.monotonic() - t0 < 2
    with pytest.raises(TypeError, match="positional argument"):
        lock.acquire(1, 2)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="unexpected keyword argument 'timeout'"):
        lock.acquire(timeout=1)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="unexpected keyword argument 'x'"):
        lock.acquire(wait=1, x=2)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="multiple values"):
        lock.acquire(1, wait=2)  # type: ignore[misc]
    with pytest.raises(ferrolock.InvalidDurationError):
        lock.acquire(wait=-1)
    assert list(inspect.signature(lock.acquire).parameters) == ["wait"]
