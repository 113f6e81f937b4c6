// Property-based bad input (RELIABILITY.md, Node column: node:test + fast-check). Any JS value in
// any argument or option is used or refused with a coded error: never a crash, a hang, or an
// error without one of the core's codes (napi's own conversion errors included). The fixed cases
// are in bad-input.test.mjs; these reach the shapes nobody listed.
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import { inspect } from 'node:util';
import { test } from 'node:test';

import fc from 'fast-check';

import { serverAndClient } from './redis.mjs';

const require = createRequire(import.meta.url);
const { Client, Redlock, errorCodes } = require('../index.js');

const CODES = new Set(errorCodes().map((c) => c.name).filter((n) => n !== 'INTERNAL'));

let server;
let client;
serverAndClient(Client, (s, c) => {
  [server, client] = [s, c];
});

/** `err` is an Error with one of the core's codes: what every refusal must be. */
function coded(err, what) {
  assert.ok(err instanceof Error, `${what}: not an Error: ${inspect(err)}`);
  assert.ok(CODES.has(err.code), `${what}: no ferrolock code: ${inspect(err)}`);
  return err;
}

/** Runs `f`, sync or async: its value, or the coded error it threw or rejected with. */
async function outcome(f, what) {
  try {
    return { value: await f() };
  } catch (err) {
    return { err: coded(err, what) };
  }
}

// Any JS value, and the numbers that sit on the edges of what durations and counts accept.
const edgeNumber = fc.oneof(
  fc.double(),
  fc.integer(),
  fc.constantFrom(0, -0, 1, 2, 3, 1000, 2 ** 31, 2 ** 32, 2 ** 53, 1e15, -1, NaN, Infinity, -Infinity),
);
const anyValue = fc.oneof(
  fc.anything({ withBigInt: true, withBoxedValues: true, withMap: true, withSet: true, withTypedArray: true, withNullPrototype: true }),
  edgeNumber,
  fc.bigInt(),
  fc.constant(Symbol('s')),
  fc.constant(() => 1),
);
const field = (arb) => fc.oneof({ weight: 3, arbitrary: arb }, { weight: 1, arbitrary: anyValue });
const lockOptions = fc.oneof(
  anyValue,
  fc.record({ ttl: field(edgeNumber), renew: field(fc.boolean()), fair: field(fc.boolean()) }, { requiredKeys: [] }),
);
const name = fc.oneof(
  fc.string({ unit: 'binary', maxLength: 40 }),
  fc.string({ maxLength: 40 }),
  fc.uint8Array({ maxLength: 40 }).map((a) => Buffer.from(a)),
  anyValue,
);

test('lock(name, options): a Lock that works, or a coded refusal', async () => {
  let worked = 0;
  await fc.assert(
    fc.asyncProperty(name, lockOptions, async (n, opts) => {
      const made = await outcome(() => client.lock(n, opts), 'lock()');
      if (made.err) return;
      const h = await made.value.tryAcquire();
      assert.ok(h, 'a free name is granted');
      // A lease of a few ms may be over (LOST) by now: coded too.
      await outcome(() => h.release(), 'release()');
      worked += 1;
    }),
    { numRuns: 300 },
  );
  assert.ok(worked >= 10, `only ${worked} locks were taken: the property hardly reached the server`);
});

test('acquire(options), extend(ttl), ensure(margin): used or refused with a code', async () => {
  const lock = client.lock('properties-acquire', { ttl: 5000 });
  let acquired = 0;
  await fc.assert(
    fc.asyncProperty(
      fc.oneof(anyValue, fc.record({ wait: field(edgeNumber), signal: field(fc.constant(null)) }, { requiredKeys: [] })),
      anyValue,
      anyValue,
      async (acquireOpts, ttl, margin) => {
        // The lock is free: any wait the call accepts returns at once.
        const got = await outcome(() => lock.acquire(acquireOpts), 'acquire()');
        if (got.err) return;
        acquired += 1;
        const h = got.value;
        await outcome(() => h.extend(ttl), 'extend()');
        await outcome(() => h.ensure(margin), 'ensure()');
        await outcome(() => h.onLost(margin), 'onLost()');
        await outcome(() => h.release(), 'release()');
        coded(await h.release().then(() => 'released twice', (e) => e), 'a second release');
      },
    ),
    { numRuns: 200 },
  );
  assert.ok(acquired >= 15, `only ${acquired} acquires went through`);
});

// Values each option takes in a working client: most cases use them, and a case sets at most
// three options, so that a fair share of cases is valid as a whole and reaches a server.
const SANE = {
  connectTimeout: [500, 2000],
  responseTimeout: [500, 2000],
  prefix: ['p:', 'ü:'],
  maxNameLen: [64, 65536],
  driftFactor: [0.01, 0.2],
  driftMin: [0, 2],
  watchdogTtl: [5000, 30000],
  fenceRetention: [60000, 86400000],
  maxReentrancy: [1, 1024],
  subscriptionLinger: [0, 10000],
  redlockQuorum: [2, 3],
  redlockNodeTimeout: [50, 1000],
  redlockRetryJitter: [0, 100],
  redlockMaxInflight: [1, 64],
};
const clientOptions = fc.oneof(
  { weight: 1, arbitrary: anyValue },
  {
    weight: 3,
    arbitrary: fc
      .uniqueArray(fc.constantFrom(...Object.keys(SANE)), { maxLength: 3 })
      .chain((keys) =>
        fc.record(Object.fromEntries(keys.map((k) => [k, fc.oneof(
          { weight: 4, arbitrary: fc.constantFrom(...SANE[k]) },
          { weight: 1, arbitrary: fc.oneof(edgeNumber, anyValue) },
        )]))),
      ),
  },
);

test('Client.connect / Redlock.connect with any options: a client, or a coded refusal', async () => {
  let connected = 0;
  await fc.assert(
    fc.asyncProperty(clientOptions, async (opts) => {
      // A valid but tiny connect or response timeout times out: that is a timeout, not bad input.
      for (const t of ['connectTimeout', 'responseTimeout']) {
        const v = opts?.[t];
        if (typeof v === 'number' && v > 0 && v < 200) return;
      }
      const got = await outcome(() => Client.connect(server.url, opts), 'Client.connect()');
      if (got.value) {
        got.value.close();
        connected += 1;
      }
      const masters = ['redis://127.0.0.1:1', 'redis://127.0.0.2:1', 'redis://127.0.0.3:1'];
      const r = await outcome(() => Redlock.connect(masters, opts), 'Redlock.connect()');
      assert.ok(r.err, 'nothing listens on port 1');
    }),
    { numRuns: 200 },
  );
  assert.ok(connected >= 40, `only ${connected} option sets connected`);
});

// A password mixing URL delimiters, '%', spaces and non-ASCII, percent-encoded into the URL.
const password = fc
  .array(fc.oneof(fc.constantFrom(...'abcdefghijklmnopqrstuvwxyz0123456789'), fc.constantFrom(...':@/?#%+&= []!$\'*,;'), fc.constantFrom('ö', '€', '😀')), { minLength: 8, maxLength: 20 })
  .map((a) => a.join(''));

test('any URL with a password in it: no error shows it, as written or decoded', async () => {
  const url = fc.record({
    scheme: fc.constantFrom('redis', 'rediss', 'redis+sentinel', 'rediss+sentinel', 'redis+cluster', 'unix', 'http'),
    pw: password,
    host: fc.constantFrom('127.0.0.1', '[::1]', 'localhost', '', '[::1', 'bad host'),
    port: fc.constantFrom(':1', ':0', ':99999', ':x'),
    path: fc.constantFrom('', '/0', '/x', '/mymaster', '/mymaster/x'),
  });
  await fc.assert(
    fc.asyncProperty(url, async ({ scheme, pw, host, port, path }) => {
      const written = encodeURIComponent(pw);
      const u = `${scheme}://alice:${written}@${host}${port}${path}`;
      assert.ok(u.includes(written), 'control: the check below looks for what the URL holds');
      for (const call of [() => Client.connect(u, { connectTimeout: 500 }), () => Redlock.connect([u], { connectTimeout: 500 })]) {
        const r = await outcome(call, u);
        assert.ok(r.err, `${u} connected`);
        const text = `${inspect(r.err, { depth: 10, showHidden: true })} ${r.err.message}`;
        for (const secret of [pw, written]) {
          assert.ok(!text.includes(secret), `${u}: the password shows in ${text}`);
        }
      }
    }),
    { numRuns: 100 },
  );
});
