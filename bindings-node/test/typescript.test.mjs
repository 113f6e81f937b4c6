// The TypeScript example type-checks (ci/test-node.sh runs tsc --noEmit) and also runs: compiled
// here and executed against a real server, so the declared types and the runtime agree.
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdtemp, rm, symlink, mkdir } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';

import { startRedis } from './redis.mjs';

const run = promisify(execFile);
const here = path.dirname(fileURLToPath(import.meta.url));
const pkg = path.resolve(here, '..');
const tsc = path.join(pkg, 'node_modules', '.bin', 'tsc');
const example = path.resolve(pkg, '..', 'examples', 'node');

let server;
let dir;
before(async () => {
  server = await startRedis();
  dir = await mkdtemp(path.join(tmpdir(), 'ferrolock-ts-'));
});
after(async () => {
  await server?.stop();
  if (dir) await rm(dir, { recursive: true, force: true });
});

test('examples/node/usage.ts compiles under --strict and runs against a server', async () => {
  const out = path.join(dir, 'out');
  await run(tsc, ['-p', path.join(example, 'tsconfig.json'), '--noEmit', 'false', '--outDir', out]);
  // Resolve `ferrolock` the way an installed package would be found.
  await mkdir(path.join(dir, 'node_modules'));
  await symlink(pkg, path.join(dir, 'node_modules', 'ferrolock'));
  const { stdout } = await run(process.execPath, [path.join(out, 'usage.js')], {
    env: { ...process.env, REDIS_URL: server.url, NODE_PATH: path.join(dir, 'node_modules') },
  });
  assert.match(stdout, /depth 2, same fence: true/);
  assert.match(stdout, /total 6/);
  assert.match(stdout, /negative TTLs are refused/);
});
