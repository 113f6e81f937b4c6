#!/usr/bin/env bash
# One command for the whole benchmark (bench/README.md):
#   bash bench/run.sh            full run, under 15 minutes: W1 W2 W3 W4 W5, every library found
#   bash bench/run.sh --quick    about 2 minutes: ferrolock Rust, W4, one Python peer (CI smoke test)
# Extra arguments go to bench/run.py (--out DIR, --only W1,W4 ...).
# FERROLOCK_BENCH_SRC=DIR benchmarks the code of another source tree (e.g. a `git archive` of a
# commit while the working tree is mid-edit): the Rust driver and both bindings are built from DIR
# (with DIR/target), the harness itself runs from here. The summary records which tree it was.
# Installs what it needs into bench/.venv and bench/node/node_modules (pinned), builds the Rust
# driver in the shared target dir, and tries the Python and Node bindings: a binding that does not
# build is skipped with its reason recorded in the summary.
set -euo pipefail
cd "$(dirname "$0")/.."
QUICK=0
for a in "$@"; do [ "$a" = "--quick" ] && QUICK=1; done
say() { echo "[bench/run.sh] $*" >&2; }

SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
if ! command -v redis-server >/dev/null 2>&1 || ! command -v redis-benchmark >/dev/null 2>&1; then
  say "installing redis-server and redis-tools (Debian)"
  $SUDO apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq redis-server redis-tools >&2
fi
command -v taskset >/dev/null 2>&1 || { say "taskset (util-linux) is required"; exit 1; }

VENV=bench/.venv
[ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
REQ=bench/requirements.txt; [ "$QUICK" = 1 ] && REQ=bench/requirements-quick.txt
say "python peers ($REQ)"
"$VENV/bin/pip" install -q --disable-pip-version-check -r "$REQ" >&2

SRC=$(cd "${FERROLOCK_BENCH_SRC:-.}" && pwd)
if [ "$SRC" = "$PWD" ]; then
  TARGET=${CARGO_TARGET_DIR:-$PWD/target}
  FROM="working tree at $(git rev-parse --short HEAD 2>/dev/null || echo '?')$(git diff --quiet HEAD 2>/dev/null || echo ' + uncommitted changes')"
else
  TARGET=$SRC/target
  FROM="${FERROLOCK_BENCH_SRC_LABEL:-source tree $SRC}"
fi
export FERROLOCK_BENCH_FROM="$FROM" FERROLOCK_BENCH_BIN="$TARGET/release/ferrolock-bench"
say "code under test: $FROM"
say "building the Rust driver (release)"
(cd "$SRC" && CARGO_TARGET_DIR=$TARGET cargo build --release --quiet -p ferrolock-bench)

GO_BIN="$TARGET/release/ferrolock-bench-go"
rm -f "$GO_BIN" "$VENV/ferrolock-go.status"  # never measure a stale build (--quick skips Go)
if [ "$QUICK" = 0 ]; then
  # ferrolock Go, redsync and raw go-redis (bench/go, modules pinned by its go.sum): the C API's
  # static library, then bench/go (cgo over bindings-go, which links
  # $SRC/target/release/libferrolock_c.a).
  if ! command -v go >/dev/null 2>&1; then
    echo "no Go toolchain on this machine" > "$VENV/ferrolock-go.status"
  elif [ "$TARGET" != "$SRC/target" ] || [ ! -f "$SRC/bench/go/main.go" ]; then
    echo "bindings-go links \$SRC/target/release/libferrolock_c.a: the target dir differs, or no bench/go" > "$VENV/ferrolock-go.status"
  else
    say "building the ferrolock Go driver (C API static library + cgo)"
    if (cd "$SRC" && cargo build --release --quiet -p ferrolock-c \
        && cd bench/go && CGO_CFLAGS="-O2 -g -DFERROLOCK_LIB_SUM=$(sha256sum "$SRC/target/release/libferrolock_c.a" | cut -c1-16)" \
           go build -o "$GO_BIN" .) >/tmp/ferrolock-bench-go.log 2>&1; then
      :
    else
      echo "building the Go driver failed: $(grep -m1 -iE 'error|cannot' /tmp/ferrolock-bench-go.log | cut -c1-200)" > "$VENV/ferrolock-go.status"
    fi
  fi
  if command -v npm >/dev/null 2>&1; then
    say "node peers (bench/node/package-lock.json)"
    (cd bench/node && npm ci --no-audit --no-fund --loglevel=error >&2) || say "npm ci failed: Node peers will be skipped"
  fi
  # ferrolock Python: pip install ./bindings-python (maturin) into the bench venv.
  if [ -f "$SRC/bindings-python/pyproject.toml" ]; then
    say "installing the ferrolock Python binding into bench/.venv"
    if CARGO_TARGET_DIR=$TARGET "$VENV/bin/pip" install -q --disable-pip-version-check "$SRC/bindings-python" \
        >/tmp/ferrolock-bench-py.log 2>&1; then
      rm -f "$VENV/ferrolock-py.status"
    else
      # Never measure a stale build from an earlier run.
      "$VENV/bin/pip" uninstall -q -y ferrolock >/dev/null 2>&1 || true
      echo "pip install ./bindings-python failed: $(grep -m1 -E '^error' /tmp/ferrolock-bench-py.log | cut -c1-200)" > "$VENV/ferrolock-py.status"
    fi
  else
    echo "bindings-python/pyproject.toml does not exist yet" > "$VENV/ferrolock-py.status"
  fi
  # ferrolock Node: build the napi addon with cargo into the shared target dir, then assemble
  # bench/node/ferrolock-pkg = bindings-node's JS entry + package.json + the addon (nothing is
  # written into bindings-node/).
  pkg=bench/node/ferrolock-pkg
  rm -rf "$pkg"
  if [ -f "$SRC/bindings-node/package.json" ] && [ -f "$SRC/bindings-node/index.js" ]; then
    say "building the ferrolock Node addon (release)"
    if (cd "$SRC" && CARGO_TARGET_DIR=$TARGET cargo build --release --quiet -p ferrolock-node) >/tmp/ferrolock-bench-node.log 2>&1; then
      lib=$(ls "$TARGET"/release/libferrolock_node.so 2>/dev/null | head -n1 || true)
      if [ -n "$lib" ]; then
        mkdir -p "$pkg"
        cp "$SRC"/bindings-node/package.json "$SRC"/bindings-node/*.js "$pkg"/
        cp "$lib" "$pkg/ferrolock.node"
        export FERROLOCK_NODE="$PWD/$pkg"
        rm -f "$VENV/ferrolock-node.status"
      else
        echo "cargo built ferrolock-node but no libferrolock_node.so was found" > "$VENV/ferrolock-node.status"
      fi
    else
      echo "cargo build -p ferrolock-node failed: $(grep -m1 '^error' /tmp/ferrolock-bench-node.log | cut -c1-200)" > "$VENV/ferrolock-node.status"
    fi
  else
    echo "bindings-node is not a napi package with index.js yet" > "$VENV/ferrolock-node.status"
  fi
fi

exec "$VENV/bin/python" bench/run.py "$@"
