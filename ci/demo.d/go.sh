#!/usr/bin/env bash
# Builds the Go demo worker (examples/go, linking the static C library) and prints its command.
set -euo pipefail
cd "$(dirname "$0")/../.."
command -v go >/dev/null 2>&1 || { echo "demo.d/go: the Go toolchain is required" >&2; exit 1; }
cargo build --release --quiet -p ferrolock-c >&2
export CGO_CFLAGS="${CGO_CFLAGS:--O2 -g} -DFERROLOCK_LIB_SUM=$(sha256sum target/release/libferrolock_c.a | cut -c1-16)"
mkdir -p target/demo-workers
(cd examples/go && go build -o ../../target/demo-workers/go-worker .) >&2
echo "$PWD/target/demo-workers/go-worker"
