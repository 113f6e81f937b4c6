#!/usr/bin/env bash
# Go module (bindings-go): gofmt, go vet, and go test -race against real redis-servers, linking the
# static C library built here. Called by ci/test.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v go >/dev/null 2>&1 || { echo "test-go: the Go toolchain is required (https://go.dev/dl)" >&2; exit 1; }
command -v redis-server >/dev/null 2>&1 || bash ci/setup.sh

echo "test-go: building the static library (release)"
cargo build --release --quiet -p ferrolock-c
# cgo does not hash libraries named in LDFLAGS: key Go's build cache on the library's content.
export CGO_CFLAGS="${CGO_CFLAGS:--O2 -g} -DFERROLOCK_LIB_SUM=$(sha256sum target/release/libferrolock_c.a | cut -c1-16)"

cd bindings-go
unformatted=$(gofmt -l .)
if [ -n "$unformatted" ]; then
  echo "test-go: gofmt needed on: $unformatted" >&2
  exit 1
fi
go vet ./...
go test -race -count=1 ./...
# bench/go (the Go driver of bench/run.sh: ferrolock Go, redsync, go-redis) builds against this
# module: keep it building.
cd ../bench/go
[ -z "$(gofmt -l .)" ] || { echo "test-go: gofmt needed in bench/go" >&2; exit 1; }
go vet ./... && go build -o /dev/null .
echo "test-go: passed"
