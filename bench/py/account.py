"""Where one acquire + release pair's time goes, per language (printed by bench/profile.sh).

Every language's W1 driver runs against the same redis-server, on the server's core, in
interleaved rounds. Each round runs each driver twice, with SHORT and LONG pairs after the same
warm-up; the difference between the two runs, divided by LONG - SHORT, cancels start-up,
connecting and warming up, so what is left is per pair:

- client CPU, user + system: getrusage of the driver process, all its threads (the kernel's
  user/system split is sampled per tick and is not reliable at this scale, so only the sum);
  it includes the loopback network stack, which runs in the sending process;
- server CPU: the redis-server's INFO cpu (used_cpu_user + used_cpu_sys);
- context switches of the client (voluntary + involuntary);
- wall time per pair: the driver's own timed loop in the LONG run (its mean), and the median of its
  acquire + release pairs (the bench's binding target compares pair p50s).

The medians over the rounds are printed as a Markdown table. Wall time minus both CPU columns
is what neither process spent on the CPU: wake-ups, the scheduler, the VM.

    python3 bench/py/account.py --port P [--rounds 3] [--short 1000] [--long 6000]
        [--rust BIN] [--go BIN] [--python PY] [--node-dir DIR] [--python-ab LABEL=PY ...]

``--python-ab`` (repeatable) adds a "Python (LABEL)" row run by another interpreter, e.g. a
virtualenv with another build of the binding, for an A/B within the same interleaved rounds.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

HERE = Path(__file__).resolve().parent
BENCH = HERE.parent


def server_cpu(port: int) -> float:
    """The server's user + system CPU seconds so far (INFO cpu over a plain socket)."""
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.sendall(b"INFO cpu\r\n")
        buf = b""
        while True:
            buf += s.recv(65536)
            head, _, rest = buf.partition(b"\r\n")
            if head.startswith(b"$") and len(rest) >= int(head[1:]):
                break
    total = 0.0
    for line in rest.decode().splitlines():
        key, _, value = line.partition(":")
        if key in ("used_cpu_user", "used_cpu_sys"):
            total += float(value)
    return total


def measure(cmd: list[str], port: int, env: dict[str, str]) -> dict[str, float]:
    """Run one driver on CPU 0: its CPU and context switches (RUSAGE_CHILDREN grows by the
    reaped driver's; taskset execs it, so they are the driver's own), the server's CPU, and the
    driver's own wall time per pair."""
    r0, before = resource.getrusage(resource.RUSAGE_CHILDREN), server_cpu(port)
    proc = subprocess.run(["taskset", "-c", "0", *cmd], capture_output=True, env=env, timeout=600)
    r1, after = resource.getrusage(resource.RUSAGE_CHILDREN), server_cpu(port)
    if proc.returncode != 0:
        raise RuntimeError(f"{cmd[0]} failed: {proc.stderr.decode(errors='replace')[-400:]}")
    line = next(x for x in proc.stdout.decode().splitlines() if x.startswith("{"))
    rep = json.loads(line)["reps"][0]
    return {
        "cpu": (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime),
        "cs": (r1.ru_nvcsw - r0.ru_nvcsw) + (r1.ru_nivcsw - r0.ru_nivcsw),
        "server": after - before,
        "wall": rep["wall_ns"] / 1e9 / len(rep["acq_ns"]),
        "p50": statistics.median(a + b for a, b in zip(rep["acq_ns"], rep["rel_ns"])) / 1e9,
    }


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--short", type=int, default=1000)
    p.add_argument("--long", type=int, default=6000)
    p.add_argument("--warmup", type=int, default=300)
    p.add_argument("--rust", default="")
    p.add_argument("--go", default="")
    p.add_argument("--python", default="")
    p.add_argument("--node-dir", default="")
    p.add_argument("--python-ab", action="append", default=[], metavar="LABEL=PY")
    a = p.parse_args()
    url = f"redis://127.0.0.1:{a.port}"
    env = dict(os.environ)

    def w1(extra_n: int) -> list[str]:
        return ["--url", url, "--n", str(extra_n), "--warmup", str(a.warmup), "--reps", "1"]

    drivers: list[tuple[str, Callable[[int], list[str]]]] = []
    if a.rust and Path(a.rust).exists():
        drivers.append(("Rust (async)", lambda n: [a.rust, "w1", *w1(n)]))
        drivers.append(("Rust (blocking: what C and Go run)", lambda n: [a.rust, "w1", "--api", "blocking", *w1(n)]))
    if a.go and Path(a.go).exists():
        drivers.append(("Go (cgo over the C API)", lambda n: [a.go, "w1", *w1(n)]))
    if a.python and Path(a.python).exists():
        drivers.append(("Python", lambda n: [a.python, str(HERE / "bench.py"), "w1", "--lib", "ferrolock", *w1(n)]))
    for spec in a.python_ab:
        label, _, py = spec.partition("=")
        drivers.append((f"Python ({label})", lambda n, py=py: [py, str(HERE / "bench.py"), "w1", "--lib", "ferrolock",
                                                                *w1(n)]))
    if a.node_dir and Path(a.node_dir).exists():
        env["FERROLOCK_NODE"] = str(Path(a.node_dir).resolve())
        drivers.append(("Node", lambda n: ["node", str(BENCH / "node" / "bench.mjs"), "w1", "--lib", "ferrolock",
                                           "--config", "default", *w1(n)]))
    # Reference rows: the raw clients, no lock library: the floor's commands (SET NX PX + EVALSHA
    # compare-and-delete), and ferrolock's own two scripts (the server work of our pair without a binding).
    if a.python and Path(a.python).exists():
        drivers.append(("raw redis-py (reference: the floor's commands)",
                        lambda n: [a.python, str(HERE / "bench.py"), "w1", "--lib", "raw", *w1(n)]))
        drivers.append(("raw redis-py sending ferrolock's scripts (reference: our server work, no binding)",
                        lambda n: [a.python, str(HERE / "bench.py"), "w1", "--lib", "raw-scripts", *w1(n)]))
    if a.node_dir and Path(a.node_dir).exists():
        drivers.append(("raw ioredis sending ferrolock's scripts (reference: our server work, no binding)",
                        lambda n: ["node", str(BENCH / "node" / "bench.mjs"), "w1", "--lib", "raw-scripts",
                                   "--config", "default", *w1(n)]))
        drivers.append(("raw ioredis (reference: the floor's commands)",
                        lambda n: ["node", str(BENCH / "node" / "bench.mjs"), "w1", "--lib", "raw", "--config", "default",
                                   *w1(n)]))
        drivers.append(("redis-semaphore Mutex (reference: the best Node peer)",
                        lambda n: ["node", str(BENCH / "node" / "bench.mjs"), "w1", "--lib", "semaphore-mutex",
                                   "--config", "default", *w1(n)]))
    if not drivers:
        sys.exit("account.py: no driver given")

    per: dict[str, dict[str, list[float]]] = {name: {} for name, _ in drivers}
    d = a.long - a.short
    for _ in range(a.rounds):
        for name, cmd in drivers:
            try:
                s, l = measure(cmd(a.short), a.port, env), measure(cmd(a.long), a.port, env)
            except (RuntimeError, StopIteration, subprocess.TimeoutExpired) as e:
                print(f"<!-- {name}: {e} -->")
                continue
            row = per[name]
            for k in ("cpu", "server", "cs"):
                row.setdefault(k, []).append((l[k] - s[k]) / d * (1e6 if k != "cs" else 1))
            row.setdefault("wall", []).append(l["wall"] * 1e6)
            row.setdefault("p50", []).append(l["p50"] * 1e6)
            time.sleep(0.2)

    print("| client (W1 driver) | wall µs per pair | pair p50 µs | client CPU | server CPU | neither on CPU | "
          "client context switches |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    failed = []
    for name, _ in drivers:
        row = per[name]
        if not row:
            print(f"| {name} | failed | | | | | |")
            failed.append(name)
            continue
        med = {k: statistics.median(v) for k, v in row.items()}
        rest = med["wall"] - med["cpu"] - med["server"]
        print(f"| {name} | {med['wall']:.1f} | {med['p50']:.1f} | {med['cpu']:.1f} | {med['server']:.1f} | {rest:.1f} | "
              f"{med['cs']:.2f} |")
    print()
    print(f"Medians of {a.rounds} interleaved rounds; CPU columns from the difference between a {a.long}-pair "
          f"and a {a.short}-pair run of each driver (start-up and warm-up cancel), µs per pair.")
    if failed:
        sys.exit(f"account.py: no measurement for {', '.join(failed)}")


if __name__ == "__main__":
    main()
