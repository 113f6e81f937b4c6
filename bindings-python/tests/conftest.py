"""Real redis-server processes on free loopback ports, stopped by pid (also on failure)."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from typing import Iterator, List, Optional

import pytest

REDIS_SERVER = shutil.which("redis-server") or "/usr/bin/redis-server"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def resp(*args: str) -> bytes:
    """One command in RESP."""
    payload = f"*{len(args)}\r\n".encode()
    for a in args:
        b = a.encode()
        payload += b"$" + str(len(b)).encode() + b"\r\n" + b + b"\r\n"
    return payload


class RedisServer:
    def __init__(self, *extra: str) -> None:
        self.dir = tempfile.mkdtemp(prefix="ferrolock-py-redis-")
        for _attempt in range(5):
            self.port = free_port()
            args = [REDIS_SERVER, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
                    "--appendonly", "no", "--dir", self.dir, *extra]
            self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            if self._wait_ready(extra):
                return
            self.stop()
        raise RuntimeError("redis-server did not start")

    def _wait_ready(self, extra: tuple) -> bool:
        """Whether the server on the port answers as the process started here: ours, not one
        that already had the port (ours then fails to bind and exits, but a look in between
        would find the other)."""
        commands = [("INFO", "server")]
        if "--requirepass" in extra:
            commands.insert(0, ("AUTH", extra[extra.index("--requirepass") + 1]))
        payload = b"".join(resp(*c) for c in commands)
        want = f"process_id:{self.proc.pid}".encode()
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                return False
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as s:
                    s.sendall(payload)
                    got = b""
                    while b"redis_version" not in got or not got.endswith(b"\r\n\r\n"):
                        chunk = s.recv(65536)
                        if not chunk:
                            break
                        got += chunk
                    if want in got.split(b"\r\n"):
                        return True
            except OSError:
                pass
            time.sleep(0.02)
        return False

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}"

    def command(self, *args: str) -> bytes:
        """One raw RESP command (the outsider's view: no ferrolock involved)."""
        with socket.create_connection(("127.0.0.1", self.port), timeout=2) as s:
            s.sendall(resp(*args))
            return s.recv(65536)

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture(scope="session")
def redis() -> Iterator[RedisServer]:
    server = RedisServer()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def name() -> str:
    return "py-test:" + uuid.uuid4().hex


@pytest.fixture
def servers() -> Iterator[List[RedisServer]]:
    started: List[RedisServer] = []
    try:
        yield started
    finally:
        for s in started:
            s.stop()


def hold_key(name: str, prefix: Optional[str] = None) -> str:
    return f"{prefix or 'ferrolock:'}{{{name}}}"
