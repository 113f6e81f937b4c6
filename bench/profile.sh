#!/usr/bin/env bash
# Where the time goes in one acquire + release (bench/README.md): server-side cost per script from
# INFO commandstats, the bare round trip (PING) from redis-benchmark, and the Rust client's
# instructions per pair from valgrind --tool=callgrind (repeatable on a noisy machine: the
# difference between a 1500-pair and a 500-pair run, divided by 1000), and the server's instructions
# per pair for ferrolock's scripts against a bare SET NX PX + compare-and-delete (bench/py/server_cost.py),
# and the same pair sent through thinner client stacks (client-stack: ferrolock, redis-rs alone, a
# bare tokio socket, a bare blocking socket), and per language (bench/py/account.py) the client's
# and the server's CPU per pair.
# Usage: bash bench/profile.sh   (after bench/run.sh has built the driver and the venv)
# Prints Markdown on stdout.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${CARGO_TARGET_DIR:-target}/release/ferrolock-bench
PY=bench/.venv/bin/python
[ -x "$BIN" ] || cargo build --release --quiet -p ferrolock-bench
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
dir=$(mktemp -d)
redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no --dir "$dir" --loglevel warning \
  --daemonize no >/dev/null 2>&1 &
rpid=$!
trap 'kill "$rpid" 2>/dev/null; wait "$rpid" 2>/dev/null; rm -rf "$dir"' EXIT
for _ in $(seq 50); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.1; done
taskset -apc 0 "$rpid" >/dev/null
url=redis://127.0.0.1:$port
cli() { redis-cli -p "$port" "$@"; }

cpu() { cli INFO cpu | tr -d '\r' | awk -F: '/^used_cpu_(sys|user):/ {t+=$2} END {printf "%.6f", t}'; }

stats() { # $1 = label, $2 = pairs, $3 = server CPU seconds before the run
  # commandstats usec of EVALSHA includes its inner calls, so no sum here: the server's total CPU
  # (INFO cpu, including network syscalls) per pair is the last row.
  cli INFO commandstats | tr -d '\r' | awk -F'[:,=]' -v label="$1" -v pairs="$2" '
    /^cmdstat_/ { name=substr($1, 9); if (name=="info" || name=="config|resetstat" || name=="hello" || name=="ping" || name=="script|load") next;
      printf "| %s | %s | %.2f | %.2f |\n", label, name, $3/pairs, $5/$3 }'
  awk -v a="$3" -v b="$(cpu)" -v label="$1" -v pairs="$2" \
    'BEGIN { printf "| %s | **server process CPU per pair (INFO cpu)** | | **%.1f** |\n", label, (b-a)*1e6/pairs }'
}

echo "### Server side: commands and server time per acquire+release pair (INFO commandstats)"
echo
echo "| client | command | calls per pair | server µs per call |"
echo "|---|---|---:|---:|"
n=3000
cli CONFIG RESETSTAT >/dev/null; c0=$(cpu)
taskset -c 0 "$BIN" w1 --url "$url" --n "$n" --warmup 0 --reps 1 >/dev/null
stats "ferrolock (Rust)" "$n" "$c0"
if [ -x "$PY" ]; then
  cli CONFIG RESETSTAT >/dev/null; c0=$(cpu)
  taskset -c 0 "$PY" bench/py/bench.py w1 --lib raw --url "$url" --n "$n" --warmup 0 --reps 1 >/dev/null
  stats "raw redis-py SET NX PX + EVALSHA" "$n" "$c0"
  if "$PY" -c 'import redis_lock' 2>/dev/null; then
    cli CONFIG RESETSTAT >/dev/null; c0=$(cpu)
    taskset -c 0 "$PY" bench/py/bench.py w1 --lib python-redis-lock --url "$url" --n "$n" --warmup 0 --reps 1 >/dev/null
    stats "python-redis-lock" "$n" "$c0"
  fi
fi
echo
echo "### Round trip floor (redis-benchmark -c 1 on the server's core, p50 µs)"
echo
for c in PING "SET k v NX PX 10000"; do
  p50=$(taskset -c 0 redis-benchmark -p "$port" -n 50000 -c 1 -P 1 --csv $c | tail -n1 | awk -F'","' '{print $5*1000}')
  echo "- \`$c\`: $p50 µs"
done
echo
echo "### Client stack: the same pair through thinner clients (µs per pair, client on the server's core)"
echo
STACK=${CARGO_TARGET_DIR:-target}/release/client-stack
[ -x "$STACK" ] || cargo build --release --quiet -p ferrolock-bench --bin client-stack
taskset -c 0 "$STACK" "$port" 5000 3
echo
echo "### Per language: where one pair's time goes (µs per pair, client on the server's core)"
echo
GO_BIN=${CARGO_TARGET_DIR:-target}/release/ferrolock-bench-go
python3 bench/py/account.py --port "$port" --rust "$BIN" --go "$GO_BIN" --python "$PY" --node-dir bench/node/ferrolock-pkg
echo
if command -v valgrind >/dev/null 2>&1; then
  echo "### Rust client instructions per acquire+release pair (callgrind, 1500-pair run minus 500-pair run)"
  echo
  echo "| API | instructions per pair (whole process) | inclusive instructions per pair under … (overlapping: a caller includes its callees) |"
  echo "|---|---:|---|"
  for api in async blocking; do
    declare -A ir=()
    for n in 500 1500; do
      out=$dir/cg.$api.$n
      taskset -c 0 valgrind --tool=callgrind --callgrind-out-file="$out" "$BIN" w1 --api "$api" --url "$url" \
        --n "$n" --warmup 0 --reps 1 >/dev/null 2>"$out.log"
      ir[$n]=$(grep -m1 -E '^(summary|totals):' "$out" | awk '{print $2}')
    done
    per=$(( (ir[1500] - ir[500]) / 1000 ))
    top=$(python3 - "$dir/cg.$api.500" "$dir/cg.$api.1500" <<'PY' || true
import re, subprocess, sys
groups = [
    ("Lock::acquire", r"ferrolock::lock::Lock::acquire"),
    ("Guard::release", r"ferrolock::lock::Guard::release"),
    ("redis-rs invoke_async", r"redis::script::ScriptInvocation::invoke_async"),
    ("redis-rs RESP parse", r"redis::parser::"),
    ("redis-rs multiplexed driver", r"redis::aio::multiplexed_connection::"),
    ("tokio I/O driver", r"tokio::runtime::io::driver::Driver::turn"),
    ("tokio task scheduling", r"tokio::runtime::scheduler::.*::(run_task|schedule)"),
]
def incl(path):
    out = subprocess.run(["callgrind_annotate", "--inclusive=yes", "--threshold=100", path],
                         capture_output=True, text=True).stdout
    best = {}
    for line in out.splitlines():
        m = re.match(r"^\s*([\d,]+) \([^)]*\)\s+\S*?:(.+?)(?: \[.*\])?$", line)
        if not m:
            continue
        ir, fn = int(m.group(1).replace(",", "")), m.group(2)
        for label, pat in groups:
            if re.search(pat, fn):
                best[label] = max(best.get(label, 0), ir)
    return best
a, b = incl(sys.argv[1]), incl(sys.argv[2])
print("; ".join(f"{k} {(b.get(k, 0) - a.get(k, 0)) / 1000:,.0f}" for k, _ in groups if k in b))
PY
)
    echo "| $api | $per | $top |"
    unset ir
  done
  if [ -x "$PY" ]; then
    echo
    echo "### Server instructions per acquire+release pair (callgrind around redis-server, pipelined)"
    echo
    echo "| protocol | server instructions per pair | × the bare lock |"
    echo "|---|---:|---:|"
    "$PY" bench/py/server_cost.py core/scripts
  fi
fi
