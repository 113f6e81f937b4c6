"""Production topologies from Python: replica acknowledgement (``replica_acks``) against a real
replica, stopped (SIGSTOP) as the control; Sentinel and Cluster URLs reach the core. The
topologies themselves are tested in the core (core/tests/{replica_ack,sentinel,cluster}.rs)."""

from __future__ import annotations

import os
import signal
import time
from typing import List

import pytest

import ferrolock
from conftest import RedisServer, hold_key


def _replica_of(master: RedisServer, servers: List[RedisServer]) -> RedisServer:
    replica = RedisServer("--replicaof", "127.0.0.1", str(master.port))
    servers.append(replica)
    deadline = time.monotonic() + 10
    while b"master_link_status:up" not in replica.command("INFO", "replication"):
        assert time.monotonic() < deadline, "the replica did not sync"
        time.sleep(0.02)
    return replica


def test_replica_acks(servers: List[RedisServer], name: str) -> None:
    master = RedisServer()
    servers.append(master)
    replica = _replica_of(master, servers)
    client = ferrolock.Client.connect(master.url, replica_acks=(1, 0.2))
    with client.lock(name, ttl=10).acquire():
        assert replica.command("EXISTS", hold_key(name)) == b":1\r\n"
    os.kill(replica.proc.pid, signal.SIGSTOP)
    try:
        with pytest.raises(ferrolock.NotReplicatedError) as e:
            client.lock(name, ttl=10).try_acquire()
        assert e.value.transient and e.value.code == 306
        assert master.command("EXISTS", hold_key(name)) == b":0\r\n", "a refused grant left a hold"
        # Control: without the option the stopped replica does not stop a grant.
        plain = ferrolock.Client.connect(master.url)
        held = plain.lock(name, ttl=10).try_acquire()
        assert held is not None
        held.release()
    finally:
        os.kill(replica.proc.pid, signal.SIGCONT)


def test_topology_options_are_checked() -> None:
    with pytest.raises(TypeError):
        ferrolock.Client.connect("redis://127.0.0.1:1", replica_acks=1)
    with pytest.raises(ferrolock.InvalidConfigError):
        ferrolock.Client.connect("redis://127.0.0.1:1", replica_acks=(0, 0.1))
    with pytest.raises(ferrolock.InvalidDurationError):
        ferrolock.Client.connect("redis://127.0.0.1:1", replica_acks=(1, 5))
    with pytest.raises(ferrolock.InvalidUrlError):
        ferrolock.Client.connect("redis+sentinel://127.0.0.1:1")  # no master name
    with pytest.raises(ferrolock.InvalidUrlError):
        ferrolock.Client.connect("redis+cluster://127.0.0.1:1/0")  # a cluster has no db
    with pytest.raises(ferrolock.RedisConnectionError):
        ferrolock.Client.connect("redis+sentinel://127.0.0.1:1/mymaster", connect_timeout=0.2)
