"""The shared behaviour scenarios with the sync API, against a real redis-server."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import threading
import time
from datetime import timedelta
from typing import AsyncIterator, Callable, Iterator, List, Tuple

import pytest

import ferrolock
from conftest import RedisServer, hold_key


@pytest.fixture
def client(redis: RedisServer) -> ferrolock.Client:
    return ferrolock.Client.connect(redis.url)


def test_acquire_release_and_inspect(client: ferrolock.Client, name: str) -> None:
    lock = client.lock(name, ttl=5)
    with lock as held:
        assert held.count == 1
        assert held.state == "held" and not held.lost
        assert 4 < held.remaining() <= 5
        info = client.inspect(name)
        assert info is not None and info.fence == held.fence and info.count == 1
    assert held.state == "released"
    assert held.remaining() == 0
    assert client.inspect(name) is None


def test_contend_between_clients(redis: RedisServer, client: ferrolock.Client, name: str) -> None:
    other = ferrolock.Client.connect(redis.url)
    held = client.lock(name, ttl=5).acquire()
    rival = other.lock(name, ttl=5)
    assert rival.try_acquire() is None
    with pytest.raises(ferrolock.AcquireTimeoutError) as e:
        rival.acquire(wait=0.2)
    assert isinstance(e.value, TimeoutError) and e.value.code == 302
    got: List[int] = []

    def waiter() -> None:
        with rival.acquire(wait=5) as h:
            got.append(h.fence)

    t = threading.Thread(target=waiter)
    t.start()
    time.sleep(0.1)
    held.release()
    t.join(5)
    assert got and got[0] > held.fence  # woken by the release, with a higher fence


def test_other_threads_contend_same_thread_reenters(client: ferrolock.Client, name: str) -> None:
    lock = client.lock(name, ttl=5)
    with lock as outer:
        with lock as inner:  # same thread: re-entry, like threading.RLock
            assert inner.count == 2 and inner.fence == outer.fence
            info = client.inspect(name)
            assert info is not None and info.count == 2
        assert outer.count == 1
        seen: List[object] = []
        t = threading.Thread(target=lambda: seen.append(lock.try_acquire()))
        t.start()
        t.join()
        assert seen == [None]  # another thread contends, never shares the hold
    assert client.inspect(name) is None


def test_release_from_another_thread_is_not_held_b8(client: ferrolock.Client, name: str) -> None:
    lock = client.lock(name, ttl=5)
    held = lock.acquire()
    errors: List[BaseException] = []

    def other() -> None:
        for call in (lock.release, held.release):
            try:
                call()
            except BaseException as e:  # noqa: BLE001 - collected for the asserts
                errors.append(e)

    t = threading.Thread(target=other)
    t.start()
    t.join()
    assert [type(e) for e in errors] == [ferrolock.NotHeldError, ferrolock.NotHeldError]
    info = client.inspect(name)
    assert info is not None and info.fence == held.fence  # nothing was deleted
    held.release()


def test_a_later_thread_with_the_same_ident_does_not_own_a_hold(client: ferrolock.Client, name: str) -> None:
    # The OS gives an ended thread's ident to the next thread (here almost every time): owning a
    # hold used to mean having its ident. The later thread does not own the dead thread's hold:
    # `lock.held` is None there and its acquire contends instead of re-entering. (It may release
    # the `Held` it was handed, as any thread may once the acquiring thread has ended.)
    lock = client.lock(name, ttl=5)
    for _ in range(20):
        box: List[object] = []
        a = threading.Thread(target=lambda: box.append((threading.get_ident(), lock.acquire())))
        a.start()
        a.join()
        ident, held = box[0]
        assert isinstance(held, ferrolock.Held)

        def b() -> None:
            box.append(threading.get_ident())
            box.append(lock.held)
            try:
                lock.acquire(wait=0)
                box.append("re-entered")
            except ferrolock.AcquireTimeoutError:
                box.append("contended")

        t = threading.Thread(target=b)
        t.start()
        t.join()
        same = box[1] == ident
        assert box[2] is None, f"a later thread sees a dead thread's hold as its own (same ident: {same})"
        assert box[3] == "contended", f"a later thread re-entered a dead thread's hold (same ident: {same})"
        held.release()
        assert client.inspect(name) is None


def test_a_release_interrupted_by_a_signal_still_releases(
    redis: RedisServer, client: ferrolock.Client, name: str
) -> None:
    lock = client.lock(name, ttl=10)
    held = lock.acquire()
    # Ctrl-C's Python behaviour for this test: a process started with SIGINT ignored (a
    # background job of a non-interactive shell, as some CI runners start their steps) keeps it
    # ignored, and the signal below would never interrupt anything.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    # The release script is held back until the interrupt has landed (unpaused below).
    redis.command("CLIENT", "PAUSE", "10000", "WRITE")
    try:
        threading.Timer(0.1, os.kill, (os.getpid(), signal.SIGINT)).start()
        with pytest.raises(KeyboardInterrupt):
            held.release()
    finally:
        redis.command("CLIENT", "UNPAUSE")
        if previous is not None:  # None: a handler not set from Python, which cannot be put back
            signal.signal(signal.SIGINT, previous)
    assert lock.held is None
    deadline = time.monotonic() + 3
    while client.inspect(name) is not None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert client.inspect(name) is None, "an interrupted release left the lock taken"
    assert held.state == "released"


def test_double_release_is_not_held(client: ferrolock.Client, name: str) -> None:
    lock = client.lock(name, ttl=5)
    held = lock.acquire()
    held.release()
    with pytest.raises(ferrolock.NotHeldError):
        held.release()
    with pytest.raises(ferrolock.NotHeldError):
        lock.release()


def test_expire_then_release_is_lost(redis: RedisServer, client: ferrolock.Client, name: str) -> None:
    held = client.lock(name, ttl=0.3).acquire()
    time.sleep(0.45)
    assert held.state == "lost" and held.lost
    with pytest.raises(ferrolock.LostError):
        held.ensure()
    other = ferrolock.Client.connect(redis.url).lock(name, ttl=5)
    taken = other.acquire(wait=1)
    with pytest.raises(ferrolock.LostError):
        held.release()  # must not delete the new owner's hold
    info = client.inspect(name)
    assert info is not None and info.fence == taken.fence
    taken.release()


def test_extend(client: ferrolock.Client, name: str) -> None:
    held = client.lock(name, ttl=0.5).acquire()
    held.extend(timedelta(seconds=2))
    assert held.remaining() > 1.5
    time.sleep(0.7)
    assert held.state == "held"
    with pytest.raises(ferrolock.InvalidDurationError):
        held.extend(-1)
    held.release()
    with pytest.raises(ferrolock.NotHeldError):
        held.extend(1)


def test_watchdog_keeps_the_lock(client: ferrolock.Client, name: str) -> None:
    with client.lock(name, ttl=0.9, renew=True) as held:
        time.sleep(2.0)  # more than two leases
        held.ensure(0.1)
        assert held.state == "held"


def test_fences_strictly_increase(redis: RedisServer, client: ferrolock.Client, name: str) -> None:
    other = ferrolock.Client.connect(redis.url)
    fences = []
    for i in range(20):
        with (client if i % 2 else other).lock(name, ttl=5) as held:
            fences.append(held.fence)
    assert all(a < b for a, b in zip(fences, fences[1:])), fences
    assert fences[0] > 2**50  # server-time floor: microseconds since the epoch


def test_lost_lock_outsider_del(redis: RedisServer, client: ferrolock.Client, name: str,
                                caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="ferrolock")
    fired = threading.Event()
    got: List[BaseException] = []

    def on_lost(err: ferrolock.LockError) -> None:
        got.append(err)
        fired.set()

    held = client.lock(name, ttl=1.5, renew=True).acquire()  # renewed every 0.5 s
    held.on_lost(on_lost)
    assert redis.command("DEL", hold_key(name)).startswith(b":1")
    t0 = time.monotonic()
    assert fired.wait(3), "on_lost did not fire"
    # Found by the next renewal ("not owner"), well before the local deadline would have said so.
    assert time.monotonic() - t0 < 1.2
    assert held.state == "lost" and held.lost
    assert isinstance(got[0], ferrolock.LostError)
    with pytest.raises(ferrolock.LostError):
        held.ensure()
    deadline = time.monotonic() + 2
    while time.monotonic() < deadline and not any("lost" in r.getMessage() for r in caplog.records):
        time.sleep(0.02)
    assert any(r.name == "ferrolock" and r.levelno == logging.WARNING and "lost" in r.getMessage()
               for r in caplog.records)


def test_on_lost_exception_is_logged(redis: RedisServer, client: ferrolock.Client, name: str,
                                     caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.ERROR, logger="ferrolock")
    held = client.lock(name, ttl=0.3, renew=False).acquire()

    def boom(err: ferrolock.LockError) -> None:
        raise ValueError("callback failure")

    held.on_lost(boom)
    time.sleep(0.5)
    assert held.lost
    deadline = time.monotonic() + 2
    while time.monotonic() < deadline and not caplog.records:
        time.sleep(0.02)
    assert any("on_lost" in r.getMessage() and r.exc_info for r in caplog.records)
    # The library keeps working after a callback raised.
    with client.lock(name, ttl=1) as again:
        assert again.fence > held.fence


def test_gil_released_while_waiting(client: ferrolock.Client, name: str) -> None:
    holder = client.lock(name, ttl=5).acquire()
    done = threading.Event()

    def waiter() -> None:
        try:
            client.lock(name, ttl=5).acquire(wait=1.0)
        except ferrolock.AcquireTimeoutError:
            pass
        done.set()

    t = threading.Thread(target=waiter)
    t.start()
    time.sleep(0.05)
    counter = 0
    t0 = time.monotonic()
    while time.monotonic() - t0 < 0.5:
        counter += 1
    assert not done.is_set(), "the waiter should still be waiting"
    # With the GIL held by the waiter this thread would barely run (switch interval aside).
    assert counter > 100_000, counter
    t.join()
    holder.release()


def test_wait_zero_is_one_attempt(client: ferrolock.Client, name: str) -> None:
    with client.lock(name, ttl=5):
        rival = client.lock(name, ttl=5)  # another Lock object: another owner, even here
        t0 = time.monotonic()
        with pytest.raises(ferrolock.AcquireTimeoutError):
            rival.acquire(wait=0)
        assert time.monotonic() - t0 < 1


def test_decorator_sync(client: ferrolock.Client, name: str) -> None:
    depths: List[int] = []

    @client.locked(name, ttl=5)
    def recurse(n: int) -> int:
        info = client.inspect(name)
        depths.append(info.count if info else 0)
        return n if n == 0 else recurse(n - 1)

    assert recurse.__name__ == "recurse"
    assert recurse(2) == 0
    assert depths == [1, 2, 3]
    assert client.inspect(name) is None


def test_decorator_refuses_what_would_run_after_the_lock(client: ferrolock.Client, name: str) -> None:
    """A generator's body runs at each next(), after the decorated call returned: held only while
    the generator object was made, the lock would protect nothing. Refused, like a plain function
    that returns a coroutine; an object with an ``async def __call__`` is awaited under the lock."""
    seen: List[bool] = []

    def gen() -> Iterator[int]:
        seen.append(client.inspect(name) is not None)
        yield 1

    async def agen() -> AsyncIterator[int]:
        yield 1

    for fn in (gen, agen):
        with pytest.raises(TypeError, match="across the yields"):
            client.locked(name, ttl=5)(fn)

    async def body() -> bool:
        return client.inspect(name) is not None

    returns_coroutine = client.locked(name, ttl=5)(lambda: body())
    with pytest.raises(TypeError, match="returned a coroutine"):
        returns_coroutine()
    assert client.inspect(name) is None

    class Job:
        async def __call__(self) -> bool:
            info = await asyncio.to_thread(client.inspect, name)
            return info is not None

    assert asyncio.run(client.locked(name, ttl=5)(Job())()) is True  # control: held in the body
    assert client.inspect(name) is None and seen == []


def test_bytes_and_binary_names(client: ferrolock.Client) -> None:
    raw = b"bin\x00\xff{}\r\n name"
    with client.lock(raw, ttl=5) as held:
        info = client.inspect(raw)
        assert info is not None and info.fence == held.fence
        assert held.name == raw


def _own_server(servers: List[RedisServer], response_timeout: float) -> Tuple[RedisServer, ferrolock.Client]:
    """A server of this test's own (to SIGSTOP) and a client with a short response timeout."""
    server = RedisServer()
    servers.append(server)
    return server, ferrolock.Client.connect(server.url, response_timeout=response_timeout)


def test_renewal_failure_is_in_doubt_and_logged(servers: List[RedisServer], name: str,
                                                 caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="ferrolock")
    srv, client = _own_server(servers, response_timeout=0.1)
    held = client.lock(name, ttl=1.5, renew=True).acquire()  # renewed every 0.5 s
    os.kill(srv.proc.pid, signal.SIGSTOP)
    try:
        deadline = time.monotonic() + 1.2
        while held.state == "held" and time.monotonic() < deadline:
            time.sleep(0.02)
        assert held.state == "in_doubt"  # a renewal timed out; the local deadline has not passed
    finally:
        os.kill(srv.proc.pid, signal.SIGCONT)
    deadline = time.monotonic() + 2
    while held.state != "held" and time.monotonic() < deadline:
        time.sleep(0.02)
    assert held.state == "held"  # the next renewal succeeded
    assert any(r.name == "ferrolock" and "renewal" in r.getMessage() for r in caplog.records)
    held.release()


def _hammer(critical: Callable[[], None], threads: int = 4, rounds: int = 25) -> None:
    ts = [threading.Thread(target=lambda: [critical() for _ in range(rounds)]) for _ in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()


def test_one_lock_object_serialises_threads_with_control(client: ferrolock.Client, name: str) -> None:
    state = {"n": 0}

    def unsafe_increment() -> None:
        v = state["n"]
        time.sleep(0.001)
        state["n"] = v + 1

    _hammer(unsafe_increment)
    assert state["n"] < 100, "control: without the lock updates must get lost"

    state["n"] = 0
    lock = client.lock(name, ttl=5)

    def locked_increment() -> None:
        with lock:
            unsafe_increment()

    _hammer(locked_increment)
    assert state["n"] == 100


def test_a_wait_on_a_stopped_server_warns_and_says_why(servers: List[RedisServer], name: str,
                                                       caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="ferrolock")
    server, client = _own_server(servers, response_timeout=0.2)
    lock = client.lock(name, ttl=5)
    os.kill(server.proc.pid, signal.SIGSTOP)
    try:
        with pytest.raises(ferrolock.AcquireTimeoutError) as e:
            lock.acquire(wait=1.6)
    finally:
        os.kill(server.proc.pid, signal.SIGCONT)
    assert "the last attempt failed: TIMEOUT" in str(e.value)
    # The failure is the exception's __cause__ too, as `raise ... from` sets it.
    assert isinstance(e.value.__cause__, ferrolock.RedisTimeoutError), repr(e.value.__cause__)
    # Control: a wait that ends on a lock another owner holds has no cause.
    with lock:
        with pytest.raises(ferrolock.AcquireTimeoutError) as held:
            client.lock(name, ttl=5).acquire(wait=0.1)
    assert held.value.__cause__ is None
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("keeps failing" in m for m in warned), warned


def test_decorator_passes_ttl_and_wait(client: ferrolock.Client, name: str) -> None:
    """``locked(ttl=..., wait=...)`` means the same as ``lock(ttl=..., wait=...)``: the lease is the
    given one, and a call while another owner holds the lock gives up after ``wait``."""
    seen: List[float] = []

    @client.locked(name, ttl=2, wait=0.2)
    def critical() -> None:
        info = client.inspect(name)
        assert info is not None and info.ttl is not None
        seen.append(info.ttl)

    critical()
    assert len(seen) == 1 and 0 < seen[0] <= 2  # not the 30 s watchdog lease
    holder = client.lock(name, ttl=5).acquire(wait=0)
    outcome: List[BaseException] = []

    def call() -> None:
        try:
            critical()
        except BaseException as e:  # noqa: BLE001 - the outcome is checked below
            outcome.append(e)

    t = threading.Thread(target=call, daemon=True)
    t.start()
    t.join(5)
    stuck = t.is_alive()
    holder.release()  # lets a call that ignored its wait finish
    t.join(5)
    assert not stuck, "the decorated call ignored wait=0.2"
    assert len(outcome) == 1 and isinstance(outcome[0], ferrolock.AcquireTimeoutError)


def test_decorator_refuses_a_returned_generator(client: ferrolock.Client, name: str) -> None:
    """A plain function that returns a generator: its body would run at next(), after the lock was
    released. Refused like a returned coroutine, and the generator's body never runs."""
    ran: List[bool] = []

    def gen() -> Iterator[int]:
        ran.append(True)
        yield 1

    returns_generator = client.locked(name, ttl=5)(lambda: gen())
    with pytest.raises(TypeError, match="returned a generator"):
        returns_generator()
    assert ran == [] and client.inspect(name) is None


def test_with_releases_when_the_body_raises(client: ferrolock.Client, name: str) -> None:
    lock = client.lock(name, ttl=5)
    with pytest.raises(ZeroDivisionError):
        with lock as held:
            with lock:  # re-entered, then both levels leave by the exception
                1 / 0
    assert held.state == "released" and lock.held is None
    assert client.inspect(name) is None
    with pytest.raises(ZeroDivisionError):
        with lock.acquire() as held2:  # a Held's own `with`
            1 / 0
    assert held2.state == "released" and client.inspect(name) is None


def test_ensure_margin(client: ferrolock.Client, name: str) -> None:
    with client.lock(name, ttl=3, renew=False) as held:
        held.ensure(0.5)
        with pytest.raises(ferrolock.LostError):
            held.ensure(10)  # less than 10 s of validity left
        with pytest.raises(ferrolock.LostError):
            held.ensure(timedelta(seconds=10))
        assert held.state == "held"


def subscribers(redis: RedisServer, name: str) -> int:
    reply = redis.command("PUBSUB", "NUMSUB", hold_key(name) + ":released")
    return int(reply.split(b"\r\n")[-2].lstrip(b":"))


def test_subscription_linger_is_honoured(redis: RedisServer, name: str) -> None:
    """A waiter's release-channel subscription is dropped ``subscription_linger`` after its last
    waiter left (here 0.1 s instead of the default 10 s)."""
    holder = ferrolock.Client.connect(redis.url).lock(name, ttl=5)
    client = ferrolock.Client.connect(redis.url, subscription_linger=0.1)
    held = holder.acquire(wait=0)
    got: List[int] = []

    def wait_then_release() -> None:
        with client.lock(name, ttl=5).acquire(wait=10) as h:
            got.append(h.fence)

    t = threading.Thread(target=wait_then_release)
    t.start()
    deadline = time.monotonic() + 5
    while subscribers(redis, name) != 1:
        assert time.monotonic() < deadline, "the waiter never subscribed"
        time.sleep(0.005)
    held.release()
    t.join(10)
    assert len(got) == 1
    deadline = time.monotonic() + 3
    while subscribers(redis, name) != 0:
        assert time.monotonic() < deadline, "the subscription outlived subscription_linger=0.1"
        time.sleep(0.02)


def test_acquire_retries_are_logged_at_debug(servers: List[RedisServer], name: str,
                                             caplog: pytest.LogCaptureFixture) -> None:
    """DEBUG events reach the logger too (Python's configuration decides what is shown): each
    failed try of a wait is one ``acquire retry`` record."""
    caplog.set_level(logging.DEBUG, logger="ferrolock")
    server, client = _own_server(servers, response_timeout=0.2)
    os.kill(server.proc.pid, signal.SIGSTOP)
    try:
        with pytest.raises(ferrolock.AcquireTimeoutError):
            client.lock(name, ttl=5).acquire(wait=1)
    finally:
        os.kill(server.proc.pid, signal.SIGCONT)
    deadline = time.monotonic() + 2  # records are forwarded by a thread of their own
    while time.monotonic() < deadline:
        debug = [r for r in caplog.records if r.levelno == logging.DEBUG and "acquire retry" in r.getMessage()]
        if debug:
            break
        time.sleep(0.02)
    assert debug, [(r.levelname, r.getMessage()) for r in caplog.records]
