#!/usr/bin/env bash
# Builds the C demo worker (examples/c/worker.c, static library) and prints its command.
set -euo pipefail
cd "$(dirname "$0")/../.."
cargo build --release --quiet -p ferrolock-c >&2
mkdir -p target/demo-workers
out=target/demo-workers/c-worker
# Rebuilt only when the source, the header or the library is newer than the worker.
if [ "$out" -nt examples/c/worker.c ] && [ "$out" -nt bindings-c/include/ferrolock.h ] &&
  [ "$out" -nt target/release/libferrolock_c.a ]; then
  echo "$PWD/$out"
  exit 0
fi
gcc -std=c11 -O2 -Wall -Wextra -Werror -Ibindings-c/include examples/c/worker.c \
  target/release/libferrolock_c.a -lgcc_s -lutil -lrt -lpthread -lm -ldl -o target/demo-workers/c-worker >&2
echo "$PWD/target/demo-workers/c-worker"
