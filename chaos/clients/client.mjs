#!/usr/bin/env node
// The Node chaos client: the same loop and history format as chaos/src/bin/chaos-client.rs.
//
//   node client.mjs --redis URL[,URL...] --resource HOST:PORT --name LOCK --id ID --history FILE
//                   --stop-file FILE [--ttl-ms 1000] [--wait-ms 5000] [--work-ms 5-10] [--seed N]
//                   [--reentrant] [--cancel-ms LO-HI] [--fair]
//
// Until the stop file exists: acquire (watchdog-renewed lease), fenced READ -> work (5-10 ms; long
// work ends early once the stop file exists) -> fenced WRITE (sent even if the lock was lost: a
// write in flight), release.
// With --cancel-ms (W4, B1), half of the outer acquires get an AbortSignal that aborts after a
// delay drawn from LO-HI ms; an acquire it ends rejects with CANCELLED, and the history gets
// `acquire` `info` with "error":"CANCELLED","cancelled":true.
import { createRequire } from 'node:module';
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
const require = createRequire(import.meta.url);
const { Client, Redlock } = require(process.env.FERROLOCK_NODE || path.join(here, '../../bindings-node/index.js'));

const argv = process.argv.slice(2);
const arg = (name, dflt) => {
  const i = argv.indexOf(name);
  if (i < 0 || i + 1 >= argv.length) {
    if (dflt !== undefined) return dflt;
    process.stderr.write(`client.mjs: missing ${name}\n`);
    process.exit(2);
  }
  return argv[i + 1];
};
const a = {
  redis: arg('--redis').split(','), resource: arg('--resource'), name: arg('--name'), id: arg('--id'),
  history: arg('--history'), stopFile: arg('--stop-file'), ttl: Number(arg('--ttl-ms', '1000')),
  wait: Number(arg('--wait-ms', '5000')), seed: Number(arg('--seed', '1')), reentrant: argv.includes('--reentrant'), fair: argv.includes('--fair'),
};
const [workLo, workHi = workLo] = arg('--work-ms', '5-10').split('-').map(Number);
const cancelMs = argv.includes('--cancel-ms') ? arg('--cancel-ms').split('-').map(Number) : null;

// Seeded jitter (mulberry32).
let seed = a.seed >>> 0;
const rand = () => {
  seed = (seed + 0x6d2b79f5) >>> 0;
  let t = seed;
  t = Math.imul(t ^ (t >>> 15), t | 1);
  t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
  return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
};

const fd = fs.openSync(a.history, 'a');
const now = () => process.hrtime.bigint(); // CLOCK_MONOTONIC on Linux
function emit(op, type, fence = null, validityMs = null, extra = {}, t = now()) {
  const line = { process: a.id, pid: process.pid, lang: 'node', op, type, key: a.name, fence, validity_ms: validityMs, t_mono_ns: 0, ...extra };
  // t_mono_ns and deadline_ns are BigInts: splice them in as integers.
  let s = JSON.stringify(line, (k, v) => (typeof v === 'bigint' ? `__BIG${v}__` : v));
  s = s.replace('"t_mono_ns":0', `"t_mono_ns":${t}`).replace(/"__BIG(\d+)__"/g, '$1');
  fs.writeSync(fd, s + '\n');
  return t;
}
const INFO = new Set(['TIMEOUT', 'CONNECTION', 'CANCELLED', 'INTERNAL']);
const kindType = (e) => (INFO.has(e.code) ? 'info' : 'fail');
const err = (e) => ({ error: e.code ?? 'ERROR', message: String(e.message) });
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
// Work for `ms`; long work (over 50 ms) ends early once the stop file exists.
async function work(ms) {
  const end = Date.now() + ms;
  for (;;) {
    const left = end - Date.now();
    if (left <= 0 || (ms > 50 && fs.existsSync(a.stopFile))) return;
    await sleep(Math.min(left, 50));
  }
}

async function connectResource(hostport) {
  const colon = hostport.lastIndexOf(':');
  const socket = net.connect({ host: hostport.slice(0, colon), port: Number(hostport.slice(colon + 1)) });
  await new Promise((resolve, reject) => { socket.once('connect', resolve); socket.once('error', reject); });
  socket.setNoDelay(true);
  socket.setEncoding('utf8');
  let buffered = '';
  const waiting = [];
  socket.on('data', (chunk) => {
    buffered += chunk;
    let nl;
    while ((nl = buffered.indexOf('\n')) >= 0) {
      const line = buffered.slice(0, nl);
      buffered = buffered.slice(nl + 1);
      waiting.shift()?.resolve(line);
    }
  });
  const failAll = (e) => { for (const w of waiting.splice(0)) w.reject(e); };
  socket.on('error', failAll);
  socket.on('close', () => failAll(new Error('the resource connection closed')));
  const call = (line) => new Promise((resolve, reject) => { waiting.push({ resolve, reject }); socket.write(line + '\n'); });
  await call(`HELLO ${a.id} ${process.pid}`);
  return { call, close: () => socket.end() };
}

async function main() {
  emit('start', 'ok');
  const opts = { responseTimeout: 250, connectTimeout: 500 };
  let client;
  for (;;) {
    try {
      client = a.redis.length > 1 ? await Redlock.connect(a.redis, opts) : await Client.connect(a.redis[0], opts);
      break;
    } catch (e) {
      if (!['CONNECTION', 'TIMEOUT'].includes(e.code) || fs.existsSync(a.stopFile)) throw e;
      emit('connect', 'fail', null, null, err(e));
      await sleep(100);
    }
  }
  const lock = client.lock(a.name, { ttl: a.ttl, renew: true, fair: a.fair });
  const res = await connectResource(a.resource);

  // The believed expiry moves with renewals: sample it (see the Rust client).
  let current = null;
  let last = 0n;
  const sampler = setInterval(() => {
    if (!current || current.state !== 'held') return;
    const d = now() + BigInt(Math.round(current.remaining() * 1e6));
    const diff = d > last ? d - last : last - d;
    if (diff > 5_000_000n) {
      last = d;
      emit('deadline', 'info', current.fence, null, { deadline_ns: d });
    }
  }, 20);

  while (!fs.existsSync(a.stopFile)) {
    // W4: abort half of the acquires after a random delay unless they completed by then.
    let abort = null;
    if (cancelMs && rand() < 0.5) {
      const [lo, hi = lo] = cancelMs;
      const after = Math.round(lo + rand() * (hi - lo));
      const ctl = new AbortController();
      abort = { ctl, after, timer: setTimeout(() => ctl.abort(), after) };
    }
    emit('acquire', 'invoke');
    let held;
    try {
      held = await lock.acquire(abort ? { wait: a.wait, signal: abort.ctl.signal } : { wait: a.wait });
    } catch (e) {
      if (abort?.ctl.signal.aborted && e.code === 'CANCELLED') {
        emit('acquire', 'info', null, null, { ...err(e), cancelled: true, after_ms: abort.after });
        continue;
      }
      emit('acquire', kindType(e), null, null, err(e));
      if (INFO.has(e.code)) await sleep(10);
      continue;
    } finally {
      if (abort) clearTimeout(abort.timer);
    }
    const tOk = now();
    const remaining = held.remaining();
    const fence = held.fence;
    emit('acquire', 'ok', fence, remaining, { deadline_ns: tOk + BigInt(Math.round(remaining * 1e6)), count: held.count }, tOk);
    held.onLost((e) => emit('lost', 'info', fence, null, err(e)));
    current = held;

    const inner = [];
    if (a.reentrant) {
      const n = 1 + Math.floor(rand() * 3);
      for (let i = 0; i < n; i++) {
        try {
          const h2 = await lock.acquire({ wait: a.wait });
          emit('reenter', 'ok', h2.fence, null, { count: h2.count });
          inner.push(h2);
        } catch (e) {
          emit('reenter', kindType(e), fence, null, err(e));
        }
      }
    }

    emit('read', 'invoke', fence);
    const r = await res.call(`READ ${fence}`);
    if (r.startsWith('OK ')) {
      const v = BigInt(r.slice(3));
      emit('read', 'ok', fence, null, { value: v });
      await work(workLo + rand() * (workHi - workLo));
      emit('write', 'invoke', fence, null, { value: v + 1n });
      const w = await res.call(`WRITE ${fence} ${v + 1n}`);
      if (w === 'OK') emit('write', 'ok', fence, null, { value: v + 1n });
      else emit('write', 'fail', fence, null, { highest: w });
    } else {
      emit('read', 'fail', fence, null, { highest: r });
    }

    while (inner.length) {
      const h2 = inner.pop();
      try {
        await h2.release();
        emit('reenter_release', 'ok', fence);
      } catch (e) {
        emit('reenter_release', kindType(e), fence, null, err(e));
      }
    }
    current = null;
    emit('release', 'invoke', fence);
    try {
      await held.release();
      emit('release', 'ok', fence);
    } catch (e) {
      emit('release', kindType(e), fence, null, err(e));
    }
    if (a.reentrant) {
      try {
        await held.release();
        emit('over_release', 'ok', fence);
      } catch (e) {
        emit('over_release', 'fail', fence, null, err(e));
      }
    }
  }
  clearInterval(sampler);
  res.close();
  client.close();
  emit('exit', 'ok');
}

main().catch((e) => {
  try { emit('exit', 'fail', null, null, err(e)); } catch { /* history closed */ }
  process.stderr.write(`client.mjs ${a.id}: ${e.code ?? 'ERROR'}: ${e.message}\n`);
  process.exit(1);
});
