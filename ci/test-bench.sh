#!/usr/bin/env bash
# Smoke test of the benchmark harness (bench/run.sh --quick, about 1–2 minutes: ferrolock Rust W1/W2/W3/W5,
# W4, raw redis-py and redis-py Lock; no Node, no bindings): it must run end to
# end and produce its JSON lines, summary and charts; then bench/py/account.py runs the Rust drivers
# for a few pairs. It never fails on a number; only a broken harness (a driver that cannot run, no
# ferrolock W1 line, no floor, no chart, no account row, a reference client that cannot run) fails it.
# Results go to a temporary directory so CI never dirties bench/results/.
set -euo pipefail
cd "$(dirname "$0")/.."
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
bash bench/run.sh --quick --out "$out"
tag=$(date -u +%Y-%m-%d)-quick
for f in "$out/$tag.jsonl" "$out/$tag.md" "$out/$tag-w1.png" "$out/$tag-w2-forced.png" "$out/$tag-w3.png"; do
  [ -s "$f" ] || { echo "test-bench: missing $f" >&2; exit 1; }
done
bench/.venv/bin/python - "$out/$tag.jsonl" <<'PY'
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
assert all(l["schema"] == "redis-lock-bench/v1" for l in lines), "schema"
need = {("W1", "ferrolock"), ("W2", "ferrolock"), ("W3", "ferrolock"), ("W4", "redis-benchmark"), ("W5", "ferrolock")}
have = {(l["workload"], l["lib"]) for l in lines if l["ok"]}
missing = need - have
assert not missing, f"harness produced no ok line for {missing}"
# W2 counts client commands in a census run of its own (MONITOR never on the timed run).
for l in lines:
    if l["workload"] == "W2" and l["ok"]:
        assert not l["monitor_attached"] and l["client_cmds_per_acq"] is not None, (l["peer"], l["client_cmds_by_name"])
print(f"bench smoke: {len(lines)} lines, workloads {sorted({l['workload'] for l in lines})}")
PY
# The per-language account (bench/py/account.py, printed by bench/profile.sh): Rust drivers only,
# a few pairs, against a throwaway server; it must print a row with numbers for each.
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no --dir "$out" --loglevel warning \
  --daemonize no >/dev/null 2>&1 &
rpid=$!
trap 'kill "$rpid" 2>/dev/null; wait "$rpid" 2>/dev/null; rm -rf "$out"' EXIT
for _ in $(seq 50); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.1; done
# (account.py exits non-zero when a driver it was given produced no row.)
python3 bench/py/account.py --port "$port" --rounds 1 --short 20 --long 80 --warmup 5 \
  --rust "${CARGO_TARGET_DIR:-target}/release/ferrolock-bench"
# The reference client that sends ferrolock's own scripts from redis-py (full runs only; it reads
# core/scripts/*.lua, so a moved or renamed script must fail here, not in a 12-minute run).
bench/.venv/bin/python bench/py/bench.py w1 --lib raw-scripts --config default --url "redis://127.0.0.1:$port" \
  --n 20 --warmup 5 --reps 1 | bench/.venv/bin/python -c 'import json, sys; d = json.load(sys.stdin); assert d["ok"] and len(d["reps"][0]["acq_ns"]) == 20, d'
echo "test-bench: harness smoke test passed"
