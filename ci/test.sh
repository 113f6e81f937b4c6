#!/usr/bin/env bash
# Every test suite: Rust workspace (fmt, clippy, tests), then each area's ci/test-*.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
bash ci/setup.sh
start=$(date +%s)
step() { echo; echo "=== $* ($(( $(date +%s) - start ))s)"; }

step "cargo fmt --check"
cargo fmt --all --check
step "cargo clippy -D warnings"
cargo clippy --workspace --all-targets --quiet -- -D warnings
step "cargo test (core, testkit, cli, examples, chaos)"
python3 ci/cargo-test.py
for t in ci/test-*.sh; do
  [ -e "$t" ] || continue
  step "$t"
  bash "$t"
done
step "all suites passed"
