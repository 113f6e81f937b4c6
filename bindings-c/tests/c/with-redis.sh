#!/usr/bin/env bash
# Run a command against throwaway redis-servers on free loopback ports:
#   with-redis.sh CMD [ARGS...]
# Starts FERROLOCK_TEST_SERVERS servers (default 3, for Redlock). CMD sees
# FERROLOCK_TEST_URL (the first) and FERROLOCK_TEST_URLS (all, space-separated).
# The servers are stopped by their pids when the command ends, also on failure or interrupt.
set -euo pipefail
dir=$(mktemp -d /tmp/ferrolock-c-redis.XXXXXX)
pids=()
cleanup() {
  for pid in "${pids[@]}"; do
    if kill -0 "$pid" 2>/dev/null; then
      kill "$pid" 2>/dev/null || true
      wait "$pid" 2>/dev/null || true
    fi
  done
  rm -rf "$dir"
}
trap cleanup EXIT INT TERM

# Start one server; on success append its pid to pids and print its URL.
start_one() {
  local n=$1 port pid
  for _ in $(seq 1 20); do
    port=$(( 20000 + RANDOM % 30000 ))
    mkdir -p "$dir/$n"
    redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no --dir "$dir/$n" \
      >"$dir/$n/redis.log" 2>&1 &
    pid=$!
    for _ in $(seq 1 100); do
      kill -0 "$pid" 2>/dev/null || break
      # Ours, not a server that already had the port (ours then fails to bind and exits).
      if redis-cli -p "$port" info server 2>/dev/null | tr -d '\r' | grep -qx "process_id:$pid"; then
        echo "$pid redis://127.0.0.1:$port"
        return 0
      fi
      sleep 0.05
    done
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  return 1
}

urls=()
for n in $(seq 1 "${FERROLOCK_TEST_SERVERS:-3}"); do
  # Not in a subshell for the pid bookkeeping: read the result through a file.
  if ! start_one "$n" >"$dir/started"; then
    echo "with-redis.sh: could not start redis-server on a free port" >&2
    exit 1
  fi
  read -r pid url <"$dir/started"
  pids+=("$pid")
  urls+=("$url")
done
export FERROLOCK_TEST_URL="${urls[0]}"
export FERROLOCK_TEST_URLS="${urls[*]}"
set +e
"$@"
rc=$?
set -e
exit "$rc"
