"""The examples in examples/python run against a real server."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
from pathlib import Path

from conftest import RedisServer

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "python"


def test_usage_example(redis: RedisServer) -> None:
    r = subprocess.run([sys.executable, str(EXAMPLES / "usage.py"), redis.url],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "ran alone" in r.stdout and "async fence" in r.stdout


def test_demo_worker_protocol(redis: RedisServer, name: str) -> None:
    """The worker against a minimal fenced counter speaking the demo's line protocol."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    state = {"value": 0, "highest": 0}

    def serve() -> None:
        conn, _ = srv.accept()
        with conn, conn.makefile("rwb") as f:
            for line in f:
                parts = line.decode().split()
                fence = int(parts[1])
                if fence < state["highest"]:
                    f.write(f"REJECT {state['highest']}\n".encode())
                else:
                    state["highest"] = fence
                    if parts[0] == "READ":
                        f.write(f"OK {state['value']}\n".encode())
                    else:
                        state["value"] = int(parts[2])
                        f.write(b"OK\n")
                f.flush()

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    port = srv.getsockname()[1]
    r = subprocess.run([sys.executable, str(EXAMPLES / "worker.py"), "--redis", redis.url, "--resource",
                        f"127.0.0.1:{port}", "--name", name, "--iterations", "5", "--id", "w"],
                       capture_output=True, text=True, timeout=60)
    srv.close()
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert len(lines) == 5 and all('"lang":"python"' in x and '"rejected":false' in x for x in lines)
    assert state["value"] == 5
