// rediss:// from Node: PEM texts in `tls` reach the core; verification is on by default; TLS
// options with a redis:// URL are refused.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import { createRequire } from 'node:module';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { after, before, test } from 'node:test';

import { startRedis } from './redis.mjs';

const require = createRequire(import.meta.url);
const { Client } = require('../index.js');

const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'ferrolock-node-tls-'));
const openssl = (...args) => execFileSync('openssl', args, { cwd: dir, stdio: 'pipe' });
const pem = (f) => fs.readFileSync(path.join(dir, f), 'utf8');
const ec = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes'];

let server;
let tlsPort;
before(async () => {
  openssl('req', '-x509', '-days', '2', '-subj', '/CN=ca', '-keyout', 'ca.key', '-out', 'ca.crt', ...ec,
    '-addext', 'basicConstraints=critical,CA:TRUE', '-addext', 'keyUsage=critical,keyCertSign');
  for (const [name, ext] of [['server', 'subjectAltName=DNS:localhost\nextendedKeyUsage=serverAuth\n'],
    ['client', 'extendedKeyUsage=clientAuth\n']]) {
    fs.writeFileSync(path.join(dir, `${name}.ext`), ext);
    openssl('req', '-subj', `/CN=${name}`, '-keyout', `${name}.key`, '-out', `${name}.csr`, ...ec);
    openssl('x509', '-req', '-in', `${name}.csr`, '-CA', 'ca.crt', '-CAkey', 'ca.key', '-CAcreateserial',
      '-days', '2', '-out', `${name}.crt`, '-extfile', `${name}.ext`);
  }
  tlsPort = await new Promise((resolve) => {
    const s = net.createServer().listen(0, '127.0.0.1', () => { const { port } = s.address(); s.close(() => resolve(port)); });
  });
  server = await startRedis(['--tls-port', String(tlsPort), '--tls-cert-file', path.join(dir, 'server.crt'),
    '--tls-key-file', path.join(dir, 'server.key'), '--tls-ca-cert-file', path.join(dir, 'ca.crt'),
    '--tls-auth-clients', 'yes']);
});
after(async () => {
  await server?.stop();
  fs.rmSync(dir, { recursive: true, force: true });
});

test('a custom CA and a client certificate give a working lock over TLS', async () => {
  const client = await Client.connect(`rediss://localhost:${tlsPort}`,
    { tls: { ca: pem('ca.crt'), cert: pem('client.crt'), key: pem('client.key') } });
  const held = await client.lock(`node-tls:${process.pid}`, { ttl: 5000 }).acquire();
  assert.ok(held.fence > 0);
  await held.release();
});

test('verification is on by default and names are checked', async () => {
  await assert.rejects(Client.connect(`rediss://localhost:${tlsPort}`, { connectTimeout: 2000 }),
    (e) => e.code === 'TLS');
  await assert.rejects(Client.connect(`rediss://127.0.0.1:${tlsPort}`,
    { tls: { ca: pem('ca.crt'), cert: pem('client.crt'), key: pem('client.key') } }), (e) => e.code === 'TLS');
});

test('bad TLS options are refused before any I/O, and the key is never echoed', async () => {
  await assert.rejects(Client.connect('redis://localhost:1', { tls: { ca: pem('ca.crt') } }),
    (e) => e.code === 'INVALID_CONFIG');
  await assert.rejects(Client.connect('rediss://localhost:1', { tls: { cert: pem('client.crt') } }),
    (e) => e.code === 'INVALID_CONFIG');
  const key = pem('client.key');
  await assert.rejects(Client.connect('rediss://localhost:1', { tls: { ca: 'junk', key, cert: 'junk' } }),
    (e) => e.code === 'INVALID_CONFIG' && !e.message.includes(key.split('\n')[1]));
});
