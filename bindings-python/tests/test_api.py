"""API hygiene: docstrings everywhere, and property-based bad input (hypothesis)."""

from __future__ import annotations

import inspect
from datetime import timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ferrolock
from conftest import RedisServer
from ferrolock import _ferrolock


def test_every_public_name_has_a_docstring() -> None:
    missing = []
    for mod in (ferrolock, _ferrolock):
        for n in mod.__all__:
            obj = getattr(mod, n)
            if n in ("Duration", "Name", "PROTOCOL_VERSION", "MAX_DURATION"):
                continue
            if not (getattr(obj, "__doc__", None) or "").strip():
                missing.append(f"{mod.__name__}.{n}")
            if inspect.isclass(obj) and not issubclass(obj, BaseException):
                for attr, value in vars(obj).items():
                    if not attr.startswith("_") and not (getattr(value, "__doc__", None) or "").strip():
                        missing.append(f"{n}.{attr}")
    assert not missing, missing


def test_async_client_needs_connect() -> None:
    with pytest.raises(TypeError):
        ferrolock.AsyncClient("redis://127.0.0.1:6379")  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def client(redis: RedisServer) -> ferrolock.Client:
    return ferrolock.Client.connect(redis.url)


ANY_NUMBER = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(min_value=-(2**80), max_value=2**80),
    st.timedeltas(),
)


@settings(max_examples=300, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ttl=ANY_NUMBER)
def test_any_ttl_is_accepted_or_invalid_duration(client: ferrolock.Client, ttl: object) -> None:
    try:
        lock = client.lock("py-test:hyp", ttl=ttl)  # type: ignore[arg-type]
    except ferrolock.InvalidDurationError:
        secs = ttl.total_seconds() if isinstance(ttl, timedelta) else float(ttl)  # type: ignore[arg-type]
        assert not (0.01 <= secs <= 300 * 24 * 3600), f"refused a sane ttl {ttl!r}"
        return
    assert lock.name == "py-test:hyp"


@settings(max_examples=300, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=st.one_of(st.text(max_size=64), st.binary(max_size=64)))
def test_any_name_is_accepted_or_invalid_name(client: ferrolock.Client, name: object) -> None:
    try:
        client.lock(name, ttl=1)  # type: ignore[arg-type]
    except ferrolock.InvalidNameError:
        assert name in ("", b"") or (isinstance(name, str) and any(0xD800 <= ord(c) <= 0xDFFF for c in name))
