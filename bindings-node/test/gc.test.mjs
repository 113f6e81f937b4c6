// DESIGN §6/§8: a collected Held never releases in Redis; its renewal stops and the lease runs
// out. Run in a child process with --expose-gc; a kept Held is the control (still renewed).
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { after, before, test } from 'node:test';
import { promisify } from 'node:util';

import { startRedis } from './redis.mjs';

const run = promisify(execFile);
let server;
before(async () => { server = await startRedis(); });
after(async () => { await server?.stop(); });

test('a collected Held is not released; its lease runs out while a kept one is renewed', async () => {
  const pkg = new URL('../index.js', import.meta.url).pathname;
  const script = `
    const { Client } = require(${JSON.stringify(pkg)});
    (async () => {
      const c = await Client.connect(process.argv[1]);
      const kept = await c.lock('gc-kept', { ttl: 600, renew: true }).acquire();
      let dropped = await c.lock('gc-dropped', { ttl: 600, renew: true }).acquire();
      dropped = null;
      for (let i = 0; i < 5; i++) { global.gc(); await new Promise((r) => setImmediate(r)); }
      process.stdout.write('collected\\n');
      await new Promise((r) => setTimeout(r, 1500));
      process.stdout.write(kept.state + '\\n');
      await kept.release();
      c.close();
    })().catch((e) => { console.error(e); process.exit(1); });
  `;
  const child = run(process.execPath, ['--expose-gc', '-e', script, server.url]);
  // Right after collection the dropped hold is still there (no release was sent)...
  let sawDroppedAlive = false;
  for (let i = 0; i < 20 && !sawDroppedAlive; i++) {
    await new Promise((r) => setTimeout(r, 25));
    sawDroppedAlive = (await server.cli('EXISTS', 'ferrolock:{gc-dropped}')) === '1';
  }
  assert.ok(sawDroppedAlive, 'the dropped hold exists after collection');
  await new Promise((r) => setTimeout(r, 1200));
  assert.equal(await server.cli('EXISTS', 'ferrolock:{gc-dropped}'), '0', 'not renewed: the lease ran out');
  assert.equal(await server.cli('EXISTS', 'ferrolock:{gc-kept}'), '1', 'control: the kept hold is renewed');
  const { stdout } = await child;
  assert.match(stdout, /collected\nheld\n/);
});

// Loss callbacks and signal listeners that refer to their own Held (`held.onLost(() =>
// this.stop())` with `this` keeping the hold) must not keep it alive: the native loss hook may
// not reach the hold's loss state, or the cycle Held -> native hook -> callback -> Held is
// invisible to V8 and the watchdog renews the lock forever. Each case runs in a child with
// --expose-gc: acquire on one client (600 ms lease, renewed), drop the Held, collect, then
// another client must get the lock within a few leases. `kept` checks the other side: a Held
// still referenced keeps its callbacks and signal through the collections, and they fire once.
function gcChild(mode, name) {
  const pkg = new URL('../index.js', import.meta.url).pathname;
  const script = `
    const { Client } = require(${JSON.stringify(pkg)});
    const [url, mode, name] = process.argv.slice(1);
    const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
    const collect = async () => {
      for (let i = 0; i < 5; i++) { global.gc(); await new Promise((r) => setImmediate(r)); await sleep(20); }
    };
    (async () => {
      const c = await Client.connect(url);
      const other = await Client.connect(url);
      const out = {};
      if (mode === 'kept') {
        const held = await c.lock(name, { ttl: 600, renew: true }).acquire();
        const fired = { onLost: 0, abort: 0 };
        held.onLost(() => { fired.onLost++; fired.fence = held.fence; });
        held.signal.addEventListener('abort', () => { fired.abort++; fired.state = held.state; });
        await collect();
        await sleep(700); // still renewed past its first lease
        out.stillHeld = held.state;
        await collect();
        await other.forceUnlock(name);
        for (let i = 0; i < 60 && !(fired.onLost && fired.abort); i++) await sleep(50);
        await sleep(200);
        await collect();
        Object.assign(out, fired, { fenceOk: fired.fence === held.fence, reason: held.signal.reason?.code });
      } else if (mode === 'signal') {
        // A leader that keeps only the hold's signal ("lead until it aborts"): the signal keeps
        // the hold, renewed; once the signal goes too, the hold is collected and runs out.
        let signal = await (async () => (await c.lock(name, { ttl: 600, renew: true }).acquire()).signal)();
        await collect();
        await sleep(1500); // 2.5 leases
        const taken = await other.lock(name, { ttl: 5000 }).tryAcquire();
        out.takenWhileSignalKept = taken !== null;
        out.abortedWhileKept = signal.aborted;
        await taken?.release();
        signal = null;
        await collect();
        const t0 = Date.now();
        const h2 = await other.lock(name, { ttl: 5000 }).acquire({ wait: 3000 }).catch((e) => e.code);
        out.acquiredAfterDrop = typeof h2 === 'object';
        out.ms = Date.now() - t0;
        if (typeof h2 === 'object') await h2.release();
      } else {
        // The Held lives only in this inner scope (and, in 'cycle', in its own callbacks).
        await (async () => {
          const held = await c.lock(name, { ttl: 600, renew: true }).acquire();
          if (mode === 'cycle') {
            const owner = { held, stop() { return this.held.fence; } };
            held.onLost(() => owner.stop());
            held.signal.addEventListener('abort', () => owner.stop());
          }
        })();
        await collect();
        const t0 = Date.now();
        try {
          const h2 = await other.lock(name, { ttl: 5000 }).acquire({ wait: 3000 });
          out.acquired = true;
          out.ms = Date.now() - t0;
          await h2.release();
        } catch (e) {
          out.acquired = false;
          out.error = e.code;
        }
      }
      process.stdout.write(JSON.stringify(out) + '\\n');
      c.close();
      other.close();
    })().catch((e) => { console.error(e); process.exit(1); });
  `;
  return run(process.execPath, ['--expose-gc', '-e', script, server.url, mode, name], { timeout: 20000 });
}

test('a collected Held whose onLost callback and signal listener refer to it stops renewing; another client gets the lock', async () => {
  const { stdout } = await gcChild('cycle', 'gc-cycle');
  const out = JSON.parse(stdout);
  assert.equal(out.acquired, true, `the lock was still renewed after collection (${out.error})`);
  assert.ok(out.ms < 3000);
});

test('control: a collected Held without loss callbacks stops renewing; another client gets the lock', async () => {
  const { stdout } = await gcChild('plain', 'gc-plain');
  const out = JSON.parse(stdout);
  assert.equal(out.acquired, true, `the lock was still renewed after collection (${out.error})`);
  assert.ok(out.ms < 3000);
});

test('a kept Held keeps its onLost callback and signal through collections; both fire once on loss', async () => {
  const { stdout } = await gcChild('kept', 'gc-kept-callbacks');
  const out = JSON.parse(stdout);
  assert.equal(out.stillHeld, 'held', 'renewed while referenced');
  assert.equal(out.onLost, 1);
  assert.equal(out.abort, 1);
  assert.equal(out.fenceOk, true);
  assert.equal(out.state, 'lost');
  assert.equal(out.reason, 'LOST');
});

test('a signal kept on its own keeps its hold renewed; dropped too, the hold runs out', async () => {
  // The split brain this guards against: the Held was collected under a kept signal, its lease
  // ran out, another client took the lock, and the signal never aborted.
  const { stdout } = await gcChild('signal', 'gc-signal');
  const out = JSON.parse(stdout);
  assert.equal(out.takenWhileSignalKept, false, `another client got the lock under a kept signal (aborted: ${out.abortedWhileKept})`);
  assert.equal(out.abortedWhileKept, false);
  assert.equal(out.acquiredAfterDrop, true, 'still renewed after the signal was dropped too');
  assert.ok(out.ms < 3000);
});

test('a live hold with an onLost callback and a signal listener does not keep the process alive', async () => {
  // The native loss hook is weak: a script that is done (its hold left to its lease) exits at
  // once, not when the lease runs out and the hook has fired.
  const pkg = new URL('../index.js', import.meta.url).pathname;
  const script = `
    const { Client } = require(${JSON.stringify(pkg)});
    (async () => {
      const c = await Client.connect(process.argv[1]);
      const h = await c.lock('exit-with-hold-' + process.pid, { ttl: 20000 }).acquire();
      h.onLost(() => {});
      h.signal.addEventListener('abort', () => {});
      globalThis.kept = h;
      process.stdout.write('holding\\n');
    })().catch((e) => { console.error(e); process.exit(1); });
  `;
  const t0 = performance.now();
  const { stdout } = await run(process.execPath, ['-e', script, server.url], { timeout: 10000 });
  assert.equal(stdout, 'holding\n');
  assert.ok(performance.now() - t0 < 8000, 'the process waited for the lease to run out');
});
