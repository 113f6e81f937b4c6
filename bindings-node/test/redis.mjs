// Test harness: real redis-server processes on free loopback ports, stopped by pid.
import { execFile, spawn } from 'node:child_process';
import net from 'node:net';
import { promisify } from 'node:util';
import { after, before } from 'node:test';

const run = promisify(execFile);
const live = new Set();
process.on('exit', () => {
  for (const p of live) {
    try { p.kill('SIGKILL'); } catch { /* already gone */ }
  }
});
// A test file the runner ends (its --test-timeout) or an interrupted run: stop the servers too
// ('exit' runs on process.exit, not on a signal's default action).
for (const sig of ['SIGTERM', 'SIGINT']) {
  process.once(sig, () => process.exit(128 + (sig === 'SIGTERM' ? 15 : 2)));
}

function freePort() {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** Start a redis-server; resolves once it answers (as the process started here). */
export async function startRedis(extra = []) {
  for (let attempt = 0; attempt < 5; attempt++) {
    const port = await freePort();
    const proc = spawn('redis-server', [
      '--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', ...extra,
    ], { stdio: ['ignore', 'ignore', 'pipe'] });
    live.add(proc);
    let exited = false;
    proc.once('exit', () => { exited = true; live.delete(proc); });
    const auth = extra.includes('--requirepass') ? ['-a', extra[extra.indexOf('--requirepass') + 1], '--no-auth-warning'] : [];
    for (let i = 0; i < 100 && !exited; i++) {
      try {
        // Ours, not a server that already had the port (ours then fails to bind and exits).
        const { stdout } = await run('redis-cli', ['-p', String(port), ...auth, 'INFO', 'server']);
        if (stdout.split(/\r?\n/).includes(`process_id:${proc.pid}`)) {
          const cli = async (...args) => (await run('redis-cli', ['-p', String(port), ...auth, ...args.map(String)])).stdout.trim();
          return {
            port,
            url: `redis://127.0.0.1:${port}`,
            pid: proc.pid,
            cli,
            async stop() {
              if (exited) return;
              const gone = new Promise((r) => proc.once('exit', r));
              proc.kill('SIGKILL');
              await gone;
            },
          };
        }
      } catch { /* not up yet */ }
      await sleep(50);
    }
    if (!exited) proc.kill('SIGKILL');
  }
  throw new Error('could not start redis-server');
}

/**
 * One redis-server and one client of `Client` for a whole test file: started in `before`,
 * closed and stopped in `after`. `set(server, client)` hands them to the file once both are up.
 */
export function serverAndClient(Client, set) {
  let server;
  let client;
  before(async () => {
    server = await startRedis();
    client = await Client.connect(server.url);
    set(server, client);
  });
  after(async () => {
    client?.close();
    await server?.stop();
  });
}

export { sleep };
