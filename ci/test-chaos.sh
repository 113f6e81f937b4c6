#!/usr/bin/env bash
# Reliability suite, short version (chaos/README.md): every scenario fenced + its control, with
# Rust, Python and Node clients on one lock, real redis-servers faulted by the nemesis, and the
# independent checker; writes target/chaos/short/{summary.json,report.md}. Non-zero on any
# failed criterion. The long version (10,000 acquisitions per scenario) is
#   cargo build --release -p ferrolock-chaos && target/release/chaos suite --mode long ...
# (see chaos/README.md). Called by ci/test.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
bash ci/setup.sh
MATURIN_VERSION=1.16.0   # the version ci/test-python.sh installs

# Built as `cargo test --workspace` (ci/test.sh) builds it: the same features, so after that
# step this is a no-op (`cargo build -p ferrolock-chaos` alone resolves features differently
# and recompiled redis and the core).
echo "test-chaos: building the suite (debug profile, shared with cargo test --workspace)" >&2
cargo test --workspace --no-run --quiet

args=(--mode short --out "$root/target/chaos/short")

# Python clients use the binding in .venv, built the way ci/test-python.sh builds it.
py_ok=""
if command -v python3 >/dev/null 2>&1; then
  if [ -x .venv/bin/python ] && .venv/bin/python -c "import ferrolock" 2>/dev/null; then
    py_ok=1
  else
    echo "test-chaos: building the Python binding into .venv (as ci/test-python.sh does)" >&2
    if { [ -x .venv/bin/python ] || python3 -m venv .venv; } \
      && { [ "$(.venv/bin/python -c "import importlib.metadata as m; print(m.version('maturin'))" 2>/dev/null)" = "$MATURIN_VERSION" ] \
           || .venv/bin/python -m pip install -q --disable-pip-version-check "maturin==$MATURIN_VERSION" >&2; } \
      && (cd bindings-python && VIRTUAL_ENV=$root/.venv PATH=$root/.venv/bin:$PATH maturin develop -q >&2) \
      && .venv/bin/python -c "import ferrolock"; then
      py_ok=1
    fi
  fi
fi
if [ -n "$py_ok" ]; then
  args+=(--python "$root/.venv/bin/python")
else
  echo "test-chaos: SKIPPING Python clients: python3 / the venv / the binding build is unavailable" >&2
fi

# Node clients use bindings-node/ferrolock.node, built by the package's install script (as
# ci/demo.d/node.sh and npm ci do).
if command -v node >/dev/null 2>&1 && node bindings-node/scripts/install.js >&2; then
  args+=(--node node)
else
  echo "test-chaos: SKIPPING Node clients: node or the addon build is unavailable" >&2
fi

FERROLOCK_ROOT=$root target/debug/chaos suite "${args[@]}"
