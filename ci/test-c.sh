#!/usr/bin/env bash
# C API: header drift check (pinned cbindgen), then the C test suite against a real redis-server
# under ASan/UBSan, under valgrind, and linked as a shared library. Called by ci/test.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
need_apt() {
  command -v "$1" >/dev/null 2>&1 && return
  echo "test-c: installing $2 (Debian package)" >&2
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "$2" >&2 \
    || { $SUDO apt-get update -qq >&2 && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "$2" >&2; }
}
need_apt gcc gcc
need_apt g++ g++
need_apt valgrind valgrind
need_apt pkg-config pkg-config
need_apt redis-server redis-server

CBINDGEN_VERSION=0.29.4
if [ "$(cbindgen --version 2>/dev/null)" != "cbindgen $CBINDGEN_VERSION" ]; then
  echo "test-c: installing cbindgen $CBINDGEN_VERSION" >&2
  cargo install cbindgen --version "$CBINDGEN_VERSION" --locked >&2
fi

out=$(mktemp -d /tmp/ferrolock-test-c.XXXXXX)
trap 'rm -rf "$out"' EXIT

echo "test-c: header drift check (cbindgen $CBINDGEN_VERSION)"
(cd bindings-c && cbindgen --quiet --config cbindgen.toml --crate ferrolock-c --output "$out/ferrolock.h")
if ! diff -u bindings-c/include/ferrolock.h "$out/ferrolock.h"; then
  echo "test-c: bindings-c/include/ferrolock.h is stale: run bindings-c/generate.sh and commit" >&2
  exit 1
fi

echo "test-c: building the library (release)"
cargo build --release --quiet -p ferrolock-c
version=$(cargo pkgid -p ferrolock-c | sed 's/.*[#@]//')
export PKG_CONFIG_PATH="$root/bindings-c${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
for pc in ferrolock ferrolock-static; do
  [ "$(pkg-config --modversion "$pc")" = "$version" ] \
    || { echo "test-c: $pc.pc version differs from the crate ($version)" >&2; exit 1; }
done

warn=(-std=c11 -Wall -Wextra -Werror -pedantic -g)
echo "test-c: the header alone compiles as C99 and C++"
printf '#include "ferrolock.h"\nint main(void){return ferrolock_version()==0;}\n' >"$out/h.c"
gcc -std=c99 -Wall -Wextra -Werror -pedantic -fsyntax-only $(pkg-config --cflags ferrolock) "$out/h.c"
g++ -std=c++11 -Wall -Wextra -Werror -pedantic -fsyntax-only -x c++ $(pkg-config --cflags ferrolock) "$out/h.c"

src=bindings-c/tests/c/test_ferrolock.c
run=bindings-c/tests/c/with-redis.sh
gcc "${warn[@]}" -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined \
  "$src" $(pkg-config --cflags --libs ferrolock-static) -o "$out/test-asan"
gcc "${warn[@]}" -O1 "$src" $(pkg-config --cflags --libs ferrolock-static) -o "$out/test-static"
gcc "${warn[@]}" -O1 "$src" $(pkg-config --cflags --libs ferrolock) \
  -Wl,-rpath,"$(pkg-config --variable=libdir ferrolock)" -o "$out/test-shared"

echo "test-c: AddressSanitizer + UBSan (static library)"
ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
  "$run" "$out/test-asan"
echo "test-c: valgrind memcheck (static library)"
FERROLOCK_TEST_NO_FORK=1 "$run" valgrind -q --error-exitcode=9 --leak-check=full --errors-for-leak-kinds=definite,indirect \
  --show-leak-kinds=definite,indirect "$out/test-static"
echo "test-c: shared library"
"$run" "$out/test-shared"
echo "test-c: all C suites passed"
