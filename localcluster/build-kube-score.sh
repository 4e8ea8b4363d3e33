#!/usr/bin/env bash
# Build kube-score (github.com/zegl/kube-score, a static checker of Kubernetes manifests) from the
# Go module proxy, cached by version: tests/unit/chart/test_kube_score.py runs it over the chart
# and over the children the operator renders. `make setup` (hence `make test`) runs this script.
#
# Output: $CAUSALFLOW_CACHE/kube-score-<version>/bin/kube-score; `.complete` marks a finished build,
# a lock makes concurrent callers wait for one build instead of racing.
# `--print-bin` prints where the binary is (built or not).
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/versions.sh"  # KUBE_SCORE_VERSION
CACHE_ROOT=${CAUSALFLOW_CACHE:-$HOME/.cache/causalflow-ocr}
DEST="$CACHE_ROOT/kube-score-${KUBE_SCORE_VERSION}"

if [[ "${1:-}" == "--print-bin" ]]; then echo "$DEST/bin/kube-score"; exit 0; fi

mkdir -p "$DEST"
exec 9>"$DEST/.lock"
flock 9
if [[ -f "$DEST/.complete" && -x "$DEST/bin/kube-score" ]]; then
  echo "kube-score: cached at $DEST/bin"; exit 0
fi
start=$(date +%s)
# kube-score's go.mod has no replace directives, so a plain `go install module@version` builds it.
# -dwarf=false and -s -w: a stripped binary (see build-binaries.sh).
export CGO_ENABLED=0 GOFLAGS="-buildvcs=false -gcflags=all=-dwarf=false" GOTOOLCHAIN=local GOBIN="$DEST/bin"
GOLOG="$DEST/go.log"
echo "kube-score $KUBE_SCORE_VERSION: building"
go install -trimpath -ldflags "-s -w" "github.com/zegl/kube-score/cmd/kube-score@$KUBE_SCORE_VERSION" >"$GOLOG" 2>&1 \
  || { tail -40 "$GOLOG"; echo "kube-score: build failed" >&2; exit 1; }
touch "$DEST/.complete"
echo "kube-score: built in $(( $(date +%s) - start ))s at $DEST/bin/kube-score"
