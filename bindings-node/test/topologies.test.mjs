// Production topologies from Node: `replicaAcks` against a real replica, stopped (SIGSTOP) as the
// control; Sentinel and Cluster URLs reach the core (the topologies themselves are tested in
// core/tests/{replica_ack,sentinel,cluster}.rs).
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { createRequire } from 'node:module';
import os from 'node:os';
import path from 'node:path';
import { after, test } from 'node:test';

import { startRedis } from './redis.mjs';

const require = createRequire(import.meta.url);
const { Client } = require('../index.js');

const started = [];
const dirs = [];
after(async () => {
  for (const s of started) await s.stop();
  for (const d of dirs) fs.rmSync(d, { recursive: true, force: true });
});
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

test('replicaAcks: grants wait for the replica; a stopped replica undoes them', async () => {
  // Each in its own directory: a replica writes the RDB of its initial sync there.
  const dir = () => {
    dirs.push(fs.mkdtempSync(path.join(os.tmpdir(), 'ferrolock-node-replica-')));
    return ['--dir', dirs.at(-1)];
  };
  const master = await startRedis(dir());
  started.push(master);
  const replica = await startRedis([...dir(), '--replicaof', '127.0.0.1', String(master.port)]);
  started.push(replica);
  for (let i = 0; !(await replica.cli('INFO', 'replication')).includes('master_link_status:up'); i++) {
    assert.ok(i < 500, 'the replica did not sync');
    await sleep(20);
  }
  const client = await Client.connect(master.url, { replicaAcks: { replicas: 1, timeout: 200 } });
  const plain = await Client.connect(master.url);
  try {
    const held = await client.lock('node-acked', { ttl: 10000 }).acquire();
    assert.equal(await replica.cli('EXISTS', 'ferrolock:{node-acked}'), '1');
    await held.release();
    process.kill(replica.pid, 'SIGSTOP');
    try {
      await assert.rejects(client.lock('node-acked', { ttl: 10000 }).tryAcquire(), { code: 'NOT_REPLICATED' });
      assert.equal(await master.cli('EXISTS', 'ferrolock:{node-acked}'), '0', 'a refused grant left a hold');
      // Control: without replicaAcks the stopped replica does not stop a grant.
      const h = await plain.lock('node-acked', { ttl: 10000 }).tryAcquire();
      assert.ok(h);
      await h.release();
    } finally {
      process.kill(replica.pid, 'SIGCONT');
    }
  } finally {
    client.close();
    plain.close();
  }
});

test('topology options and URLs are checked', async () => {
  await assert.rejects(Client.connect('redis://127.0.0.1:1', { replicaAcks: { replicas: 0, timeout: 100 } }),
    { code: 'INVALID_CONFIG' });
  await assert.rejects(Client.connect('redis://127.0.0.1:1', { replicaAcks: { replicas: 1, timeout: 5000 } }),
    { code: 'INVALID_DURATION' });
  await assert.rejects(Client.connect('redis+sentinel://127.0.0.1:1'), { code: 'INVALID_URL' });
  await assert.rejects(Client.connect('redis+cluster://127.0.0.1:1/0'), { code: 'INVALID_URL' });
  await assert.rejects(Client.connect('redis+sentinel://127.0.0.1:1/mymaster', { connectTimeout: 200 }),
    { code: 'CONNECTION' });
});
