#!/usr/bin/env bash
# The explicit recipe for every generated interface of the C and Go bindings:
#   src/result.rs and ../bindings-go/codes_gen.go from ferrolock::ErrorKind (tests/generated.rs),
#   then include/ferrolock.h from src/ with the pinned cbindgen.
set -euo pipefail
cd "$(dirname "$0")"
CBINDGEN_VERSION=0.29.4
if [ "$(cbindgen --version 2>/dev/null)" != "cbindgen $CBINDGEN_VERSION" ]; then
  echo "generate.sh: installing cbindgen $CBINDGEN_VERSION" >&2
  cargo install cbindgen --version "$CBINDGEN_VERSION" --locked >&2
fi
FERROLOCK_REGENERATE=1 cargo test -q -p ferrolock-c --test generated -- rust_result_codes go_error_codes >&2
cbindgen --config cbindgen.toml --crate ferrolock-c --output include/ferrolock.h
cargo test -q -p ferrolock-c --test generated >&2
echo "generated: src/result.rs ../bindings-go/codes_gen.go include/ferrolock.h" >&2
