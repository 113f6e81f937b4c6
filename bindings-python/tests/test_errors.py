"""The exception mapping is total: every core ErrorKind has its own class."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest

import ferrolock
from ferrolock import _ferrolock


def test_every_kind_has_a_class() -> None:
    table = ferrolock.error_table()
    assert len(table) >= 21
    codes = [code for code, _, _ in table]
    assert len(set(codes)) == len(codes)
    classes = [cls for _, _, cls in table]
    assert len(set(classes)) == len(classes)
    for code, name, cls in table:
        assert issubclass(cls, ferrolock.LockError) and cls is not ferrolock.LockError
        assert cls.code == code and cls.name == name
        assert getattr(ferrolock, cls.__name__) is cls, f"{cls.__name__} is not exported"
        assert cls.__name__ in ferrolock.__all__
        err = _ferrolock.make_error(code, "msg")
        assert type(err) is cls and err.code == code and err.name == name and str(err) == "msg"
        assert cls.__module__ == "ferrolock"
        assert cls.__doc__


def test_the_stub_lists_every_class() -> None:
    stub = (Path(_ferrolock.__file__).parent / "_ferrolock.pyi").read_text()
    for _, _, cls in ferrolock.error_table():
        assert f"class {cls.__name__}(LockError" in stub


def test_builtin_bases() -> None:
    assert issubclass(ferrolock.AcquireTimeoutError, TimeoutError)
    assert issubclass(ferrolock.RedisTimeoutError, TimeoutError)
    assert issubclass(ferrolock.RedisConnectionError, ConnectionError)
    assert issubclass(ferrolock.InvalidDurationError, ValueError)
    assert not issubclass(ferrolock.NotHeldError, TimeoutError)
    assert ferrolock.RedisConnectionError.transient and ferrolock.RedisTimeoutError.transient
    assert not ferrolock.LostError.transient


def test_stable_codes() -> None:
    assert ferrolock.NotHeldError.code == 300 and ferrolock.NotHeldError.name == "NOT_HELD"
    assert ferrolock.LostError.code == 301
    assert ferrolock.AcquireTimeoutError.code == 302
    assert ferrolock.InvalidDurationError.code == 102


def test_errors_pickle() -> None:
    err = _ferrolock.make_error(300, "not held")
    back = pickle.loads(pickle.dumps(err))
    assert type(back) is ferrolock.NotHeldError and str(back) == "not held"


def test_unknown_code() -> None:
    try:
        _ferrolock.make_error(999, "x")
    except ValueError:
        return
    raise AssertionError("code 999 accepted")


def test_value_kinds_are_value_errors() -> None:
    for cls in (ferrolock.InvalidArgumentError, ferrolock.InvalidNameError, ferrolock.InvalidDurationError,
                ferrolock.InvalidUrlError, ferrolock.InvalidConfigError):
        assert issubclass(cls, ValueError), cls
    with pytest.raises(ValueError):
        ferrolock.Client.connect("http://127.0.0.1:6379")
