"""Python side of the benchmark: one workload, one library, raw JSON on stdout.

    python bench.py w1 --lib LIB --config default|tuned --url U [--n 5000 --warmup 500 --reps 3]
    python bench.py w2 --lib LIB --config ... --url U --mode any|forced [--workers 8 --secs 10
                       --hold-ms 1 --procs 0|1]

Statistics and the redis-lock-bench/v1 line are made by bench/run.py (same code for every
language). LIB is one of: raw, raw-scripts, redis-py-lock, python-redis-lock, pottery, ferrolock
(raw-scripts: redis-py sending ferrolock's own acquire and release scripts, a reference for
bench/py/account.py: the same server work without the binding).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import resource
import sys
import threading
import time
from importlib import metadata

import redis

TTL_S = 10
WAIT_S = 10

# Compare-and-delete for the raw baseline (one script call per release, like every lock library).
CAD = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end"


def cpu_ns() -> int:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return int((ru.ru_utime + ru.ru_stime) * 1e9)


_COUNTER = {}


def ctx_switches() -> int:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_nvcsw + ru.ru_nivcsw


def total_cmds(url: str) -> int:
    """total_commands_processed, read on one kept connection (so each read adds exactly 1)."""
    r = _COUNTER.get(url)
    if r is None:
        r = _COUNTER[url] = redis.Redis.from_url(url, single_connection_client=True)
        r.ping()
    return int(r.info("stats")["total_commands_processed"])


def version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "?"


class Lib:
    """Adapter: `new_lock(name)` returns an object with acquire() -> bool and release()."""

    def __init__(self, lib: str, config: str, url: str):
        self.lib, self.config, self.url = lib, config, url
        self.settings: dict = {}
        self.api = "sync"
        if lib == "ferrolock":
            import ferrolock  # noqa: F401  (fails early when the binding is not installed)

            self.lib_version = version("ferrolock")
            self.client = make_ferrolock_client(url)
        else:
            self.r = redis.Redis.from_url(url)
            self.lib_version = {
                "raw": version("redis"),
                "raw-scripts": version("redis"),
                "redis-py-lock": version("redis"),
                "python-redis-lock": version("python-redis-lock"),
                "pottery": version("pottery"),
            }[lib]
        if lib == "raw":
            self.cad = self.r.register_script(CAD)
            self.settings = {"acquire": "SET NX PX", "release": "EVALSHA compare-and-delete", "wait": "none"}
        elif lib == "raw-scripts":
            scripts = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "core", "scripts")
            with open(os.path.join(scripts, "acquire.lua")) as f:
                self.fl_acquire = self.r.register_script(f.read())
            with open(os.path.join(scripts, "release.lua")) as f:
                self.fl_release = self.r.register_script(f.read())
            self.settings = {"acquire": "EVALSHA core/scripts/acquire.lua", "release": "EVALSHA core/scripts/release.lua",
                             "wait": "none"}
        elif lib == "redis-py-lock":
            self.sleep = 0.1 if config == "default" else 0.001
            self.settings = {"sleep_s": self.sleep}
        elif lib == "python-redis-lock":
            self.settings = {"wait": "BLPOP on a signal list (no retry delay to tune)"}
        elif lib == "pottery":
            import pottery

            base = pottery.Redlock
            if config == "tuned":
                # The retry delay is a class attribute (not a constructor option): 1 ms, not 200 ms.
                base = type("TunedRedlock", (pottery.Redlock,), {"_RETRY_DELAY": 0.001})
            self.redlock_cls = base
            self.settings = {"retry_delay_s": base._RETRY_DELAY, "note": "uniform(0, delay) sleep"}
        elif lib == "ferrolock":
            self.settings = {"api": "sync Lock", "fair": config == "fair"}

    def new_lock(self, name: str):
        lib = self.lib
        if lib == "raw":
            return RawLock(self, name)
        if lib == "raw-scripts":
            return RawScriptsLock(self, name)
        if lib == "redis-py-lock":
            lk = self.r.lock(name, timeout=TTL_S, sleep=self.sleep, blocking_timeout=WAIT_S)
            return Adapter(lk.acquire, lk.release)
        if lib == "python-redis-lock":
            import redis_lock

            lk = redis_lock.Lock(self.r, name, expire=TTL_S)
            return Adapter(lambda: lk.acquire(blocking=True, timeout=WAIT_S), lk.release)
        if lib == "pottery":
            lk = self.redlock_cls(key=name, masters={self.r}, auto_release_time=TTL_S)
            return Adapter(lambda: lk.acquire(blocking=True, timeout=WAIT_S), lk.release)
        if lib == "ferrolock":
            return ferrolock_lock(self.client, name, self.config == "fair")
        raise SystemExit(f"unknown lib {lib}")


class Adapter:
    def __init__(self, acquire, release):
        self.acquire, self.release = acquire, release


class RawLock:
    def __init__(self, lib: Lib, name: str):
        self.r, self.cad, self.name = lib.r, lib.cad, name
        self.token = os.urandom(16).hex()

    def acquire(self) -> bool:
        return bool(self.r.set(self.name, self.token, nx=True, px=TTL_S * 1000))

    def release(self):
        self.cad(keys=[self.name], args=[self.token])


class RawScriptsLock:
    """The W1 pair of a ferrolock client, sent by redis-py: the protocol's acquire (a fresh grant)
    and release (count 0) scripts with the arguments the core sends in W1. No waiting, no
    reentrancy bookkeeping, no watchdog: a reference for the server's share of a pair."""

    def __init__(self, lib: Lib, name: str):
        self.acq, self.rel = lib.fl_acquire, lib.fl_release
        self.key = f"ferrolock:{{{name}}}"
        self.token = os.urandom(16).hex()

    def acquire(self) -> bool:
        r = self.acq(keys=[self.key, self.key + ":fence"], args=[self.token, TTL_S * 1000, 7 * 24 * 3600 * 1000, 1024])
        return r[0] == 1

    def release(self):
        self.rel(keys=[self.key], args=[self.token, self.key + ":released", "0"])


# ---- ferrolock binding (its API is documented in bindings-python; adapt here if it changes) ----


def make_ferrolock_client(url: str):
    import ferrolock

    return ferrolock.Client(url) if not hasattr(ferrolock.Client, "connect") else ferrolock.Client.connect(url)


def ferrolock_lock(client, name: str, fair: bool = False):
    lk = client.lock(name, ttl=float(TTL_S), fair=True) if fair else client.lock(name, ttl=float(TTL_S))
    state = {}

    def acquire():
        state["held"] = lk.acquire(wait=float(WAIT_S))
        return True

    def release():
        held = state.pop("held", None)
        if held is not None and hasattr(held, "release"):
            held.release()
        else:
            lk.release()

    return Adapter(acquire, release)


# ---------------------------------------------------------------- W1


def w1(a) -> dict:
    lib = Lib(a.lib, a.config, a.url)
    name = f"bench:w1:py:{a.lib}:{a.config}"
    lk = lib.new_lock(name)
    for _ in range(a.warmup):
        if not lk.acquire():
            raise RuntimeError("uncontended acquire failed")
        lk.release()
    before = total_cmds(a.url)
    reps = []
    perf = time.perf_counter_ns
    for _ in range(a.reps):
        acq, rel = [], []
        c0, w0, x0 = cpu_ns(), perf(), ctx_switches()
        for _ in range(a.n):
            t0 = perf()
            ok = lk.acquire()
            t1 = perf()
            lk.release()
            t2 = perf()
            if not ok:
                raise RuntimeError("uncontended acquire failed")
            acq.append(t1 - t0)
            rel.append(t2 - t1)
        reps.append({"acq_ns": acq, "rel_ns": rel, "wall_ns": perf() - w0, "cpu_ns": cpu_ns() - c0,
                     "ctx_switches": ctx_switches() - x0})
    after = total_cmds(a.url)
    return {
        "ok": True, "lib_version": lib.lib_version, "api": lib.api, "settings": lib.settings,
        "runtime": f"CPython {sys.version.split()[0]}",
        "params": {"n": a.n, "warmup": a.warmup, "reps": a.reps, "ttl_ms": TTL_S * 1000},
        "reps": reps, "counters": {"total_cmds": after - before - 1},
    }


# ---------------------------------------------------------------- W2


def worker_loop(wid, a, end_ns, last, cond, out, lib=None):
    """One W2 worker: acquire -> hold -> release until end_ns; stamps on CLOCK_MONOTONIC.
    Threads share one client (`lib`), as an application would; processes each make their own."""
    lib = lib or Lib(a.lib, a.config, a.url)
    lk = lib.new_lock(f"bench:w2:py:{a.lib}:{a.config}:{a.mode}")
    mono = time.monotonic_ns
    ev, timeouts, errors, first_error = [], 0, 0, None
    hold = a.hold_ms / 1000.0
    while mono() < end_ns:
        a0 = mono()
        try:
            ok = lk.acquire()
        except Exception as e:  # noqa: BLE001 - counted and reported, never hidden
            errors += 1
            first_error = first_error or repr(e)
            time.sleep(0.01)
            continue
        if not ok:
            timeouts += 1
            continue
        a1 = mono()
        if a.mode == "forced":
            with cond:
                last.value = wid
                cond.notify_all()
        time.sleep(hold)
        r0 = mono()
        try:
            lk.release()
        except Exception as e:  # noqa: BLE001
            errors += 1
            first_error = first_error or repr(e)
        r1 = mono()
        ev.append([wid, a0, a1, r0, r1])
        if a.mode == "forced":
            with cond:
                cond.wait_for(lambda: last.value != wid or mono() >= end_ns, timeout=max(0.0, (end_ns - mono()) / 1e9))
    out.put((ev, timeouts, errors, first_error, lib.lib_version, lib.settings))


class _Val:
    value = -1


def w2(a) -> dict:
    import queue

    secs_ns = int(a.secs * 1e9)
    before = total_cmds(a.url)
    c0 = cpu_ns()
    start = time.monotonic_ns() + 300_000_000  # let every worker connect first
    end = start + secs_ns
    if a.procs:
        ctx = mp.get_context("fork")
        last, cond, out = ctx.Value("i", -1), ctx.Condition(), ctx.Queue()
        ps = [ctx.Process(target=delayed, args=(w, a, start, end, last, cond, out)) for w in range(a.workers)]
        for p in ps:
            p.start()
        results = [out.get(timeout=a.secs + 60) for _ in ps]
        for p in ps:
            p.join()
        cpu = sum_children_cpu() + (cpu_ns() - c0)
    else:
        last, cond, out = _Val(), threading.Condition(), queue.Queue()
        shared = Lib(a.lib, a.config, a.url)
        ts = [threading.Thread(target=delayed, args=(w, a, start, end, last, cond, out, shared)) for w in range(a.workers)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        results = [out.get() for _ in ts]
        cpu = cpu_ns() - c0
    wall = time.monotonic_ns() - start
    after = total_cmds(a.url)
    events = []
    timeouts = errors = 0
    first_error = None
    for ev, t, e, fe, lib_version, settings in results:
        events.extend(ev)
        timeouts += t
        errors += e
        first_error = first_error or fe
    events = [[w, (a0 - start) / 1e3, (a1 - start) / 1e3, (r0 - start) / 1e3, (r1 - start) / 1e3] for w, a0, a1, r0, r1 in events]
    return {
        "ok": True, "lib_version": lib_version, "api": "sync", "settings": settings,
        "runtime": f"CPython {sys.version.split()[0]}, {a.workers} {'processes' if a.procs else 'threads'}",
        "params": {"workers": a.workers, "secs": a.secs, "hold_ms": a.hold_ms, "ttl_ms": TTL_S * 1000,
                   "wait_ms": WAIT_S * 1000, "workers_are": "processes" if a.procs else "threads"},
        "events": events, "timeouts": timeouts, "errors": errors, "first_error": first_error,
        "wall_ns": wall, "cpu_ns": cpu, "counters": {"total_cmds": after - before - 1},
    }


def delayed(wid, a, start, end, last, cond, out, lib=None):
    now = time.monotonic_ns()
    if start > now:
        time.sleep((start - now) / 1e9)
    worker_loop(wid, a, end, last, cond, out, lib)


def sum_children_cpu() -> int:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return int((ru.ru_utime + ru.ru_stime) * 1e9)


# ---------------------------------------------------------------- W3 (Redlock over 5 masters)

W3_PHASES = [  # (name, nodes stopped after this phase's set-up, per-node timeout)
    ("healthy", 0, None),
    ("one_stopped_default", 1, None),
    ("one_stopped_t100", 1, 0.1),
    ("two_stopped_t100", 2, 0.1),
    ("after_resume", 0, None),
]


def w3(a) -> dict:
    """pottery Redlock over the given masters; this driver SIGSTOPs/SIGCONTs the last nodes itself.
    Each call runs in a helper thread so a hung call is detected (hang_s) instead of hanging us."""
    import pottery
    import signal

    urls, pids = a.urls.split(","), [int(x) for x in a.pids.split(",")]
    counters = [redis.Redis.from_url(u, single_connection_client=True) for u in urls]

    def clients(timeout):
        return [redis.Redis.from_url(u, socket_timeout=timeout, socket_connect_timeout=timeout) for u in urls]

    default_c, t100_c = clients(None), clients(0.1)
    for c in default_c + t100_c:
        c.ping()  # connect while every node is up
    phases = {}
    stopped: list[int] = []
    baseline: dict[int, int] = {}
    base_threads = threading.active_count()
    for name, n_stopped, timeout in W3_PHASES:
        while len(stopped) < n_stopped:
            i = len(urls) - 1 - len(stopped)
            baseline[i] = int(counters[i].info("stats")["total_commands_processed"])
            stopped.append(i)
            os.kill(pids[i], signal.SIGSTOP)
        late = None
        if n_stopped == 0 and stopped:
            for i in stopped:
                os.kill(pids[i], signal.SIGCONT)
            time.sleep(0.3)
            # Commands sent to a node while it was stopped and executed when it resumed (stale
            # lock writes and releases), less this harness's own INFO.
            late = {urls[i]: int(counters[i].info("stats")["total_commands_processed"]) - baseline[i] - 1 for i in stopped}
            stopped = []
        masters = set(t100_c if timeout else default_c)
        lk = pottery.Redlock(key=f"bench:w3:py:{name}", masters=masters, auto_release_time=TTL_S)
        ph = run_phase(lambda: lk.acquire(blocking=False), lk.release, a.n, a.phase_secs, a.hang_s)
        ph["threads_alive_after"] = threading.active_count() - base_threads
        if late is not None:
            ph["late_cmds_on_resumed_nodes"] = late
        phases[name] = ph
    for i in stopped:
        os.kill(pids[i], signal.SIGCONT)
    return {
        "ok": True, "lib_version": version("pottery"), "api": "sync",
        "settings": {"per_node_timeout_s": "None (default) / 0.1 (t100)", "blocking": False},
        "runtime": f"CPython {sys.version.split()[0]}",
        "params": {"n": a.n, "phase_secs": a.phase_secs, "hang_s": a.hang_s, "masters": len(urls), "ttl_ms": TTL_S * 1000},
        "phases": phases,
    }


def run_phase(acquire, release, n, phase_secs, hang_s) -> dict:
    """Up to n acquire->release pairs or phase_secs; a call longer than hang_s counts as hung and
    ends the phase (every later call would hang the same way)."""
    acq, rel = [], []
    failed = hung = 0
    t_end = time.monotonic() + phase_secs
    perf = time.perf_counter_ns

    def call(fn):
        box = {}

        def run():
            try:
                box["v"] = fn()
            except Exception as e:  # noqa: BLE001
                box["e"] = e

        th = threading.Thread(target=run, daemon=True)
        t0 = perf()
        th.start()
        th.join(hang_s)
        dt_ns = perf() - t0
        if th.is_alive():
            return None, dt_ns, "hung"
        return box.get("v"), dt_ns, box.get("e")

    for _ in range(n):
        if time.monotonic() > t_end:
            break
        ok, dt_a, err = call(acquire)
        if err == "hung":
            hung += 1
            break
        acq.append(dt_a)
        if err is not None or not ok:
            failed += 1
            continue
        _, dt_r, err = call(release)
        if err == "hung":
            hung += 1
            break
        rel.append(dt_r)
        if err is not None:
            failed += 1
    return {"n": len(acq), "completed": len(rel), "failed": failed, "hung": hung, "acq_ns": acq, "rel_ns": rel}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("workload", choices=["w1", "w2", "w3"])
    p.add_argument("--urls", default="")
    p.add_argument("--pids", default="")
    p.add_argument("--phase-secs", type=float, default=8)
    p.add_argument("--hang-s", type=float, default=3)
    p.add_argument("--lib", default="pottery")
    p.add_argument("--config", default="default")
    p.add_argument("--url", default="")
    p.add_argument("--n", type=int, default=5000)
    p.add_argument("--warmup", type=int, default=500)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--mode", default="any")
    p.add_argument("--workers", type=int, default=8)
    p.add_argument("--secs", type=float, default=10)
    p.add_argument("--hold-ms", type=float, default=1)
    p.add_argument("--procs", type=int, default=0)
    a = p.parse_args()
    try:
        out = {"w1": w1, "w2": w2, "w3": w3}[a.workload](a)
    except Exception as e:  # noqa: BLE001 - the harness records the failure as a line
        print(json.dumps({"ok": False, "error": f"{type(e).__name__}: {e}"}))
        sys.exit(1)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
