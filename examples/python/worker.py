#!/usr/bin/env python3
"""The Python demo worker (protocol: examples/README.md).

Per iteration: acquire the shared lock (watchdog-renewed, wait up to 60 s), fenced
read-modify-write of the resource's counter, release, one JSON line on stdout.
"""

from __future__ import annotations

import argparse
import json
import socket
import sys
import time

import ferrolock


class Resource:
    """One kept-open connection to the fenced resource (line protocol)."""

    def __init__(self, addr: str) -> None:
        host, _, port = addr.rpartition(":")
        self.sock = socket.create_connection((host, int(port)))
        self.reader = self.sock.makefile("rb")

    def call(self, line: str) -> str:
        self.sock.sendall(line.encode() + b"\n")
        reply = self.reader.readline().decode().strip()
        if not reply:
            raise ConnectionError("the resource closed the connection")
        return reply

    def fenced_increment(self, fence: int) -> bool:
        """READ then WRITE value+1 under ``fence``; False if the resource rejected the token."""
        reply = self.call(f"READ {fence}")
        if not reply.startswith("OK "):
            return False
        value = int(reply[3:])
        return self.call(f"WRITE {fence} {value + 1}") == "OK"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--redis", required=True)
    p.add_argument("--resource", required=True)
    p.add_argument("--name", required=True)
    p.add_argument("--iterations", type=int, required=True)
    p.add_argument("--id", required=True)
    a = p.parse_args()

    client = ferrolock.Client.connect(a.redis)
    lock = client.lock(a.name)  # no explicit lease: renewed by the watchdog
    resource = Resource(a.resource)
    for _ in range(a.iterations):
        held = lock.acquire(wait=60)
        acquired_ns = time.monotonic_ns()
        ok = resource.fenced_increment(held.fence)
        released_ns = time.monotonic_ns()
        held.release()
        line = {"id": a.id, "lang": "python", "fence": held.fence, "acquired_ns": acquired_ns,
                "released_ns": released_ns, "rejected": not ok}
        print(json.dumps(line, separators=(",", ":")), flush=True)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except ferrolock.LockError as e:
        print(f"python worker: {type(e).__name__} ({e.code}): {e}", file=sys.stderr)
        sys.exit(1)
