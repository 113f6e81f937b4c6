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
command -v cargo >/dev/null 2>&1 || { echo "ci/setup: cargo (Rust) is required" >&2; exit 1; }
