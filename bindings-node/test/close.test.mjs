// client.close() (docs/GUARANTEES.md, "Closing a client"): a pending acquire rejects with CLOSED
// at once, live holds become lost and are left to expire with no renewal after the close, later
// calls fail with CLOSED; garbage collection of a client closes nothing.
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { createRequire } from 'node:module';
import net from 'node:net';
import { after, before, test } from 'node:test';
import { promisify } from 'node:util';

import { sleep, startRedis } from './redis.mjs';

const require = createRequire(import.meta.url);
const { Client, Redlock } = require('../index.js');
const run = promisify(execFile);

let server;
let seq = 0;
const fresh = (tag) => `node-close:${tag}:${process.pid}:${++seq}`;

before(async () => { server = await startRedis(); });
after(async () => { await server?.stop(); });

/** Every command the server runs (MONITOR), with the time it was read. */
async function monitor(port) {
  const sock = net.connect(port, '127.0.0.1');
  const lines = [];
  let buf = '';
  await new Promise((resolve, reject) => {
    sock.once('error', reject);
    sock.once('connect', () => { sock.write('MONITOR\r\n'); resolve(); });
  });
  sock.on('data', (d) => {
    buf += d.toString('utf8');
    const parts = buf.split('\r\n');
    buf = parts.pop();
    const now = performance.now();
    for (const l of parts) lines.push([now, l]);
  });
  return {
    /** Renewals (the owner-checked extend: the hold key alone) of `name` run after `since`. */
    renewalsAfter(name, since) {
      const key = `"ferrolock:{${name}}"`;
      return lines.filter(([t, l]) => t > since && l.includes('"EVALSHA"') && l.includes(key) &&
        !l.includes(':fence') && !l.includes(':released')).length;
    },
    close() { sock.destroy(); },
  };
}

for (const close of [true, false]) {
  test(`a pending acquire ${close ? 'rejects with CLOSED on close' : 'is granted (control: no close)'}`, async () => {
    const name = fresh('pending');
    const holder = await Client.connect(server.url);
    const client = await Client.connect(server.url);
    try {
      const held = await holder.lock(name, { ttl: 30000 }).acquire();
      const results = [null, 60000].map((wait) => client.lock(name).acquire({ wait }).then(
        async (h) => { const t = performance.now(); await h.release(); return ['granted', t]; },
        (e) => [e, performance.now()],
      ));
      await sleep(300);
      const tClose = performance.now();
      if (close) client.close();
      await sleep(300);
      await held.release(); // the lock is free: a live waiter takes it now
      for (const [what, t] of await Promise.all(results)) {
        if (close) {
          assert.equal(what.code, 'CLOSED', String(what));
          assert.ok(t - tClose < 200, `ended ${t - tClose} ms after close`);
        } else {
          assert.equal(what, 'granted');
        }
      }
      if (close) {
        await sleep(200);
        assert.equal(await holder.inspect(name), null, 'the closed client took the lock after close');
      }
    } finally {
      holder.close();
      client.close();
    }
  });
}

for (const close of [true, false]) {
  test(`close while held: ${close ? 'lost, no renewal after close' : 'control: a dropped client keeps renewing'}`, async () => {
    const name = fresh('held');
    const mon = await monitor(server.port);
    let client = await Client.connect(server.url, { watchdogTtl: 600 });
    try {
      const held = await client.lock(name).acquire();
      const lost = [];
      held.onLost((e) => lost.push(e));
      const signal = held.signal;
      await sleep(700);
      assert.ok(mon.renewalsAfter(name, performance.now() - 700) >= 1);
      const tClose = performance.now();
      if (close) {
        client.close();
        client.close(); // idempotent
      } else {
        client = null; // control: the held lock keeps the client's watchdog alive
      }
      await sleep(1500);
      const renewals = mon.renewalsAfter(name, tClose + 20);
      if (close) {
        assert.equal(renewals, 0, 'renewals reached the server after close');
        assert.equal(held.state, 'lost');
        assert.equal(held.remaining(), 0);
        assert.ok(signal.aborted);
        assert.equal(lost.length, 1);
        assert.equal(lost[0].code, 'LOST');
        assert.match(lost[0].message, /the client was closed/);
        assert.equal(await server.cli('EXISTS', `ferrolock:{${name}}`), '0', 'left to expire');
      } else {
        assert.ok(renewals >= 2, `control: saw ${renewals} renewals of a live hold`);
        assert.equal(held.state, 'held');
        await held.release();
      }
    } finally {
      mon.close();
      client?.close();
    }
  });
}

for (const how of ['acquire', 'tryAcquire', 'acquire with a signal']) {
  test(`${how}: granted, then close() before the promise settles: CLOSED, the grant released`, async () => {
    // A shutdown handler that closes while requests are acquiring: the grant is made on the
    // runtime while JS is busy, and close() comes in the same turn, before the promise settles.
    // It resolved with a Held already lost, and the lock stayed taken for its whole lease.
    const name = fresh('settle');
    const client = await Client.connect(server.url);
    try {
      await client.inspect(name); // warm: the scripts loaded, the connection up
      const lock = client.lock(name, { ttl: 30000 });
      const p = how === 'tryAcquire' ? lock.tryAcquire()
        : lock.acquire(how === 'acquire' ? undefined : { signal: new AbortController().signal });
      const settled = p.then((h) => `resolved ${h?.state}`, (e) => e.code);
      const end = performance.now() + 50;
      while (performance.now() < end); // busy: the runtime grants meanwhile (driver.rs)
      client.close();
      assert.equal(await settled, 'CLOSED');
      let exists;
      for (let i = 0; i < 100 && (exists = await server.cli('EXISTS', `ferrolock:{${name}}`)) !== '0'; i++) {
        await sleep(20);
      }
      assert.equal(exists, '0', 'the grant nobody received stayed taken');
    } finally {
      client.close();
    }
  });
}

test('calls after close fail with CLOSED; double close; close from onLost', async () => {
  const name = fresh('after');
  const client = await Client.connect(server.url);
  const lock = client.lock(name, { ttl: 5000 });
  const held = await lock.acquire();
  const inner = await lock.acquire(); // re-entry
  client.close();
  for (const p of [lock.acquire(), lock.acquire({ wait: 0 }), lock.tryAcquire(), held.extend(5000),
    inner.release(), held.release(), held[Symbol.asyncDispose](), client.inspect(name), client.forceUnlock(name)]) {
    await assert.rejects(p, { code: 'CLOSED' });
  }
  assert.throws(() => client.lock(name), { code: 'CLOSED' });
  assert.throws(() => held.ensure(), { code: 'LOST' });
  assert.equal(held.state, 'lost');
  assert.equal(held.count, 0);
  assert.notEqual(await server.cli('EXISTS', `ferrolock:{${name}}`), '0', 'not released: left to its lease');
  // withLock around a close: the body's signal aborts and the release fails with CLOSED.
  const c2 = await Client.connect(server.url);
  await assert.rejects(c2.withLock(fresh('with'), async (signal) => {
    c2.close();
    await sleep(50); // the loss reaches the JS thread on a later turn of the event loop
    assert.ok(signal.aborted);
  }), { code: 'CLOSED' });

  // Close from inside a loss callback: no deadlock, no crash.
  const admin = await Client.connect(server.url);
  const c3 = await Client.connect(server.url, { watchdogTtl: 300 });
  const n3 = fresh('cb');
  const h3 = await c3.lock(n3).acquire();
  const closedInCallback = new Promise((resolve) => h3.onLost(() => {
    c3.close();
    c3.close();
    resolve(true);
  }));
  await admin.forceUnlock(n3);
  assert.equal(await closedInCallback, true);
  await assert.rejects(c3.inspect(n3), { code: 'CLOSED' });
  admin.close();
});

for (const first of ['release', 'close']) {
  test(`release() ${first === 'release' ? 'then close() in one turn: the release is sent' : 'after close(): CLOSED, nothing sent (control)'}`, async () => {
    // A shutdown handler: release every hold, then close at once.
    const name = fresh('release-close');
    const client = await Client.connect(server.url);
    const held = await client.lock(name, { ttl: 30000 }).acquire();
    let released;
    if (first === 'release') {
      released = held.release();
      client.close();
    } else {
      client.close();
      released = held.release();
    }
    const outcome = await released.then(() => 'ok', (e) => e.code);
    const exists = await server.cli('EXISTS', `ferrolock:{${name}}`);
    if (first === 'release') {
      assert.equal(outcome, 'ok');
      assert.equal(exists, '0', 'the release asked for before the close left the lock held');
    } else {
      assert.equal(outcome, 'CLOSED');
      assert.equal(exists, '1');
    }
  });
}

test('a Redlock client closes the same way', async () => {
  const servers = await Promise.all([0, 1, 2].map(() => startRedis()));
  try {
    const urls = servers.map((s) => s.url);
    const holder = await Redlock.connect(urls);
    const rl = await Redlock.connect(urls);
    const name = fresh('redlock');
    const held = await holder.lock(name, { ttl: 30000 }).acquire();
    const waiting = rl.lock(name).acquire({ wait: 60000 }).catch((e) => e);
    await sleep(200);
    rl.close();
    assert.equal((await waiting).code, 'CLOSED');
    await held.release();
    holder.close();
  } finally {
    await Promise.all(servers.map((s) => s.stop()));
  }
});

test('a collected client closes nothing: its referenced hold is renewed, then released', async () => {
  const pkg = new URL('../index.js', import.meta.url).pathname;
  const name = fresh('gc');
  const script = `
    const { Client } = require(${JSON.stringify(pkg)});
    (async () => {
      let c = await Client.connect(process.argv[1], { watchdogTtl: 600 });
      const kept = await c.lock(process.argv[2]).acquire();
      c = null;
      for (let i = 0; i < 5; i++) { global.gc(); await new Promise((r) => setImmediate(r)); }
      process.stdout.write('collected\\n');
      await new Promise((r) => setTimeout(r, 1500));
      process.stdout.write(kept.state + '\\n');
      await kept.release();
      process.stdout.write('released\\n');
    })().catch((e) => { console.error(e); process.exit(1); });
  `;
  const child = run(process.execPath, ['--expose-gc', '-e', script, server.url, name]);
  await sleep(1200);
  assert.equal(await server.cli('EXISTS', `ferrolock:{${name}}`), '1', 'renewed after the client was collected');
  const { stdout } = await child;
  assert.match(stdout, /collected\nheld\nreleased\n/);
  assert.equal(await server.cli('EXISTS', `ferrolock:{${name}}`), '0');
});
