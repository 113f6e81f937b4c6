# Stubs of the native module (src/*.rs), checked by `mypy.stubtest` in ci/test-python.sh.
from typing_extensions import disjoint_base
from typing import final, Any, Awaitable, Callable, ClassVar, Dict, Iterable, List, Optional, Tuple, Type, Union
from datetime import timedelta

_Duration = Union[int, float, timedelta]
_Name = Union[str, bytes]

__all__ = [
    "AcquireTimeoutError",
    "AuthError",
    "CancelledError",
    "ClosedError",
    "Held",
    "InternalError",
    "InvalidArgumentError",
    "InvalidConfigError",
    "InvalidDurationError",
    "InvalidNameError",
    "InvalidUrlError",
    "LockError",
    "LockInfo",
    "LostError",
    "MAX_DURATION",
    "NativeClient",
    "NativeGuard",
    "NativeLock",
    "NativeLockBase",
    "NotHeldError",
    "NotReplicatedError",
    "NullArgumentError",
    "PROTOCOL_VERSION",
    "ProtocolError",
    "QuorumNotReachedError",
    "RedisConnectionError",
    "RedisPermissionError",
    "RedisTimeoutError",
    "ReentrancyLimitError",
    "ScriptError",
    "TlsError",
    "connect",
    "connect_async",
    "connect_redlock",
    "connect_redlock_async",
    "error_table",
    "make_error",
]
PROTOCOL_VERSION: int
MAX_DURATION: float

class LockError(Exception):
    """Base class of every ferrolock error."""
    code: ClassVar[int]
    name: ClassVar[str]
    transient: ClassVar[bool]

class InvalidArgumentError(LockError, ValueError): ...
class InvalidNameError(LockError, ValueError): ...
class InvalidDurationError(LockError, ValueError): ...
class InvalidUrlError(LockError, ValueError): ...
class InvalidConfigError(LockError, ValueError): ...
class ClosedError(LockError): ...
class NullArgumentError(LockError): ...
class RedisConnectionError(LockError, ConnectionError): ...
class RedisTimeoutError(LockError, TimeoutError): ...
class AuthError(LockError): ...
class TlsError(LockError): ...
class NotHeldError(LockError): ...
class LostError(LockError): ...
class AcquireTimeoutError(LockError, TimeoutError): ...
class QuorumNotReachedError(LockError): ...
class ReentrancyLimitError(LockError): ...
class CancelledError(LockError): ...
class NotReplicatedError(LockError): ...
class ProtocolError(LockError): ...
class ScriptError(LockError): ...
class RedisPermissionError(LockError): ...
class InternalError(LockError): ...

def error_table() -> List[Tuple[int, str, Type[LockError]]]: ...
def make_error(code: int, message: str) -> LockError: ...
def connect(url: str, options: Optional[Dict[str, Any]] = None) -> NativeClient: ...
def connect_async(url: str, options: Optional[Dict[str, Any]] = None) -> Awaitable[NativeClient]: ...
def connect_redlock(urls: Iterable[str], options: Optional[Dict[str, Any]] = None) -> NativeClient: ...
def connect_redlock_async(
    urls: Iterable[str], options: Optional[Dict[str, Any]] = None
) -> Awaitable[NativeClient]: ...

@final
class LockInfo:
    """What `inspect` and `force_unlock` report about one lock."""
    @property
    def owner(self) -> bytes: ...
    @property
    def count(self) -> int: ...
    @property
    def fence(self) -> int: ...
    @property
    def ttl(self) -> Optional[float]: ...

@final
class NativeClient:
    def lock(
        self,
        name: _Name,
        ttl: Optional[_Duration] = None,
        renew: Optional[bool] = None,
        fair: bool = False,
        wait: Optional[_Duration] = None,
    ) -> NativeLock: ...
    def inspect(self, name: _Name) -> Optional[LockInfo]: ...
    def inspect_async(self, name: _Name) -> Awaitable[Optional[LockInfo]]: ...
    def force_unlock(self, name: _Name) -> Optional[LockInfo]: ...
    def force_unlock_async(self, name: _Name) -> Awaitable[Optional[LockInfo]]: ...
    @property
    def is_redlock(self) -> bool: ...
    def close(self) -> None: ...

@final
class NativeLock:
    def acquire(self, wait: Optional[_Duration] = None) -> NativeGuard: ...
    def try_acquire(self) -> Optional[NativeGuard]: ...
    def acquire_async(self, wait: Optional[_Duration] = None) -> Awaitable[NativeGuard]: ...
    def try_acquire_async(self) -> Awaitable[Optional[NativeGuard]]: ...
    @property
    def name(self) -> bytes: ...
    @property
    def ttl(self) -> float: ...

@final
class NativeGuard:
    def _abandon(self) -> None: ...
    def release(self) -> None: ...
    def release_async(self) -> Awaitable[None]: ...
    def extend(self, ttl: _Duration) -> None: ...
    def extend_async(self, ttl: _Duration) -> Awaitable[None]: ...
    @property
    def fence(self) -> int: ...
    @property
    def count(self) -> int: ...
    def remaining(self) -> float: ...
    def ensure(self, margin: Optional[_Duration] = None) -> None: ...
    @property
    def state(self) -> str: ...
    def on_lost(self, callback: Callable[[LockError], object]) -> None: ...

@disjoint_base
class NativeLockBase:
    """The native half of ``ferrolock.Lock`` (which subclasses it)."""
    def __init__(
        self,
        native: NativeClient,
        name: _Name,
        *,
        ttl: Optional[_Duration] = None,
        wait: Optional[_Duration] = None,
        renew: Optional[bool] = None,
        fair: bool = False,
    ) -> None: ...
    @property
    def name(self) -> _Name:
        """The lock's name, as given."""
    def acquire(self, wait: Optional[_Duration] = None) -> Held:
        """Acquire (or re-enter), waiting at most ``wait`` seconds."""
    def try_acquire(self) -> Optional[Held]:
        """One attempt: a ``Held``, or ``None`` when another owner holds the lock."""
    def release(self) -> None:
        """Release this thread's innermost hold. ``NotHeldError`` if this thread holds none."""
    @property
    def held(self) -> Optional[Held]:
        """This thread's innermost hold, or ``None``."""
    def __enter__(self) -> Held: ...
    def __exit__(self, *exc_info: object) -> None: ...

@final
class Held:
    """One level of a sync hold, returned by ``Lock.acquire`` and ``with lock as held``."""
    @property
    def name(self) -> _Name:
        """The lock's name, as given."""
    @property
    def fence(self) -> int:
        """The fencing token: strictly increasing across grants; re-entry keeps it."""
    @property
    def count(self) -> int:
        """The owner's reentrancy depth (0 once lost or released)."""
    def remaining(self) -> float:
        """Seconds left until the local deadline (0 once lost or released)."""
    def ensure(self, margin: Optional[_Duration] = None) -> None:
        """Raise ``LostError`` unless still held with more than ``margin`` of validity left."""
    @property
    def state(self) -> str:
        """``"held"``, ``"in_doubt"``, ``"lost"`` or ``"released"``."""
    @property
    def lost(self) -> bool:
        """Whether the hold is lost."""
    def on_lost(self, callback: Callable[[LockError], object]) -> None:
        """Call ``callback(error)`` once if the hold is lost."""
    def release(self) -> None:
        """Release this level; ``NotHeldError`` from another thread while the acquiring thread
        lives, or when already released."""
    def extend(self, ttl: _Duration) -> None:
        """Extend the lease to ``ttl`` from now."""
    def __enter__(self) -> Held: ...
    def __exit__(self, *exc_info: object) -> None: ...
