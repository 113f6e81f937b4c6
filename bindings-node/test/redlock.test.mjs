// Redlock through the same surface: three real masters, one of them stopped mid-test.
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import { after, before, test } from 'node:test';

import { startRedis } from './redis.mjs';

const require = createRequire(import.meta.url);
const { Redlock, Client } = require('../index.js');

let masters = [];
before(async () => {
  masters = await Promise.all([startRedis(), startRedis(), startRedis()]);
});
after(async () => {
  await Promise.all(masters.map((m) => m.stop()));
});

const holders = async (name) =>
  (await Promise.all(masters.map((m) => m.cli('EXISTS', `ferrolock:{${name}}`).catch(() => '0'))))
    .filter((v) => v === '1').length;

test('Redlock.connect gives a Client whose locks hold a quorum, contend, re-enter and fence', async () => {
  const rl = await Redlock.connect(masters.map((m) => m.url), { redlockNodeTimeout: 50 });
  const other = await Redlock.connect(masters.map((m) => m.url));
  try {
    assert.ok(rl instanceof Client);
    assert.equal(rl.isRedlock, true);
    const name = `node-redlock:${process.pid}`;
    const lock = rl.lock(name, { ttl: 5000 });
    const h = await lock.acquire({ wait: 1000 });
    assert.ok(await holders(name) >= 2, 'held on a majority');
    assert.equal(await other.lock(name).tryAcquire(), null);
    const again = await lock.acquire();
    assert.equal(again.fence, h.fence);
    assert.equal(again.count, 2);
    await again.release();
    await h.release();
    assert.equal(await holders(name), 0, 'released everywhere');
    const h2 = await other.lock(name, { ttl: 5000 }).acquire({ wait: 1000 });
    assert.ok(h2.fence > h.fence);
    await h2.release();
  } finally {
    rl.close();
    other.close();
  }
  assert.equal(rl.isRedlock, true, 'a closed Redlock client is still one');
});

test('Redlock.connect applies its options: redlockQuorum, prefix', async () => {
  // Two masters need an explicit quorum (an even count has no strict majority by default).
  const two = masters.slice(0, 2);
  const rl = await Redlock.connect(two.map((m) => m.url), { redlockQuorum: 2, prefix: 'node-rl:' });
  try {
    const name = `node-redlock-opts:${process.pid}`;
    const h = await rl.lock(name, { ttl: 5000 }).acquire({ wait: 1000 });
    const onBoth = await Promise.all(two.map((m) => m.cli('EXISTS', `node-rl:{${name}}`)));
    assert.deepEqual(onBoth, ['1', '1'], 'held under the configured prefix on both masters');
    await h.release();
  } finally {
    rl.close();
  }
});

test('one master down: still a quorum; two down: QUORUM_NOT_REACHED', async () => {
  const rl = await Redlock.connect(masters.map((m) => m.url), { redlockNodeTimeout: 50, redlockRetryJitter: 10 });
  try {
    await masters[0].stop();
    const name = `node-redlock-down:${process.pid}`;
    const h = await rl.lock(name, { ttl: 5000 }).acquire({ wait: 2000 });
    await h.release();
    await masters[1].stop();
    await assert.rejects(rl.lock(name, { ttl: 5000 }).acquire({ wait: 300 }), (err) => {
      assert.ok(['QUORUM_NOT_REACHED', 'ACQUIRE_TIMEOUT'].includes(err.code), err.code);
      return true;
    });
  } finally {
    rl.close();
  }
});

test('Redlock configuration errors are coded', async () => {
  await assert.rejects(Redlock.connect([]), { code: 'INVALID_CONFIG' });
  await assert.rejects(Redlock.connect([masters[2].url, masters[2].url, masters[2].url]), { code: 'INVALID_CONFIG' });
  await assert.rejects(Redlock.connect(['redis://127.0.0.1:1', 'redis://127.0.0.1:2']), { code: 'INVALID_CONFIG' });
  await assert.rejects(Redlock.connect(['ftp://x']), { code: 'INVALID_URL' });
  await assert.rejects(Redlock.connect('redis://127.0.0.1:1'), { code: 'INVALID_ARGUMENT' });
});
