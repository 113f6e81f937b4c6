#!/usr/bin/env bash
# The main job: a throwaway redis-server, a fenced resource, and workers in every language on one
# lock. Each ci/demo.d/<lang>.sh prepares its worker and prints its command (examples/README.md).
set -euo pipefail
cd "$(dirname "$0")/.."
for a in "$@"; do
  case "$a" in
    -h | --help)
      echo "usage: bash ci/demo.sh [--iterations N] [--per-worker-kind K] [--timeout S]"
      echo "  builds every language's worker (examples/README.md), then runs target/release/demo:"
      echo "  --iterations N       critical sections per worker (default 100)"
      echo "  --per-worker-kind K  workers per language (default 2)"
      echo "  --timeout S          seconds before workers still running are stopped and the demo"
      echo "                       fails (default 60 plus 50 ms per critical section)"
      exit 0 ;;
  esac
done
bash ci/setup.sh
echo "building the Rust demo (release; a first build takes several minutes)..." >&2
cargo build --release -p ferrolock-examples
args=()
for f in ci/demo.d/*.sh; do
  [ -e "$f" ] || continue
  echo "preparing $(basename "$f" .sh) workers..." >&2
  args+=(--worker "$(bash "$f")")
done
exec target/release/demo "${args[@]}" "$@"
