"""ferrolock: Redis distributed locks with fencing tokens, reentrancy and a watchdog.

One audited Rust core shared with the Rust, Node, C and Go bindings (same scripts, same keys),
so Python workers contend correctly with the others on one lock::

    import ferrolock

    client = ferrolock.Client.connect("redis://127.0.0.1:6379")
    with client.lock("orders:42", wait=5) as held:
        write_to_resource(token=held.fence)   # the resource rejects lower tokens

    async def main() -> None:
        client = await ferrolock.AsyncClient.connect("redis://127.0.0.1:6379")
        async with client.lock("orders:42", wait=5) as held:
            ...

``ferrolock.Redlock([url1, url2, url3])`` (and ``AsyncRedlock``) has the same surface and
takes every lock on a majority of independent masters.

A sync ``Lock`` re-enters for the same thread, an ``AsyncLock`` for the same asyncio task;
other threads and tasks contend. Without an explicit ``ttl`` a hold is renewed in the
background until release; ``held.state``, ``held.lost``, ``held.ensure()`` and
``held.on_lost()`` report a lost hold, and so does the ``ferrolock`` logger. Every error is a
``LockError`` subclass with ``code`` and ``name``; ``AcquireTimeoutError`` is also a
``TimeoutError``.
"""

from __future__ import annotations

from . import _ferrolock
from ._client import AsyncClient, AsyncRedlock, Client, Redlock
from ._ferrolock import (
    MAX_DURATION,
    PROTOCOL_VERSION,
    AcquireTimeoutError,
    AuthError,
    CancelledError,
    ClosedError,
    Held,
    InternalError,
    InvalidArgumentError,
    InvalidConfigError,
    InvalidDurationError,
    InvalidNameError,
    InvalidUrlError,
    LockError,
    LockInfo,
    LostError,
    NotHeldError,
    NotReplicatedError,
    NullArgumentError,
    ProtocolError,
    QuorumNotReachedError,
    RedisConnectionError,
    RedisPermissionError,
    RedisTimeoutError,
    ReentrancyLimitError,
    ScriptError,
    TlsError,
    error_table,
)
from ._locks import AsyncHeld, AsyncLock, Duration, Lock, Name

# Every core error kind is importable from here, including kinds newer than this file.
for _code, _name, _cls in _ferrolock.error_table():
    globals().setdefault(_cls.__name__, _cls)
del _code, _name, _cls

__all__ = [
    "MAX_DURATION",
    "PROTOCOL_VERSION",
    "AcquireTimeoutError",
    "AsyncClient",
    "AsyncHeld",
    "AsyncLock",
    "AsyncRedlock",
    "AuthError",
    "CancelledError",
    "Client",
    "ClosedError",
    "Duration",
    "Held",
    "InternalError",
    "InvalidArgumentError",
    "InvalidConfigError",
    "InvalidDurationError",
    "InvalidNameError",
    "InvalidUrlError",
    "Lock",
    "LockError",
    "LockInfo",
    "LostError",
    "Name",
    "NotHeldError",
    "NotReplicatedError",
    "NullArgumentError",
    "ProtocolError",
    "QuorumNotReachedError",
    "Redlock",
    "RedisConnectionError",
    "RedisPermissionError",
    "RedisTimeoutError",
    "ReentrancyLimitError",
    "ScriptError",
    "TlsError",
    "error_table",
]
