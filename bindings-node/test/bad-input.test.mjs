// Bad input (RELIABILITY.md matrix, Node column): a coded error, never a crash or a hang.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { createRequire } from 'node:module';
import { inspect } from 'node:util';
import { test } from 'node:test';

import { serverAndClient, startRedis } from './redis.mjs';

const require = createRequire(import.meta.url);
const { Client, Redlock } = require('../index.js');

let server;
let client;
serverAndClient(Client, (s, c) => {
  [server, client] = [s, c];
});

const BAD_DURATIONS = [-1, NaN, Infinity, -Infinity, 0, 1e15, Number.MAX_VALUE];

test('TTLs that are not usable durations are INVALID_DURATION, before any I/O', () => {
  for (const ttl of BAD_DURATIONS) {
    assert.throws(() => client.lock('bad-ttl', { ttl }), { code: 'INVALID_DURATION' }, `ttl ${ttl}`);
  }
  assert.throws(() => client.lock('bad-ttl', { ttl: 3 }), { code: 'INVALID_DURATION' }, 'below drift + 2 ms');
  assert.throws(() => client.lock('bad-ttl', { ttl: '1000' }), { code: 'INVALID_ARGUMENT' });
});

test('waits, margins and extensions are checked too', async () => {
  const lock = client.lock('bad-wait', { ttl: 2000 });
  for (const wait of [-1, NaN, Infinity, 1e15, '10']) {
    await assert.rejects(lock.acquire({ wait }), { code: 'INVALID_DURATION' }, `wait ${wait}`);
  }
  const h = await lock.acquire({ wait: 0 });
  for (const ttl of BAD_DURATIONS) {
    await assert.rejects(h.extend(ttl), { code: 'INVALID_DURATION' }, `extend ${ttl}`);
  }
  await assert.rejects(h.extend('1000'), { code: 'INVALID_ARGUMENT' });
  for (const m of [-1, NaN, Infinity]) {
    assert.throws(() => h.ensure(m), { code: 'INVALID_DURATION' }, `margin ${m}`);
  }
  assert.throws(() => h.ensure(10_000), { code: 'LOST' }, 'less validity left than the margin');
  await h.release();
  await assert.rejects(h.release(), { code: 'NOT_HELD' }, 'double release');
});

test('names: empty, lone surrogate, over the cap, wrong type; Buffer and odd bytes work', async () => {
  assert.throws(() => client.lock(''), { code: 'INVALID_NAME' });
  assert.throws(() => client.lock(Buffer.alloc(0)), { code: 'INVALID_NAME' });
  assert.throws(() => client.lock('a\uD800b'), { code: 'INVALID_NAME' });
  assert.throws(() => client.lock('x'.repeat(64 * 1024 + 1)), { code: 'INVALID_NAME' });
  assert.throws(() => client.lock(42), { code: 'INVALID_ARGUMENT' });
  assert.throws(() => client.lock(null), { code: 'INVALID_ARGUMENT' });
  const odd = Buffer.from([0, 0xff, 0x7b, 0x7d, 0x0d, 0x0a, 0x20]);
  const h = await client.lock(odd, { ttl: 2000 }).acquire();
  assert.equal(await client.lock(odd).tryAcquire(), null);
  await h.release();
  const big = await Client.connect(server.url, { maxNameLen: 1024 * 1024 });
  try {
    const h2 = await big.lock('n'.repeat(1024 * 1024), { ttl: 2000 }).acquire();
    await h2.release();
  } finally {
    big.close();
  }
});

test('options and arguments of the wrong shape', async () => {
  await assert.rejects(Client.connect(server.url, { prefix: 'a{b' }), { code: 'INVALID_CONFIG' });
  await assert.rejects(Client.connect(server.url, { maxReentrancy: 0 }), { code: 'INVALID_CONFIG' });
  await assert.rejects(Client.connect(server.url, { driftFactor: 2 }), { code: 'INVALID_CONFIG' });
  await assert.rejects(Client.connect(server.url, { responseTimeout: -5 }), { code: 'INVALID_DURATION' });
  await assert.rejects(Client.connect(server.url, 'fast'), { code: 'INVALID_ARGUMENT' });
  await assert.rejects(Client.connect(server.url, [1]), { code: 'INVALID_ARGUMENT' });
  assert.throws(() => client.lock('x', 1000), { code: 'INVALID_ARGUMENT' });
  // napi's reason is kept where it quotes no value.
  for (const name of [undefined, 42, {}]) {
    assert.throws(() => client.lock(name), { code: 'INVALID_ARGUMENT', message: /expected a string or a Buffer/ });
  }
  await assert.rejects(Client.connect(server.url, { replicaAcks: { replicas: 1 } }),
    { code: 'INVALID_ARGUMENT', message: /missing field timeout of ClientOptions.replicaAcks/ });
  await assert.rejects(Client.connect('ftp://127.0.0.1'), { code: 'INVALID_URL' });
  await assert.rejects(Client.connect('redis://[::1'), { code: 'INVALID_URL' });
  const lock = client.lock('bad-shape', { ttl: 2000 });
  await assert.rejects(lock.acquire('soon'), { code: 'INVALID_ARGUMENT' });
  await assert.rejects(lock.acquire({ signal: 'abort' }), { code: 'INVALID_ARGUMENT' });
  const h = await lock.acquire();
  assert.throws(() => h.onLost('not a function'), { code: 'INVALID_ARGUMENT' });
  await h.release();
  await assert.rejects(client.withLock('bad-shape', 'not a function'), { code: 'INVALID_ARGUMENT' });
});

test('counts must be whole numbers: a fraction is refused, not truncated', async () => {
  // maxReentrancy 2.5 read as 2, or a quorum of 1.5 read as 1, would change what the lock guarantees.
  for (const options of [{ maxReentrancy: 2.5 }, { maxNameLen: 100.5 }, { redlockMaxInflight: 1.5 }, { redlockQuorum: 1.5 },
    { replicaAcks: { replicas: 1.5, timeout: 100 } }]) {
    await assert.rejects(Client.connect(server.url, options), { code: 'INVALID_CONFIG' }, JSON.stringify(options));
  }
  await assert.rejects(Redlock.connect([server.url], { redlockQuorum: 1.5 }), { code: 'INVALID_CONFIG' });
  // Control: the whole numbers next to them are accepted.
  (await Client.connect(server.url, { maxReentrancy: 2, maxNameLen: 100, redlockMaxInflight: 1, redlockQuorum: 1 })).close();
});

test('unknown option keys are refused, naming the key; every documented key is accepted', async () => {
  // Another library's option would otherwise be ignored: `timeout` read as no bound at all.
  const lock = client.lock('unknown-keys', { ttl: 2000 });
  await assert.rejects(lock.acquire({ timeout: 100 }), { code: 'INVALID_ARGUMENT', message: /'timeout'/ });
  await assert.rejects(lock.acquire([]), { code: 'INVALID_ARGUMENT' });
  assert.throws(() => client.lock('unknown-keys', { lockTimeout: 1000 }), { code: 'INVALID_ARGUMENT', message: /'lockTimeout'/ });
  await assert.rejects(Client.connect(server.url, { retryCount: 3 }), { code: 'INVALID_ARGUMENT', message: /'retryCount'/ });
  await assert.rejects(Redlock.connect([server.url], { retryDelay: 1 }), { code: 'INVALID_ARGUMENT' });
  await assert.rejects(client.withLock('unknown-keys', async () => {}, { timeout: 5 }), { code: 'INVALID_ARGUMENT' });
  await assert.rejects(client.withLock('unknown-keys', async () => {}, []), { code: 'INVALID_ARGUMENT' });
  await assert.rejects(Client.connect(server.url, { replicaAcks: { replicas: 1, timeout: 10, wait: 1 } }),
    { code: 'INVALID_ARGUMENT', message: /replicaAcks has no option 'wait'/ });

  // Every field index.d.ts declares passes the key check (the lists in index.js follow it).
  const dts = fs.readFileSync(new URL('../index.d.ts', import.meta.url), 'utf8');
  const fields = (name) => {
    const body = new RegExp(`export interface ${name}\\b[^{]*\\{([^}]*)\\}`).exec(dts)[1];
    return [...body.matchAll(/^\s*(\w+)\??:/gm)].map((m) => m[1]);
  };
  const notUnknown = (e) => !/has no option/.test(e.message);
  const cases = [
    ['ClientOptions', (k) => Client.connect('redis://127.0.0.1:1', { [k]: undefined, connectTimeout: 50 })],
    ['LockOptions', (k) => client.lock('dts-keys', { [k]: undefined })],
    ['AcquireOptions', (k) => client.lock('dts-keys', { ttl: 2000 }).acquire({ [k]: undefined, wait: 0 })],
  ];
  for (const [iface, call] of cases) {
    const keys = fields(iface);
    assert.ok(keys.length >= 2, `${iface}: ${keys}`);
    for (const k of keys) {
      try {
        const r = await call(k);
        if (r?.release) await r.release();
        if (r?.close) r.close();
      } catch (e) {
        assert.ok(notUnknown(e), `${iface}.${k} refused as unknown: ${e.message}`);
      }
    }
  }
  for (const [iface, outer] of [['TlsOptions', 'tls'], ['ReplicaAcksOptions', 'replicaAcks']]) {
    for (const k of fields(iface)) {
      await Client.connect('rediss://127.0.0.1:1', { [outer]: { [k]: undefined }, connectTimeout: 50 }).then(
        (c) => c.close(), (e) => assert.ok(notUnknown(e), `${iface}.${k}: ${e.message}`));
    }
  }
});

test('tls of the wrong type, or any tls with a plain URL, never connects in clear text', async () => {
  for (const tls of [true, 'pem', 42, [], () => {}]) {
    await assert.rejects(Client.connect(server.url, { tls }), { code: 'INVALID_ARGUMENT', message: /options.tls must be an object/ },
      `tls: ${String(tls)}`);
  }
  // `tls: {}` (an ioredis habit for "use TLS") names TLS even when it sets no certificate.
  for (const url of [server.url, `redis+sentinel://127.0.0.1:${server.port}/m`]) {
    await assert.rejects(Client.connect(url, { tls: {} }), { code: 'INVALID_CONFIG', message: /clear text/ });
  }
  await assert.rejects(Redlock.connect([server.url], { tls: {} }), { code: 'INVALID_CONFIG' });
  // Control: no tls connects in clear text as asked.
  for (const options of [{}, { tls: undefined }]) (await Client.connect(server.url, options)).close();
});

test('a closed client is CLOSED, and so are locks made before (test/close.test.mjs)', async () => {
  const c = await Client.connect(server.url);
  const lock = c.lock('closed-client', { ttl: 2000 });
  c.close();
  c.close();
  assert.throws(() => c.lock('x'), { code: 'CLOSED' });
  await assert.rejects(c.inspect('x'), { code: 'CLOSED' });
  await assert.rejects(lock.acquire(), { code: 'CLOSED' });
});

test('passwords never appear in errors or util.inspect', async () => {
  const secret = 'S3ntinel-node-pw';
  const url = `redis://:${secret}@127.0.0.1:1`;
  // Arguments of the wrong shape: napi's own messages would quote the value.
  for (const call of [
    () => Client.connect([url]),
    () => Client.connect({ url }),
    () => Redlock.connect([url, { url }]),
    () => Client.connect(url, { prefix: { url } }),
  ]) {
    await assert.rejects(call(), (err) => {
      assert.equal(err.code, 'INVALID_ARGUMENT');
      assert.ok(!inspect(err, { depth: 10 }).includes(secret), inspect(err));
      return true;
    });
  }
  const guarded = await startRedis(['--requirepass', secret]);
  try {
    await assert.rejects(Client.connect(`redis://:wrong-${secret}@127.0.0.1:${guarded.port}`), (err) => {
      assert.equal(err.code, 'AUTH');
      assert.ok(!inspect(err).includes(secret));
      return true;
    });
    const c = await Client.connect(`redis://:${secret}@127.0.0.1:${guarded.port}`);
    assert.ok(!inspect(c, { showHidden: true, depth: 5 }).includes(secret));
    const h = await c.lock('pw', { ttl: 2000 }).acquire();
    assert.ok(!inspect(h, { showHidden: true, depth: 5 }).includes(secret));
    await h.release();
    c.close();
  } finally {
    await guarded.stop();
  }
});

test('the classes are not constructed with new; methods need a real receiver', async () => {
  const { Lock, Held } = require('../index.js');
  for (const cls of [Client, Redlock, Lock, Held]) {
    assert.throws(() => new cls(), { code: 'INVALID_ARGUMENT' }, cls.name);
  }
  const h = await client.lock('receiver', { ttl: 2000 }).acquire();
  assert.ok(h instanceof Held);
  assert.ok(client instanceof Client);
  await assert.rejects(Held.prototype.release.call({}), { code: 'INVALID_ARGUMENT' });
  // Every member, called on something else, fails with one of our codes (not napi's status,
  // not a plain TypeError).
  const getter = (proto, name) => Object.getOwnPropertyDescriptor(proto, name).get;
  for (const [what, call] of [
    ['client.close', () => Client.prototype.close.call({})],
    ['held.remaining', () => Held.prototype.remaining.call({})],
    ['held.ensure', () => Held.prototype.ensure.call({})],
    ['held.onLost', () => Held.prototype.onLost.call({}, () => {})],
    ['client.lock', () => Client.prototype.lock.call({}, 'x')],
    ...['fence', 'count', 'state', 'signal'].map((n) => [`held.${n}`, () => getter(Held.prototype, n).call({})]),
    ...['name', 'ttl'].map((n) => [`lock.${n}`, () => getter(Lock.prototype, n).call({})]),
    ['client.isRedlock', () => getter(Client.prototype, 'isRedlock').call({})],
  ]) {
    assert.throws(call, { code: 'INVALID_ARGUMENT' }, what);
  }
  await assert.rejects(Client.prototype.withLock.call({}, 'x', async () => {}), { code: 'INVALID_ARGUMENT' });
  await assert.rejects(Lock.prototype.acquire.call({}), { code: 'INVALID_ARGUMENT' });
  assert.equal(h.fence > 0 && h.count === 1 && h.state === 'held', true); // the wrapped getters still read
  await h.release();
});
