// The error mapping is total over the core's table, and codes are what users match on.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import net from 'node:net';
import { createRequire } from 'node:module';
import { test } from 'node:test';

const require = createRequire(import.meta.url);
const ferrolock = require('../index.js');
const native = require('../ferrolock.node');

test('every core error kind reaches JS as an Error with err.code equal to the core name', () => {
  const table = ferrolock.errorCodes();
  assert.ok(table.length >= 21, 'the core table has every kind');
  assert.equal(new Set(table.map((e) => e.code)).size, table.length, 'numeric codes are unique');
  for (const { name, code } of table) {
    assert.ok(code >= 100 && code < 600, `${name} has a code in the published ranges`);
    assert.equal(ferrolock.ErrorCode[name], name);
    assert.throws(() => native._errorOfKind(name), (err) => {
      assert.ok(err instanceof Error);
      assert.equal(err.code, name);
      return true;
    });
  }
  assert.deepEqual(Object.keys(ferrolock.ErrorCode).sort(), table.map((e) => e.name).sort());
  assert.ok(table.every((e) => typeof e.transient === 'boolean'));
  const transient = new Set(table.filter((e) => e.transient).map((e) => e.name));
  assert.ok(transient.has('CONNECTION') && transient.has('TIMEOUT') && !transient.has('NOT_HELD'));
});

test('index.d.ts declares exactly the core\'s error codes (ErrorCodeName)', () => {
  const dts = readFileSync(new URL('../index.d.ts', import.meta.url), 'utf8');
  const union = dts.match(/export type ErrorCodeName =([^;]*?)\n\n/);
  assert.ok(union, 'ErrorCodeName not found in index.d.ts');
  const declared = [...union[1].matchAll(/'([A-Z_]+)'/g)].map((m) => m[1]);
  assert.deepEqual(declared.sort(), ferrolock.errorCodes().map((e) => e.name).sort());
});

test('a bad URL is INVALID_URL and the password never shows', async () => {
  const secret = 'S3ntinel-url-secret';
  await assert.rejects(ferrolock.Client.connect(`http://user:${secret}@127.0.0.1:1`), (err) => {
    assert.equal(err.code, 'INVALID_URL');
    assert.ok(!err.message.includes(secret));
    return true;
  });
  await assert.rejects(ferrolock.Client.connect(42), { code: 'INVALID_ARGUMENT' });
});

test('an unreachable server is CONNECTION, without the password', async () => {
  const secret = 'S3ntinel-unreachable';
  await assert.rejects(
    ferrolock.Client.connect(`redis://:${secret}@127.0.0.1:1`, { connectTimeout: 300 }),
    (err) => {
      assert.equal(err.code, 'CONNECTION');
      assert.ok(!err.message.includes(secret) && !String(err.stack).includes(secret));
      return true;
    },
  );
});

test('an error made when a call settles carries the caller\'s frames', async () => {
  // The addon builds it on settling, with no JavaScript on the stack ("Error: …" and nothing
  // else, as the bare addon's call rejects); index.js gives it the awaiting caller's frames.
  async function connectFromHere() {
    return ferrolock.Client.connect('redis://127.0.0.1:1', { connectTimeout: 300 });
  }
  const here = new URL(import.meta.url).pathname;
  await assert.rejects(connectFromHere(), (err) => {
    assert.equal(err.code, 'CONNECTION');
    assert.ok(String(err.stack).includes(here), err.stack);
    return true;
  });
});

test('connectTimeout bounds a connect to a server that accepts but never answers', async () => {
  // The default (2 s per connect, with the reconnect attempts after it) takes about 8 s here;
  // a connectTimeout that was read but not used passed every other test.
  const silent = net.createServer(() => {});
  await new Promise((resolve) => silent.listen(0, '127.0.0.1', resolve));
  try {
    const t0 = performance.now();
    await assert.rejects(
      ferrolock.Client.connect(`redis://127.0.0.1:${silent.address().port}`, { connectTimeout: 200 }),
      { code: 'TIMEOUT' },
    );
    const took = performance.now() - t0;
    assert.ok(took < 4000, `connectTimeout 200 ms ignored: the connect took ${Math.round(took)} ms`);
  } finally {
    silent.close();
  }
});
