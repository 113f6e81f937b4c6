#!/usr/bin/env node
// Builds the native addon from source (Rust/cargo required) and puts it next to index.js as
// ferrolock.node. Runs on `npm install ./bindings-node` in any project and on `npm ci` here.
// Needs nothing from node_modules: a consumer's install does not get our devDependencies.
'use strict';
const { spawnSync } = require('node:child_process');
const fs = require('node:fs');
const path = require('node:path');

const pkg = path.resolve(__dirname, '..');
const profile = process.env.FERROLOCK_NODE_PROFILE === 'debug' ? 'debug' : 'release';
const log = (m) => process.stderr.write(`ferrolock: ${m}\n`);

const cargo = process.env.CARGO || 'cargo';
const args = ['build', '--quiet', '-p', 'ferrolock-node', '--manifest-path', path.join(pkg, 'Cargo.toml'),
  '--message-format', 'json-render-diagnostics'];
if (profile === 'release') args.push('--release');
// Name the host's target explicitly, as `napi build` always does: both then build into
// target/<triple>/, and `npm run build` (the index.d.ts generation) reuses this build instead
// of compiling every dependency a second time. Without rustc's answer, cargo's default is fine.
const rustc = spawnSync(process.env.RUSTC || 'rustc', ['-vV'], { encoding: 'utf8' });
const host = !rustc.error && rustc.status === 0 && /^host: (\S+)$/m.exec(rustc.stdout);
if (host) args.push('--target', host[1]);
log(`building the native addon (cargo ${profile}; the first build takes a minute or two)`);
const r = spawnSync(cargo, args, { cwd: pkg, encoding: 'utf8', stdio: ['ignore', 'pipe', 'inherit'], maxBuffer: 256 << 20 });
if (r.error) {
  log(`cannot run ${cargo}: ${r.error.message}. Install Rust (https://rustup.rs) and retry.`);
  process.exit(1);
}
if (r.status !== 0) {
  log(`cargo build failed (exit ${r.status})`);
  process.exit(r.status || 1);
}
// Find the library cargo produced (respects CARGO_TARGET_DIR and workspace target dirs).
let lib = null;
for (const line of r.stdout.split('\n')) {
  if (!line.startsWith('{')) continue;
  let msg;
  try { msg = JSON.parse(line); } catch { continue; }
  if (msg.reason === 'compiler-artifact' && msg.target && msg.target.name === 'ferrolock_node') {
    lib = msg.filenames.find((f) => /\.(so|dylib|dll)$/.test(f)) || lib;
  }
}
if (!lib) {
  log('cargo finished but reported no ferrolock_node library');
  process.exit(1);
}
const dest = path.join(pkg, 'ferrolock.node');
const tmp = `${dest}.${process.pid}.tmp`;
fs.copyFileSync(lib, tmp);
fs.renameSync(tmp, dest); // atomic: a running process keeps its old mapping
log(`built ${path.relative(process.cwd(), dest) || dest}`);
