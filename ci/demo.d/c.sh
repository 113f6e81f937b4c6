#!/usr/bin/env bash
# Builds the C demo worker (examples/c/worker.c, static library) and prints its command.
set -euo pipefail
cd "$(dirname "$0")/../.."
cargo build --release --quiet -p ferrolock-c >&2
mkdir -p target/demo-workers
gcc -std=c11 -O2 -Wall -Wextra -Werror -Ibindings-c/include examples/c/worker.c \
  target/release/libferrolock_c.a -lgcc_s -lutil -lrt -lpthread -lm -ldl -o target/demo-workers/c-worker >&2
echo "$PWD/target/demo-workers/c-worker"
