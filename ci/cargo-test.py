#!/usr/bin/env python3
"""`cargo test --workspace`, binary by binary, optionally side by side.

Each test binary runs as cargo would run it (its package directory as the working directory and
CARGO_MANIFEST_DIR), in its own process group: a binary over its time bound, or the runner being
stopped, stops it with its redis-servers. Output is shown per binary when it ends, failures again
at the end, then the slowest binaries. Ours mostly wait on leases, timeouts and stopped servers,
so two at a time halve the step; every test starts its own servers on free ports, so binaries do
not share state, but a test needs margins for the load (CONTRIBUTING.md, "Keeping CI short").

    python3 ci/cargo-test.py [--jobs N] [cargo test args after --, e.g. -- --include-ignored]

--jobs defaults to FERROLOCK_TEST_JOBS or 2 (what CI runs). Doc tests run as one more job.
"""

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

TIMEOUT_S = 900  # one binary; a hung test otherwise holds CI until its 90-minute limit
RUNNING = set()  # test binaries running now (each leads its own process group)
RUNNING_LOCK = threading.Lock()


def stop_all(signum, _frame):
    """Stopped (SIGTERM, Ctrl-C): stop every running binary's group, with its servers, by pgid."""
    with RUNNING_LOCK:
        for pid in RUNNING:
            try:
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    os._exit(128 + signum)


def build():
    """Compile every test target; return (label, argv, cwd, env) per test binary."""
    cmd = ["cargo", "test", "--workspace", "--no-run", "--quiet", "--message-format=json-render-diagnostics"]
    out = subprocess.run(cmd, stdout=subprocess.PIPE, check=False, text=True)
    if out.returncode != 0:
        sys.exit(f"cargo-test: `{' '.join(cmd)}` failed ({out.returncode})")
    runs = []
    for line in out.stdout.splitlines():
        if not line.startswith("{"):
            continue
        msg = json.loads(line)
        if msg.get("reason") != "compiler-artifact" or not msg.get("profile", {}).get("test"):
            continue
        exe = msg.get("executable")
        if not exe:
            continue
        pkg_dir = os.path.dirname(msg["manifest_path"])
        pkg = os.path.basename(pkg_dir)
        target = msg["target"]
        kind = "unit" if target["kind"] != ["test"] else "test"
        label = f"{pkg} {kind} {target['name']}"
        env = dict(os.environ, CARGO_MANIFEST_DIR=pkg_dir)
        size = os.path.getsize(target["src_path"]) if kind == "test" else 0
        runs.append((size, (label, [exe], pkg_dir, env)))
    # Longest first, so that a long binary does not start last: integration tests by the size of
    # their source (a fair guess of their run time), then the unit tests (all short).
    return [run for _, run in sorted(runs, key=lambda r: -r[0])]


def run_one(label, argv, cwd, env, extra):
    start = time.monotonic()
    with subprocess.Popen(argv + extra, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, errors="replace", start_new_session=True) as p:
        with RUNNING_LOCK:
            RUNNING.add(p.pid)
        timer = threading.Timer(TIMEOUT_S, lambda: os.killpg(p.pid, signal.SIGKILL))
        timer.start()
        try:
            text = p.stdout.read()
            rc = p.wait()
        finally:
            timer.cancel()
            with RUNNING_LOCK:
                RUNNING.discard(p.pid)
    took = time.monotonic() - start
    if rc == -signal.SIGKILL and took >= TIMEOUT_S:
        text += f"\ncargo-test: killed after {TIMEOUT_S}s\n"
    return label, rc, took, text


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=int(os.environ.get("FERROLOCK_TEST_JOBS", "2")))
    ap.add_argument("extra", nargs="*", help="arguments for every test binary (after --)")
    args = ap.parse_args()
    signal.signal(signal.SIGTERM, stop_all)
    signal.signal(signal.SIGINT, stop_all)
    t0 = time.monotonic()
    runs = build()
    print(f"cargo-test: {len(runs)} test binaries + doc tests, {args.jobs} at a time", flush=True)
    lock = threading.Lock()
    results = []

    def job(run):
        label, argv, cwd, env = run
        r = run_one(label, argv, cwd, env, ["-q", *args.extra])
        with lock:
            results.append(r)
            status = "ok" if r[1] == 0 else f"FAILED (exit {r[1]})"
            print(f"--- {label}: {status} in {r[2]:.1f}s", flush=True)
            print(r[3].rstrip(), flush=True)

    doc = ("doc tests", ["cargo", "test", "--workspace", "--doc", "--"], os.getcwd(), dict(os.environ))
    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        list(pool.map(job, runs + [doc]))
    failed = [r for r in results if r[1] != 0]
    print(f"\ncargo-test: {len(results)} runs in {time.monotonic() - t0:.0f}s; slowest:", flush=True)
    for label, _, took, _ in sorted(results, key=lambda r: -r[2])[:8]:
        print(f"  {took:6.1f}s  {label}")
    if failed:
        for label, rc, _, text in failed:
            print(f"\n=== FAILED: {label} (exit {rc})\n{text.rstrip()}")
        sys.exit(f"cargo-test: {len(failed)} failed: {', '.join(r[0] for r in failed)}")


if __name__ == "__main__":
    main()
