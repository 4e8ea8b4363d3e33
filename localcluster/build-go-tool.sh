#!/usr/bin/env bash
# Build one of the harness's single-binary Go tools from the Go module proxy, cached by version:
#   kube-score  github.com/zegl/kube-score, a static checker of Kubernetes manifests
#               (tests/unit/chart/test_kube_score.py runs it over the chart and the operator's children);
#   versitygw   github.com/versity/versitygw, Apache-2.0, an S3 gateway with a POSIX backend
#               (localcluster/s3server.py starts it: a real S3 server on this machine).
# `make setup` (hence `make test`) builds both; build-kube-score.sh and build-versitygw.sh name one each.
#
# Usage: build-go-tool.sh TOOL [--print-bin]
# Output: $CAUSALFLOW_CACHE/<tool>-<version>/bin/<tool>; `.complete` marks a finished build, a lock
# makes concurrent callers wait for one build instead of racing. `--print-bin` prints where the
# binary is (built or not).
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/versions.sh"  # KUBE_SCORE_VERSION, VERSITYGW_VERSION
TOOL=${1:?usage: build-go-tool.sh kube-score|versitygw [--print-bin]}
# Each tool's go.mod has no replace directives, so a plain `go install module@version` builds it.
case "$TOOL" in
  kube-score) VERSION=$KUBE_SCORE_VERSION; PACKAGE=github.com/zegl/kube-score/cmd/kube-score; LDFLAGS="" ;;
  # main.Version is what `versitygw --version` prints (its Makefile sets it the same way).
  versitygw) VERSION=$VERSITYGW_VERSION; PACKAGE=github.com/versity/versitygw/cmd/versitygw
             LDFLAGS="-X=main.Version=$VERSITYGW_VERSION" ;;
  *) echo "build-go-tool.sh: unknown tool $TOOL" >&2; exit 2 ;;
esac
CACHE_ROOT=${CAUSALFLOW_CACHE:-$HOME/.cache/causalflow-ocr}
DEST="$CACHE_ROOT/$TOOL-$VERSION"

if [[ "${2:-}" == "--print-bin" ]]; then echo "$DEST/bin/$TOOL"; exit 0; fi

mkdir -p "$DEST"
exec 9>"$DEST/.lock"
flock 9
if [[ -f "$DEST/.complete" && -x "$DEST/bin/$TOOL" ]]; then
  echo "$TOOL: cached at $DEST/bin"; exit 0
fi
start=$(date +%s)
# -dwarf=false and -s -w: a stripped binary (see build-binaries.sh).
export CGO_ENABLED=0 GOFLAGS="-buildvcs=false -gcflags=all=-dwarf=false" GOTOOLCHAIN=local GOBIN="$DEST/bin"
GOLOG="$DEST/go.log"
echo "$TOOL $VERSION: building"
go install -trimpath -ldflags "-s -w $LDFLAGS" "$PACKAGE@$VERSION" >"$GOLOG" 2>&1 \
  || { tail -40 "$GOLOG"; echo "$TOOL: build failed" >&2; exit 1; }
touch "$DEST/.complete"
echo "$TOOL: built in $(( $(date +%s) - start ))s at $DEST/bin/$TOOL"
