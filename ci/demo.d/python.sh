#!/usr/bin/env bash
# Installs the Python binding into .venv (maturin develop: incremental) and prints the Python demo
# worker command. Progress goes to stderr; the one line on stdout is the command.
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
MATURIN_VERSION=1.16.0
command -v python3 >/dev/null 2>&1 || { echo "demo.d/python: python3 is required" >&2; exit 1; }
# A .venv left half-made (Debian without python3-venv: no pip in it) is made again, once.
if ! .venv/bin/python -m pip --version >/dev/null 2>&1; then
  rm -rf .venv
  python3 -m venv .venv >&2 && .venv/bin/python -m pip --version >/dev/null 2>&1 || {
    echo "demo.d/python: cannot make a virtualenv with pip (on Debian: apt-get install python3-venv)" >&2
    exit 1
  }
fi
if [ "$(.venv/bin/python -c "import importlib.metadata as m; print(m.version('maturin'))" 2>/dev/null)" != "$MATURIN_VERSION" ]; then
  .venv/bin/python -m pip install -q --disable-pip-version-check "maturin==$MATURIN_VERSION" >&2
fi
# maturin prints its progress lines even with -q: shown only when the build fails.
log=$(cd bindings-python && VIRTUAL_ENV=$root/.venv PATH=$root/.venv/bin:$PATH maturin develop -q --release 2>&1) || {
  printf '%s\n' "$log" >&2
  echo "demo.d/python: maturin develop failed (above)" >&2
  exit 1
}
echo "$root/.venv/bin/python $root/examples/python/worker.py"
