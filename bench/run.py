"""Benchmark orchestrator (bench/README.md). Run it through `bash bench/run.sh [--quick]`.

Starts its own pinned redis-server processes on free loopback ports, runs every workload for every
available library through the per-language drivers (Rust `ferrolock-bench`, `py/bench.py`,
`node/bench.mjs`), turns their raw measurements into `redis-lock-bench/v1` lines (one statistics
code path for all languages), and writes results/<date>.jsonl, results/<date>.md and PNG charts.
It reports numbers; it never fails on one. It exits non-zero only when the harness itself breaks.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import os
import platform
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
VENV_PY = HERE / ".venv" / "bin" / "python"
RUST_BIN = Path(os.environ.get("FERROLOCK_BENCH_BIN")
                or Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target")) / "release" / "ferrolock-bench")
GO_BIN = RUST_BIN.with_name("ferrolock-bench-go")  # built by run.sh from bench/go (ferrolock Go, redsync, go-redis)
CODE_FROM = os.environ.get("FERROLOCK_BENCH_FROM", "working tree (run.py started directly)")
SCHEMA = "redis-lock-bench/v1"
MACHINE_CPUS = os.cpu_count() or 1
SERVER_CPU = "0"
W1_CPU = "0"  # same core as the server (BENCH.md placement)
W2_CPU = "1" if MACHINE_CPUS > 1 else "0"  # busy clients must not steal the server's core

CAD = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end"
# W2 forced with 8 Python processes (a client each), besides 8 threads: ferrolock, and the peers
# its targets are read against (python-redis-lock, redis-py's Lock as shipped). pottery and the
# tuned redis-py Lock run threads only since the Go lines came in (the 15-minute budget).
PROCESS_RUNS = {("ferrolock", "default"), ("ferrolock", "fair"), ("python-redis-lock", "default"),
                ("redis-py-lock", "default")}


def log(*a):
    print("[bench]", *a, file=sys.stderr, flush=True)


# ------------------------------------------------------------------ statistics


def lat(values_us):
    """{n, min, p50, p90, p99, max, mean} in µs, nearest-rank percentiles."""
    v = sorted(values_us)
    n = len(v)
    if n == 0:
        return {"n": 0, "min": None, "p50": None, "p90": None, "p99": None, "max": None, "mean": None}

    def rank(q):
        return round(v[max(0, math.ceil(q * n) - 1)], 1)

    return {"n": n, "min": round(v[0], 1), "p50": rank(0.50), "p90": rank(0.90), "p99": rank(0.99),
            "max": round(v[-1], 1), "mean": round(sum(v) / n, 1)}


def quantiles(values, k):
    v = sorted(values)
    if not v:
        return []
    return [round(v[min(len(v) - 1, max(0, math.ceil(i / k * len(v)) - 1))], 1) for i in range(k + 1)]


def jain(xs):
    s, q = sum(xs), sum(x * x for x in xs)
    return round(s * s / (len(xs) * q), 4) if q else None


# ------------------------------------------------------------------ servers


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """One redis-server child on 127.0.0.1, pinned to SERVER_CPU; stopped by pid."""

    def __init__(self):
        self.dir = Path(tempfile.mkdtemp(prefix="ferrolock-bench-redis-"))
        for _ in range(20):
            self.port = free_port()
            self.proc = subprocess.Popen(
                ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
                 "--appendonly", "no", "--dir", str(self.dir), "--protected-mode", "no",
                 "--loglevel", "warning", "--daemonize", "no"],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            if self._wait_up():
                break
            self.stop()
        else:
            raise RuntimeError("could not start redis-server")
        subprocess.run(["taskset", "-apc", SERVER_CPU, str(self.proc.pid)], check=True, stdout=subprocess.DEVNULL)
        self.url = f"redis://127.0.0.1:{self.port}"

    def _wait_up(self) -> bool:
        t = time.time()
        while time.time() - t < 10:
            if self.proc.poll() is not None:
                return False
            if self.cli("PING") == "PONG":
                return True
            time.sleep(0.05)
        return False

    def cli(self, *args, timeout=10) -> str:
        r = subprocess.run(["redis-cli", "-p", str(self.port), *args], capture_output=True, text=True, timeout=timeout)
        return r.stdout.strip()

    def info(self, section) -> dict:
        out = {}
        for line in self.cli("INFO", section).splitlines():
            if ":" in line:
                k, v = line.split(":", 1)
                out[k] = v.strip()
        return out

    def pause(self):
        os.kill(self.proc.pid, signal.SIGSTOP)

    def resume(self):
        os.kill(self.proc.pid, signal.SIGCONT)

    def stop(self):
        if self.proc.poll() is None:
            try:
                os.kill(self.proc.pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
            self.proc.kill()
            self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


class Monitor:
    """Counts the commands clients send (MONITOR lines that are not `[… lua]` script calls and not
    connection set-up or this harness's INFO)."""

    SETUP = {"info", "hello", "client", "script", "ping", "select", "auth", "command", "config"}

    def __init__(self, server: Server, cpu: str):
        self.file = tempfile.NamedTemporaryFile(prefix="bench-monitor-", delete=False)
        self.proc = subprocess.Popen(["taskset", "-c", cpu, "redis-cli", "-p", str(server.port), "MONITOR"],
                                     stdout=self.file, stderr=subprocess.DEVNULL)
        time.sleep(0.2)

    def stop(self) -> dict:
        time.sleep(0.2)
        self.proc.terminate()
        self.proc.wait()
        self.file.close()
        counts: dict = {}
        pat = re.compile(r'^\d+\.\d+ \[\d+ ([^\]]+)\] "([^"]+)"')
        with open(self.file.name, "rb") as f:
            for raw in f:
                m = pat.match(raw.decode("utf-8", "replace"))
                if not m or m.group(1) == "lua":
                    continue
                cmd = m.group(2).lower()
                if cmd in self.SETUP:
                    continue
                counts[cmd] = counts.get(cmd, 0) + 1
        os.unlink(self.file.name)
        return counts


# ------------------------------------------------------------------ libraries


class Target:
    def __init__(self, lang, lib, label, driver, configs, client, peer=True, w2=True):
        self.lang, self.lib, self.label, self.driver = lang, lib, label, driver
        self.configs, self.client, self.peer, self.w2 = configs, client, peer, w2

    def cmd(self, workload, config, url, extra):
        if self.driver == "rust":
            fair = ["--fair", "1"] if config == "fair" else []
            return [str(RUST_BIN), workload, "--url", url, *extra, *fair]
        if self.driver == "go":
            return [str(GO_BIN), workload, "--lib", self.lib, "--config", config, "--url", url, *extra]
        if self.driver == "py":
            return [str(VENV_PY), str(HERE / "py" / "bench.py"), workload, "--lib", self.lib, "--config", config,
                    "--url", url, *extra]
        return ["node", str(HERE / "node" / "bench.mjs"), workload, "--lib", self.lib, "--config", config,
                "--url", url, *extra]


def py_version(dist):
    r = subprocess.run([str(VENV_PY), "-c", f"from importlib import metadata; print(metadata.version('{dist}'))"],
                       capture_output=True, text=True)
    return r.stdout.strip() if r.returncode == 0 else None


def targets(args, skipped):
    t = []
    rs = cargo_pkg_version("redis")
    t.append(Target("rust", "ferrolock", "ferrolock Rust (async)", "rust", ["default", "fair"], f"redis-rs {rs} + ferrolock hot path",
                    peer=False))
    t.append(Target("rust", "ferrolock-blocking", "ferrolock Rust (blocking)", "rust", ["default"], f"redis-rs {rs} + ferrolock hot path",
                    peer=False, w2=False))
    if GO_BIN.exists():
        t.append(Target("go", "ferrolock", "ferrolock Go", "go", ["default"], "ferrolock core via the C API (cgo)",
                        peer=False))
        gv = go_version("github.com/redis/go-redis/v9")
        t.append(Target("go", "raw", "raw go-redis SET NX PX + EVALSHA", "go", ["default"], f"go-redis {gv}", w2=False))
        t.append(Target("go", "raw-scripts", "raw go-redis sending ferrolock's scripts", "go", ["default"], f"go-redis {gv}",
                        w2=False))
        t.append(Target("go", "redsync", "redsync", "go", ["default", "tuned"], f"go-redis {gv}"))
    elif not args.quick:
        skipped.append(("ferrolock Go", read_status("ferrolock-go", "the Go driver was not built")))
    if not VENV_PY.exists():
        skipped.append(("python (all)", "bench/.venv missing (run bench/run.sh)"))
        return t
    pyv = py_version("redis")
    only_quick = args.quick
    if py_version("ferrolock"):
        t.append(Target("python", "ferrolock", "ferrolock Python", "py", ["default", "fair"], "ferrolock core (redis-rs + hot path)",
                        peer=False))
    else:
        skipped.append(("ferrolock Python", read_status("ferrolock-py", "the binding is not installed in bench/.venv")))
    t.append(Target("python", "raw", "raw redis-py SET NX PX + EVALSHA", "py", ["default"], f"redis-py {pyv}", w2=False))
    if not only_quick:
        t.append(Target("python", "raw-scripts", "raw redis-py sending ferrolock's scripts", "py", ["default"],
                        f"redis-py {pyv}", w2=False))
    t.append(Target("python", "redis-py-lock", "redis-py Lock", "py", ["default", "tuned"], f"redis-py {pyv}"))
    if not only_quick:
        for lib, label, cfgs in [("python-redis-lock", "python-redis-lock", ["default"]),
                                 ("pottery", "pottery Redlock", ["default", "tuned"])]:
            if py_version(lib):
                t.append(Target("python", lib, label, "py", cfgs, f"redis-py {pyv}"))
            else:
                skipped.append((label, "not installed in bench/.venv"))
    else:
        skipped.append(("python-redis-lock, pottery", "--quick runs one Python peer only"))
    if only_quick:
        skipped.append(("Node (all)", "--quick skips Node to stay near 2 minutes"))
        return t
    if not (HERE / "node" / "node_modules" / "ioredis").exists():
        skipped.append(("Node (all)", "bench/node/node_modules missing (npm install failed?)"))
        return t
    iv = node_version("ioredis")
    if os.environ.get("FERROLOCK_NODE") and Path(os.environ["FERROLOCK_NODE"]).exists():
        t.append(Target("node", "ferrolock", "ferrolock Node", "node", ["default", "fair"], "ferrolock core (redis-rs + hot path)",
                    peer=False))
    else:
        skipped.append(("ferrolock Node", read_status("ferrolock-node", "the addon was not built")))
    t.append(Target("node", "raw", "raw ioredis SET NX PX + EVALSHA", "node", ["default"], f"ioredis {iv}", w2=False))
    t.append(Target("node", "raw-scripts", "raw ioredis sending ferrolock's scripts", "node", ["default"], f"ioredis {iv}",
                    w2=False))
    t.append(Target("node", "redlock", "node redlock v5", "node", ["default", "tuned"], f"ioredis {iv}"))
    t.append(Target("node", "semaphore-mutex", "redis-semaphore Mutex", "node", ["default", "tuned"], f"ioredis {iv}"))
    t.append(Target("node", "semaphore-redlock-mutex", "redis-semaphore RedlockMutex", "node", ["default", "tuned"],
                    f"ioredis {iv}"))
    return t


def go_version(module):
    """The version bench/go/go.mod pins for `module`."""
    m = re.search(rf"^\s*{re.escape(module)} (v\S+)", (HERE / "go" / "go.mod").read_text(), re.M)
    return m.group(1) if m else "?"


def read_status(name, default):
    p = HERE / ".venv" / f"{name}.status"
    return p.read_text().strip() if p.exists() else default


def node_version(name):
    try:
        return json.loads((HERE / "node" / "node_modules" / name / "package.json").read_text())["version"]
    except OSError:
        return "?"


def cargo_pkg_version(name):
    lock = (ROOT / "Cargo.lock").read_text()
    m = re.search(r'name = "%s"\nversion = "([^"]+)"' % re.escape(name), lock)
    return m.group(1) if m else "?"


# ------------------------------------------------------------------ running


class Run:
    def __init__(self, args):
        self.args = args
        self.quick = args.quick
        now = dt.datetime.now(dt.timezone.utc)
        self.tag = now.strftime("%Y-%m-%d") + ("-quick" if args.quick else "")
        self.out_dir = Path(args.out) if args.out else HERE / "results"
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self.jsonl = self.out_dir / f"{self.tag}.jsonl"
        self.lines: list[dict] = []
        self.raw: dict = {}  # label -> raw data for charts
        self.skipped: list[tuple[str, str]] = []
        self.harness_errors: list[str] = []
        self.load = {"start": os.getloadavg()}

    def base(self, workload, tgt: Target | None, config, client_cpus, extra=None):
        line = {
            "schema": SCHEMA, "ts": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "workload": workload, "peer": tgt.label if tgt else "redis-benchmark",
            "lib": tgt.lib if tgt else "redis-benchmark", "lib_version": None, "api": None,
            "config": config, "settings": {}, "lang": tgt.lang if tgt else "c",
            "runtime": None, "client": tgt.client if tgt else "redis-benchmark",
            "params": {}, "placement": {"client_cpus": client_cpus, "redis_cpus": SERVER_CPU,
                                        "machine_cpus": MACHINE_CPUS},
            "ok": False, "error": None,
            "machine_load": [round(x, 2) for x in os.getloadavg()],
            "code_under_test": CODE_FROM,
        }
        if extra:
            line.update(extra)
        return line

    def emit(self, line):
        self.lines.append(line)
        with open(self.jsonl, "a") as f:
            f.write(json.dumps(line) + "\n")
        ok = "ok" if line["ok"] else (line["error"] if str(line["error"]).startswith("skipped") else f"FAILED: {line['error']}")
        log(f"{line['workload']} {line['peer']} [{line['config']}] {line.get('mode', '')} -> {ok}")

    def drive(self, cmd, cpu, timeout):
        """Run one driver pinned to `cpu`; return (parsed JSON or None, error)."""
        try:
            r = subprocess.run(["taskset", "-c", cpu, *cmd], capture_output=True, text=True, timeout=timeout,
                               cwd=ROOT, env={**os.environ, "PYTHONUNBUFFERED": "1"})
        except subprocess.TimeoutExpired:
            return None, f"driver timed out after {timeout}s"
        try:
            out = json.loads(r.stdout.strip().splitlines()[-1])
        except (IndexError, json.JSONDecodeError):
            return None, f"driver exit {r.returncode}, no JSON; stderr: {r.stderr.strip()[-400:]}"
        if not out.get("ok"):
            return None, out.get("error") or f"exit {r.returncode}"
        return out, None

    @staticmethod
    def fill(line, out):
        for k in ("lib_version", "api", "settings", "runtime", "params"):
            if out.get(k) is not None:
                line[k] = out[k]

    # ---------------- W1
    def w1(self, server, tgts):
        n, warmup, reps = (1000, 100, 3) if self.quick else (5000, 5000, 3)
        runs = [(tg, cfg) for tg in tgts for cfg in tg.configs]

        def extra(tg, pairs, warm):
            api = []
            if tg.driver == "rust":
                api = ["--api", "blocking" if tg.lib == "ferrolock-blocking" else "async"]
            return ["--n", str(pairs), "--warmup", str(warm), "--reps", "1", *api]

        # Repetitions are interleaved: round k runs every library once (each with its own
        # warm-up), so a slow minute on this shared machine lands on one repetition of every
        # library, not on all repetitions of one; the median then drops it for everyone alike.
        outs = {i: [] for i in range(len(runs))}
        errs = {}
        floors = []  # the W4 floor, sampled again in every round: the same minutes as the libraries
        sha = server.cli("SCRIPT", "LOAD", CAD)
        for k in range(reps):
            log(f"W1 round {k + 1}/{reps} ({len(runs) - len(errs)} libraries)")
            sample = self.floor_sample(server, sha, 5000 if self.quick else 20000)
            if sample:
                floors.append(sample)
            for i, (tg, cfg) in enumerate(runs):
                if i in errs:
                    continue
                out, err = self.drive(tg.cmd("w1", cfg, server.url, extra(tg, n, warmup)), W1_CPU, 300)
                if out is None:
                    errs[i] = err
                else:
                    outs[i].append(out)
        for i, (tg, cfg) in enumerate(runs):
            line = self.base("W1", tg, cfg, W1_CPU)
            if i in errs:
                line["error"] = errs[i]
                self.emit(line)
                continue
            self.fill(line, outs[i][0])
            line["params"] = {**line.get("params", {}), "reps": reps, "interleaved": True}
            # Census: the same driver, a few pairs, under MONITOR (kept out of the timed run).
            cen_n = 200
            mon = Monitor(server, W2_CPU)
            cout, cerr = self.drive(tg.cmd("w1", cfg, server.url, extra(tg, cen_n, 0)), W1_CPU, 120)
            counts = mon.stop()
            runs_reps = [o["reps"][0] for o in outs[i]]
            rates = [n / (r["wall_ns"] / 1e9) for r in runs_reps]
            med = sorted(range(len(rates)), key=lambda j: rates[j])[len(rates) // 2]
            r = runs_reps[med]
            pairs = n * len(runs_reps)
            acq = [x / 1e3 for x in r["acq_ns"]]
            rel = [x / 1e3 for x in r["rel_ns"]]
            line.update({
                "ok": True,
                "ops_per_s": round(rates[med], 1),
                "acquire_us": lat(acq), "release_us": lat(rel),
                "pair_us": lat([a + b for a, b in zip(acq, rel)]),
                "client_cmds_per_op": round(sum(counts.values()) / cen_n, 3) if cout else None,
                "client_cmds_census": counts if cout else {"error": cerr},
                "redis_cmds_per_op": round(sum(o["counters"]["total_cmds"] for o in outs[i]) / pairs, 3),
                "client_cpu_us_per_op": round(sum(x["cpu_ns"] for x in runs_reps) / pairs / 1e3, 2),
                "client_ctx_switches_per_op": (round(sum(x["ctx_switches"] for x in runs_reps) / pairs, 2)
                                               if all("ctx_switches" in x for x in runs_reps) else None),
                "reps_ops_per_s": [round(x, 1) for x in rates],
                "floor_rounds_ops_per_s": floors if len(floors) == reps else None,
            })
            self.emit(line)

    def floor_sample(self, server, sha, n):
        """W4's mean pair floor (-c 1, client on the server's core) from `n` requests of each
        command: pairs/s, or None when redis-benchmark's output is not understood."""
        mean_us = 0.0
        for cmd in (["SET", "bench:w4:k", "v", "NX", "PX", "10000"], ["EVALSHA", sha, "1", "bench:w4:k", "v"]):
            r = subprocess.run(["taskset", "-c", SERVER_CPU, "redis-benchmark", "-p", str(server.port), "-n", str(n),
                                "-c", "1", "-P", "1", "--csv", *cmd], capture_output=True, text=True, timeout=300)
            row = parse_rb_csv(r.stdout)
            if row is None:
                return None
            mean_us += 1e6 / row["rps"]
        return round(1e6 / mean_us, 1)

    # ---------------- W2
    def w2(self, server, tgts):
        secs = 3 if self.quick else 10
        for tg in tgts:
            if not tg.w2:
                continue
            for cfg in tg.configs:
                variants = [("threads", [])]
                if tg.lang == "python" and not self.quick and (tg.lib, cfg) in PROCESS_RUNS:
                    variants.append(("processes", ["--procs", "1"]))
                for mode in ("any", "forced"):
                    for vname, vextra in variants:
                        if vname == "processes" and mode == "any":
                            continue  # processes run in forced mode only (time budget)
                        self.w2_one(server, tg, cfg, mode, secs, vname, vextra)

    def w2_one(self, server, tg, cfg, mode, secs, vname, vextra):
        line = self.base("W2", tg, cfg, W2_CPU, {"mode": mode})
        def extra(s):
            return ["--mode", mode, "--secs", str(s), "--workers", "8", "--hold-ms", "1", *vextra]
        server.cli("FLUSHALL")
        out, err = self.drive(tg.cmd("w2", cfg, server.url, extra(secs)), W2_CPU, secs + 120)
        if out is None:
            line["error"] = err
            self.emit(line)
            return
        # Census: the same driver, a short run under MONITOR, kept out of the timed run. Attached
        # to the timed run, MONITOR lengthened every handoff, ferrolock Python's 2-3 x
        # (bench/FINDINGS.md, "2026-11-27, later").
        cen_secs = 1  # enough for a per-acquisition ratio; 41 W2 lines in a full run (15-minute budget)
        server.cli("FLUSHALL")
        mon = Monitor(server, W2_CPU)
        cout, cerr = self.drive(tg.cmd("w2", cfg, server.url, extra(cen_secs)), W2_CPU, cen_secs + 120)
        counts = mon.stop()
        cen_acqs = len(cout["events"]) if cout else 0
        self.fill(line, out)
        ev = sorted(out["events"], key=lambda e: e[2])
        gaps, gaps_other, same, overlaps = [], [], 0, 0
        for a, b in zip(ev, ev[1:]):
            g = b[2] - a[4]
            gaps.append(g)
            if b[0] == a[0]:
                same += 1
            else:
                gaps_other.append(g)
            if b[2] < a[3]:  # the next grant arrived before the previous holder started releasing
                overlaps += 1
        per = {}
        for e in ev:
            per[int(e[0])] = per.get(int(e[0]), 0) + 1
        workers = out["params"].get("workers", 8)
        counts_list = [per.get(w, 0) for w in range(workers)]
        acqs = len(ev)
        line.update({
            "ok": True, "mode": mode, "acquisitions": acqs, "acq_per_s": round(acqs / secs, 1),
            "handoff_gap_us": lat(gaps), "handoff_gap_other_us": lat(gaps_other),
            "same_worker_ratio": round(same / max(1, len(gaps)), 4), "overlaps": overlaps,
            "acquire_wait_us": lat([e[2] - e[1] for e in ev]),
            "per_worker": counts_list,
            "fairness": {"min": min(counts_list), "max": max(counts_list),
                         "min_over_max": round(min(counts_list) / max(1, max(counts_list)), 4),
                         "jain": jain(counts_list)},
            "timeouts": out["timeouts"], "errors": out["errors"], "first_error": out.get("first_error"),
            "client_cmds_per_acq": round(sum(counts.values()) / cen_acqs, 3) if cen_acqs else None,
            "client_cmds_by_name": counts if cout else {"error": cerr},
            "census": {"secs": cen_secs, "acquisitions": cen_acqs},
            "redis_cmds_per_acq": round(out["counters"]["total_cmds"] / max(1, acqs), 3),
            "client_cpu_s": round(out["cpu_ns"] / 1e9, 3),
            "workers_are": vname if tg.lang == "python" else "goroutines" if tg.lang == "go" else "async tasks",
            "monitor_attached": False,
            # 201 quantiles (0, 0.5 %, …, 100 %) of the other-worker gaps: enough to redraw the chart.
            "handoff_gap_other_quantiles_us": quantiles(gaps_other, 200),
        })
        self.emit(line)

    # ---------------- W4
    def w4(self, server):
        n = 20000 if self.quick else 100000
        sha = server.cli("SCRIPT", "LOAD", CAD)
        rows = []
        err = None
        for cpu in (SERVER_CPU, W2_CPU):
            # The floor is the same-core rows'; the cross-core rows are context, and with one client
            # they run at a few thousand requests/s on a slow host (a minute of a full run at n):
            # a fifth of n is plenty for their p50 and p99.
            rn = n if cpu == SERVER_CPU else n // 5
            for clients in (1, 8):
                for test, cmd in (("SET NX PX", ["SET", "bench:w4:k", "v", "NX", "PX", "10000"]),
                                  ("EVALSHA compare-and-delete", ["EVALSHA", sha, "1", "bench:w4:k", "v"])):
                    r = subprocess.run(["taskset", "-c", cpu, "redis-benchmark", "-p", str(server.port), "-n", str(rn),
                                        "-c", str(clients), "-P", "1", "--csv", *cmd],
                                       capture_output=True, text=True, timeout=300)
                    row = parse_rb_csv(r.stdout)
                    if row is None:
                        err = f"redis-benchmark output not understood: {r.stdout[-300:]} {r.stderr[-300:]}"
                        continue
                    rows.append({"test": test, "command": " ".join(cmd), "clients": clients, "client_cpu": cpu, "n": rn,
                                 **row})
        line = self.base("W4", None, "default", f"{SERVER_CPU} and {W2_CPU}")
        line["lib_version"] = rb_version()
        line["params"] = {"n": n, "n_other_core": n // 5, "pipeline": 1}
        c1 = {r["test"]: r for r in rows if r["clients"] == 1 and r["client_cpu"] == SERVER_CPU}
        if len(c1) == 2:
            p50 = c1["SET NX PX"]["p50_us"] + c1["EVALSHA compare-and-delete"]["p50_us"]
            # redis-benchmark's p50 comes in 8 µs steps here (15, 23, 31 …): the p50 floor jumps by
            # a quarter between runs. With one client and no pipelining, 1 / rps is the exact mean
            # round trip, so the mean floor is what the (mean) pairs/s of W1 are compared with.
            mean = sum(1e6 / c1[t]["rps"] for t in ("SET NX PX", "EVALSHA compare-and-delete"))
            line["derived"] = {"pair_floor_p50_us_c1": round(p50, 1), "pair_floor_ops_per_s_c1": round(1e6 / p50, 1),
                               "pair_floor_mean_us_c1": round(mean, 2),
                               "pair_floor_mean_ops_per_s_c1": round(1e6 / mean, 1),
                               "placement": "client on the server's core"}
            line["ok"] = True
        line["rows"] = rows
        line["error"] = err
        self.emit(line)
        return line.get("derived")

    # ---------------- W3
    def w3(self, tgts):
        n, phase_secs = (300, 3) if self.quick else (2000, 5)
        for tg in tgts:
            if tg.lib not in ("pottery", "redlock", "semaphore-redlock-mutex", "redsync") and (tg.lib, tg.lang) != ("ferrolock", "rust"):
                continue
            servers = [Server() for _ in range(5)]
            line = self.base("W3", tg, "default", W1_CPU)
            try:
                urls = ",".join(s.url for s in servers)
                pids = ",".join(str(s.proc.pid) for s in servers)
                extra = ["--urls", urls, "--pids", pids, "--n", str(n), "--phase-secs", str(phase_secs), "--hang-s", "3"]
                out, err = self.drive(tg.cmd("w3", "default", "", extra), W1_CPU, 5 * phase_secs + 120)
            finally:
                for s in servers:
                    s.stop()
            if out is None:
                line["error"] = err
                self.emit(line)
                continue
            self.fill(line, out)
            phases = {}
            for name, ph in out["phases"].items():
                extra_fields = {k: v for k, v in ph.items() if k not in ("acq_ns", "rel_ns", "n", "completed", "failed", "hung")}
                phases[name] = {"n": ph["n"], "completed": ph["completed"], "failed": ph["failed"],
                                "acquire_us": lat([x / 1e3 for x in ph["acq_ns"]]),
                                "release_us": lat([x / 1e3 for x in ph["rel_ns"]]), "hung": ph["hung"], **extra_fields}
            line.update({"ok": True, "phases": phases})
            self.emit(line)

    # ---------------- W5
    def w5(self, server):
        secs = 5 if self.quick else 20
        tg = Target("rust", "ferrolock", "ferrolock Rust (async)", "rust", ["default"], f"redis-rs {cargo_pkg_version('redis')}",
                    peer=False)
        line = self.base("W5", tg, "default", W2_CPU)
        server.cli("FLUSHALL")
        out, err = self.drive(tg.cmd("w5", "default", server.url, ["--locks", "10000", "--secs", str(secs),
                                                                    "--ttl-ms", "3000"]), W2_CPU, secs + 180)
        if out is None:
            line["error"] = err
            self.emit(line)
            return
        self.fill(line, out)
        wall = out["wall_ns"] / 1e9
        line.update({
            "ok": True, "locks": out["params"]["locks"],
            "client_cpu_pct_of_core": round(100 * out["cpu_ns"] / out["wall_ns"], 2),
            "relay_cpu_pct_of_core": round(100 * out["relay_cpu_ns"] / out["wall_ns"], 2),
            "server_cmds_per_s": round(out["counters"]["total_cmds"] / wall, 1),
            "renewals_expected_per_s": round(out["params"]["locks"] / (out["params"]["ttl_ms"] / 3000), 1),
            "ticks": round(out["ticks"], 2),
            "round_trips_per_tick": round(out["client_bursts"] / out["ticks"], 2),
            "client_writes_per_tick": round(out["client_writes"] / out["ticks"], 2),
            "lost": out["lost"], "acquire_all_s": round(out["acquire_all_s"], 2),
        })
        self.emit(line)


def rb_version():
    r = subprocess.run(["redis-benchmark", "--version"], capture_output=True, text=True)
    return r.stdout.strip() or "?"


def parse_rb_csv(text):
    """redis-benchmark 7 --csv: header then one row: test, rps, avg, min, p50, p95, p99, max (ms)."""
    rows = [ln for ln in text.strip().splitlines() if ln.startswith('"')]
    if len(rows) < 2:
        return None
    head = [h.strip('"') for h in rows[0].split('","')]
    vals = [v.strip('"') for v in rows[-1].split('","')]
    d = dict(zip(head, vals))
    try:
        return {"rps": float(d["rps"]), "p50_us": round(float(d["p50_latency_ms"]) * 1000, 1),
                "p99_us": round(float(d["p99_latency_ms"]) * 1000, 1)}
    except (KeyError, ValueError):
        return None


# ------------------------------------------------------------------ summary + charts


def fmt(x, nd=0):
    if x is None:
        return "—"
    return f"{x:,.{nd}f}"


def floor_rate(floor):
    """Pairs/s of the W4 floor the ratios use: the median of the samples taken in the W1 rounds
    (older result files: W4's mean floor, or its p50 one)."""
    rounds = floor.get("w1_rounds_ops_per_s")
    if rounds:
        return sorted(rounds)[len(rounds) // 2]
    return floor.get("pair_floor_mean_ops_per_s_c1") or floor["pair_floor_ops_per_s_c1"]


def with_w1_rounds(floor, lines):
    """W4's floor, plus the floor samples of the W1 rounds when the run took them."""
    rounds = next((x.get("floor_rounds_ops_per_s") for x in lines
                   if x["workload"] == "W1" and x["ok"] and x.get("floor_rounds_ops_per_s")), None)
    return {**floor, "w1_rounds_ops_per_s": rounds} if floor and rounds else floor


def summary(run: Run, floor):
    L = run.lines
    w1 = [x for x in L if x["workload"] == "W1" and x["ok"]]
    w2 = [x for x in L if x["workload"] == "W2" and x["ok"]]
    out = [f"# ferrolock benchmark — {run.tag}", ""]
    out.append(f"Machine: {platform.node()} · {MACHINE_CPUS} CPUs · {platform.platform()} · "
               f"load average (1/5/15 min) at the first line {tuple(L[0].get('machine_load', ())) if L else '?'}, at the last "
               f"{tuple(L[-1].get('machine_load', ())) if L else '?'} (other engineers were compiling on this machine). Mode: {'--quick' if run.quick else 'full'}, "
               f"workloads {', '.join(sorted({x['workload'] for x in L if x['ok']}))}. "
               f"redis-server pinned to CPU {SERVER_CPU}; W1 clients on CPU {W1_CPU}, W2/W5 clients on CPU {W2_CPU}. "
               "Absolute numbers on this shared 2-core machine move ±10–15 % between runs: compare ratios within this "
               "file. Raw lines: `" + run.jsonl.name + "`. Code under test (Rust driver and bindings): "
               + (L[0].get("code_under_test", "?") if L else "?") + ".")
    out.append("")
    peak = max((x.get("machine_load", [0])[0] for x in L), default=0)
    if peak > MACHINE_CPUS:
        out.append(f"**Warning: the machine was overloaded during this run** (1-minute load average up to {peak} on "
                   f"{MACHINE_CPUS} CPUs, from other work on the machine). Every library was slowed, but not equally "
                   "or at the same moment: treat the ratios in this file as rough, and prefer a run with load below "
                   f"{MACHINE_CPUS}.")
        out.append("")
    if floor:
        out.append(f"**Floor (W4, client on the server's core, -c 1):** SET NX PX p50 + EVALSHA p50 = "
                   f"{floor['pair_floor_p50_us_c1']} µs → {fmt(floor['pair_floor_ops_per_s_c1'])} pairs/s.")
        if "pair_floor_mean_us_c1" in floor:
            out.append(f"redis-benchmark's p50 comes in coarse steps (15, 23, 31 µs …), so that sum moves by a quarter "
                       f"from run to run; the × floor ratios below use the **mean floor** instead: with one client and "
                       f"no pipelining 1 / rps is the exact mean round trip, SET + EVALSHA = "
                       f"{floor['pair_floor_mean_us_c1']} µs → **{fmt(floor['pair_floor_mean_ops_per_s_c1'])} pairs/s**, "
                       f"the same kind of number as the W1 pairs/s (also means).")
        if floor.get("w1_rounds_ops_per_s"):
            out.append(f"The same mean floor was sampled again at the start of each W1 round ("
                       f"{', '.join(fmt(x) for x in floor['w1_rounds_ops_per_s'])} pairs/s); the × floor ratios use "
                       f"their median, **{fmt(floor_rate(floor))} pairs/s**, measured in the same minutes as the "
                       f"libraries.")
        out.append("")
    interleaved = bool(w1) and all(x.get("params", {}).get("interleaved") for x in w1)
    out.append("## W1 uncontended (pairs/s, median of 3 repetitions"
               + (", interleaved: round k runs every library once)" if interleaved else ")"))
    out.append("")
    out.append("| library | lang | config | pairs/s | × floor | pair p50 / p99 µs | client cmds/op | server cmds/op | "
               "client CPU µs/op | client context switches/op | reps pairs/s |")
    out.append("|---|---|---|---:|---:|---|---:|---:|---:|---:|---|")
    for x in sorted(w1, key=lambda x: -x["ops_per_s"]):
        ratio = x["ops_per_s"] / floor_rate(floor) if floor else None
        out.append(f"| {x['peer']} | {x['lang']} | {x['config']} | {fmt(x['ops_per_s'])} | {fmt(ratio, 2)} | "
                   f"{x['pair_us']['p50']} / {x['pair_us']['p99']} | {fmt(x['client_cmds_per_op'], 2)} | "
                   f"{fmt(x['redis_cmds_per_op'], 2)} | {fmt(x['client_cpu_us_per_op'], 1)} | "
                   f"{fmt(x.get('client_ctx_switches_per_op'), 2)} | "
                   f"{', '.join(fmt(r) for r in x['reps_ops_per_s'])} |")
    out.append("")
    out.append("### Ratios (W1)")
    out.append("")
    rust = next((x for x in w1 if x["lib"] == "ferrolock" and x["lang"] == "rust"), None)
    for lang in ("rust", "python", "node", "go"):
        ours = next((x for x in w1 if x["lang"] == lang and x["lib"] == "ferrolock" and x["config"] == "default"), None)
        peers = [x for x in w1 if (x["lang"] == lang or lang == "rust") and is_peer(x)]
        locks = [x for x in peers if x["lib"] != "raw"]
        if not ours:
            if peers:
                out.append(f"- {lang}: ferrolock not measured (see Skipped).")
            continue
        parts = [f"- {ours['peer']}: {fmt(ours['ops_per_s'])} pairs/s"]
        if floor:
            parts.append(f"{ours['ops_per_s'] / floor_rate(floor):.2f} × floor")
        if locks:
            best = max(locks, key=lambda x: x["ops_per_s"])
            where = "any language" if lang == "rust" else lang
            parts.append(f"{ours['ops_per_s'] / best['ops_per_s']:.2f} × the best lock peer in {where} "
                         f"({best['peer']} {best['config']})")
        for raw in (x for x in peers if x["lib"] == "raw"):
            parts.append(f"{ours['ops_per_s'] / raw['ops_per_s']:.2f} × {raw['peer']}")
        if rust and lang != "rust":
            parts.append(f"pair p50 {ours['pair_us']['p50'] / rust['pair_us']['p50']:.2f} × the Rust core's")
            ref = reference(w1, lang)
            if ref:
                parts.append(f"{ref['peer']}: pair p50 {ref['pair_us']['p50'] / rust['pair_us']['p50']:.2f} × the "
                             f"Rust core's (the same server work with no binding)")
        out.append(", ".join(parts))
    out.append("")
    out.append("## W2 contended handoff (8 workers, hold 1 ms)")
    out.append("")
    out.append("| library | lang | config | mode | workers | acq/s | gap p50 / p99 µs (other worker) | same-worker | "
               "per-worker min/max | Jain | overlaps | timeouts / errors | client cmds/acq | server cmds/acq |")
    out.append("|---|---|---|---|---|---:|---|---:|---|---:|---:|---|---:|---:|")
    for x in sorted(w2, key=lambda x: (x["mode"], x["lang"], -x["acq_per_s"])):
        g = x["handoff_gap_other_us"]
        f = x["fairness"]
        out.append(f"| {x['peer']} | {x['lang']} | {x['config']} | {x['mode']} | {x['workers_are']} | "
                   f"{fmt(x['acq_per_s'])} | {fmt(g['p50'])} / {fmt(g['p99'])} | {x['same_worker_ratio']:.2f} | "
                   f"{f['min']}/{f['max']} ({f['min_over_max']:.2f}) | {f['jain']} | {x['overlaps']} | "
                   f"{x['timeouts']} / {x['errors']} | {fmt(x['client_cmds_per_acq'], 2)} | "
                   f"{fmt(x['redis_cmds_per_acq'], 2)} |")
    out.append("")
    if any(x.get("monitor_attached") for x in w2):  # result files from before the census run
        how = ("W2 runs with `redis-cli MONITOR` attached (to count client commands); the server is mostly idle in W2, "
               "but MONITOR adds a little server work to every command.")
    else:
        how = ("Client commands per acquisition come from a census: the same driver run again for a few seconds "
               "under `redis-cli MONITOR`, so MONITOR never slows the timed run.")
    out.append(how + " `overlaps` counts grants that arrived before the previous holder had started releasing "
               "(must be 0).")
    out.append("")
    out.append("Node workers are async tasks sharing one process and one connection: a release reply and the next "
               "grant's reply often arrive in the same socket read, so their gaps measure event-loop ordering (≈ 0 µs, "
               "sometimes negative) rather than how fast a separate client notices a release; compare Node gaps with Node. "
               "Go workers are goroutines sharing one client too: ferrolock Go's release wakes the client's next "
               "waiter before `Release` returns to its caller (negative gaps again), while redsync's waiters retry on "
               "their own timers.")
    out.append("")
    out.append("### Ratios (W2)")
    out.append("")
    prl = next((x for x in w2 if x["mode"] == "forced" and x["lib"] == "python-redis-lock" and x["workers_are"] == "threads"), None)
    for x in (y for y in w2 if not is_peer(y)):
        g = x["handoff_gap_other_us"]
        same = [y for y in w2 if is_peer(y) and y["mode"] == x["mode"]]
        s = f"- {x['peer']} `{x['mode']}` ({x['workers_are']}): {fmt(x['acq_per_s'])} acq/s"
        if same:
            best = max(same, key=lambda y: y["acq_per_s"])
            s += f" = {x['acq_per_s'] / best['acq_per_s']:.2f} × the best peer ({best['peer']} {best['config']}, {best['workers_are']})"
        s += f"; gap p50 {fmt(g['p50'])} µs, p99 {fmt(g['p99'])} µs"
        if x["mode"] == "forced" and prl and prl["handoff_gap_other_us"]["p50"]:
            s += f" ({g['p50'] / prl['handoff_gap_other_us']['p50']:.2f} × python-redis-lock's p50)"
        s += (f"; fairness min/max {x['fairness']['min_over_max']:.2f}; {fmt(x['client_cmds_per_acq'], 2)} client "
              f"commands per acquisition.")
        out.append(s)
    out.append("")
    out.extend(targets_section(run, floor, w1, w2))
    out.extend(w3_section(L))
    for w in ("W4", "W5"):
        for x in (y for y in L if y["workload"] == w):
            if w == "W4":
                out.append("## W4 floor (redis-benchmark, -P 1)")
                out.append("")
                out.append("| command | clients | client CPU | rps | p50 µs | p99 µs |")
                out.append("|---|---:|---|---:|---:|---:|")
                for r in x.get("rows", []):
                    out.append(f"| {r['command'][:60]} | {r['clients']} | {r['client_cpu']} | {fmt(r['rps'])} | "
                               f"{r['p50_us']} | {r['p99_us']} |")
                out.append("")
            elif w == "W5" and x["ok"]:
                out.append("## W5 watchdog scale (ferrolock Rust)")
                out.append("")
                out.append(f"{x['locks']} locks renewed by one client's watchdog (TTL {x['params']['ttl_ms']} ms, "
                           f"renewal every TTL/3) for {x['params']['secs']} s: client CPU "
                           f"{x['client_cpu_pct_of_core']} % of one core; server {fmt(x['server_cmds_per_s'])} commands/s "
                           f"(renewals alone would be {fmt(x['renewals_expected_per_s'])}/s, each a script with its inner "
                           f"calls); {x['round_trips_per_tick']} client request bursts per renewal tick "
                           f"({x['client_writes_per_tick']} socket reads at the relay per tick); {x['lost']} locks lost. "
                           f"Counting relay CPU (excluded): {x['relay_cpu_pct_of_core']} %.")
                out.append("")
            elif w == "W5":
                out.append(f"## W5 watchdog scale\n\nFailed: {x['error']}\n")
    out.append("## Versions")
    out.append("")
    seen = set()
    for x in L:
        if not x["ok"]:
            continue
        key = (x["peer"], x.get("lib_version"), x.get("client"), x.get("runtime") if x["workload"] == "W1" else None)
        if key[:2] in seen or key[1] is None:
            continue
        seen.add(key[:2])
        out.append(f"- {x['peer']}: {x['lib_version']} (client: {x.get('client')}; runtime: {x.get('runtime')})")
    out.append("")
    out.append("## Skipped")
    out.append("")
    for x in L:
        err = str(x["error"])
        if x["ok"]:
            continue
        if err.startswith("skipped: "):
            out.append(f"- {x['peer'] if x['workload'] != 'W3' else 'W3 Redlock'}: {err[len('skipped: '):]}")
        else:
            out.append(f"- {x['workload']} {x['peer']} [{x['config']}] {x.get('mode', '')}: failed: {err}")
    out.append("")
    out.append("Charts: " + ", ".join(f"`{p}`" for p in run.charts))
    out.append("")
    return "\n".join(out)


W3_ORDER = ["healthy", "one_stopped_default", "one_stopped_t100", "two_stopped_t100", "after_resume"]


def w3_section(L):
    w3 = [x for x in L if x["workload"] == "W3" and x["ok"]]
    if not w3:
        return []
    out = ["## W3 Redlock over 5 masters (last masters SIGSTOPped, then resumed)", "",
           "One attempt per acquire (no retry loop), a call slower than 3 s counts as hung and ends its phase. "
           "`t100` = a 100 ms per-node timeout in the client. Leak columns: threads still alive (Python) or commands "
           "still queued in the clients (Node) or goroutines above the healthy phase's (Go) at the end of the phase; after resume, commands the resumed nodes "
           "executed late (queued while they were stopped; server commands, so script-internal calls count too).", "",
           "| library | phase | pairs done / failed / hung | acquire p50 / p99 µs | release p50 / p99 µs | leaked / late |",
           "|---|---|---|---|---|---|"]
    for x in w3:
        for name in W3_ORDER:
            ph = x["phases"].get(name)
            if not ph:
                continue
            leak = []
            for k in ("threads_alive_after", "pending_cmds_after", "tasks_alive_after", "goroutines_alive_after"):
                if k in ph:
                    leak.append(f"{k.replace('_', ' ')} {ph[k]}")
            if "late_cmds_on_resumed_nodes" in ph:
                leak.append(f"late cmds {sum(ph['late_cmds_on_resumed_nodes'].values())}")
            a, r = ph["acquire_us"], ph["release_us"]
            out.append(f"| {x['peer']} | {name} | {ph['completed']} / {ph['failed']} / {ph['hung']} | "
                       f"{fmt(a['p50'])} / {fmt(a['p99'])} | {fmt(r['p50'])} / {fmt(r['p99'])} | {'; '.join(leak)} |")
    out.append("")
    return out


def targets_section(run, floor, w1, w2):
    """BENCH.md's targets against this run: met / missed / not measured, never hidden."""
    rows = []

    def row(target, measured, met):
        rows.append(f"| {target} | {measured} | {'met' if met is True else 'missed' if met is False else met} |")

    def ours(workload, lang, **kw):
        kw.setdefault("config", "default")
        for x in (w1 if workload == "W1" else w2):
            if x["lang"] == lang and x["lib"] == "ferrolock" and all(x.get(k) == v for k, v in kw.items()):
                return x
        return None

    fl = floor_rate(floor) if floor else None
    r = ours("W1", "rust")
    if r and fl:
        # Shown rounded down: 0.89996 must not read "0.900 × … missed".
        row("W1 Rust ≥ 0.9 × floor", f"{math.floor(r['ops_per_s'] / fl * 1000) / 1000:.3f} ×",
            r["ops_per_s"] >= 0.9 * fl)
    for lang in ("python", "node"):
        o = ours("W1", lang)
        if not o:
            row(f"W1 {lang} ≥ 0.8 × floor, ahead of every {lang} peer", "binding not measured", "not measured")
            continue
        peers = [x for x in w1 if (x["lang"] == lang or lang == "rust") and is_peer(x)]
        best = max(peers, key=lambda x: x["ops_per_s"]) if peers else None
        met = bool(fl and o["ops_per_s"] >= 0.8 * fl and (not best or o["ops_per_s"] >= best["ops_per_s"]))
        vs_floor = f"{o['ops_per_s'] / fl:.2f} × floor" if fl else "no floor (W4 not run)"
        row(f"W1 {lang} ≥ 0.8 × floor, ahead of every {lang} peer",
            f"{vs_floor}; best peer {best['peer'] if best else '—'}", met if fl else "not measured")
        if r:
            ref = reference(w1, lang)
            row(f"{lang} binding pair p50 ≤ 1.3 × Rust core", f"{o['pair_us']['p50'] / r['pair_us']['p50']:.2f} ×"
                + (f" ({ref['peer']}: {ref['pair_us']['p50'] / r['pair_us']['p50']:.2f} ×)" if ref else ""),
                o["pair_us"]["p50"] <= 1.3 * r["pair_us"]["p50"])
    prl = next((x for x in w2 if x["mode"] == "forced" and x["lib"] == "python-redis-lock" and x["workers_are"] == "threads"), None)
    # Every ferrolock W2 line of the run gets its rows: each language, worker kind and mode.
    mine = [x for x in w2 if x["lib"] == "ferrolock"]

    def who_of(x):
        return f"{x['lang']} {x.get('workers_are', 'workers')}, {x['config']}"

    for f in (x for x in mine if x["mode"] == "forced"):
        who = who_of(f)
        g = f["handoff_gap_other_us"]
        if prl:
            p = prl["handoff_gap_other_us"]["p50"]
            row(f"W2 forced gap p50 ≤ python-redis-lock's (same run) [{who}]", f"{g['p50']} µs vs {p} µs", g["p50"] <= p)
        row(f"W2 forced gap p99 < 1 ms [{who}]", f"{g['p99']} µs", g["p99"] < 1000)
        n = f["client_cmds_per_acq"]
        row(f"W2 client commands per acquisition ≤ 4 (no polling) [{who}]", f"{n}", n is not None and n <= 4)
        row(f"W2 forced: fairness min/max [{who}]", f"{f['fairness']['min_over_max']}", "(reported)")
    any_peers = [x for x in w2 if x["mode"] == "any" and is_peer(x)]
    best_any = max(any_peers, key=lambda x: x["acq_per_s"]) if any_peers else None
    for a in (x for x in mine if x["mode"] == "any"):
        who = who_of(a)
        row(f"W2 any: fairness min/max ≥ 0.8 [{who}]", f"{a['fairness']['min_over_max']}",
            a["fairness"]["min_over_max"] >= 0.8)
        if best_any:
            row(f"W2 any: throughput against the best peer [{who}]",
                f"{a['acq_per_s'] / best_any['acq_per_s']:.2f} × ({best_any['peer']} {best_any['config']}, "
                f"{best_any.get('workers_are', 'workers')})", "(reported)")
    w3 = next((x for x in run.lines if x["workload"] == "W3" and x["ok"] and x["lib"] == "ferrolock"), None)
    if w3:
        ph = w3["phases"]
        h = ph.get("healthy", {}).get("acquire_us", {}).get("p99")
        for name in ("one_stopped_default", "one_stopped_t100"):
            p = ph.get(name, {}).get("acquire_us", {}).get("p99")
            if h and p:
                row(f"W3 {name}: acquire p99 ≤ 1.2 × healthy", f"{p} µs vs {h} µs ({p / h:.2f} ×)", p <= 1.2 * h)
        hung = sum(v.get("hung", 0) for v in ph.values())
        row("W3: no call hangs", f"{hung} hung", hung == 0)
        base = ph.get("healthy", {}).get("tasks_alive_after", 0)
        during = max((ph.get(p, {}).get("tasks_alive_after", 0) for p in W3_ORDER[1:4]), default=0) - base
        after = ph.get("after_resume", {}).get("tasks_alive_after", 0) - base
        late = sum(ph.get("after_resume", {}).get("late_cmds_on_resumed_nodes", {}).values())
        row("W3: nothing leaks (work pending on stopped masters)",
            f"tokio tasks above the healthy baseline: up to {during} while masters were stopped, {after} after resume; "
            f"{late} server commands executed late by the resumed masters", during <= 2 and late == 0)
    else:
        row("W3: stopped node adds nothing to p99, no hang, no leak", "ferrolock Redlock not measured", "not measured")
    w5 = next((x for x in run.lines if x["workload"] == "W5" and x["ok"]), None)
    if w5:
        row("W5: 10,000 locks ≤ 5 % of one core", f"{w5['client_cpu_pct_of_core']} %", w5["client_cpu_pct_of_core"] <= 5)
        row("W5: one pipelined round trip per renewal tick", f"{w5['round_trips_per_tick']} bursts per tick",
            w5["round_trips_per_tick"] <= 1.5)
    if not rows:
        return []
    return ["## Targets (BENCH.md) in this run", "", "| target | measured | |", "|---|---|---|", *rows, ""]


def is_peer(x):
    return x["lib"] not in ("ferrolock", "ferrolock-blocking", "raw-scripts")


def reference(lines, lang):
    """The raw client of `lang` sending ferrolock's own scripts (a reference, not a peer): the
    binding's pair with the same server work and no binding."""
    return next((x for x in lines if x["lang"] == lang and x["lib"] == "raw-scripts"), None)


def charts(run: Run, floor):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    made = []
    w1 = sorted((x for x in run.lines if x["workload"] == "W1" and x["ok"]), key=lambda x: x["ops_per_s"])
    if w1:
        fig, ax = plt.subplots(figsize=(9, 0.45 * len(w1) + 1.5))
        labels = [f"{x['peer']} [{x['config']}]" for x in w1]
        colors = ["#e67e22" if x["lib"] == "raw-scripts" else "#c0392b" if not is_peer(x) else "#7f8c8d" for x in w1]
        ax.barh(labels, [x["ops_per_s"] for x in w1], color=colors)
        from matplotlib.patches import Patch

        handles = [Patch(color="#c0392b", label="ferrolock"), Patch(color="#7f8c8d", label="peers and raw clients")]
        if any(x["lib"] == "raw-scripts" for x in w1):
            handles.append(Patch(color="#e67e22", label="reference: ferrolock's scripts from a raw client"))
        if floor:
            handles.append(ax.axvline(floor_rate(floor), color="black", linestyle="--", label="floor (-c 1, mean)"))
        ax.legend(handles=handles, loc="lower right", fontsize=8)
        ax.set_xlabel("acquire+release pairs per second (W1, median of 3)")
        ax.set_title(f"W1 uncontended — {run.tag}")
        fig.tight_layout()
        p = run.out_dir / f"{run.tag}-w1.png"
        fig.savefig(p, dpi=110)
        plt.close(fig)
        made.append(p.name)
    w2 = [x for x in run.lines if x["workload"] == "W2" and x["ok"] and x["mode"] == "forced"
          and x.get("handoff_gap_other_quantiles_us")]
    if w2:
        panels = [("Rust and Python (threads / processes)", ("rust", "python")), ("Rust and Node (async tasks)", ("rust", "node")),
                  ("Rust and Go (goroutines)", ("rust", "go"))]
        panels = [p for p in panels if any(x["lang"] == p[1][1] for x in w2)] or panels[:1]
        fig, axes = plt.subplots(1, len(panels), figsize=(7.5 * len(panels), 5.5), squeeze=False)
        for ax, (title, langs) in zip(axes[0], panels):
            for x in w2:
                if x["lang"] not in langs:
                    continue
                q = x["handoff_gap_other_quantiles_us"]
                v = [max(g, 1.0) for g in q]
                ys = [i / (len(q) - 1) for i in range(len(q))]
                ours = not is_peer(x)
                ax.plot(v, ys, "-" if ours else "--", linewidth=2.5 if ours else 1.2,
                        label=f"{x['peer']} [{x['config']}, {x['workers_are']}]")
            ax.set_xscale("log")
            ax.set_xlabel("handoff gap to another worker, µs (log; ≤ 1 µs drawn at 1)")
            ax.set_ylabel("fraction of handoffs ≤ x")
            ax.set_title(title)
            ax.grid(True, which="both", alpha=0.3)
            ax.legend(fontsize=7, loc="lower right")
        fig.suptitle(f"W2 forced handoff: how fast a waiting client gets a released lock — {run.tag}")
        fig.tight_layout()
        p = run.out_dir / f"{run.tag}-w2-forced.png"
        fig.savefig(p, dpi=110)
        plt.close(fig)
        made.append(p.name)
    w3 = [x for x in run.lines if x["workload"] == "W3" and x["ok"]]
    if w3:
        fig, ax = plt.subplots(figsize=(11, 5.5))
        width = 0.8 / len(w3)
        for j, x in enumerate(w3):
            xs = [i + j * width for i in range(len(W3_ORDER))]
            p50 = [x["phases"].get(p, {}).get("acquire_us", {}).get("p50") or 0 for p in W3_ORDER]
            p99 = [x["phases"].get(p, {}).get("acquire_us", {}).get("p99") or 0 for p in W3_ORDER]
            bars = ax.bar(xs, p99, width * 0.9, alpha=0.35)
            ax.bar(xs, p50, width * 0.9, color=bars[0].get_facecolor()[:3], label=f"{x['peer']} (solid p50, light p99)")
            for xi, p in zip(xs, W3_ORDER):
                ph = x["phases"].get(p, {})
                if ph.get("hung"):  # drawn at the hang threshold (3 s)
                    ax.bar(xi, 3e6, width * 0.9, fill=False, hatch="//", edgecolor=bars[0].get_facecolor()[:3])
                    ax.text(xi, 3e6, "hung", ha="center", va="bottom", fontsize=8)
        ax.set_yscale("log")
        ax.set_xticks([i + 0.4 - width / 2 for i in range(len(W3_ORDER))], W3_ORDER, fontsize=8)
        ax.set_ylabel("acquire latency, µs (log)")
        ax.set_title(f"W3 Redlock over 5 masters: acquire latency per phase — {run.tag}")
        ax.legend(fontsize=8)
        ax.grid(True, axis="y", which="both", alpha=0.3)
        fig.tight_layout()
        p = run.out_dir / f"{run.tag}-w3.png"
        fig.savefig(p, dpi=110)
        plt.close(fig)
        made.append(p.name)
    return made


# ------------------------------------------------------------------ main


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="about 2 minutes: Rust, W4, one Python peer")
    ap.add_argument("--out", help="results directory (default bench/results)")
    ap.add_argument("--only", help="comma list of workloads to run (W1,W2,W3,W4,W5)")
    ap.add_argument("--langs", help="comma list of client languages to run (rust,python,node,go); default all")
    ap.add_argument("--from", dest="from_jsonl", help="redo the summary and charts of an existing .jsonl")
    args = ap.parse_args()
    if args.from_jsonl:
        return resummarize(Path(args.from_jsonl))
    run = Run(args)
    only = set((args.only or "W1,W2,W3,W4,W5").upper().split(","))
    if not RUST_BIN.exists():
        log(f"missing {RUST_BIN}: build it with cargo build --release -p ferrolock-bench")
        return 2
    if run.jsonl.exists():
        run.jsonl.unlink()  # one file per date and mode: a re-run replaces it
    tg = targets(args, run.skipped)
    if args.langs:
        tg = [t for t in tg if t.lang in args.langs.split(",")]
    log("libraries:", ", ".join(f"{t.label}" for t in tg))
    for what, why in run.skipped:  # recorded as lines too, so the .jsonl explains itself
        line = run.base("W1", None, "default", W1_CPU, {"peer": what, "lib": what, "lang": None, "client": None})
        line["error"] = f"skipped: {why}"
        run.emit(line)
    server = Server()
    floor = None
    t0 = time.time()
    try:
        if "W4" in only:
            floor = run.w4(server)
        if "W1" in only:
            run.w1(server, tg)
        if "W2" in only:
            run.w2(server, tg)
        if "W3" in only:
            run.w3(tg)
        if "W5" in only:
            run.w5(server)
    finally:
        server.stop()
    finish(run, floor)
    log(f"done in {time.time() - t0:.0f}s: {run.jsonl}, charts {run.charts}")
    # The harness is broken (exit 1) only if the reference measurements could not be taken at all.
    must = [x for x in run.lines if x["workload"] in ("W1", "W4") and x["lib"] in ("ferrolock", "redis-benchmark")]
    if not (only & {"W1", "W4"}):
        must = [x for x in run.lines if x["ok"]][:1]
    if not must or not all(x["ok"] for x in must) or run.harness_errors:
        log("HARNESS FAILURE:", run.harness_errors, [x["error"] for x in must if not x["ok"]])
        return 1
    return 0


def finish(run, floor):
    floor = with_w1_rounds(floor, run.lines)
    run.charts = []
    try:
        run.charts = charts(run, floor)
    except Exception as e:  # noqa: BLE001 - a chart failure is a harness failure, reported by main
        run.harness_errors.append(f"charts: {type(e).__name__}: {e}")
    (run.out_dir / f"{run.tag}.md").write_text(summary(run, floor))


def resummarize(path: Path) -> int:
    lines = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
    run = Run(argparse.Namespace(quick=path.stem.endswith("-quick"), out=str(path.parent)))
    run.tag, run.jsonl, run.lines = path.stem, path, lines
    run.skipped = []
    w4 = next((x for x in lines if x["workload"] == "W4" and x["ok"]), None)
    finish(run, w4.get("derived") if w4 else None)
    log(f"rewrote {run.out_dir / (run.tag + '.md')} and {run.charts}")
    return 1 if run.harness_errors else 0


if __name__ == "__main__":
    sys.exit(main())
