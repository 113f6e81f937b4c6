"""Redlock through the same Python surface: N independent masters, majority grants."""

from __future__ import annotations

import asyncio
from typing import List

import pytest

import ferrolock
from conftest import RedisServer, free_port


@pytest.fixture
def masters(servers: List[RedisServer]) -> List[RedisServer]:
    for _ in range(3):
        servers.append(RedisServer())
    return servers


def test_redlock_contend_reenter_and_fence(masters: List[RedisServer], name: str) -> None:
    urls = [m.url for m in masters]
    a = ferrolock.Redlock(urls)
    b = ferrolock.Redlock.connect(urls)
    assert a.is_redlock and isinstance(a, ferrolock.Client)
    lock = a.lock(name, ttl=5)
    fences = []
    with lock as held:
        with lock as inner:
            assert inner.count == 2 and inner.fence == held.fence
        assert b.lock(name, ttl=5).try_acquire() is None
        fences.append(held.fence)
    for _ in range(4):
        with b.lock(name, ttl=5) as h:
            fences.append(h.fence)
    assert all(x < y for x, y in zip(fences, fences[1:])), fences


def test_redlock_survives_one_master_down(masters: List[RedisServer], name: str) -> None:
    client = ferrolock.Redlock([m.url for m in masters])
    masters[0].stop()
    with client.lock(name, ttl=5) as held:  # 2 of 3 still grant
        assert held.count == 1
    masters[1].stop()
    with pytest.raises(ferrolock.LockError) as e:
        client.lock(name, ttl=5).acquire(wait=0.5)
    assert isinstance(e.value, (ferrolock.QuorumNotReachedError, ferrolock.AcquireTimeoutError))


def test_redlock_bad_input(masters: List[RedisServer]) -> None:
    with pytest.raises(TypeError):
        ferrolock.Redlock(masters[0].url)  # a string, not a list of URLs
    with pytest.raises(ferrolock.InvalidConfigError):
        ferrolock.Redlock([masters[0].url, masters[0].url, masters[1].url])
    with pytest.raises(ferrolock.InvalidUrlError):
        ferrolock.Redlock([m.url for m in masters[:2]] + ["http://nope"])
    dead = [f"redis://127.0.0.1:{free_port()}" for _ in range(2)]
    with pytest.raises(ferrolock.QuorumNotReachedError):
        ferrolock.Redlock([masters[0].url, *dead], connect_timeout=0.3)


def test_async_redlock(masters: List[RedisServer], name: str) -> None:
    async def main() -> None:
        client = await ferrolock.AsyncRedlock.connect([m.url for m in masters])
        assert client.is_redlock
        lock = client.lock(name, ttl=5)
        async with lock as held:
            other = client.lock(name, ttl=5)
            assert await asyncio.create_task(other.try_acquire()) is None
            assert held.count == 1

    asyncio.run(main())
