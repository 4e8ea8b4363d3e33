#!/usr/bin/env bash
# Build the local cluster's metric chain from the Go module proxy, each binary cached by version:
#
#   prometheus-adapter  sigs.k8s.io/prometheus-adapter (cmd/adapter), the custom-metrics API server
#                       users run in front of Prometheus.
#   prometheus          github.com/prometheus/prometheus (cmd/prometheus). Debian's `prometheus`
#                       package (promtool and the monitoring tests use it) is built without the
#                       Kubernetes service discovery, which the chain needs to find server pods
#                       through the API server, so the cluster's Prometheus is built here, with the
#                       build tags that keep only the Kubernetes, file and HTTP discovery
#                       (remove_all_sd, enable_kubernetes_sd: the cloud SDKs are not compiled).
#
# Like the control plane's binaries (build-binaries.sh) each comes from a throwaway wrapper module:
# `go get -tool` pins the version, GOFLAGS=-mod=mod lets the wrapper's go.mod follow the module's
# requirements, and the module's own `replace` lines are copied (a dependency's replaces do not apply).
# Output: $CAUSALFLOW_CACHE/<name>-<version>/bin/<name>; `.complete` marks a finished build, a
# lock makes concurrent callers wait for one build instead of racing.
# `--print-bin NAME` prints where NAME is (built or not).
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/versions.sh"  # PROMETHEUS_ADAPTER_VERSION, PROMETHEUS_MODULE_VERSION
ADAPTER_VERSION=$PROMETHEUS_ADAPTER_VERSION
PROMETHEUS_TAGS="remove_all_sd,enable_kubernetes_sd"
CACHE_ROOT=${CAUSALFLOW_CACHE:-$HOME/.cache/causalflow-ocr}
ADAPTER_DEST="$CACHE_ROOT/prometheus-adapter-${ADAPTER_VERSION}"
PROMETHEUS_DEST="$CACHE_ROOT/prometheus-${PROMETHEUS_MODULE_VERSION}_k8s-sd"

if [[ "${1:-}" == "--print-bin" ]]; then
  case "${2:-}" in
    prometheus-adapter) echo "$ADAPTER_DEST/bin/prometheus-adapter" ;;
    prometheus) echo "$PROMETHEUS_DEST/bin/prometheus" ;;
    *) echo "usage: $0 --print-bin prometheus|prometheus-adapter" >&2; exit 2 ;;
  esac
  exit 0
fi

# -dwarf=false: no DWARF for stripped binaries (see build-binaries.sh).
export CGO_ENABLED=0 GOFLAGS="-buildvcs=false -mod=mod -gcflags=all=-dwarf=false" GOTOOLCHAIN=local
start=$(date +%s)
log() { printf '[build-metrics-binaries %4ss] %s\n' "$(( $(date +%s) - start ))" "$*"; }

# build_one DEST NAME MODULE@VERSION PACKAGE [go build flags...]
build_one() {
  local dest=$1 name=$2 modver=$3 pkg=$4; shift 4
  mkdir -p "$dest"
  exec 9>"$dest/.lock"
  flock 9
  if [[ -f "$dest/.complete" && -x "$dest/bin/$name" ]]; then
    echo "$name: cached at $dest/bin"; exec 9>&-; return 0
  fi
  local golog="$dest/go.log"; : > "$golog"
  quiet() { "$@" >>"$golog" 2>&1 || { tail -40 "$golog"; log "failed: $*"; exit 1; }; }
  log "$name ${modver#*@}: resolving modules"
  mkdir -p "$dest/bin"
  local w="$dest/src"; rm -rf "$w"; mkdir -p "$w"; cd "$w"
  printf 'module local/%sbin\n\ngo 1.26.0\n' "$name" > go.mod
  local gomod
  gomod=$(go mod download -json "$modver" 2>>"$golog" | python3 -c 'import json,sys; print(json.load(sys.stdin)["GoMod"])')
  # single-line `replace a => b vX` directives of the module, applied to the wrapper
  for r in $(sed -n 's|^replace \([^ ]*\) => \([^ ]*\) \(v[^ ]*\)$|\1=\2@\3|p' "$gomod"); do
    quiet go mod edit -replace="$r"
  done
  quiet go get -tool "$pkg@${modver#*@}"
  log "$name ${modver#*@}: compiling"
  quiet go build -trimpath "$@" -o "$dest/bin/$name" "$pkg"
  cd "$CACHE_ROOT"; rm -rf "$w"
  touch "$dest/.complete"
  log "done: $dest/bin/$name"
  exec 9>&-
}

build_one "$ADAPTER_DEST" prometheus-adapter "sigs.k8s.io/prometheus-adapter@$ADAPTER_VERSION" \
  sigs.k8s.io/prometheus-adapter/cmd/adapter -ldflags "-s -w"
build_one "$PROMETHEUS_DEST" prometheus "github.com/prometheus/prometheus@$PROMETHEUS_MODULE_VERSION" \
  github.com/prometheus/prometheus/cmd/prometheus -tags "$PROMETHEUS_TAGS" -ldflags "-s -w"
