#!/usr/bin/env bash
# Builds the ferrolock Node addon (npm's install script: cargo build, copy to
# bindings-node/ferrolock.node) and prints the Node demo worker command.
set -euo pipefail
cd "$(dirname "$0")/../.."
command -v node >/dev/null 2>&1 || { echo "demo.d/node: Node.js (>= 20) is required" >&2; exit 1; }
node bindings-node/scripts/install.js >&2
echo "node $PWD/examples/node/worker.mjs"
