"""The sync Held's cost in place (bench/FINDINGS.md, "2026-11-28: a native sync Held").

One process, one client, three W1 loops interleaved in blocks on the same server:

- "old layer": the pure-Python ``Lock``/``Held``/``_Owner`` of 89a4561 (read from git), run
  over the same native calls it made (``NativeLock.acquire`` / ``NativeGuard.release``);
- "public API": ``ferrolock.Lock.acquire`` / ``Held.release`` of the installed build;
- "bare native": ``NativeLock.acquire`` / ``NativeGuard.release`` alone.

Each round runs a block of pairs of each loop (the order rotates) and keeps the block's pair
p50; printed are the medians over the rounds and the per-round differences. Interleaving in one
process cancels what separate processes on this shared host do not: minutes that run slower.

    taskset -c 0 bench/.venv/bin/python bench/py/held_ab.py --port P [--rounds 60] [--block 1000]

``--only LOOP --pairs N`` runs 300 warm-up pairs and then N pairs of one loop ("old", "public" or
"native") and prints nothing: for instruction counts, the difference between two such runs
under ``valgrind --tool=callgrind`` (FINDINGS.md, "2026-11-28").
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
import types
from pathlib import Path
from typing import Callable, Dict, List

OLD = "89a4561"  # the last commit with the pure-Python sync Held


def old_layer() -> types.ModuleType:
    root = Path(__file__).resolve().parents[2]
    src = subprocess.run(["git", "-C", str(root), "show", f"{OLD}:bindings-python/python/ferrolock/_locks.py"],
                         capture_output=True, text=True, check=True).stdout
    mod = types.ModuleType("ferrolock_old_locks")
    mod.__dict__["__package__"] = "ferrolock"  # its relative import reads ferrolock._ferrolock
    sys.modules[mod.__name__] = mod
    exec(compile(src, f"{OLD}:_locks.py", "exec"), mod.__dict__)
    return mod


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--rounds", type=int, default=60)
    p.add_argument("--block", type=int, default=1000)
    p.add_argument("--only", choices=["old", "public", "native"])
    p.add_argument("--pairs", type=int, default=1000)
    a = p.parse_args()
    import ferrolock

    client = ferrolock.Client.connect(f"redis://127.0.0.1:{a.port}")
    old = old_layer().Lock(client._native, "bench:held-ab:old", ttl=10.0)
    new = client.lock("bench:held-ab:public", ttl=10.0)
    nat = client._native.lock("bench:held-ab:native", 10.0)
    loops: Dict[str, Callable[[], object]] = {
        "old layer": lambda: old.acquire(wait=10.0),
        "public API": lambda: new.acquire(wait=10.0),
        "bare native": lambda: nat.acquire(10.0),
    }
    if a.only:
        acquire = loops[{"old": "old layer", "public": "public API", "native": "bare native"}[a.only]]
        for _ in range(300 + a.pairs):
            acquire().release()  # type: ignore[attr-defined]
        return
    perf = time.perf_counter_ns

    def block(acquire: Callable[[], object], n: int) -> float:
        times = []
        for _ in range(n):
            t0 = perf()
            acquire().release()  # type: ignore[attr-defined]
            times.append(perf() - t0)
        return statistics.median(times) / 1e3

    for acquire in loops.values():
        block(acquire, 3000)  # warm-up
    names = list(loops)
    got: Dict[str, List[float]] = {k: [] for k in names}
    for r in range(a.rounds):
        for k in names[r % 3:] + names[:r % 3]:
            got[k].append(block(loops[k], a.block))

    def diff(x: str, y: str) -> str:
        d = [b - c for c, b in zip(got[x], got[y])]
        q = statistics.quantiles(d, n=4)
        return f"{statistics.median(d):+.2f} µs (quartiles {q[0]:+.2f} .. {q[2]:+.2f})"

    for k in names:
        print(f"{k}: median of block p50s {statistics.median(got[k]):.1f} µs, min {min(got[k]):.1f}")
    print(f"public API - old layer, per round: {diff('old layer', 'public API')}")
    print(f"bare native - old layer, per round: {diff('old layer', 'bare native')}")
    print(f"public API - bare native, per round: {diff('bare native', 'public API')}")


if __name__ == "__main__":
    main()
