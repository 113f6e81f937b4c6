#!/usr/bin/env node
// The Node demo worker (protocol: examples/README.md): acquire the shared lock, do a fenced
// read-modify-write of the resource's counter, release, print one JSON line per iteration.
//
//   node worker.mjs --redis URL --resource HOST:PORT --name LOCK --iterations N --id ID
import { createRequire } from 'node:module';
import net from 'node:net';

const require = createRequire(import.meta.url);
const { Client } = require('../../bindings-node/index.js');

function arg(name) {
  const i = process.argv.indexOf(name);
  if (i < 0 || i + 1 >= process.argv.length) {
    process.stderr.write(`worker: missing ${name}\n`);
    process.exit(2);
  }
  return process.argv[i + 1];
}

/** One TCP connection to the resource: one request line, one reply line. */
async function connectResource(hostport) {
  const colon = hostport.lastIndexOf(':');
  const socket = net.connect({ host: hostport.slice(0, colon), port: Number(hostport.slice(colon + 1)) });
  await new Promise((resolve, reject) => {
    socket.once('connect', resolve);
    socket.once('error', reject);
  });
  socket.setNoDelay(true);
  let buffered = '';
  const waiting = [];
  socket.setEncoding('utf8');
  socket.on('data', (chunk) => {
    buffered += chunk;
    let nl;
    while ((nl = buffered.indexOf('\n')) >= 0) {
      const line = buffered.slice(0, nl).replace(/\r$/, '');
      buffered = buffered.slice(nl + 1);
      waiting.shift()?.resolve(line);
    }
  });
  const failAll = (err) => { for (const w of waiting.splice(0)) w.reject(err); };
  socket.on('error', failAll);
  socket.on('close', () => failAll(new Error('the resource connection closed')));
  return {
    call(request) {
      return new Promise((resolve, reject) => {
        waiting.push({ resolve, reject });
        socket.write(request);
      });
    },
    close() { socket.end(); },
  };
}

async function main() {
  const redis = arg('--redis');
  const resource = arg('--resource');
  const name = arg('--name');
  const iterations = Number(arg('--iterations'));
  const id = arg('--id');

  const client = await Client.connect(redis);
  const lock = client.lock(name); // no explicit lease: renewed by the watchdog
  const conn = await connectResource(resource);
  for (let i = 0; i < iterations; i++) {
    const held = await lock.acquire({ wait: 60_000 });
    const acquiredNs = process.hrtime.bigint(); // CLOCK_MONOTONIC on Linux
    const fence = held.fence;
    let rejected = true;
    const read = await conn.call(`READ ${fence}\n`);
    if (read.startsWith('OK ')) {
      const value = BigInt(read.slice(3));
      rejected = (await conn.call(`WRITE ${fence} ${value + 1n}\n`)) !== 'OK';
    }
    const releasedNs = process.hrtime.bigint();
    await held.release();
    process.stdout.write(
      `{"id":${JSON.stringify(id)},"lang":"node","fence":${fence},"acquired_ns":${acquiredNs},` +
        `"released_ns":${releasedNs},"rejected":${rejected}}\n`,
    );
  }
  conn.close();
  client.close();
}

main().catch((err) => {
  // ferrolock errors never carry the password; print the code and message only.
  process.stderr.write(`worker: ${err.code ?? 'ERROR'}: ${err.message}\n`);
  process.exit(1);
});
