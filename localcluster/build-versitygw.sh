#!/usr/bin/env bash
# Build versitygw (github.com/versity/versitygw, Apache-2.0, an S3 gateway with a POSIX backend) from
# the Go module proxy, cached by version: localcluster/s3server.py starts it for the batch storage
# tests (a real S3 server on this machine). `make setup` (hence `make test`) runs this script.
#
# Output: $CAUSALFLOW_CACHE/versitygw-<version>/bin/versitygw; `.complete` marks a finished build,
# a lock makes concurrent callers wait for one build instead of racing.
# `--print-bin` prints where the binary is (built or not).
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/versions.sh"  # VERSITYGW_VERSION
CACHE_ROOT=${CAUSALFLOW_CACHE:-$HOME/.cache/causalflow-ocr}
DEST="$CACHE_ROOT/versitygw-${VERSITYGW_VERSION}"

if [[ "${1:-}" == "--print-bin" ]]; then echo "$DEST/bin/versitygw"; exit 0; fi

mkdir -p "$DEST"
exec 9>"$DEST/.lock"
flock 9
if [[ -f "$DEST/.complete" && -x "$DEST/bin/versitygw" ]]; then
  echo "versitygw: cached at $DEST/bin"; exit 0
fi
start=$(date +%s)
# versitygw's go.mod has no replace directives, so a plain `go install module@version` builds it;
# main.Version is what `versitygw --version` prints (its Makefile sets it the same way).
# -dwarf=false and -s -w: a stripped binary (see build-binaries.sh).
export CGO_ENABLED=0 GOFLAGS="-buildvcs=false -gcflags=all=-dwarf=false" GOTOOLCHAIN=local GOBIN="$DEST/bin"
GOLOG="$DEST/go.log"
echo "versitygw $VERSITYGW_VERSION: building"
go install -trimpath -ldflags "-s -w -X=main.Version=$VERSITYGW_VERSION" \
  "github.com/versity/versitygw/cmd/versitygw@$VERSITYGW_VERSION" >"$GOLOG" 2>&1 \
  || { tail -40 "$GOLOG"; echo "versitygw: build failed" >&2; exit 1; }
touch "$DEST/.complete"
echo "versitygw: built in $(( $(date +%s) - start ))s at $DEST/bin/versitygw"
