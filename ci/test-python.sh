#!/usr/bin/env bash
# Python binding: build into .venv (maturin develop, incremental), check the checked-in .pyi stub
# against the built module (mypy.stubtest) and the package types (mypy --strict), run the pytest
# suite against real redis-servers, then prove `pip install ./bindings-python` works in a fresh
# virtualenv. Called by ci/test.sh; exits non-zero on any failure.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
MATURIN_VERSION=1.16.0
PYTEST_VERSION=9.2.0
MYPY_VERSION=2.4.1
HYPOTHESIS_VERSION=6.170.15

command -v redis-server >/dev/null 2>&1 || bash ci/setup.sh
py=python3
command -v "$py" >/dev/null 2>&1 || { echo "test-python: python3 is required" >&2; exit 1; }
if [ ! -x .venv/bin/python ]; then
  echo "test-python: creating .venv" >&2
  "$py" -m venv .venv || {
    echo "test-python: python3 -m venv failed; installing python3-venv (Debian)" >&2
    SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
    $SUDO apt-get update -qq >&2 && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq python3-venv >&2
    "$py" -m venv .venv
  }
fi
vpy=$root/.venv/bin/python
have() { [ "$("$vpy" -c "import importlib.metadata as m; print(m.version('$1'))" 2>/dev/null)" = "$2" ]; }
if ! have maturin $MATURIN_VERSION || ! have pytest $PYTEST_VERSION || ! have mypy $MYPY_VERSION \
  || ! have hypothesis $HYPOTHESIS_VERSION; then
  echo "test-python: installing maturin $MATURIN_VERSION, pytest $PYTEST_VERSION, mypy $MYPY_VERSION," \
    "hypothesis $HYPOTHESIS_VERSION" >&2
  "$vpy" -m pip install -q --disable-pip-version-check "maturin==$MATURIN_VERSION" \
    "pytest==$PYTEST_VERSION" "mypy==$MYPY_VERSION" "hypothesis==$HYPOTHESIS_VERSION" >&2
fi

echo "test-python: building the extension (maturin develop)"
(cd bindings-python && VIRTUAL_ENV=$root/.venv PATH=$root/.venv/bin:$PATH maturin develop -q >&2)

echo "test-python: stub check (mypy.stubtest) and mypy --strict"
tmp=$(mktemp -d /tmp/ferrolock-test-python.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
(cd "$tmp" && "$vpy" -m mypy.stubtest ferrolock)
(cd bindings-python/python && "$vpy" -m mypy --strict --cache-dir "$tmp/mypy-cache" ferrolock)

echo "test-python: pytest"
(cd bindings-python && "$vpy" -m pytest -q -p no:cacheprovider tests)

echo "test-python: pip install ./bindings-python in a fresh virtualenv"
"$py" -m venv "$tmp/fresh"
# The packaging path a user takes (pip -> PEP 517 -> maturin -> cargo), built with the dev profile
# into this tree's target/: it reuses `maturin develop`'s build above instead of compiling every
# dependency again in release (about two minutes of CI). A user's `pip install` builds release.
CARGO_TARGET_DIR=$root/target MATURIN_PEP517_ARGS="--profile dev" \
  "$tmp/fresh/bin/python" -m pip install -q --disable-pip-version-check ./bindings-python >&2
(cd "$tmp" && "$tmp/fresh/bin/python" -c "
import ferrolock
assert len(ferrolock.error_table()) >= 21 and issubclass(ferrolock.AcquireTimeoutError, TimeoutError)
try:
    ferrolock.Client.connect('nonsense')
except ferrolock.InvalidUrlError:
    print('test-python: the installed wheel imports and maps errors')
")
echo "test-python: all passed"
