// Fair mode from Node: waiters of separate clients are served in arrival order, each grant handed
// on by the previous holder's release with no try after it; refused with Redlock.
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import { after, before, test } from 'node:test';

import { sleep, startRedis } from './redis.mjs';

const require = createRequire(import.meta.url);
const { Client, Redlock } = require('../index.js');

let server;
const clients = [];
let seq = 0;
const fresh = (tag) => `node-test:${tag}:${process.pid}:${++seq}`;
const connect = async () => {
  const c = await Client.connect(server.url);
  clients.push(c);
  return c;
};
const evalshaCalls = async () => {
  const m = (await server.cli('INFO', 'commandstats')).match(/cmdstat_evalsha:calls=(\d+)/);
  return m ? Number(m[1]) : 0;
};

before(async () => {
  server = await startRedis();
});
after(async () => {
  for (const c of clients) c.close();
  await server?.stop();
});

// Leases of 2 s: a longer one is handed over as a 2 s offer that the new holder's watchdog
// confirms with one more script call.
async function handoff(name, fair, k = 4) {
  const holder = (await connect()).lock(name, { ttl: 2000, fair });
  const held = await holder.acquire();
  const order = [];
  const waiting = [];
  for (let i = 0; i < k; i++) {
    const lock = (await connect()).lock(name, { ttl: 2000, fair });
    waiting.push((async () => {
      const h = await lock.acquire({ wait: 20000 });
      order.push(i);
      await sleep(5);
      await h.release();
    })());
    const t0 = Date.now();
    if (fair) {
      while (Number(await server.cli('LLEN', `ferrolock:{${name}}:queue`)) !== i + 1) {
        assert.ok(Date.now() - t0 < 5000, 'the waiter never queued');
        await sleep(2);
      }
    } else {
      await sleep(100);
    }
  }
  const before = await evalshaCalls();
  await held.release();
  await Promise.all(waiting);
  return { order, calls: (await evalshaCalls()) - before };
}

test('waiters are served in arrival order, each by the release alone', async () => {
  const { order, calls } = await handoff(fresh('fair'), true);
  assert.deepEqual(order, [0, 1, 2, 3]);
  assert.equal(calls, 5, `${calls} scripts for 5 releases: a waiter tried again`);
  // Control: without fair mode each grant costs its waiter a try after the release.
  const control = await handoff(fresh('unfair'), false);
  assert.ok(control.calls >= 9, `control: ${control.calls} scripts`);
});

test('withLock with fair: true waits in the server-side queue', async () => {
  // The test below only shows that withLock({ fair: true }) runs its body, which a withLock
  // that dropped `fair` does too: here its waiter must be queued on the server.
  const name = fresh('with-queue');
  const held = await (await connect()).lock(name, { ttl: 2000, fair: true }).acquire();
  const c = await connect();
  const body = c.withLock(name, async (_signal, h) => h.fence, { fair: true, wait: 10000 });
  const t0 = Date.now();
  try {
    while (Number(await server.cli('LLEN', `ferrolock:{${name}}:queue`)) !== 1) {
      assert.ok(Date.now() - t0 < 3000, 'withLock({ fair: true }) never queued its waiter');
      await sleep(2);
    }
  } finally {
    await held.release();
  }
  assert.ok(await body > held.fence);
});

test('withLock passes fair on; Redlock refuses it', async () => {
  const c = await connect();
  const name = fresh('with');
  const r = await c.withLock(name, async () => (await c.inspect(name))?.owner !== undefined, { fair: true });
  assert.equal(r, true);
  const redlock = await Redlock.connect([server.url]);
  clients.push(redlock);
  assert.throws(() => redlock.lock(name, { fair: true }), { code: 'INVALID_CONFIG' });
  redlock.lock(name, { fair: false }); // control
});
