// Secret scan (RELIABILITY.md "No secrets in logs/errors", peer bug B20): a sentinel password goes
// through a successful connection, WRONGPASS, a refused and a timed-out connection, a TLS failure
// and a bad URL. Each runs in a child node process (RUST_LOG=trace) that prints everything the
// library exposes — err.message, String(err), err.stack, util.inspect(err) and its own properties
// and cause, util.inspect of the client, lock and hold — and the child's whole stdout + stderr is
// grepped for the password: 0 hits. A control run of the same child prints the URL, and the same
// grep must find it there.
import assert from 'node:assert/strict';
import { execFile, execFileSync } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { after, before, test } from 'node:test';

import { startRedis } from './redis.mjs';

const SENTINEL = 'Sentinel-Secret-7f3a';
const indexJs = fileURLToPath(new URL('../index.js', import.meta.url));
const run = promisify(execFile);

// The child: argv = [mode, url]; prints one dump per captured thing.
const CHILD = `
const util = require('node:util');
const { Client } = require(${JSON.stringify(indexJs)});
const [mode, url] = process.argv.slice(1);
const show = (v) => util.inspect(v, { depth: 8, showHidden: true, getters: true });
const dump = (label, v) => console.log('--- ' + label + '\\n' + (typeof v === 'string' ? v : show(v)));
function dumpErr(err) {
  dump('message', err.message);
  dump('String', String(err));
  dump('stack', String(err.stack));
  dump('inspect', err);
  dump('code', String(err.code));
  dump('props', JSON.stringify(Object.getOwnPropertyNames(err).map((k) => [k, String(err[k])])));
  if (err.cause !== undefined) dump('cause', err.cause);
  console.error(err);
}
(async () => {
  const opts = { connectTimeout: 300, responseTimeout: 300 };
  if (mode === 'control') { dump('url', url); return; }
  if (mode === 'ok') {
    const client = await Client.connect(url, opts);
    dump('client', client);
    dump('client String', String(client));
    const lock = client.lock('secret-scan-' + process.pid, { ttl: 5000 });
    dump('lock', lock);
    const held = await lock.acquire();
    dump('held', held);
    dump('info', await client.inspect('secret-scan-' + process.pid));
    await held.release();
    dump('released', held);
    client.close();
    dump('OK', 'connected');
    return;
  }
  try {
    await Client.connect(url, opts);
    dump('UNEXPECTED', 'connected');
  } catch (err) {
    dumpErr(err);
  }
})().catch((e) => { console.error('child failed', e); process.exit(3); });
`;

async function child(mode, url) {
  const { stdout, stderr } = await run(process.execPath, ['-e', CHILD, mode, url],
    { env: { ...process.env, RUST_LOG: 'trace', RUST_BACKTRACE: 'full' }, timeout: 30000 });
  return { stdout, stderr, all: `${stdout}\n${stderr}` };
}

const hits = (text) => text.split(SENTINEL).length - 1;

const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'ferrolock-node-secret-'));
const openssl = (...args) => execFileSync('openssl', args, { cwd: dir, stdio: 'pipe' });
const ec = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes'];
const freePort = () => new Promise((resolve) => {
  const s = net.createServer().listen(0, '127.0.0.1', () => { const { port } = s.address(); s.close(() => resolve(port)); });
});

let server;
let tlsPort;
let silent;
before(async () => {
  openssl('req', '-x509', '-days', '2', '-subj', '/CN=ca', '-keyout', 'ca.key', '-out', 'ca.crt', ...ec,
    '-addext', 'basicConstraints=critical,CA:TRUE', '-addext', 'keyUsage=critical,keyCertSign');
  fs.writeFileSync(path.join(dir, 'server.ext'), 'subjectAltName=DNS:localhost\nextendedKeyUsage=serverAuth\n');
  openssl('req', '-subj', '/CN=localhost', '-keyout', 'server.key', '-out', 'server.csr', ...ec);
  openssl('x509', '-req', '-in', 'server.csr', '-CA', 'ca.crt', '-CAkey', 'ca.key', '-CAcreateserial',
    '-days', '2', '-out', 'server.crt', '-extfile', 'server.ext');
  tlsPort = await freePort();
  server = await startRedis(['--requirepass', SENTINEL, '--tls-port', String(tlsPort),
    '--tls-cert-file', path.join(dir, 'server.crt'), '--tls-key-file', path.join(dir, 'server.key'),
    '--tls-ca-cert-file', path.join(dir, 'ca.crt'), '--tls-auth-clients', 'no']);
  // Completes the TCP handshake and never answers: a response timeout.
  silent = net.createServer(() => {}).listen(0, '127.0.0.1');
  await new Promise((r) => silent.once('listening', r));
});
after(async () => {
  await server?.stop();
  await new Promise((r) => (silent ? silent.close(r) : r()));
  fs.rmSync(dir, { recursive: true, force: true });
});

const url = (port, { scheme = 'redis', user = '', pass = SENTINEL } = {}) =>
  `${scheme}://${user}:${pass}@${scheme === 'rediss' ? 'localhost' : '127.0.0.1'}:${port}`;

test('control: the scan finds the sentinel when the child prints it', async () => {
  const out = await child('control', url(server.port));
  assert.equal(hits(out.all), 1, out.all);
  const err = new Error(`cannot reach ${url(server.port)}`);
  assert.ok(hits(String(err.stack)) > 0 && hits(String(err)) > 0);
});

test('success: client, lock and hold expose no password', async () => {
  for (const u of [url(server.port), url(server.port, { user: 'default' })]) {
    const out = await child('ok', u);
    assert.match(out.stdout, /--- OK/, out.all);
    assert.match(out.stdout, /--- held/, out.all);
    assert.equal(hits(out.all), 0, out.all);
  }
});

for (const [label, make, codes] of [
  ['WRONGPASS', () => url(server.port, { pass: `wrong-${SENTINEL}` }), ['AUTH']],
  ['WRONGPASS with a user', () => url(server.port, { user: 'nobody', pass: `${SENTINEL}-x` }), ['AUTH']],
  ['connection refused', async () => url(await freePort()), ['CONNECTION']],
  ['response timeout', () => url(silent.address().port), ['TIMEOUT', 'CONNECTION']],
  ['TLS with an untrusted CA', () => url(tlsPort, { scheme: 'rediss' }), ['TLS']],
  ['plain redis:// to the TLS port', () => url(tlsPort), ['CONNECTION', 'TIMEOUT', 'PROTOCOL']],
  ['a bad URL', () => `redis://:${SENTINEL}@127.0.0.1:notaport`, ['INVALID_URL']],
  ['a bad scheme', () => `http://:${SENTINEL}@127.0.0.1:6379`, ['INVALID_URL']],
]) {
  test(`${label}: the error exposes no password`, async () => {
    const out = await child('fail', await make());
    assert.doesNotMatch(out.stdout, /UNEXPECTED/, out.all);
    const code = /--- code\n(\w+)/.exec(out.stdout)?.[1];
    assert.ok(codes.includes(code), `code ${code}: ${out.all}`);
    assert.match(out.stdout, /--- stack\n\S/, out.all);
    assert.equal(hits(out.all), 0, out.all);
  });
}
