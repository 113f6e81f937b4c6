"""Bad input: typed exceptions before any I/O, never a crash, never a password in a message."""

from __future__ import annotations

import logging
import math
import time
from datetime import timedelta

import pytest

import ferrolock
from conftest import RedisServer, free_port

SENTINEL = "S3ntinel-pw-9f2c"


@pytest.fixture
def client(redis: RedisServer) -> ferrolock.Client:
    return ferrolock.Client.connect(redis.url)


@pytest.mark.parametrize("ttl", [0, -1, -0.5, math.nan, math.inf, -math.inf, timedelta(seconds=-1),
                                 10**30, 400 * 24 * 3600, 0.001])
def test_bad_ttl(client: ferrolock.Client, ttl: object) -> None:
    with pytest.raises(ferrolock.InvalidDurationError) as e:
        client.lock("x", ttl=ttl)  # type: ignore[arg-type]
    assert isinstance(e.value, ValueError) and e.value.code == 102 and e.value.name == "INVALID_DURATION"


@pytest.mark.parametrize("wait", [-1, math.nan, math.inf, timedelta(days=-1)])
def test_bad_wait(client: ferrolock.Client, wait: object) -> None:
    with pytest.raises(ferrolock.InvalidDurationError):
        client.lock("x", ttl=1).acquire(wait=wait)  # type: ignore[arg-type]
    # A lock's default wait is checked when the lock is made (it was first seen at an acquire).
    with pytest.raises(ferrolock.InvalidDurationError):
        client.lock("x", ttl=1, wait=wait)  # type: ignore[arg-type]
    with pytest.raises(ferrolock.InvalidDurationError):
        ferrolock.AsyncLock(client._native, "x", ttl=1, wait=wait)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        client.lock("x", ttl=1, wait="soon")  # type: ignore[arg-type]


@pytest.mark.parametrize("value", ["3", True, None.__class__, [1]])
def test_duration_wrong_type(client: ferrolock.Client, value: object) -> None:
    with pytest.raises(TypeError):
        client.lock("x", ttl=value)  # type: ignore[arg-type]


def test_timedelta_and_int_durations(client: ferrolock.Client) -> None:
    with client.lock("py-test:td", ttl=timedelta(milliseconds=1500)) as held:
        assert 1.0 < held.remaining() <= 1.5
        held.extend(2)
        assert held.remaining() > 1.5


def test_durations_read_back_as_given(client: ferrolock.Client) -> None:
    # Seconds from whole nanoseconds: 1.118 used to come back as 1.1179999999999999.
    native = client._native
    off = [t for t in (i / 1000 for i in range(10, 20000)) if native.lock("py-test:rt", t).ttl != t]
    assert off[:5] == []


@pytest.mark.parametrize("bad", ["", b"", "\ud800"])
def test_bad_names(client: ferrolock.Client, bad: object) -> None:
    with pytest.raises(ferrolock.InvalidNameError):
        client.lock(bad)  # type: ignore[arg-type]


def test_name_wrong_type(client: ferrolock.Client) -> None:
    with pytest.raises(TypeError):
        client.lock(123)  # type: ignore[arg-type]


def test_name_cap(redis: RedisServer) -> None:
    c = ferrolock.Client.connect(redis.url, max_name_len=8)
    c.lock("12345678")
    with pytest.raises(ferrolock.InvalidNameError):
        c.lock("123456789")
    big = ferrolock.Client.connect(redis.url, max_name_len=2 * 1024 * 1024)
    with big.lock("n" * (1024 * 1024), ttl=5) as held:  # 1 MiB works when the cap allows it
        assert held.count == 1


@pytest.mark.parametrize("url", ["http://127.0.0.1:6379", "nonsense", "", "redis://[::1"])
def test_bad_urls(url: str) -> None:
    with pytest.raises(ferrolock.InvalidUrlError):
        ferrolock.Client.connect(url)


def test_bad_options(redis: RedisServer) -> None:
    with pytest.raises(TypeError):
        ferrolock.Client.connect(redis.url, no_such_option=1)
    with pytest.raises(ferrolock.InvalidConfigError):
        ferrolock.Client.connect(redis.url, prefix="a{b")
    with pytest.raises(ferrolock.InvalidConfigError):
        ferrolock.Client.connect(redis.url, drift_factor=2.0)
    with pytest.raises(ferrolock.InvalidConfigError):
        ferrolock.Client.connect(redis.url, max_reentrancy=-1)
    with pytest.raises(ferrolock.InvalidDurationError):
        ferrolock.Client.connect(redis.url, connect_timeout=0)


def test_reentrancy_limit(redis: RedisServer) -> None:
    c = ferrolock.Client.connect(redis.url, max_reentrancy=2)
    lock = c.lock("py-test:depth", ttl=5)
    with lock, lock:
        with pytest.raises(ferrolock.ReentrancyLimitError):
            lock.acquire()
        info = c.inspect("py-test:depth")
        assert info is not None and info.count == 2  # unchanged by the refused re-entry


def test_connection_refused_is_typed() -> None:
    port = free_port()  # nobody listens there
    with pytest.raises(ferrolock.RedisConnectionError) as e:
        ferrolock.Client.connect(f"redis://127.0.0.1:{port}", connect_timeout=0.5)
    assert isinstance(e.value, ConnectionError)


def test_password_never_in_errors_or_repr(servers: list, caplog: pytest.LogCaptureFixture) -> None:
    from conftest import RedisServer as Server

    caplog.set_level(logging.DEBUG, logger="ferrolock")
    srv = Server("--requirepass", "another-password")
    servers.append(srv)
    url = f"redis://:{SENTINEL}@127.0.0.1:{srv.port}"
    with pytest.raises(ferrolock.AuthError) as e:
        ferrolock.Client.connect(url)
    for text in (str(e.value), repr(e.value), repr(e.value.args)):
        assert SENTINEL not in text
    with pytest.raises(ferrolock.InvalidUrlError) as e2:
        ferrolock.Client.connect(f"redis://:{SENTINEL}@127.0.0.1:notaport")
    assert SENTINEL not in str(e2.value) and SENTINEL not in repr(e2.value)
    good = ferrolock.Client.connect(f"redis://:another-password@127.0.0.1:{srv.port}")
    assert "another-password" not in repr(good)
    with good.lock("py-test:auth", ttl=2) as held:
        assert "another-password" not in repr(held)
    # Kill the connection under a renewing hold: retries and failures are logged, secrets never.
    held2 = good.lock("py-test:auth2", ttl=0.6, renew=True).acquire()
    srv.stop()
    time.sleep(0.8)
    with pytest.raises(ferrolock.LockError) as e3:
        held2.release()
    assert "another-password" not in str(e3.value)
    assert caplog.records, "expected renewal-failure log records"
    for r in caplog.records:
        assert SENTINEL not in r.getMessage() and "another-password" not in r.getMessage()


def test_on_lost_needs_a_callable(client: ferrolock.Client) -> None:
    with client.lock("py-test:cb", ttl=2) as held:
        with pytest.raises(TypeError):
            held.on_lost(42)  # type: ignore[arg-type]


def test_timedelta_days_are_days(client: ferrolock.Client, name: str) -> None:
    with client.lock(name, ttl=timedelta(days=1, seconds=5)) as held:
        assert held.remaining() > 80_000  # a day, less the drift allowance
    assert client._native.lock(name, timedelta(days=2)).ttl == 2 * 86_400
    with pytest.raises(ferrolock.InvalidDurationError):
        client.lock(name, ttl=timedelta(days=400))


def test_int_options_refuse_bools(redis: RedisServer) -> None:
    for key in ("max_reentrancy", "max_name_len", "redlock_max_inflight", "redlock_quorum"):
        with pytest.raises(TypeError):
            ferrolock.Client.connect(redis.url, **{key: True})
