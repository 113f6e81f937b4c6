"""Secret scan (RELIABILITY.md "No secrets in logs/errors", peer bug B20): a sentinel password goes
through a successful connection, WRONGPASS, a refused and a timed-out connection, and a TLS
failure; everything the library exposes (exception str/repr/args/attributes/traceback, client,
lock and hold reprs, the ``ferrolock`` logger at DEBUG, captured stdout/stderr) is grepped for it:
0 hits. A control shows the same grep finds the sentinel where it is."""

from __future__ import annotations

import asyncio
import logging
import socket
import subprocess
import traceback
from pathlib import Path
from typing import Iterator, List, Tuple, Union

import pytest

import ferrolock
from conftest import RedisServer, free_port

SENTINEL = "Sentinel-Secret-7f3a"


def _dump_exc(e: BaseException) -> List[str]:
    out = [str(e), repr(e), repr(e.args), repr(vars(e)),
           "".join(traceback.format_exception(type(e), e, e.__traceback__))]
    for attr in dir(e):
        if attr.startswith("__") and attr not in ("__cause__", "__context__", "__notes__"):
            continue
        try:
            out.append(f"{attr}={getattr(e, attr)!r}")
        except Exception as inner:  # an attribute that raises is itself output
            out.append(repr(inner))
    for chained in (e.__cause__, e.__context__):
        if chained is not None:
            out.extend(_dump_exc(chained))
    return out


def _hits(texts: List[str]) -> List[str]:
    return [t for t in texts if SENTINEL in t]


class _Capture(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: List[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record) + repr(record.args) + repr(record.__dict__))


@pytest.fixture
def log_lines() -> Iterator[List[str]]:
    logger = logging.getLogger("ferrolock")
    handler = _Capture()
    old = logger.level
    logger.setLevel(logging.DEBUG)
    logger.addHandler(handler)
    try:
        yield handler.lines
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old)


@pytest.fixture(scope="module")
def auth_server() -> Iterator[RedisServer]:
    server = RedisServer("--requirepass", SENTINEL)
    try:
        yield server
    finally:
        server.stop()


def _openssl(cwd: Path, *args: str) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


@pytest.fixture(scope="module")
def tls_port(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    """A TLS redis-server (requirepass = the sentinel) whose CA the clients are not given."""
    d = tmp_path_factory.mktemp("secret-tls")
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    _openssl(d, "req", "-x509", "-days", "2", "-subj", "/CN=ca", "-keyout", "ca.key", "-out", "ca.crt", *ec,
             "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign")
    (d / "server.ext").write_text("subjectAltName=DNS:localhost\nextendedKeyUsage=serverAuth\n")
    _openssl(d, "req", "-subj", "/CN=localhost", "-keyout", "server.key", "-out", "server.csr", *ec)
    _openssl(d, "x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
             "-days", "2", "-out", "server.crt", "-extfile", "server.ext")
    port = free_port()
    server = RedisServer("--requirepass", SENTINEL, "--tls-port", str(port),
                         "--tls-cert-file", str(d / "server.crt"), "--tls-key-file", str(d / "server.key"),
                         "--tls-ca-cert-file", str(d / "ca.crt"), "--tls-auth-clients", "no")
    try:
        yield port
    finally:
        server.stop()


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A listener that completes the TCP handshake and never answers (a response timeout)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(16)
        yield int(s.getsockname()[1])


def _url(port: int, scheme: str = "redis", password: str = SENTINEL, user: str = "") -> str:
    return f"{scheme}://{user}:{password}@{'localhost' if scheme == 'rediss' else '127.0.0.1'}:{port}"


def _fail(url: str, exc: Union[type, Tuple[type, ...]], timeout: float = 0.3,
          **options: object) -> List[str]:
    with pytest.raises(ferrolock.LockError) as sync_err:
        ferrolock.Client.connect(url, connect_timeout=timeout, response_timeout=timeout, **options)
    assert isinstance(sync_err.value, exc), repr(sync_err.value)

    async def run() -> BaseException:
        try:
            await ferrolock.AsyncClient.connect(url, connect_timeout=timeout, response_timeout=timeout,
                                                **options)
        except ferrolock.LockError as e:
            return e
        raise AssertionError("AsyncClient.connect succeeded")

    async_err = asyncio.run(run())
    assert isinstance(async_err, exc), repr(async_err)
    return _dump_exc(sync_err.value) + _dump_exc(async_err) + [sync_err.exconly(), str(sync_err.getrepr())]


def test_control_the_scan_finds_the_sentinel(auth_server: RedisServer) -> None:
    url = _url(auth_server.port)
    assert _hits([url]) == [url]
    built = ValueError(f"could not connect to {url}")
    assert _hits(_dump_exc(built)), "the scan must see a password that is in an exception"
    assert len(_hits([repr({"url": url})])) == 1


def test_success_exposes_no_password(auth_server: RedisServer, log_lines: List[str],
                                     capfd: pytest.CaptureFixture[str]) -> None:
    texts: List[str] = []
    for url in (_url(auth_server.port), _url(auth_server.port, user="default")):
        client = ferrolock.Client.connect(url)
        lock = client.lock("secret-scan", ttl=5)
        texts += [repr(client), str(client), repr(client._native), repr(lock), str(lock)]
        with lock as held:
            texts += [repr(held), str(held), repr(client.inspect("secret-scan"))]
        texts.append(repr(client.force_unlock("secret-scan")))

        async def run() -> List[str]:
            aclient = await ferrolock.AsyncClient.connect(url)
            alock = aclient.lock("secret-scan-async", ttl=5)
            async with alock as aheld:
                return [repr(aclient), repr(alock), repr(aheld)]

        texts += asyncio.run(run())
    assert any("Client" in t for t in texts)  # the reprs were really captured
    out, err = capfd.readouterr()
    texts += log_lines + [out, err]
    assert _hits(texts) == []


def test_wrongpass_exposes_no_password(auth_server: RedisServer, log_lines: List[str],
                                       capfd: pytest.CaptureFixture[str]) -> None:
    texts = _fail(_url(auth_server.port, password="wrong-" + SENTINEL), ferrolock.AuthError)
    texts += _fail(_url(auth_server.port, password=SENTINEL + "-wrong", user="nobody"), ferrolock.AuthError)
    assert any("WRONGPASS" in t for t in texts)
    out, err = capfd.readouterr()
    assert _hits(texts + log_lines + [out, err]) == []


def test_refused_and_timed_out_connections_expose_no_password(
        silent_port: int, log_lines: List[str], capfd: pytest.CaptureFixture[str]) -> None:
    texts = _fail(_url(free_port()), ferrolock.RedisConnectionError)
    texts += _fail(_url(silent_port), (ferrolock.RedisTimeoutError, ferrolock.RedisConnectionError))
    out, err = capfd.readouterr()
    assert _hits(texts + log_lines + [out, err]) == []


def test_tls_failure_exposes_no_password(tls_port: int, log_lines: List[str],
                                         capfd: pytest.CaptureFixture[str]) -> None:
    # A TLS handshake on a loaded machine can take longer than 0.3 s (then a timeout, not the
    # certificate error this checks).
    texts = _fail(_url(tls_port, scheme="rediss"), ferrolock.TlsError, timeout=5.0)
    # The plain scheme on the TLS port: the server drops the connection.
    texts += _fail(_url(tls_port), (ferrolock.RedisConnectionError, ferrolock.RedisTimeoutError,
                                    ferrolock.ProtocolError))
    out, err = capfd.readouterr()
    assert _hits(texts + log_lines + [out, err]) == []


def test_invalid_urls_expose_no_password(log_lines: List[str], capfd: pytest.CaptureFixture[str]) -> None:
    texts: List[str] = []
    for url in (f"redis://:{SENTINEL}@127.0.0.1:notaport", f"redis://:{SENTINEL}@[::1/0",
                f"http://:{SENTINEL}@127.0.0.1:6379", f"redis://:{SENTINEL}@127.0.0.1:6379/notadb"):
        with pytest.raises((ferrolock.InvalidUrlError, ferrolock.InvalidConfigError)) as e:
            ferrolock.Client.connect(url, connect_timeout=1)
        texts += _dump_exc(e.value)
    out, err = capfd.readouterr()
    assert _hits(texts + log_lines + [out, err]) == []
