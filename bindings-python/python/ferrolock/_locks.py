"""Locks with Python owners: a sync ``Lock`` is owned per thread, an ``AsyncLock`` per task.

The core re-enters through one lock handle (one owner token). These classes give each thread
(``Lock``) or asyncio task (``AsyncLock``) its own core handle, so the same thread or task
re-enters like ``threading.RLock`` and any other thread or task contends. Everything else is the
core's: timing, retries, renewal and the scripts.

The sync ``Lock`` is native but for its Python face (the class below subclasses
``NativeLockBase``, ``src/held.rs``): each thread's owner (its handle and its stack of holds) is
kept in the ``Lock``'s ``threading.local``, which also decides who may release a ``Held``, and
``acquire``, ``with`` and ``release`` are one native call each. A task's owner and
``AsyncHeld`` are here.
"""

from __future__ import annotations

import asyncio
import weakref
from datetime import timedelta
from typing import Any, Awaitable, Callable, List, Optional, TypeVar, Union

from ._ferrolock import LockError, NativeClient, NativeGuard, NativeLock, NativeLockBase, NotHeldError

_T = TypeVar("_T")

Duration = Union[int, float, timedelta]
"""Seconds as ``int``/``float``, or a ``datetime.timedelta``."""

Name = Union[str, bytes]
"""A lock name: ``str`` (UTF-8) or ``bytes``."""


async def _granted(fut: Awaitable[_T]) -> _T:
    """Await a native acquire. If this task is cancelled after the grant was delivered but before
    the task resumed (``asyncio.wait_for`` can do that), hand the grant back at once instead of
    leaving the lock taken for the rest of its lease."""
    try:
        return await fut
    except asyncio.CancelledError:
        if isinstance(fut, asyncio.Future) and fut.done() and not fut.cancelled() and fut.exception() is None:
            guard = fut.result()
            if guard is not None:
                guard._abandon()
        raise


def _is_transient(e: LockError) -> bool:
    # A transient failure (connection, server timeout) leaves the hold in place: retry release.
    return bool(getattr(e, "transient", False))


class _Owner:
    """One task's core handle and its stack of holds (innermost last)."""

    __slots__ = ("handle", "stack", "__weakref__")

    def __init__(self, handle: NativeLock) -> None:
        self.handle = handle
        self.stack: List[Any] = []

    def forget(self, held: object) -> None:
        stack = self.stack
        if stack and stack[-1] is held:  # the usual order: innermost first
            stack.pop()
            return
        for i in range(len(stack) - 1, -1, -1):
            if stack[i] is held:
                del stack[i]
                return


class Lock(NativeLockBase):
    """A named lock, re-entrant per thread like ``threading.RLock``; other threads contend.

    Use ``with lock as held:`` or ``held = lock.acquire(wait=5)`` / ``held.release()``.
    Made by ``Client.lock``; creating it does no I/O.
    """

    # Everything but the repr is native (``NativeLockBase``, src/held.rs): ``acquire``,
    # ``with`` and ``release`` are one native call each, with no Python frame.

    def __repr__(self) -> str:
        return f"<ferrolock.Lock name={self.name!r}>"


class AsyncHeld:
    """One level of an asyncio hold, returned by ``AsyncLock.acquire`` and ``async with``."""

    __slots__ = ("_guard", "_owner", "_name", "_task", "__weakref__")

    def __init__(self, owner: _Owner, guard: NativeGuard, name: Name, task: "asyncio.Task[Any]") -> None:
        self._guard = guard
        # Weakly: the owner's stack keeps its holds, and a hold that kept its owner would make a
        # cycle, so that the hold of a task that ended holding (its owner dropped with the task)
        # would go on renewing until Python's cycle collector ran.
        self._owner = weakref.ref(owner)
        self._name = name
        self._task = weakref.ref(task)

    def _forget(self) -> None:
        owner = self._owner()
        if owner is not None:
            owner.forget(self)

    @property
    def name(self) -> Name:
        """The lock's name, as given."""
        return self._name

    @property
    def fence(self) -> int:
        """The fencing token: strictly increasing across grants; re-entry keeps it.
        Pass it to the resource you write, which must reject lower tokens."""
        return self._guard.fence

    @property
    def count(self) -> int:
        """The owner's reentrancy depth (0 once lost or released)."""
        return self._guard.count

    def remaining(self) -> float:
        """Seconds left until the local deadline (0 once lost or released)."""
        return self._guard.remaining()

    def ensure(self, margin: Optional[Duration] = None) -> None:
        """Raise ``LostError`` unless still held with more than ``margin`` of validity left
        (``NotHeldError`` if released)."""
        self._guard.ensure(margin)

    @property
    def state(self) -> str:
        """``"held"``, ``"in_doubt"`` (a renewal failed; still valid), ``"lost"`` or
        ``"released"``."""
        return self._guard.state

    @property
    def lost(self) -> bool:
        """Whether the hold is lost (its lease ran out, or another owner took the lock)."""
        return self._guard.state == "lost"

    def on_lost(self, callback: Callable[[LockError], object]) -> None:
        """Call ``callback(error)`` once if the hold is lost, from a ferrolock thread (at once
        if it already is). Exceptions it raises are logged on the ``ferrolock`` logger."""
        self._guard.on_lost(callback)

    def __repr__(self) -> str:
        try:
            return f"<{type(self).__name__} name={self._name!r} fence={self.fence} state={self.state}>"
        except LockError:  # e.g. inherited across fork(): the hold is the parent's
            return f"<{type(self).__name__} name={self._name!r} (unusable here)>"

    async def release(self) -> None:
        """Release this level. ``NotHeldError`` from another task while the acquiring task
        runs, or when already released;
        ``LostError`` if the hold was lost meanwhile (nothing of another owner is deleted)."""
        task = self._task()
        # A task that has ended (a hold returned from create_task, or from asyncio.wait_for's
        # inner task on Python 3.11) leaves its holds to whoever kept them: nobody can release
        # them in its name any more, and they would be renewed for as long as they are kept.
        if task is not None and not task.done() and asyncio.current_task() is not task:
            raise NotHeldError("this hold belongs to another task; release it from that task")
        try:
            await self._guard.release_async()
        except LockError as e:
            if not _is_transient(e):
                self._forget()
            raise
        except BaseException:  # cancelled: the release runs on to its end
            self._forget()
            raise
        self._forget()

    async def extend(self, ttl: Duration) -> None:
        """Extend the lease to ``ttl`` from now (raises ``LostError`` if it is already lost)."""
        await self._guard.extend_async(ttl)

    async def __aenter__(self) -> "AsyncHeld":
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.release()


def _current_task() -> "asyncio.Task[Any]":
    task = asyncio.current_task()
    if task is None:
        raise RuntimeError("an AsyncLock must be used from inside an asyncio task")
    return task


class AsyncLock:
    """A named lock for asyncio, re-entrant per task; other tasks (and threads) contend.

    Use ``async with lock as held:`` or ``held = await lock.acquire(wait=5)``. Made by
    ``AsyncClient.lock``; creating it does no I/O. Waiting never blocks the event loop.
    """

    def __init__(
        self,
        native: NativeClient,
        name: Name,
        *,
        ttl: Optional[Duration] = None,
        wait: Optional[Duration] = None,
        renew: Optional[bool] = None,
        fair: bool = False,
    ) -> None:
        self._native = native
        self._name = name
        self._ttl = ttl
        self._wait = wait
        self._renew = renew
        self._fair = fair
        self._owners: "weakref.WeakKeyDictionary[asyncio.Task[Any], _Owner]" = weakref.WeakKeyDictionary()
        # Validates name, ttl and wait now, before any I/O; the first task to acquire gets it.
        self._spare: Optional[NativeLock] = native.lock(name, ttl, renew, fair, wait)

    @property
    def name(self) -> Name:
        """The lock's name, as given."""
        return self._name

    def _owner(self, task: "asyncio.Task[Any]") -> _Owner:
        owner = self._owners.get(task)
        if owner is None:
            handle, self._spare = self._spare, None
            if handle is None:
                handle = self._native.lock(self._name, self._ttl, self._renew, self._fair)
            owner = _Owner(handle)
            self._owners[task] = owner
        return owner

    async def acquire(self, wait: Optional[Duration] = None) -> AsyncHeld:
        """Acquire (or re-enter from the same task), waiting at most ``wait`` seconds
        (``None``: the lock's ``wait``, unbounded unless given; ``0``: one attempt). Raises
        ``AcquireTimeoutError`` when the wait elapses. Cancelling the call cancels the attempt
        and leaves no hold behind."""
        task = _current_task()
        owner = self._owner(task)
        guard = await _granted(owner.handle.acquire_async(self._wait if wait is None else wait))
        held = AsyncHeld(owner, guard, self._name, task)
        owner.stack.append(held)
        return held

    async def try_acquire(self) -> Optional[AsyncHeld]:
        """One attempt: an ``AsyncHeld``, or ``None`` when another owner holds the lock."""
        task = _current_task()
        owner = self._owner(task)
        guard = await _granted(owner.handle.try_acquire_async())
        if guard is None:
            return None
        held = AsyncHeld(owner, guard, self._name, task)
        owner.stack.append(held)
        return held

    async def release(self) -> None:
        """Release this task's innermost hold. ``NotHeldError`` if this task holds none."""
        owner = self._owners.get(_current_task())
        if owner is None or not owner.stack:
            raise NotHeldError("this task does not hold the lock")
        await owner.stack[-1].release()

    @property
    def held(self) -> Optional[AsyncHeld]:
        """The current task's innermost hold, or ``None`` (also outside a running event loop)."""
        try:
            task = asyncio.current_task()
        except RuntimeError:  # no running loop: no task holds anything here
            return None
        owner = self._owners.get(task) if task is not None else None
        return owner.stack[-1] if owner is not None and owner.stack else None

    async def __aenter__(self) -> AsyncHeld:
        return await self.acquire()

    async def __aexit__(self, *exc_info: object) -> None:
        await self.release()

    def __repr__(self) -> str:
        return f"<ferrolock.AsyncLock name={self._name!r}>"
