// Node side of the benchmark: one workload, one library, raw JSON on stdout.
//
//   node bench.mjs w1 --lib LIB --config default|tuned --url U [--n 5000 --warmup 500 --reps 3]
//   node bench.mjs w2 --lib LIB --config ... --url U --mode any|forced [--workers 8 --secs 10 --hold-ms 1]
//
// LIB: raw (ioredis SET NX PX + EVALSHA), raw-scripts (ioredis sending ferrolock's own acquire and
// release scripts: a reference, the same server work without the binding), redlock (v5),
// semaphore-mutex, semaphore-redlock-mutex, ferrolock (the napi binding, when built).
// Statistics are made by bench/run.py.

import { createRequire } from 'node:module';
import { randomBytes } from 'node:crypto';
import { readFileSync, writeSync } from 'node:fs';

const require = createRequire(import.meta.url);
const Redis = require('ioredis');

const TTL_MS = 10000;
const WAIT_MS = 10000;
const CAD = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end";

function parseArgs(argv) {
  const out = { workload: argv[0] };
  for (let i = 1; i < argv.length; i += 2) out[argv[i].replace(/^--/, '')] = argv[i + 1];
  return out;
}

const now = () => process.hrtime.bigint(); // CLOCK_MONOTONIC, ns
const cpuNs = () => { const u = process.cpuUsage(); return (u.user + u.system) * 1000; };
const ctxSwitches = () => { const r = process.resourceUsage(); return r.voluntaryContextSwitches + r.involuntaryContextSwitches; };
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

function pkgVersion(name) {
  try {
    return JSON.parse(readFileSync(new URL(`./node_modules/${name}/package.json`, import.meta.url), 'utf8')).version;
  } catch {
    return '?';
  }
}

async function totalCmds(r) {
  const info = await r.info('stats');
  const m = /total_commands_processed:(\d+)/.exec(info);
  return Number(m[1]);
}

// Each adapter: { version, settings, newLock(name) -> { acquire(): Promise<bool>, release(): Promise } }
async function makeLib(lib, config, url) {
  const redis = new Redis(url, { lazyConnect: false, enableAutoPipelining: false });
  await redis.ping();
  if (lib === 'raw') {
    redis.defineCommand('cad', { numberOfKeys: 1, lua: CAD });
    return {
      redis, version: pkgVersion('ioredis'),
      settings: { acquire: 'SET NX PX', release: 'EVALSHA compare-and-delete (defineCommand)', wait: 'none' },
      newLock(name) {
        const token = randomBytes(16).toString('hex');
        return {
          async acquire() { return (await redis.set(name, token, 'PX', TTL_MS, 'NX')) === 'OK'; },
          async release() { await redis.cad(name, token); },
        };
      },
    };
  }
  if (lib === 'raw-scripts') {
    // The W1 pair of a ferrolock client, sent by ioredis: the protocol's acquire (a fresh grant)
    // and release (count 0) scripts with the arguments the core sends in W1 (the same 9 and 7
    // elements). No waiting, no reentrancy bookkeeping, no watchdog: a reference for the server's
    // share of a pair.
    const script = (f) => readFileSync(new URL(`../../core/scripts/${f}`, import.meta.url), 'utf8');
    redis.defineCommand('flAcquire', { numberOfKeys: 2, lua: script('acquire.lua') });
    redis.defineCommand('flRelease', { numberOfKeys: 1, lua: script('release.lua') });
    return {
      redis, version: pkgVersion('ioredis'),
      settings: { acquire: 'EVALSHA core/scripts/acquire.lua', release: 'EVALSHA core/scripts/release.lua', wait: 'none' },
      newLock(name) {
        const token = randomBytes(16).toString('hex');
        const key = `ferrolock:{${name}}`;
        return {
          async acquire() {
            const r = await redis.flAcquire(key, `${key}:fence`, token, TTL_MS, 7 * 24 * 3600 * 1000, 1024);
            return r[0] === 1;
          },
          async release() { await redis.flRelease(key, token, `${key}:released`, '0'); },
        };
      },
    };
  }
  if (lib === 'redlock') {
    const Redlock = require('redlock').default;
    const settings = config === 'tuned'
      ? { retryDelay: 1, retryJitter: 0, retryCount: WAIT_MS }
      : { retryCount: Math.ceil(WAIT_MS / 200) }; // library delay/jitter; enough tries to wait ~10 s
    const rl = new Redlock([redis], settings);
    rl.on('error', () => {}); // acquisition failures are counted by the worker
    return {
      redis, version: pkgVersion('redlock'), settings: { ...rl.settings },
      newLock(name) {
        let held = null;
        return {
          async acquire() { held = await rl.acquire([name], TTL_MS); return true; },
          async release() { await held.release(); held = null; },
        };
      },
    };
  }
  if (lib === 'semaphore-mutex' || lib === 'semaphore-redlock-mutex') {
    const sem = require('redis-semaphore');
    const opts = { lockTimeout: TTL_MS, acquireTimeout: WAIT_MS, refreshInterval: 0 };
    if (config === 'tuned') opts.retryInterval = 1;
    return {
      redis, version: pkgVersion('redis-semaphore'),
      settings: { retryInterval_ms: opts.retryInterval ?? 10, refresh: 'off (fixed lease)' },
      newLock(name) {
        const m = lib === 'semaphore-mutex' ? new sem.Mutex(redis, name, opts) : new sem.RedlockMutex([redis], name, opts);
        return {
          async acquire() { await m.acquire(); return true; },
          async release() { await m.release(); },
        };
      },
    };
  }
  if (lib === 'ferrolock') {
    const fl = loadFerrolock();
    const client = await fl.Client.connect(url);
    let version = '?';
    try { version = JSON.parse(readFileSync(`${process.env.FERROLOCK_NODE}/package.json`, 'utf8')).version; } catch { /* keep '?' */ }
    return {
      redis, version, settings: { api: 'async Lock (napi), Client.connect defaults', fair: config === 'fair' },
      close: () => client.close(),
      newLock(name) {
        const lk = client.lock(name, config === 'fair' ? { ttl: TTL_MS, fair: true } : { ttl: TTL_MS });
        let held = null;
        return {
          async acquire() { held = await lk.acquire({ wait: WAIT_MS }); return true; },
          async release() { await held.release(); held = null; },
        };
      },
    };
  }
  throw new Error(`unknown lib ${lib}`);
}

// FERROLOCK_NODE: a directory holding bindings-node's index.js and package.json next to the
// addon built by cargo (assembled by bench/run.sh; nothing is written into bindings-node/).
function loadFerrolock() {
  const p = process.env.FERROLOCK_NODE;
  if (!p) throw new Error('FERROLOCK_NODE (directory of the assembled binding) is not set');
  return require(`${p}/index.js`);
}

async function w1(a) {
  const n = Number(a.n ?? 5000), warmup = Number(a.warmup ?? 500), reps = Number(a.reps ?? 3);
  const L = await makeLib(a.lib, a.config ?? 'default', a.url);
  const counter = new Redis(a.url);
  const lk = L.newLock(`bench:w1:node:${a.lib}:${a.config}`);
  for (let i = 0; i < warmup; i++) {
    if (!(await lk.acquire())) throw new Error('uncontended acquire failed');
    await lk.release();
  }
  const before = await totalCmds(counter);
  const out = [];
  for (let r = 0; r < reps; r++) {
    const acq = [], rel = [];
    const c0 = cpuNs(), w0 = now(), x0 = ctxSwitches();
    for (let i = 0; i < n; i++) {
      const t0 = now();
      const ok = await lk.acquire();
      const t1 = now();
      await lk.release();
      const t2 = now();
      if (!ok) throw new Error('uncontended acquire failed');
      acq.push(Number(t1 - t0));
      rel.push(Number(t2 - t1));
    }
    out.push({ acq_ns: acq, rel_ns: rel, wall_ns: Number(now() - w0), cpu_ns: cpuNs() - c0, ctx_switches: ctxSwitches() - x0 });
  }
  const after = await totalCmds(counter);
  return {
    ok: true, lib_version: L.version, api: 'async', settings: L.settings, runtime: `node ${process.version}`,
    params: { n, warmup, reps, ttl_ms: TTL_MS }, reps: out, counters: { total_cmds: after - before - 1 },
    _close: [L.redis, counter, ...(L.close ? [{ close: L.close }] : [])],
  };
}

async function w2(a) {
  const workers = Number(a.workers ?? 8), secs = Number(a.secs ?? 10), holdMs = Number(a['hold-ms'] ?? 1);
  const forced = a.mode === 'forced';
  const L = await makeLib(a.lib, a.config ?? 'default', a.url);
  const counter = new Redis(a.url);
  const name = `bench:w2:node:${a.lib}:${a.config}:${a.mode}`;
  // forced mode: after releasing, a worker waits until another worker has acquired.
  let last = -1;
  let waiters = [];
  const announce = (w) => { last = w; const ws = waiters; waiters = []; ws.forEach((f) => f()); };
  const base = now();
  const end = base + BigInt(Math.round(secs * 1e9));
  const us = (t) => Number(t - base) / 1000;
  let timeouts = 0, errors = 0, firstError = null;
  const before = await totalCmds(counter);
  const c0 = cpuNs();
  const events = [];
  async function worker(w) {
    const lk = L.newLock(name);
    while (now() < end) {
      const a0 = now();
      try {
        if (!(await lk.acquire())) { timeouts++; continue; }
      } catch (e) {
        const msg = String(e && (e.name || e.message));
        if (/timeout|Timeout|ExecutionError|attempts/.test(msg + String(e?.message))) timeouts++;
        else { errors++; firstError ??= String(e?.message ?? e); }
        continue;
      }
      const a1 = now();
      if (forced) announce(w);
      await sleep(holdMs);
      const r0 = now();
      try { await lk.release(); } catch (e) { errors++; firstError ??= String(e?.message ?? e); }
      const r1 = now();
      events.push([w, us(a0), us(a1), us(r0), us(r1)]);
      if (forced) {
        while (last === w && now() < end) {
          const left = Number(end - now()) / 1e6;
          await new Promise((res) => { waiters.push(res); setTimeout(res, left); });
        }
      }
    }
  }
  await Promise.all(Array.from({ length: workers }, (_, w) => worker(w)));
  const wall = Number(now() - base);
  const cpu = cpuNs() - c0;
  const after = await totalCmds(counter);
  return {
    ok: true, lib_version: L.version, api: 'async', settings: L.settings,
    runtime: `node ${process.version}, ${workers} async tasks, one shared ioredis connection`,
    params: { workers, secs, hold_ms: holdMs, ttl_ms: TTL_MS, wait_ms: WAIT_MS },
    events, timeouts, errors, first_error: firstError, wall_ns: wall, cpu_ns: cpu,
    counters: { total_cmds: after - before - 1 }, _close: [L.redis, counter, ...(L.close ? [{ close: L.close }] : [])],
  };
}

// ---------------------------------------------------------------- W3 (Redlock over 5 masters)

const W3_PHASES = [
  ['healthy', 0, null],
  ['one_stopped_default', 1, null],
  ['one_stopped_t100', 1, 100],
  ['two_stopped_t100', 2, 100],
  ['after_resume', 0, null],
];

async function w3(a) {
  const urls = a.urls.split(','), pids = a.pids.split(',').map(Number);
  const n = Number(a.n ?? 2000), phaseSecs = Number(a['phase-secs'] ?? 8), hangMs = Number(a['hang-s'] ?? 3) * 1000;
  const counters = urls.map((u) => new Redis(u));
  const mk = (timeout) => urls.map((u) => new Redis(u, timeout ? { commandTimeout: timeout } : {}));
  const defaultC = mk(null), t100C = mk(100);
  // Wait for every connection while all masters are up (a PING could itself exceed the 100 ms
  // command timeout on a loaded machine).
  await Promise.all([...defaultC, ...t100C].map((c) => (c.status === 'ready' ? null : new Promise((r) => c.once('ready', r)))));
  let lockFor;
  let version;
  if (a.lib === 'redlock') {
    const Redlock = require('redlock').default;
    version = pkgVersion('redlock');
    lockFor = (clients, key) => {
      const rl = new Redlock(clients, { retryCount: 0 });
      rl.on('error', () => {});
      let held = null;
      return {
        async acquire() { try { held = await rl.acquire([key], TTL_MS); return true; } catch { return false; } },
        async release() { await held.release(); held = null; },
      };
    };
  } else if (a.lib === 'semaphore-redlock-mutex') {
    const sem = require('redis-semaphore');
    version = pkgVersion('redis-semaphore');
    lockFor = (clients, key) => {
      const m = new sem.RedlockMutex(clients, key, { lockTimeout: TTL_MS, acquireTimeout: WAIT_MS, refreshInterval: 0 });
      return { acquire: () => m.tryAcquire(), release: () => m.release() };
    };
  } else throw new Error(`W3 has no driver for ${a.lib}`);
  const phases = {};
  let stopped = [];
  const baseline = {};
  const totalOn = async (i) => totalCmds(counters[i]);
  for (const [name, nStopped, timeout] of W3_PHASES) {
    while (stopped.length < nStopped) {
      const i = urls.length - 1 - stopped.length;
      baseline[i] = await totalOn(i);
      stopped.push(i);
      process.kill(pids[i], 'SIGSTOP');
    }
    let late = null;
    if (nStopped === 0 && stopped.length) {
      for (const i of stopped) process.kill(pids[i], 'SIGCONT');
      await sleep(300);
      late = {};
      for (const i of stopped) late[urls[i]] = (await totalOn(i)) - baseline[i] - 1;
      stopped = [];
    }
    const clients = timeout ? t100C : defaultC;
    const lk = lockFor(clients, `bench:w3:node:${a.lib}:${name}`);
    const acq = [], rel = [];
    let failed = 0, hung = 0;
    const tEnd = Date.now() + phaseSecs * 1000;
    const call = async (fn) => {
      let timer;
      const t0 = now();
      const r = await Promise.race([
        fn().then((v) => ({ v }), (e) => ({ e })),
        new Promise((res) => { timer = setTimeout(() => res({ hung: true }), hangMs); }),
      ]);
      clearTimeout(timer);
      return { ...r, ns: Number(now() - t0) };
    };
    for (let k = 0; k < n && Date.now() < tEnd; k++) {
      const ra = await call(() => lk.acquire());
      if (ra.hung) { hung++; break; }
      acq.push(ra.ns);
      if (ra.e || !ra.v) { failed++; continue; }
      const rr = await call(() => lk.release());
      if (rr.hung) { hung++; break; }
      rel.push(rr.ns);
      if (rr.e) failed++;
    }
    const pending = clients.reduce((s, c) => s + (c.commandQueue?.length ?? 0) + (c.offlineQueue?.length ?? 0), 0);
    phases[name] = { n: acq.length, completed: rel.length, failed, hung, acq_ns: acq, rel_ns: rel, pending_cmds_after: pending };
    if (late) phases[name].late_cmds_on_resumed_nodes = late;
  }
  for (const i of stopped) process.kill(pids[i], 'SIGCONT');
  return {
    ok: true, lib_version: version, api: 'async',
    settings: { per_node_timeout_ms: 'ioredis default (none) / commandTimeout 100 (t100)', attempts: 'one (retryCount 0 / tryAcquire)' },
    runtime: `node ${process.version}`,
    params: { n, phase_secs: phaseSecs, hang_s: hangMs / 1000, masters: urls.length, ttl_ms: TTL_MS },
    phases, _close: [...counters, ...defaultC, ...t100C],
  };
}

// Write all of `text` to stdout before exiting (process.stdout.write + process.exit can cut a
// large result at the pipe's 64 KiB).
function emit(text) {
  const buf = Buffer.from(text + '\n');
  let off = 0;
  while (off < buf.length) {
    try {
      off += writeSync(1, buf, off, buf.length - off);
    } catch (e) {
      if (e.code !== 'EAGAIN') throw e;
    }
  }
}

const a = parseArgs(process.argv.slice(2));
try {
  const out = await ({ w1, w2, w3 })[a.workload](a);
  const close = out._close;
  delete out._close;
  emit(JSON.stringify(out));
  for (const c of close) (c.disconnect ? c.disconnect() : c.close?.());
  process.exit(0);
} catch (e) {
  emit(JSON.stringify({ ok: false, error: `${e?.name}: ${e?.message ?? e}` }));
  process.exit(1);
}
