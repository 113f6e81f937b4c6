"""Callgrind loops for the sync Lock's other call forms (bench/FINDINGS.md, "2026-11-28, later:
a native Lock"): ``with lock: pass`` and ``lock.acquire(); lock.release()``, 300 warm-up pairs
then N pairs, printing nothing. Instructions per pair: the difference between a 3,000- and a
1,000-pair run under ``valgrind --tool=callgrind`` ÷ 2,000, with ``PYTHONHASHSEED=0`` so that
both runs start up alike.

    PYTHONHASHSEED=0 taskset -c 0 valgrind --tool=callgrind python bench/py/lock_forms.py \\
        --port P --form with --pairs N
"""

from __future__ import annotations

import argparse


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--form", choices=["with", "lock-release"], required=True)
    p.add_argument("--pairs", type=int, default=1000)
    a = p.parse_args()
    import ferrolock

    client = ferrolock.Client.connect(f"redis://127.0.0.1:{a.port}")
    lock = client.lock(f"bench:lock-forms:{a.form}", ttl=10.0, wait=10.0)
    if a.form == "with":
        for _ in range(300 + a.pairs):
            with lock:
                pass
    else:
        for _ in range(300 + a.pairs):
            lock.acquire()
            lock.release()


if __name__ == "__main__":
    main()
