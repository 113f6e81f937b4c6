"""Closing a client (docs/GUARANTEES.md, "Closing a client"): a pending acquire raises
``ClosedError`` at once, live holds become lost and are left to expire with no renewal after the
close, later calls raise ``ClosedError``; garbage collection closes nothing."""

from __future__ import annotations

import asyncio
import gc
import socket
import threading
import time
from typing import Any, Dict, List, Tuple

import pytest

import ferrolock

from conftest import RedisServer, hold_key


class Monitor:
    """Every command the server runs (``MONITOR``), with the monotonic time it was read."""

    def __init__(self, server: RedisServer) -> None:
        self.sock = socket.create_connection(("127.0.0.1", server.port))
        self.sock.sendall(b"MONITOR\r\n")
        self.lines: List[Tuple[float, str]] = []
        self.buf = b""
        while b"\r\n" not in self.buf:
            self.buf += self.sock.recv(4096)
        assert self.buf.startswith(b"+OK")
        self.buf = self.buf.split(b"\r\n", 1)[1]
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        while True:
            try:
                data = self.sock.recv(65536)
            except OSError:
                return
            if not data:
                return
            self.buf += data
            *done, self.buf = self.buf.split(b"\r\n")
            now = time.monotonic()
            self.lines.extend((now, line.decode("utf-8", "replace")) for line in done)

    def renewals_after(self, name: str, since: float) -> int:
        """Renewals (the owner-checked extend: the hold key alone) of ``name`` run after ``since``."""
        key = f'"{hold_key(name)}"'
        return sum(
            1
            for t, line in list(self.lines)
            if t > since and '"EVALSHA"' in line and key in line and ":fence" not in line and ":released" not in line
        )

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def monitor(redis: RedisServer) -> Any:
    m = Monitor(redis)
    yield m
    m.close()


@pytest.mark.parametrize("close", [True, False])
def test_close_ends_a_pending_acquire_with_closed(redis: RedisServer, name: str, close: bool) -> None:
    holder = ferrolock.Client.connect(redis.url)
    held = holder.lock(name, ttl=30).acquire()
    client = ferrolock.Client.connect(redis.url)
    results: Dict[str, Any] = {}

    def wait(key: str, wait_s: Any) -> None:
        try:
            got = client.lock(name).acquire(wait=wait_s)
            results[key] = ("granted", time.monotonic())
            got.release()  # control: the next waiter's turn
        except ferrolock.LockError as e:
            results[key] = (e, time.monotonic())

    threads = [threading.Thread(target=wait, args=(k, w)) for k, w in (("unbounded", None), ("long", 60))]
    for t in threads:
        t.start()
    time.sleep(0.3)
    t_close = time.monotonic()
    if close:
        client.close()
    time.sleep(0.3)
    held.release()  # the lock is free: a live waiter takes it now
    for t in threads:
        t.join(5)
        assert not t.is_alive(), "the pending acquire did not end"
    for what, t_end in results.values():
        if close:
            assert isinstance(what, ferrolock.ClosedError), what
            assert t_end - t_close < 0.2
        else:
            assert what == "granted"  # control: without close the waiters are granted
    if close:
        time.sleep(0.2)
        assert holder.inspect(name) is None, "the closed client took the lock after close"


def test_close_ends_a_pending_async_acquire(redis: RedisServer, name: str) -> None:
    async def body() -> None:
        holder = await ferrolock.AsyncClient.connect(redis.url)
        held = await holder.lock(name, ttl=30).acquire()
        client = await ferrolock.AsyncClient.connect(redis.url)
        task = asyncio.ensure_future(client.lock(name).acquire(wait=60))
        await asyncio.sleep(0.3)
        t_close = time.monotonic()
        client.close()
        with pytest.raises(ferrolock.ClosedError):
            await asyncio.wait_for(task, 2)
        assert time.monotonic() - t_close < 0.2
        await held.release()
        await asyncio.sleep(0.2)
        assert await holder.inspect(name) is None

    asyncio.run(body())


@pytest.mark.parametrize("how", ["acquire", "try_acquire"])
def test_a_grant_settled_after_close_raises_closed_and_is_released(redis: RedisServer, name: str, how: str) -> None:
    # A shutdown handler closing while a request acquires: the grant is made on the runtime
    # while the loop is busy, and close() runs before the loop sets the future. It resolved
    # with a hold already lost, and the lock stayed taken for its whole lease.
    async def body() -> None:
        client = await ferrolock.AsyncClient.connect(redis.url)
        await client.inspect(name)  # warm: scripts loaded, connection up
        lock = client.lock(name, ttl=30)
        task = asyncio.ensure_future(lock.acquire() if how == "acquire" else lock.try_acquire())
        await asyncio.sleep(0)  # the task sends its acquire
        time.sleep(0.05)  # the loop is busy: the runtime grants meanwhile
        client.close()
        with pytest.raises(ferrolock.ClosedError):
            await task

    asyncio.run(body())
    for _ in range(100):
        if redis.command("EXISTS", hold_key(name)) == b":0\r\n":
            break
        time.sleep(0.02)
    assert redis.command("EXISTS", hold_key(name)) == b":0\r\n", "the grant nobody received stayed taken"


@pytest.mark.parametrize("close", [True, False])
def test_close_while_held_loses_the_hold_and_stops_renewals(
    redis: RedisServer, name: str, monitor: Monitor, close: bool
) -> None:
    client = ferrolock.Client.connect(redis.url, watchdog_ttl=0.6)
    held = client.lock(name).acquire()
    lost: List[ferrolock.LockError] = []
    held.on_lost(lost.append)
    time.sleep(0.7)
    assert monitor.renewals_after(name, time.monotonic() - 0.7) >= 1
    t_close = time.monotonic()
    if close:
        client.close()
        client.close()  # idempotent
    else:
        del client  # control: collecting the client object closes nothing
        gc.collect()
    time.sleep(1.5)
    renewals = monitor.renewals_after(name, t_close + 0.02)
    if close:
        assert renewals == 0, "renewals reached the server after close"
        assert held.state == "lost" and held.lost and held.remaining() == 0 and held.count == 0
        assert len(lost) == 1 and isinstance(lost[0], ferrolock.LostError)
        assert "the client was closed" in str(lost[0])
        other = ferrolock.Client.connect(redis.url)
        assert other.inspect(name) is None  # left to expire: the 0.6 s lease ran out
    else:
        assert renewals >= 2, f"control: the check saw {renewals} renewals of a live hold"
        assert held.state == "held" and not lost
        held.release()


def test_calls_after_close_raise_closed(redis: RedisServer, name: str) -> None:
    with ferrolock.Client.connect(redis.url) as client:
        lock = client.lock(name, ttl=5)
        held = lock.acquire()
        inner = lock.acquire()  # re-entry
    # Closed at the end of the block.
    for call in (
        lambda: client.lock(name),
        lambda: client.inspect(name),
        lambda: client.force_unlock(name),
        lambda: lock.acquire(),
        lambda: lock.acquire(wait=0),
        lambda: lock.try_acquire(),
        lambda: held.extend(5),
        lambda: inner.release(),
        lambda: held.release(),
    ):
        with pytest.raises(ferrolock.ClosedError, match="the client was closed"):
            call()
    assert "closed" in repr(client)
    assert held.state == "lost" and held.count == 0
    with pytest.raises(ferrolock.LostError):
        held.ensure()
    # Left to its lease, not released.
    other = ferrolock.Client.connect(redis.url)
    info = other.inspect(name)
    assert info is not None and info.count == 2
    client.close()  # idempotent

    # A `with` block around a hold whose client is closed inside it: ClosedError at its end.
    client = ferrolock.Client.connect(redis.url)
    with pytest.raises(ferrolock.ClosedError):
        with client.lock(name + "-with", ttl=5):
            client.close()


def test_async_calls_after_close_raise_closed(redis: RedisServer, name: str) -> None:
    async def body() -> None:
        async with await ferrolock.AsyncClient.connect(redis.url) as client:
            lock = client.lock(name, ttl=5)
            held = await lock.acquire()
        for make in (lambda: client.inspect(name), lambda: lock.acquire(), lambda: lock.try_acquire(),
                     lambda: held.extend(5), lambda: held.release()):
            with pytest.raises(ferrolock.ClosedError):
                await make()
        assert held.state == "lost"

    asyncio.run(body())


def test_close_from_a_loss_callback_and_from_threads(redis: RedisServer, name: str) -> None:
    admin = ferrolock.Client.connect(redis.url)
    client = ferrolock.Client.connect(redis.url, watchdog_ttl=0.3)
    held = client.lock(name).acquire()
    done = threading.Event()

    def on_lost(_e: ferrolock.LockError) -> None:
        client.close()
        client.close()
        done.set()

    held.on_lost(on_lost)
    admin.force_unlock(name)  # the next renewal is refused: lost
    assert done.wait(3), "the loss callback did not run (or hung in close)"
    with pytest.raises(ferrolock.ClosedError):
        client.inspect(name)

    client = ferrolock.Client.connect(redis.url)
    errors: List[BaseException] = []

    def worker(i: int) -> None:
        lock = client.lock(f"{name}-{i % 2}")
        while True:
            try:
                with lock.acquire(wait=10):
                    pass
            except ferrolock.ClosedError:
                return
            except BaseException as e:  # pragma: no cover - reported below
                errors.append(e)
                return

    workers = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    for w in workers:
        w.start()
    time.sleep(0.2)
    closers = [threading.Thread(target=client.close) for _ in range(3)]
    for c in closers:
        c.start()
    for t in closers + workers:
        t.join(5)
        assert not t.is_alive()
    assert not errors, errors


def test_collecting_a_client_with_held_locks(redis: RedisServer, name: str, monitor: Monitor) -> None:
    """Dropping the last reference to a client closes nothing: its holds keep renewing while they
    are referenced; once they are collected too, renewals stop and the lease runs out."""
    client = ferrolock.Client.connect(redis.url, watchdog_ttl=0.6)
    lock = client.lock(name)
    held = lock.acquire()
    del client
    gc.collect()
    time.sleep(0.7)
    assert held.state == "held" and monitor.renewals_after(name, time.monotonic() - 0.7) >= 1
    del held, lock
    gc.collect()
    t_gone = time.monotonic()
    time.sleep(1.0)
    assert monitor.renewals_after(name, t_gone + 0.02) == 0
    other = ferrolock.Client.connect(redis.url)
    assert other.inspect(name) is None
