#!/usr/bin/env bash
# Node binding (bindings-node/): npm ci (whose install script builds the addon with cargo),
# index.d.ts drift check against a fresh @napi-rs/cli generation, tsc --strict over the
# TypeScript example, then node --test against real redis-servers. Non-zero on any failure.
set -euo pipefail
cd "$(dirname "$0")/.."
bash ci/setup.sh
command -v node >/dev/null 2>&1 || { echo "test-node: Node.js (>= 20) is required" >&2; exit 1; }
root=$PWD
cd bindings-node

echo "test-node: npm ci (builds the native addon)" >&2
log=$(mktemp)
if ! npm ci --no-audit --no-fund --loglevel=error 2>"$log"; then
  # A registry mirror that does not serve other platforms' optional packages of @napi-rs/cli
  # leaves them out of package-lock.json, and npm ci then refuses the lock. Install the same
  # locked versions without rewriting the lock instead; any other failure is fatal.
  # (npm 11 also lists those packages' own dependencies, e.g. @emnapi/*, tslib.) Accepted only
  # when no package.json dependency is among the missing.
  missing=$( { grep -o 'Missing: [^ ]* from lock file' "$log" || true; } | awk '{print $2}' | sed 's/@[^@/]*$//' | sort -u)
  direct=$(node -e 'const p = require("./package.json");
    console.log(Object.keys({...p.dependencies, ...p.devDependencies, ...p.optionalDependencies}).join("\n"))')
  if [ -n "$missing" ] && ! grep -qxF -f <(printf '%s\n' "$direct") <<<"$missing"; then
    echo "test-node: npm ci refused the lock only for other platforms' optional packages; using npm install --no-save" >&2
    npm install --no-save --no-audit --no-fund --loglevel=error
  else
    cat "$log" >&2
    rm -f "$log"
    exit 1
  fi
fi
rm -f "$log"

echo "test-node: regenerating index.d.ts (drift check)" >&2
gen=$(mktemp -d)
trap 'rm -rf "$gen"' EXIT
node_modules/.bin/napi build --release --output-dir "$gen" --dts index.d.ts >&2
if ! diff -u index.d.ts "$gen/index.d.ts"; then
  echo "test-node: bindings-node/index.d.ts differs from the generated one: run 'npm run build' in bindings-node and commit index.d.ts" >&2
  exit 1
fi

echo "test-node: tsc --strict --noEmit over examples/node" >&2
node_modules/.bin/tsc -p "$root/examples/node/tsconfig.json"

echo "test-node: node --test" >&2
# A test that hangs fails after 2 minutes instead of holding CI until its own limit.
node --test --test-concurrency=1 --test-timeout=120000 test/
