// The shared behaviour scenarios (contend, expire, extend, reentrancy, fencing order, lost lock,
// cancellation, event loop) against a real redis-server.
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import { describe, test } from 'node:test';

import { serverAndClient, sleep, startRedis } from './redis.mjs';

const require = createRequire(import.meta.url);
const { Client } = require('../index.js');

let server;
let client;
let seq = 0;
const fresh = (tag) => `node-test:${tag}:${process.pid}:${++seq}`;

serverAndClient(Client, (s, c) => {
  [server, client] = [s, c];
});

describe('contend', () => {
  test('a second handle waits, times out, then gets the lock after release with a higher fence', async () => {
    const name = fresh('contend');
    const a = client.lock(name, { ttl: 5000 });
    const b = client.lock(name, { ttl: 5000 });
    const ha = await a.acquire();
    assert.equal(ha.state, 'held');
    assert.equal(await b.tryAcquire(), null);
    await assert.rejects(b.acquire({ wait: 100 }), { code: 'ACQUIRE_TIMEOUT' });
    const waiting = b.acquire({ wait: 5000 });
    await sleep(50);
    const t0 = performance.now();
    await ha.release();
    const hb = await waiting;
    assert.ok(performance.now() - t0 < 1000, 'woken by the release, not by a poll or the lease');
    assert.ok(hb.fence > ha.fence);
    assert.equal(ha.state, 'released');
    await hb.release();
  });

  test('two clients contend on one name', async () => {
    const other = await Client.connect(server.url);
    try {
      const name = fresh('two-clients');
      const h = await client.lock(name, { ttl: 5000 }).acquire();
      assert.equal(await other.lock(name).tryAcquire(), null);
      await h.release();
      const h2 = await other.lock(name).tryAcquire();
      assert.ok(h2 !== null && h2.fence > h.fence);
      await h2.release();
    } finally {
      other.close();
    }
  });
});

describe('expire and extend', () => {
  test('a lease without renewal expires: state lost, ensure throws LOST, others acquire, release is LOST', async () => {
    const name = fresh('expire');
    const h = await client.lock(name, { ttl: 200 }).acquire();
    assert.ok(h.remaining() > 0 && h.remaining() <= 200);
    h.ensure(10);
    const signal = h.signal;
    await sleep(350);
    assert.equal(signal.aborted, true, 'the lease deadline aborts the signal without any call');
    assert.equal(signal.reason.code, 'LOST');
    assert.equal(h.state, 'lost');
    assert.equal(h.remaining(), 0);
    assert.throws(() => h.ensure(), { code: 'LOST' });
    const h2 = await client.lock(name, { ttl: 1000 }).tryAcquire();
    assert.ok(h2 !== null, 'the lease ran out on the server too');
    await assert.rejects(h.release(), { code: 'LOST' });
    await h2.release();
  });

  test('extend keeps the lock past its first lease', async () => {
    const name = fresh('extend');
    const h = await client.lock(name, { ttl: 300 }).acquire();
    await h.extend(2000);
    assert.ok(h.remaining() > 1000);
    await sleep(450);
    assert.equal(h.state, 'held');
    assert.equal(await client.lock(name).tryAcquire(), null);
    const pttl = Number(await server.cli('PTTL', `ferrolock:{${name}}`));
    assert.ok(pttl > 1000, `server lease was extended (PTTL ${pttl})`);
    await h.release();
    await assert.rejects(h.extend(1000), { code: 'NOT_HELD' });
  });

  test('the watchdog keeps a lock without explicit lease alive', async () => {
    const c = await Client.connect(server.url, { watchdogTtl: 300 });
    try {
      const name = fresh('watchdog');
      const h = await c.lock(name).acquire();
      await sleep(800);
      assert.equal(h.state, 'held');
      assert.equal(await c.lock(name).tryAcquire(), null);
      await h.release();
    } finally {
      c.close();
    }
  });

  test('renew: false without a ttl takes the watchdog lease once and lets it run out', async () => {
    // A lock made without `ttl` renews by default; `renew: false` must turn that off.
    const c = await Client.connect(server.url, { watchdogTtl: 300 });
    try {
      const name = fresh('no-renew');
      const lock = c.lock(name, { renew: false });
      assert.equal(lock.ttl, 300);
      const h = await lock.acquire();
      const lost = new Promise((resolve) => h.signal.addEventListener('abort', resolve, { once: true }));
      const outcome = await Promise.race([lost.then(() => 'lost'), sleep(3000).then(() => 'still held')]);
      assert.equal(outcome, 'lost', 'a renew: false hold was renewed past its lease');
      assert.equal(h.state, 'lost');
      assert.equal(await server.cli('EXISTS', `ferrolock:{${name}}`), '0');
    } finally {
      c.close();
    }
  });
});

describe('reentrancy', () => {
  test('the same handle re-enters with the same fence; another handle contends; counts unwind', async () => {
    const name = fresh('reenter');
    const lock = client.lock(name, { ttl: 5000 });
    const h1 = await lock.acquire();
    const h2 = await lock.acquire({ wait: 0 });
    assert.equal(h2.fence, h1.fence);
    assert.equal(h2.count, 2);
    assert.equal(await client.lock(name).tryAcquire(), null);
    await h2.release();
    assert.equal(h1.count, 1);
    assert.equal(await client.lock(name).tryAcquire(), null, 'still held at depth 1');
    await h1.release();
    await assert.rejects(h1.release(), { code: 'NOT_HELD' });
    const h3 = await client.lock(name).tryAcquire();
    assert.ok(h3 !== null);
    await h3.release();
  });

  test('re-entry beyond maxReentrancy is REENTRANCY_LIMIT and leaves the count unchanged', async () => {
    const c = await Client.connect(server.url, { maxReentrancy: 2 });
    try {
      const lock = c.lock(fresh('limit'), { ttl: 5000 });
      const a = await lock.acquire();
      const b = await lock.acquire();
      await assert.rejects(lock.acquire(), { code: 'REENTRANCY_LIMIT' });
      assert.equal(b.count, 2);
      await b.release();
      await a.release();
    } finally {
      c.close();
    }
  });
});

describe('fencing', () => {
  test('fences strictly increase in grant order across handles', async () => {
    const name = fresh('fence-order');
    let last = 0;
    for (let i = 0; i < 20; i++) {
      const h = await client.lock(name, { ttl: 2000 }).acquire({ wait: 1000 });
      assert.ok(Number.isSafeInteger(h.fence));
      assert.ok(h.fence > last, `fence ${h.fence} after ${last}`);
      last = h.fence;
      await h.release();
    }
  });

  test('fences above 2^50 are exact numbers', async () => {
    const name = fresh('fence-big');
    assert.equal(await server.cli('SET', `ferrolock:{${name}}:fence`, String(2 ** 52 + 3)), 'OK');
    const h = await client.lock(name, { ttl: 2000 }).acquire();
    assert.equal(h.fence, 2 ** 52 + 4);
    const info = await client.inspect(name);
    assert.equal(info.fence, 2 ** 52 + 4);
    assert.equal(info.count, 1);
    await h.release();
    const h2 = await client.lock(name, { ttl: 2000 }).acquire();
    assert.equal(h2.fence, 2 ** 52 + 5);
    await h2.release();
  });
});

describe('lease and retention options', () => {
  test('inspect reports the holder\'s depth and its lease in ms; Lock.ttl is in ms', async () => {
    const name = fresh('inspect');
    const lock = client.lock(name, { ttl: 5000 });
    assert.equal(lock.ttl, 5000);
    assert.equal(client.lock(name).ttl, 30000, 'without ttl: the default watchdogTtl');
    const h = await lock.acquire();
    const h2 = await lock.acquire();
    const info = await client.inspect(name);
    assert.equal(info.count, 2);
    assert.equal(info.fence, h.fence);
    assert.equal(typeof info.owner, 'string');
    assert.ok(info.ttl > 4000 && info.ttl <= 5000, `inspect ttl ${info.ttl}`);
    await h2.release();
    await h.release();
  });

  test('fenceRetention sets how long the fencing counter is kept', async () => {
    const c = await Client.connect(server.url, { fenceRetention: 60000 });
    try {
      const name = fresh('retention');
      const h = await c.lock(name, { ttl: 2000 }).acquire();
      const pttl = Number(await server.cli('PTTL', `ferrolock:{${name}}:fence`));
      assert.ok(pttl > 0 && pttl <= 60000, `fence key PTTL ${pttl} (the default is 7 days)`);
      await h.release();
    } finally {
      c.close();
    }
  });
});

describe('durations read back', () => {
  test('Lock.ttl gives back the ttl the lock was made with', () => {
    // 1001 ms read back as 1000.9999999999999 (seconds as a float, times 1000).
    const off = [];
    for (let ttl = 10; ttl <= 20000; ttl++) {
      const got = client.lock('ttl-roundtrip', { ttl }).ttl;
      if (got !== ttl) off.push(`${ttl} -> ${got}`);
    }
    assert.deepEqual(off.slice(0, 5), []);
    assert.equal(client.lock('ttl-roundtrip', { ttl: 2000.5 }).ttl, 2000.5);
  });
});

describe('lost lock', () => {
  test('an outsider DEL makes the watchdog see the loss: signal aborts, onLost runs, state lost', async () => {
    const name = fresh('lost');
    const h = await client.lock(name, { ttl: 300, renew: true }).acquire();
    const signal = h.signal;
    assert.equal(signal.aborted, false);
    const called = new Promise((resolve) => h.onLost(resolve));
    const aborted = new Promise((resolve) => signal.addEventListener('abort', resolve, { once: true }));
    assert.equal(await server.cli('DEL', `ferrolock:{${name}}`), '1');
    const err = await Promise.race([called, sleep(3000).then(() => null)]);
    assert.ok(err !== null, 'onLost was called');
    assert.equal(err.code, 'LOST');
    await Promise.race([aborted, sleep(1000)]);
    assert.equal(signal.aborted, true);
    assert.equal(signal.reason.code, 'LOST');
    assert.equal(h.state, 'lost');
    // ensure() names why, as the callback heard it (it used to say only "the lock was lost").
    assert.throws(() => h.ensure(), { code: 'LOST', message: /renewal refused/ });
    await assert.rejects(h.release(), { code: 'LOST' });
    // A signal first read after the loss is aborted at once; a late callback still runs, once.
    const h2 = await client.lock(fresh('lost-late'), { ttl: 100 }).acquire();
    await sleep(200);
    assert.equal(h2.signal.aborted, true);
    assert.equal(h2.signal.reason.code, 'LOST');
    assert.match(h2.signal.reason.message, /the lease ran out/);
    const late = await new Promise((resolve) => h.onLost(resolve));
    assert.equal(late.code, 'LOST');
  });

  test('forceUnlock by an administrator aborts the holder signal', async () => {
    const name = fresh('force');
    const h = await client.lock(name, { ttl: 300, renew: true }).acquire();
    const signal = h.signal;
    const info = await client.forceUnlock(name);
    assert.equal(info.fence, h.fence);
    await new Promise((resolve, reject) => {
      const t = setTimeout(() => reject(new Error('signal did not abort')), 3000);
      signal.addEventListener('abort', () => { clearTimeout(t); resolve(); }, { once: true });
    });
    assert.equal(h.state, 'lost');
  });

  test('a throwing onLost callback is reported, the others still run', async () => {
    const name = fresh('lost-throw');
    const h = await client.lock(name, { ttl: 300, renew: true }).acquire();
    const warned = new Promise((resolve) => process.once('warning', resolve));
    h.onLost(() => { throw new Error('callback failure'); });
    const second = new Promise((resolve) => h.onLost(resolve));
    await server.cli('DEL', `ferrolock:{${name}}`);
    const err = await Promise.race([second, sleep(3000).then(() => null)]);
    assert.equal(err?.code, 'LOST');
    const w = await Promise.race([warned, sleep(1000).then(() => null)]);
    assert.ok(w !== null && /callback failure/.test(w.message));
  });

  test('a loss callback may call back into ferrolock (release, acquire) without deadlock', async () => {
    const name = fresh('lost-reenter');
    const lock = client.lock(name, { ttl: 300, renew: true });
    const h = await lock.acquire();
    const done = new Promise((resolve, reject) => {
      h.onLost(() => {
        h.release()
          .then(() => reject(new Error('release after loss succeeded')), (e) => {
            assert.equal(e.code, 'LOST');
            return lock.acquire({ wait: 2000 });
          })
          .then((again) => again.release().then(() => resolve(again.fence)))
          .catch(reject);
      });
    });
    await server.cli('DEL', `ferrolock:{${name}}`);
    const fence = await Promise.race([done, sleep(4000).then(() => null)]);
    assert.ok(fence !== null && fence > h.fence);
  });

  test('a released hold never reports a loss', async () => {
    const name = fresh('no-loss');
    const h = await client.lock(name, { ttl: 300, renew: true }).acquire();
    let calls = 0;
    h.onLost(() => { calls++; });
    const signal = h.signal;
    await h.release();
    await sleep(500);
    assert.equal(calls, 0);
    assert.equal(signal.aborted, false);
  });
});

describe('cancellation', () => {
  test('aborting a waiting acquire rejects with CANCELLED and leaves no hold behind', async () => {
    const name = fresh('cancel');
    const holder = await client.lock(name, { ttl: 5000 }).acquire();
    const waiter = client.lock(name, { ttl: 5000 });
    const ac = new AbortController();
    const p = waiter.acquire({ signal: ac.signal });
    await sleep(100);
    ac.abort(new Error('no longer needed'));
    await assert.rejects(p, (err) => {
      assert.equal(err.code, 'CANCELLED');
      assert.equal(err.cause?.message, 'no longer needed');
      return true;
    });
    await holder.release();
    await sleep(100);
    assert.equal(await client.inspect(name), null, 'the cancelled waiter did not take the lock');
    const h = await client.lock(name).tryAcquire();
    assert.ok(h !== null);
    await h.release();
  });

  test('an elapsed wait on a stopped server has the failure as its cause; a held lock\'s has none', async () => {
    const own = await startRedis();
    const c = await Client.connect(own.url, { responseTimeout: 200 });
    try {
      const name = fresh('wait-failing');
      const holder = await c.lock(name, { ttl: 5000 }).acquire();
      const held = await c.lock(name, { ttl: 5000 }).acquire({ wait: 100 }).catch((e) => e);
      assert.equal(held.code, 'ACQUIRE_TIMEOUT');
      assert.equal(held.cause, undefined);
      await holder.release();
      process.kill(own.pid, 'SIGSTOP');
      const err = await c.lock(fresh('wait-failing'), { ttl: 5000 }).acquire({ wait: 700 }).catch((e) => e);
      assert.equal(err.code, 'ACQUIRE_TIMEOUT');
      assert.ok(err.cause instanceof Error, `no cause: ${err.message}`);
      assert.equal(err.cause.code, 'TIMEOUT');
      assert.ok(!Object.keys(err).includes('cause'), 'cause is not enumerable, as with new Error(m, { cause })');
    } finally {
      process.kill(own.pid, 'SIGCONT');
      c.close();
      await own.stop();
    }
  });

  test('an abort after failed attempts quotes the last failure, as an elapsed wait does', async () => {
    // A server that stops answering: each attempt times out and is retried until the abort.
    const own = await startRedis();
    const c = await Client.connect(own.url, { responseTimeout: 200 });
    try {
      const lock = c.lock(fresh('abort-failing'), { ttl: 5000 });
      process.kill(own.pid, 'SIGSTOP');
      const ac = new AbortController();
      const p = lock.acquire({ signal: ac.signal });
      await sleep(700);
      ac.abort(new Error('gave up'));
      await assert.rejects(p, (err) => {
        assert.equal(err.code, 'CANCELLED');
        assert.match(err.message, /the last attempt failed: TIMEOUT/);
        assert.equal(err.cause?.message, 'gave up');
        return true;
      });
    } finally {
      process.kill(own.pid, 'SIGCONT');
      c.close();
      await own.stop();
    }
  });

  test('an abort before the grant is seen rejects with CANCELLED, also when the grant raced it', async () => {
    // The waiter's signal aborts right after the holder's release reply: the waiter's grant may
    // be on its way or already made in the core, its promise not yet settled. Such an acquire
    // used to resolve with a hold the caller had given up on; now the grant is given back and
    // the acquire rejects. (A promise that settled before the abort keeps its hold.)
    const name = fresh('abort-race');
    let raced = 0;
    for (let i = 0; i < 200; i++) {
      const holder = await client.lock(name).acquire();
      const ac = new AbortController();
      let settled = false;
      const p = client.lock(name).acquire({ signal: ac.signal }).then(
        (h) => { settled = true; return { h }; },
        (e) => { settled = true; return { e }; },
      );
      await sleep(2);
      await holder.release();
      // Let a grant that JS has already seen finish settling (microtasks only: no I/O runs).
      for (let k = 0; k < 10; k++) await null;
      const early = settled;
      ac.abort(new Error('stop'));
      const r = await p;
      if (r.h) await r.h.release();
      if (!early) {
        raced += 1;
        assert.equal(r.e?.code, 'CANCELLED', `round ${i}: resolved with a hold after the abort`);
      }
    }
    assert.ok(raced > 0, 'no round aborted before its acquire settled');
    assert.equal(await client.inspect(name), null, 'a hold was left behind');
  });

  test('a grant made before the abort but seen after it is handed back', async () => {
    // The race above reaches the hand-back only by chance. Here JS stays busy while the
    // runtime's background driver grants (driver.rs), so the abort lands after the grant and
    // before JS has seen it, every time: a hand-back that kept the grant passed the race.
    const name = fresh('late-grant');
    const ac = new AbortController();
    const p = client.lock(name, { ttl: 5000 }).acquire({ signal: ac.signal });
    const until = Date.now() + 300;
    while (Date.now() < until); // busy: the background driver grants meanwhile
    ac.abort(new Error('gave up'));
    await assert.rejects(p, { code: 'CANCELLED' });
    let left;
    for (let i = 0; i < 100 && (left = await client.inspect(name)) !== null; i++) await sleep(20);
    assert.equal(left, null, 'the grant seen after the abort was kept');
  });

  test('an already aborted signal and AbortSignal.timeout', async () => {
    const name = fresh('cancel2');
    const holder = await client.lock(name, { ttl: 5000 }).acquire();
    await assert.rejects(client.lock(name).acquire({ signal: AbortSignal.abort() }), { code: 'CANCELLED' });
    await assert.rejects(client.lock(name).acquire({ signal: AbortSignal.timeout(100) }), { code: 'CANCELLED' });
    await holder.release();
  });

  test('cancelling in a loop while the lock is free leaves no hold (B1)', async () => {
    const name = fresh('cancel-loop');
    for (let i = 0; i < 30; i++) {
      const ac = new AbortController();
      const p = client.lock(name, { ttl: 5000 }).acquire({ signal: ac.signal });
      setTimeout(() => ac.abort(), i % 3);
      try {
        const h = await p;
        await h.release();
      } catch (e) {
        assert.equal(e.code, 'CANCELLED');
      }
    }
    await sleep(100);
    assert.equal(await client.inspect(name), null);
  });
});

describe('event loop', () => {
  test('a timer keeps firing while 8 acquires wait', async () => {
    const name = fresh('loop');
    const holder = await client.lock(name, { ttl: 5000 }).acquire();
    let ticks = 0;
    const timer = setInterval(() => { ticks++; }, 10);
    const waiters = Array.from({ length: 8 }, () =>
      client.lock(name, { ttl: 5000 }).acquire({ wait: 10000 }).then((h) => h.release().then(() => h.fence)));
    const t0 = performance.now();
    await sleep(500);
    const elapsed = performance.now() - t0;
    clearInterval(timer);
    assert.ok(ticks >= elapsed / 10 / 3, `timer fired ${ticks} times in ${Math.round(elapsed)} ms`);
    await holder.release();
    const fences = await Promise.all(waiters);
    assert.equal(new Set(fences).size, 8, 'each waiter got its own grant');
    assert.ok(fences.every((f) => f > holder.fence));
  });
});

describe('helpers', () => {
  test('withLock passes the loss signal and releases in finally, also on throw', async () => {
    const name = fresh('with');
    const out = await client.withLock(name, async (signal, held) => {
      assert.equal(signal.aborted, false);
      assert.equal(held.state, 'held');
      assert.equal(await client.lock(name).tryAcquire(), null);
      return 42;
    }, { ttl: 2000 });
    assert.equal(out, 42);
    assert.equal(await client.inspect(name), null);
    await assert.rejects(client.withLock(name, async () => { throw new Error('body'); }), /body/);
    assert.equal(await client.inspect(name), null, 'released after the body threw');
    const own = await client.withLock(name, async (_s, held) => { await held.release(); return 1; });
    assert.equal(own, 1, 'a body that released the hold itself is fine');
  });

  test('Symbol.asyncDispose releases once; a second dispose is a no-op', async () => {
    const name = fresh('dispose');
    const h = await client.lock(name, { ttl: 2000 }).acquire();
    await h[Symbol.asyncDispose]();
    assert.equal(h.state, 'released');
    assert.equal(await client.inspect(name), null);
    await h[Symbol.asyncDispose]();
  });

  test('Symbol.asyncDispose of a hold lost before the release rejects with LOST', async () => {
    // `await using` around a critical section that outran its lease must not end silently
    // (only the no-op on a released hold was tested: a dispose that swallowed LOST passed).
    const h = await client.lock(fresh('dispose-lost'), { ttl: 200 }).acquire();
    await sleep(350); // the fixed lease runs out
    assert.equal(h.state, 'lost');
    await assert.rejects(h[Symbol.asyncDispose](), { code: 'LOST' });
  });

  test('withLock bounds its wait by the wait option: ACQUIRE_TIMEOUT, the body never runs', async () => {
    // A withLock that dropped `wait` waited without bound: here until the holder's 10 s lease
    // ran out, then ran the body after all.
    const name = fresh('with-wait');
    const holder = await client.lock(name, { ttl: 10000 }).acquire();
    let ran = false;
    const t0 = performance.now();
    await assert.rejects(client.withLock(name, async () => { ran = true; }, { wait: 100 }), { code: 'ACQUIRE_TIMEOUT' });
    assert.ok(performance.now() - t0 < 5000, 'the wait was not bounded by the option');
    assert.equal(ran, false);
    await holder.release();
  });

  test('withLock: a body that outlived its lease rejects with LOST; a failing body keeps its own error', async () => {
    // The body waits for its signal: the fixed lease's deadline aborts it (no sleep, no renewal).
    const untilLost = (signal) => new Promise((resolve) => {
      if (signal.aborted) resolve();
      else signal.addEventListener('abort', resolve, { once: true });
    });
    // Its work is done, but the hold was lost meanwhile: the caller must hear of it, not get
    // the result as if the section had run under the lock.
    await assert.rejects(client.withLock(fresh('with-lost'), async (signal) => {
      await untilLost(signal);
      return 'done';
    }, { ttl: 200 }), { code: 'LOST' });
    // The body's own error wins over the release's LOST.
    await assert.rejects(client.withLock(fresh('with-lost-throw'), async (signal) => {
      await untilLost(signal);
      throw new Error('body failed');
    }, { ttl: 200 }), { message: 'body failed' });
  });
});

describe('worker_threads', () => {
  test('the addon loads in a worker, whose handles contend with the main thread', async () => {
    const { Worker } = await import('node:worker_threads');
    const name = fresh('worker');
    const held = await client.lock(name, { ttl: 5000 }).acquire();
    const src = `
      const { parentPort, workerData } = require('node:worker_threads');
      const { Client } = require(workerData.pkg);
      (async () => {
        const c = await Client.connect(workerData.url);
        const first = await c.lock(workerData.name, { ttl: 5000 }).tryAcquire();
        parentPort.postMessage({ first: first === null ? null : first.fence });
        const h = await c.lock(workerData.name, { ttl: 5000 }).acquire({ wait: 5000 });
        parentPort.postMessage({ got: h.fence });
        await h.release();
        c.close();
      })().catch((e) => parentPort.postMessage({ err: String(e.code) }));
    `;
    const pkg = new URL('../index.js', import.meta.url).pathname;
    const w = new Worker(src, { eval: true, workerData: { url: server.url, name, pkg } });
    const messages = [];
    await new Promise((resolve, reject) => {
      w.on('message', (m) => {
        messages.push(m);
        if ('first' in m) held.release().catch(reject);
      });
      w.on('error', reject);
      w.on('exit', resolve);
    });
    assert.deepEqual(messages[0], { first: null }, 'held by the main thread');
    assert.ok(messages[1]?.got > held.fence, `the worker got it after the release: ${JSON.stringify(messages)}`);
  });

  test('a worker terminated while its acquire waits leaves no hold behind', async () => {
    const { Worker } = await import('node:worker_threads');
    const name = fresh('worker-terminated');
    const held = await client.lock(name, { ttl: 10000 }).acquire();
    const src = `
      const { parentPort, workerData } = require('node:worker_threads');
      const { Client } = require(workerData.pkg);
      (async () => {
        const c = await Client.connect(workerData.url);
        const waiting = c.lock(workerData.name, { ttl: 10000 }).acquire();
        parentPort.postMessage('waiting');
        await waiting;
      })();
    `;
    const pkg = new URL('../index.js', import.meta.url).pathname;
    const w = new Worker(src, { eval: true, workerData: { url: server.url, name, pkg } });
    await new Promise((resolve, reject) => { w.once('message', resolve); w.once('error', reject); });
    await sleep(100); // the worker's acquire has made its attempt and waits for the release
    await w.terminate();
    await held.release();
    // Before the fix the terminated worker's acquire ran on in the process-wide runtime and took
    // the lock for its whole lease within a millisecond of the release.
    await sleep(300);
    assert.equal(await client.inspect(name), null, 'a terminated worker\'s acquire took the lock');
  });
});
