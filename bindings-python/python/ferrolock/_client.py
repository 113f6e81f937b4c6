"""``Client`` (sync) and ``AsyncClient`` (asyncio): connections that make locks."""

from __future__ import annotations

import functools
import inspect
from typing import Any, Callable, Iterable, Optional, TypeVar, cast

from . import _ferrolock
from ._ferrolock import LockInfo, NativeClient
from ._locks import AsyncLock, Duration, Lock, Name

F = TypeVar("F", bound=Callable[..., Any])
_C = TypeVar("_C", bound="Client")
_A = TypeVar("_A", bound="AsyncClient")


def _decorator(
    native: NativeClient,
    name: Name,
    ttl: Optional[Duration],
    wait: Optional[Duration],
    renew: Optional[bool],
    fair: bool,
) -> Callable[[F], F]:
    def decorate(fn: F) -> F:
        what = getattr(fn, "__qualname__", repr(fn))
        if inspect.isgeneratorfunction(fn) or inspect.isasyncgenfunction(fn):
            # The body runs at each next(), after the call returned: the lock would be held
            # only while the generator object is made.
            raise TypeError(
                f"locked() cannot hold a lock across the yields of the generator {what}: "
                "take it with `with client.lock(...)` (or `async with`) inside the generator"
            )
        call = getattr(type(fn), "__call__", None)
        if inspect.iscoroutinefunction(fn) or (
            not inspect.isfunction(fn) and not inspect.ismethod(fn) and inspect.iscoroutinefunction(call)
        ):
            alock = AsyncLock(native, name, ttl=ttl, wait=wait, renew=renew, fair=fair)

            @functools.wraps(fn)
            async def run_async(*args: Any, **kwargs: Any) -> Any:
                async with alock:
                    return await fn(*args, **kwargs)

            return cast(F, run_async)
        lock = Lock(native, name, ttl=ttl, wait=wait, renew=renew, fair=fair)

        @functools.wraps(fn)
        def run(*args: Any, **kwargs: Any) -> Any:
            with lock:
                result = fn(*args, **kwargs)
            if inspect.iscoroutine(result) or inspect.isgenerator(result):
                # Its body runs later, without the lock: say so instead of returning it.
                result.close()
                raise TypeError(
                    f"locked(): {what} returned a {type(result).__name__}, whose body would run "
                    "after the lock was released; decorate an async def (or take the lock inside)"
                )
            return result

        return cast(F, run)

    return decorate


class Client:
    """A connection to one Redis server, shared by every lock made from it (thread-safe).

    ``Client.connect(url, **options)`` or ``Client(url, **options)``; ``url`` is
    ``redis://[user:password@]host[:port][/db]`` (``rediss://`` for TLS),
    ``redis+sentinel://[user:password@]host:port[,host:port...]/master-name[/db]`` (the master found
    through Sentinel, failovers followed) or ``redis+cluster://[user:password@]host:port[,...]``
    (Redis Cluster seed nodes). Options (durations in seconds or ``timedelta``):
    ``connect_timeout``, ``response_timeout``, ``prefix``, ``max_name_len``, ``drift_factor``,
    ``drift_min``, ``watchdog_ttl``, ``fence_retention``, ``max_reentrancy``,
    ``subscription_linger``, ``replica_acks`` (``(replicas, timeout)``: every grant waits for that
    many replica acknowledgements, else it is undone and ``NotReplicatedError`` raised; see
    docs/GUARANTEES.md). TLS (``rediss://`` only; the server's chain and
    host name are always verified): ``tls_ca_file`` (trust this CA instead of the system store),
    ``tls_cert_file`` + ``tls_key_file`` (client certificate for mutual TLS); paths as ``str``
    or ``os.PathLike``.
    """

    __slots__ = ("_native",)

    def __init__(self, url: str, **options: Any) -> None:
        self._native = _ferrolock.connect(url, options)

    @classmethod
    def connect(cls, url: str, **options: Any) -> "Client":
        """Connect (blocking; other threads keep running)."""
        return cls(url, **options)

    def lock(
        self,
        name: Name,
        *,
        ttl: Optional[Duration] = None,
        wait: Optional[Duration] = None,
        renew: Optional[bool] = None,
        fair: bool = False,
    ) -> Lock:
        """A lock on ``name`` (no I/O). ``ttl``: the lease (default: the client's
        ``watchdog_ttl``, renewed in the background until release); ``renew``: force renewal
        on or off; ``wait``: how long ``with`` / ``acquire()`` wait by default (``None``: no
        bound); ``fair``: waiters queue on the server and each release hands the lock to the
        oldest one (first come, first served; not with ``Redlock`` or ``replica_acks``)."""
        return Lock(self._native, name, ttl=ttl, wait=wait, renew=renew, fair=fair)

    def locked(
        self,
        name: Name,
        *,
        ttl: Optional[Duration] = None,
        wait: Optional[Duration] = None,
        renew: Optional[bool] = None,
        fair: bool = False,
    ) -> Callable[[F], F]:
        """Decorator: run the function while holding ``name``. Works on plain functions
        (re-entrant per thread: recursion re-enters) and ``async def`` functions (re-entrant per
        task). Each decorated function has its own lock handle, so two functions decorated with
        the same name contend like two ``Lock`` objects: one calling the other waits for itself.
        Generator functions, and a plain function's returned coroutine or generator, raise
        ``TypeError`` (their bodies would run after the lock was released)."""
        return _decorator(self._native, name, ttl, wait, renew, fair)

    def inspect(self, name: Name) -> Optional[LockInfo]:
        """Who holds ``name`` (owner token, count, fence, ttl), or ``None``."""
        return self._native.inspect(name)

    def force_unlock(self, name: Name) -> Optional[LockInfo]:
        """Administrative: delete any hold on ``name`` and wake its waiters. The former holder
        finds out at its next renewal (its hold becomes lost)."""
        return self._native.force_unlock(name)

    @property
    def is_redlock(self) -> bool:
        """Whether locks are taken by quorum over several masters (``Redlock``)."""
        return self._native.is_redlock

    def close(self) -> None:
        """Close the client and everything made from it; ``with Client.connect(url) as client:``
        closes at the end of the block. Never blocks; idempotent; any thread may call it.

        An ``acquire`` of its locks waiting in another thread or task raises ``ClosedError`` at
        once. Live holds become lost (``on_lost`` callbacks run) and are *not* released: renewal
        stops and the lease runs out. Every later call on the client, its locks and holds raises
        ``ClosedError``. Release holds first if others should get them at once. Garbage
        collection of a client closes nothing (docs/GUARANTEES.md, "Closing a client")."""
        self._native.close()

    def __enter__(self: _C) -> _C:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        native = getattr(self, "_native", None)  # unset when the constructor raised
        return repr(native) if native is not None else f"<ferrolock {type(self).__name__}: not connected>"


class Redlock(Client):
    """A ``Client`` over N independent Redis masters: every lock operation needs a majority.

    ``Redlock(["redis://a:6379", "redis://b:6379", "redis://c:6379"], **options)``; same
    surface as ``Client``. Extra options: ``redlock_quorum`` (default N // 2 + 1; an even N
    needs it), ``redlock_node_timeout``, ``redlock_retry_jitter``, ``redlock_max_inflight``.
    Raises ``QuorumNotReachedError`` if fewer than a quorum of masters can be reached now.
    """

    __slots__ = ()

    def __init__(self, urls: Iterable[str], **options: Any) -> None:  # noqa: D107
        self._native = _ferrolock.connect_redlock(urls, options)

    @classmethod
    def connect(cls, urls: Iterable[str], **options: Any) -> "Redlock":  # type: ignore[override]
        """Connect to the masters (blocking; other threads keep running)."""
        return cls(urls, **options)


class AsyncClient:
    """The asyncio face of ``Client``: ``client = await AsyncClient.connect(url, **options)``.

    Same options as ``Client``. Nothing here blocks the event loop.
    """

    __slots__ = ("_native",)

    def __init__(self, native: NativeClient) -> None:
        """Internal: use ``await AsyncClient.connect(...)``."""
        if not isinstance(native, NativeClient):
            raise TypeError("use `await ferrolock.AsyncClient.connect(url, ...)`")
        self._native = native

    @classmethod
    async def connect(cls, url: str, **options: Any) -> "AsyncClient":
        """Connect without blocking the event loop."""
        return cls(await _ferrolock.connect_async(url, options))

    def lock(
        self,
        name: Name,
        *,
        ttl: Optional[Duration] = None,
        wait: Optional[Duration] = None,
        renew: Optional[bool] = None,
        fair: bool = False,
    ) -> AsyncLock:
        """An asyncio lock on ``name`` (no I/O); options as for ``Client.lock``."""
        return AsyncLock(self._native, name, ttl=ttl, wait=wait, renew=renew, fair=fair)

    def locked(
        self,
        name: Name,
        *,
        ttl: Optional[Duration] = None,
        wait: Optional[Duration] = None,
        renew: Optional[bool] = None,
        fair: bool = False,
    ) -> Callable[[F], F]:
        """Decorator, as ``Client.locked``."""
        return _decorator(self._native, name, ttl, wait, renew, fair)

    async def inspect(self, name: Name) -> Optional[LockInfo]:
        """Who holds ``name``, or ``None``."""
        return await self._native.inspect_async(name)

    async def force_unlock(self, name: Name) -> Optional[LockInfo]:
        """Administrative: delete any hold on ``name`` and wake its waiters."""
        return await self._native.force_unlock_async(name)

    @property
    def is_redlock(self) -> bool:
        """Whether locks are taken by quorum over several masters (``AsyncRedlock``)."""
        return self._native.is_redlock

    def close(self) -> None:
        """As ``Client.close`` (does not block); ``async with await AsyncClient.connect(url) as
        client:`` closes at the end of the block."""
        self._native.close()

    async def __aenter__(self: _A) -> _A:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return repr(self._native).replace("<ferrolock ", "<ferrolock Async", 1)


class AsyncRedlock(AsyncClient):
    """The asyncio face of ``Redlock``: ``await AsyncRedlock.connect([url, ...], **options)``."""

    __slots__ = ()

    @classmethod
    async def connect(cls, urls: Iterable[str], **options: Any) -> "AsyncRedlock":  # type: ignore[override]
        """Connect to the masters without blocking the event loop."""
        return cls(await _ferrolock.connect_redlock_async(urls, options))
