#!/usr/bin/env python3
"""A small tour of the Python API. Needs a Redis server: `python usage.py redis://127.0.0.1:6379`."""

from __future__ import annotations

import asyncio
import sys
from datetime import timedelta

import ferrolock

URL = sys.argv[1] if len(sys.argv) > 1 else "redis://127.0.0.1:6379"


def sync_demo() -> None:
    client = ferrolock.Client.connect(URL, response_timeout=timedelta(milliseconds=500))

    # A watchdog-renewed lock: held until released, however long the work takes.
    with client.lock("orders:42", wait=5) as held:
        print("fence", held.fence, "state", held.state)
        held.on_lost(lambda err: print("lost!", err))
        held.ensure(margin=0.1)  # raises LostError if the hold is gone

    # A fixed lease: expires 2 s after each acquire/extend unless released first.
    lock = client.lock("reports", ttl=2)
    held = lock.try_acquire()
    if held is not None:
        held.extend(5)
        held.release()

    @client.locked("nightly-job", wait=0)
    def nightly() -> str:
        return "ran alone"

    try:
        print(nightly())
    except ferrolock.AcquireTimeoutError:  # also a builtin TimeoutError
        print("someone else is running it")


async def async_demo() -> None:
    client = await ferrolock.AsyncClient.connect(URL)
    async with client.lock("orders:42", wait=5) as held:
        print("async fence", held.fence)


if __name__ == "__main__":
    sync_demo()
    asyncio.run(async_demo())
