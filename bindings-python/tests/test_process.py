"""Process-level behaviour: fork() safety and a clean interpreter exit after asyncio use."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time

import pytest

import ferrolock
from conftest import RedisServer

FORK_SCRIPT = textwrap.dedent(
    """
    import os, sys, time, ferrolock
    url, name, other = sys.argv[1], sys.argv[2], sys.argv[3]
    client = ferrolock.Client.connect(url)
    held = client.lock(name, ttl=1.0, renew=True).acquire()  # watchdog-renewed lease
    print("fence", held.fence, flush=True)
    pid = os.fork()
    if pid:
        os._exit(0)                                       # the parent dies without releasing
    # Child: the inherited hold belongs to the parent.
    try:
        held.release()
        print("child released the parent's lock", flush=True)
    except ferrolock.ClosedError:
        print("release refused", flush=True)
    try:
        held.extend(5)
        print("child extended the parent's lock", flush=True)
    except ferrolock.ClosedError:
        print("extend refused", flush=True)
    print("repr", "unusable" in repr(held), flush=True)
    # A new client works in the child (its own runtime) and contends with the parent's hold.
    mine = ferrolock.Client.connect(url)
    print("contends", mine.lock(name, ttl=5).try_acquire() is None, flush=True)
    with mine.lock(other, ttl=5) as h:
        print("child lock ok", h.count, flush=True)
    time.sleep(3.0)                                       # outlive the parent's lease
    print("child done", flush=True)
    """
)


def test_fork_child_neither_renews_nor_releases(redis: RedisServer, name: str, tmp_path) -> None:
    script = tmp_path / "fork.py"
    script.write_text(FORK_SCRIPT)
    out = tmp_path / "out.txt"
    with open(out, "w") as f:
        proc = subprocess.Popen([sys.executable, str(script), redis.url, name, name + ":child"],
                                stdout=f, stderr=subprocess.STDOUT)
        assert proc.wait(10) == 0  # the parent exits at once; the child goes on
    observer = ferrolock.Client.connect(redis.url)
    # The parent is gone and nothing may renew its lease: it must run out within ~1 s while the
    # child (which holds the inherited handle) is still alive.
    t0 = time.monotonic()
    while observer.inspect(name) is not None:
        assert time.monotonic() - t0 < 2.0, "the parent's lock is still being kept alive"
        time.sleep(0.05)
    deadline = time.monotonic() + 8
    while "child done" not in out.read_text() and time.monotonic() < deadline:
        time.sleep(0.05)
    lines = out.read_text().splitlines()
    assert "release refused" in lines, lines
    assert "extend refused" in lines, lines
    assert "repr True" in lines, lines
    assert "contends True" in lines, lines
    assert "child lock ok 1" in lines, lines
    assert "child done" in lines, lines
    assert observer.inspect(name + ":child") is None


def _fork_from_c() -> int:
    """fork() called from C, as a C extension would: it skips ``os.register_at_fork``."""
    import ctypes

    libc_fork = ctypes.PyDLL(None).fork  # PyDLL: the GIL stays held across the call
    libc_fork.restype = ctypes.c_int
    return int(libc_fork())


@pytest.mark.parametrize("fork", [getattr(os, "fork", None), _fork_from_c], ids=["os.fork", "fork from C"])
def test_fork_child_leaves_the_parents_hold_alone(redis: RedisServer, name: str, fork) -> None:
    """The child cannot release the parent's hold. The binding caches its process id, and a
    ``pthread_atfork`` handler resets it, so this holds for a fork from C too."""
    if fork is None or not hasattr(os, "fork"):
        pytest.skip("no fork")
    client = ferrolock.Client.connect(redis.url)
    held = client.lock(name, ttl=5).acquire()
    held.remaining()  # the process id is cached by now
    pid = fork()
    if pid == 0:  # child: try to release, then exit with finalizers (GC of the handles)
        code = 1
        try:
            held.release()
        except ferrolock.ClosedError:
            code = 0
        except BaseException:  # noqa: BLE001
            code = 2
        del held
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.WEXITSTATUS(status) == 0
    info = client.inspect(name)
    assert info is not None and info.fence == held.fence and info.count == 1
    held.release()


EXIT_SCRIPT = textwrap.dedent(
    """
    import asyncio, sys, ferrolock

    async def main():
        client = await ferrolock.AsyncClient.connect(sys.argv[1])
        lock = client.lock(sys.argv[2], ttl=2)
        async with lock as held:
            await held.extend(2)
        await client.lock(sys.argv[2] + ":b").try_acquire()   # left held: watchdog running at exit
        # Completions racing the shutdown: asyncio.run cancels these while the runtime finishes them.
        for i in range(20):
            asyncio.ensure_future(client.lock(f"{sys.argv[2]}:c{i}", ttl=2).acquire())
        await asyncio.sleep(0)
        # Native futures nobody awaits or cancels: they complete (acquire timeouts after 0-40 ms)
        # while the interpreter finalizes, which is when an unguarded runtime thread would crash it.
        busy = client.lock(sys.argv[2] + ":busy", ttl=5)
        await busy.acquire()
        for k in range(40):
            client._native.lock(sys.argv[2] + ":busy", 5).acquire_async(k / 1000)

    asyncio.run(main())
    """
)


def test_asyncio_scripts_exit_cleanly_50_times(redis: RedisServer, name: str, tmp_path) -> None:
    script = tmp_path / "exit.py"
    script.write_text(EXIT_SCRIPT)
    failures = []
    for i in range(50):
        r = subprocess.run([sys.executable, str(script), redis.url, f"{name}:{i}"],
                           capture_output=True, text=True, timeout=30)
        if r.returncode != 0 or "Fatal" in r.stderr or "PyGILState" in r.stderr:
            failures.append((i, r.returncode, r.stderr[-500:]))
    assert not failures, failures


SIGINT_SCRIPT = textwrap.dedent(
    """
    import os, signal, sys, ferrolock
    url, name, mode = sys.argv[1], sys.argv[2], sys.argv[3]
    client = ferrolock.Client.connect(url)
    if mode in ("warm", "fork"):
        # Calls before the wait: this thread's signal-check timer exists and is part-way run.
        other = client.lock(name + ":other", ttl=5)
        for _ in range(200):
            other.acquire().release()
    if mode == "fork":
        child = os.fork()
        if child:
            _, status = os.waitpid(child, 0)
            os._exit(os.waitstatus_to_exitcode(status))
        client = ferrolock.Client.connect(url)           # the parent's objects are not usable here
    # A shell without job control starts background jobs with SIGINT ignored, and Python then
    # keeps it ignored: install the KeyboardInterrupt handler whatever this process inherited.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    print("waiting", os.getpid(), flush=True)
    try:
        client.lock(name, ttl=5).acquire()                # held by the test: waits without bound
    except KeyboardInterrupt:
        print("interrupted", flush=True)
    """
)


@pytest.mark.parametrize("mode", ["cold", "warm", "fork"])
def test_ctrl_c_interrupts_a_blocking_acquire(redis: RedisServer, name: str, tmp_path, mode: str) -> None:
    """The wait returns to Python to look for signals: in a fresh process, after calls (the
    thread's signal-check timer is reused across calls), and in a forked child (which must not
    reuse the parent's timer: nothing drives the parent's runtime there)."""
    import signal

    client = ferrolock.Client.connect(redis.url)
    held = client.lock(name, ttl=60).acquire()            # outlasts the wait below
    script = tmp_path / "sigint.py"
    script.write_text(SIGINT_SCRIPT)
    proc = subprocess.Popen([sys.executable, str(script), redis.url, name, mode],
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        word, pid = proc.stdout.readline().split()
        assert word == "waiting"
        time.sleep(0.3)
        os.kill(int(pid), signal.SIGINT)
        try:
            out, _ = proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            os.kill(int(pid), signal.SIGKILL)             # still waiting (in fork mode, the child)
            pytest.fail(f"the {mode} waiter did not see SIGINT within 10 s")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert "interrupted" in out and proc.returncode == 0
    held.release()
    assert client.inspect(name) is None  # the interrupted waiter took nothing
