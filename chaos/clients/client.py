#!/usr/bin/env python3
"""The Python chaos client: the same loop and history format as chaos/src/bin/chaos-client.rs.

    client.py --redis URL[,URL...] --resource HOST:PORT --name LOCK --id ID --history FILE
              --stop-file FILE [--ttl-ms 1000] [--wait-ms 5000] [--work-ms 5-10] [--seed N] [--reentrant] [--fair]
              [--cancel-ms LO-HI]

Until the stop file exists: acquire (watchdog-renewed lease), fenced READ -> work (5-10 ms; long
work ends early once the stop file exists) -> fenced WRITE (sent even if the lock was lost: a
write in flight), release. One JSON line per step. More than one URL means Redlock.

The sync API (``Client``, ``Lock``) is used unless ``--cancel-ms`` is given (W4, B1): then it is
the asyncio API (``AsyncClient``, ``AsyncLock``), and half of the outer acquires are cancelled
(``task.cancel()`` on the awaiting task, as ``asyncio.timeout`` does) if they have not completed
after a delay drawn from LO-HI ms; the history gets ``acquire`` ``info`` with
``"error":"CANCELLED"``.
"""

from __future__ import annotations

import argparse
import asyncio
import inspect
import json
import os
import random
import socket
import sys
import threading
import time
from typing import Any, Optional

import ferrolock

INFO_KINDS = {"TIMEOUT", "CONNECTION", "CANCELLED", "INTERNAL"}


class History:
    def __init__(self, path: str, process: str, key: str) -> None:
        self.f = open(path, "a", buffering=1)
        self.process, self.key = process, key
        self.mu = threading.Lock()

    def emit(self, op: str, ty: str, fence: Optional[int] = None, validity_ms: Optional[float] = None,
             t: Optional[int] = None, **extra: Any) -> int:
        t = time.monotonic_ns() if t is None else t
        line = {"process": self.process, "pid": os.getpid(), "lang": "python", "op": op, "type": ty,
                "key": self.key, "fence": fence, "validity_ms": validity_ms, "t_mono_ns": t, **extra}
        with self.mu:
            self.f.write(json.dumps(line, separators=(",", ":")) + "\n")
        return t


class Resource:
    def __init__(self, addr: str, client: str) -> None:
        host, _, port = addr.rpartition(":")
        self.sock = socket.create_connection((host, int(port)))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.reader = self.sock.makefile("rb")
        self.call(f"HELLO {client} {os.getpid()}")

    def call(self, line: str) -> str:
        self.sock.sendall(line.encode() + b"\n")
        reply = self.reader.readline().decode().strip()
        if not reply:
            raise ConnectionError("the resource closed the connection")
        return reply


def err(e: BaseException) -> dict:
    return {"error": getattr(e, "name", type(e).__name__), "message": str(e)}


def kind_type(e: BaseException) -> str:
    return "info" if getattr(e, "name", "") in INFO_KINDS else "fail"


async def do_work(seconds: float, stop_file: str) -> None:
    """Work for `seconds`; long work (over 50 ms) ends early once the stop file exists."""
    end = time.monotonic() + seconds
    while True:
        left = end - time.monotonic()
        if left <= 0 or (seconds > 0.05 and os.path.exists(stop_file)):
            return
        await asyncio.sleep(min(left, 0.05))


async def done(r: Any) -> Any:
    """The result of a sync call, or of an async one awaited (sync and asyncio API alike)."""
    return await r if inspect.isawaitable(r) else r


class Cancelled(Exception):
    """The acquire was cancelled by its timer (W4)."""


async def cancel_after(aw: Any, after: Optional[float]) -> Any:
    """Await `aw`, cancelling this task's wait if it has not completed after `after` seconds
    (what ``asyncio.timeout`` does, also before Python 3.11): raises ``Cancelled`` then."""
    if after is None:
        return await aw
    task = asyncio.current_task()
    assert task is not None
    fired = False

    def fire() -> None:
        nonlocal fired
        fired = True
        task.cancel()

    timer = asyncio.get_running_loop().call_later(after, fire)
    try:
        return await aw
    except asyncio.CancelledError:
        if not fired:
            raise
        if hasattr(task, "uncancel"):
            task.uncancel()
        raise Cancelled() from None
    finally:
        timer.cancel()


async def main() -> int:
    p = argparse.ArgumentParser()
    for a in ("--redis", "--resource", "--name", "--id", "--history", "--stop-file"):
        p.add_argument(a, required=True)
    p.add_argument("--ttl-ms", type=int, default=1000)
    p.add_argument("--wait-ms", type=int, default=5000)
    p.add_argument("--work-ms", default="5-10")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--reentrant", action="store_true")
    p.add_argument("--fair", action="store_true")
    p.add_argument("--cancel-ms", default=None)
    a = p.parse_args()
    cancel = None
    if a.cancel_ms:
        clo, _, chi = a.cancel_ms.partition("-")
        cancel = (int(clo) / 1000, int(chi or clo) / 1000)
    rng = random.Random(a.seed)
    lo, _, hi = a.work_ms.partition("-")
    work = (int(lo) / 1000, int(hi or lo) / 1000)
    h = History(a.history, a.id, a.name)
    h.emit("start", "ok")
    urls = a.redis.split(",")
    opts = {"response_timeout": 0.25, "connect_timeout": 0.5}
    while True:
        try:
            if cancel is None:
                client = ferrolock.Redlock.connect(urls, **opts) if len(urls) > 1 else ferrolock.Client.connect(urls[0], **opts)
            elif len(urls) > 1:
                client = await ferrolock.AsyncRedlock.connect(urls, **opts)
            else:
                client = await ferrolock.AsyncClient.connect(urls[0], **opts)
            break
        except ferrolock.LockError as e:
            if not getattr(e, "transient", False) or os.path.exists(a.stop_file):
                raise
            h.emit("connect", "fail", **err(e))
            await asyncio.sleep(0.1)
    lock = client.lock(a.name, ttl=a.ttl_ms / 1000, renew=True, fair=a.fair)
    res = Resource(a.resource, a.id)

    # The believed expiry moves with renewals: sample it (see the Rust client).
    current: list = [None]

    def sampler() -> None:
        last = 0
        while True:
            time.sleep(0.02)
            held = current[0]
            if held is None:
                continue
            try:
                if held.state != "held":
                    continue
                d = time.monotonic_ns() + int(held.remaining() * 1e9)
            except ferrolock.LockError:
                continue
            if abs(d - last) > 5_000_000:
                last = d
                h.emit("deadline", "info", held.fence, deadline_ns=d)

    threading.Thread(target=sampler, daemon=True).start()

    while not os.path.exists(a.stop_file):
        # W4: cancel half of the acquires after a random delay unless they completed by then.
        delay = rng.uniform(*cancel) if cancel is not None and rng.random() < 0.5 else None
        h.emit("acquire", "invoke")
        try:
            held = await cancel_after(done(lock.acquire(wait=a.wait_ms / 1000)), delay)
        except ferrolock.LockError as e:
            h.emit("acquire", kind_type(e), **err(e))
            if getattr(e, "transient", False):
                await asyncio.sleep(0.01)
            continue
        except Cancelled:
            h.emit("acquire", "info", error="CANCELLED", message="acquire task cancelled", cancelled=True,
                   after_ms=round((delay or 0) * 1000))
            continue
        t_ok = time.monotonic_ns()
        remaining = held.remaining()
        fence = held.fence
        deadline = t_ok + int(remaining * 1e9)
        h.emit("acquire", "ok", fence, remaining * 1000, t=t_ok, deadline_ns=deadline, count=held.count)
        held.on_lost(lambda e, f=fence: h.emit("lost", "info", f, **err(e)))
        current[0] = held

        inner = []
        if a.reentrant:
            for _ in range(rng.randint(1, 3)):
                try:
                    n = await done(lock.acquire(wait=a.wait_ms / 1000))
                    h.emit("reenter", "ok", n.fence, count=n.count)
                    inner.append(n)
                except ferrolock.LockError as e:
                    h.emit("reenter", kind_type(e), fence, **err(e))

        h.emit("read", "invoke", fence)
        r = res.call(f"READ {fence}")
        if r.startswith("OK "):
            v = int(r[3:])
            h.emit("read", "ok", fence, value=v)
            await do_work(rng.uniform(*work), a.stop_file)
            h.emit("write", "invoke", fence, value=v + 1)
            w = res.call(f"WRITE {fence} {v + 1}")
            if w == "OK":
                h.emit("write", "ok", fence, value=v + 1)
            else:
                h.emit("write", "fail", fence, highest=w)
        else:
            h.emit("read", "fail", fence, highest=r)

        while inner:
            n = inner.pop()
            try:
                await done(n.release())
                h.emit("reenter_release", "ok", fence)
            except ferrolock.LockError as e:
                h.emit("reenter_release", kind_type(e), fence, **err(e))
        current[0] = None
        h.emit("release", "invoke", fence)
        try:
            await done(held.release())
            h.emit("release", "ok", fence)
        except ferrolock.LockError as e:
            h.emit("release", kind_type(e), fence, **err(e))
        if a.reentrant:
            try:
                await done(held.release())
                h.emit("over_release", "ok", fence)
            except ferrolock.LockError as e:
                h.emit("over_release", "fail", fence, **err(e))
    h.emit("exit", "ok")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
