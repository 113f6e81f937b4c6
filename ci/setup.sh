#!/usr/bin/env bash
# Idempotent machine set-up shared by ci/demo.sh and ci/test.sh.
set -euo pipefail
if ! command -v redis-server >/dev/null 2>&1; then
  echo "ci/setup: installing redis-server (Debian package)" >&2
  export DEBIAN_FRONTEND=noninteractive
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq >&2
  $SUDO apt-get install -y -qq redis-server >&2
fi
# iptables for the chaos suite's kernel partitions (N5); they need root and are skipped without
# it, so a failed install does not stop the set-up.
if [ "$(id -u)" -eq 0 ] && ! command -v iptables-restore >/dev/null 2>&1; then
  echo "ci/setup: installing iptables (Debian package)" >&2
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq iptables; } >&2 \
    || echo "ci/setup: iptables not installed: chaos kernel-partition scenarios will be skipped" >&2
fi
command -v cargo >/dev/null 2>&1 || { echo "ci/setup: cargo (Rust) is required" >&2; exit 1; }
