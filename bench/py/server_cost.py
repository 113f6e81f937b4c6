"""Server instructions per acquire + release pair, counted by valgrind --tool=callgrind around
redis-server (repeatable on a noisy machine, unlike µs timings).

Each protocol runs N pairs on one key over a pipelined connection (400 commands per batch, so
the network syscalls are amortised and the count is the command work itself) in a fresh
redis-server under callgrind; the count is (run of 3000 pairs - run of 1000 pairs) / 2000.
Prints one Markdown row per protocol. Used by bench/profile.sh.

Usage: python bench/py/server_cost.py SCRIPTS_DIR
"""

import glob
import os
import socket
import subprocess
import sys
import tempfile
import time

import redis

TOKEN = "0123456789abcdef0123456789abcdef"
CAD = "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) else return 0 end"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def instructions(scripts, protocol, pairs, workdir):
    port = free_port()
    out = os.path.join(workdir, f"cg.{port}")
    server = subprocess.Popen(
        ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", "redis-server", "--port", str(port),
         "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", workdir],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        r = redis.Redis(port=port)
        for _ in range(400):
            try:
                r.ping()
                break
            except redis.ConnectionError:
                time.sleep(0.05)
        acquire = r.script_load(scripts["acquire"])
        release = r.script_load(scripts["release"])
        cad = r.script_load(CAD)
        floor = str(int(time.time() * 1e6) + 1_000_000)
        hold, fence, channel = "ferrolock:{k}", "ferrolock:{k}:fence", "ferrolock:{k}:released"
        p = r.pipeline(transaction=False)
        for i in range(pairs):
            if protocol == "PING + PING":
                p.ping()
                p.ping()
            elif protocol == "SET NX PX + compare-and-delete":
                p.set("k", TOKEN, nx=True, px=10000)
                p.evalsha(cad, 1, "k", TOKEN)
            else:
                extra = ["", floor] if "Redlock" in protocol else []
                p.evalsha(acquire, 2, hold, fence, TOKEN, 10000, 60000, 10, *extra)
                p.evalsha(release, 1, hold, TOKEN, channel, 0)
            if i % 200 == 199:
                p.execute()
        p.execute()
        r.shutdown(nosave=True)
    finally:
        server.wait(timeout=60)
    total = 0
    for f in glob.glob(out + "*"):
        with open(f) as fh:
            for line in fh:
                if line.startswith(("summary:", "totals:")):
                    total = max(total, int(line.split()[1]))
        os.remove(f)
    return total


def main():
    root = sys.argv[1]
    scripts = {n: open(os.path.join(root, f"{n}.lua")).read() for n in ("acquire", "release")}
    protocols = [
        "PING + PING",
        "SET NX PX + compare-and-delete",
        "ferrolock acquire.lua + release.lua",
        "ferrolock, Redlock round (with the fence floor)",
    ]
    with tempfile.TemporaryDirectory() as workdir:
        base = None
        for protocol in protocols:
            per = (instructions(scripts, protocol, 3000, workdir) - instructions(scripts, protocol, 1000, workdir)) / 2000
            if protocol.startswith("SET"):
                base = per
            ratio = f"{per / base:.1f} ×" if base else ""
            print(f"| {protocol} | {per:,.0f} | {ratio} |", flush=True)


if __name__ == "__main__":
    main()
