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
