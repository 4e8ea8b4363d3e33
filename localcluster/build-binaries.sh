#!/usr/bin/env bash
# Build the local control plane's binaries from the Go module proxy, cached by version.
#
# kube-apiserver, kube-controller-manager, kube-scheduler and kubectl come from a wrapper module
# (k8s.io/kubernetes cannot be `go install`ed: its go.mod replaces staging modules with local paths),
# etcd from its own wrapper (server/go.mod has replaces too), kwok and helm with `go get -tool`.
# Output: $CAUSALFLOW_CACHE/<versions>/bin/{etcd,kube-apiserver,...}; a finished build leaves a
# `.complete` stamp, so a second run is a no-op and an interrupted one is redone.
# First the real node's binaries (build-node-binaries.sh, own cache key; CAUSALFLOW_REAL_NODE=0 skips),
# last the metric chain: Prometheus and prometheus-adapter (build-metrics-binaries.sh, own cache keys;
# CAUSALFLOW_METRIC_CHAIN=0 skips them: `make demo` autoscales nothing and needs neither).
# CAUSALFLOW_HELM=0 skips helm (`make demo` runs the operator as a local process; the chart's
# tests need it): the build then stamps nothing, and the next run without it builds helm alone.
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/versions.sh"  # K8S_VERSION, ETCD_VERSION, KWOK_VERSION, HELM_VERSION
CACHE_ROOT=${CAUSALFLOW_CACHE:-$HOME/.cache/causalflow-ocr}
KEY="k8s-${K8S_VERSION}_etcd-${ETCD_VERSION}_kwok-${KWOK_VERSION}_helm-${HELM_VERSION}"
DEST="$CACHE_ROOT/$KEY"
BIN="$DEST/bin"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

if [[ "${1:-}" == "--print-dir" ]]; then echo "$BIN"; exit 0; fi
# A failed node build leaves the control plane usable: the cluster then runs without its real node.
node_binaries() {
  [[ "${CAUSALFLOW_REAL_NODE:-1}" =~ ^(0|false|no|off)$ ]] && return 0
  bash "$HERE/build-node-binaries.sh" || echo "node binaries: build failed (see above); the local cluster will run without its real node"
}
metrics_binaries() {
  [[ "${CAUSALFLOW_METRIC_CHAIN:-1}" =~ ^(0|false|no|off)$ ]] && return 0
  bash "$HERE/build-metrics-binaries.sh"
}
if [[ -f "$DEST/.complete" ]]; then echo "cluster binaries: cached at $BIN"; node_binaries; metrics_binaries; exit 0; fi

# The node's binaries first: containerd is then ready early for the image preload of the set-up
# (localcluster/imagestore.py), and the control plane reuses the packages kubelet compiled.
node_binaries
mkdir -p "$BIN" "$DEST/src"
# -dwarf=false: the binaries are stripped (-s -w) anyway, so the compiler need not write DWARF at
# all; measured on crictl, cold: 12 % less CPU, 15 % less wall time on 2 cores.
export CGO_ENABLED=0 GOFLAGS="-buildvcs=false -gcflags=all=-dwarf=false" GOTOOLCHAIN=local
start=$(date +%s)
log() { printf '[build-binaries %4ss] %s\n' "$(( $(date +%s) - start ))" "$*"; }

built() { for b in "$@"; do [[ -x "$BIN/$b" ]] || return 1; done; }
# Module resolution prints a line per module; keep it in a log, shown only when a step fails.
GOLOG="$DEST/go.log"; : > "$GOLOG"
quiet() { "$@" >>"$GOLOG" 2>&1 || { tail -40 "$GOLOG"; log "failed: $*"; exit 1; }; }

source "$HERE/k8s-module.sh"  # k8s_staging_replaces, k8s_version_ldflags

# --- Kubernetes: apiserver, controller-manager, scheduler, kubectl ---------------------------
if ! built kube-apiserver kube-controller-manager kube-scheduler kubectl; then
  log "kubernetes $K8S_VERSION: resolving modules"
  W="$DEST/src/k8s"; rm -rf "$W"; mkdir -p "$W"; cd "$W"
  printf 'module local/k8sbins\n\ngo 1.26.0\n\ngodebug default=go1.26\n' > go.mod
  k8s_staging_replaces
  # Every path carries the version: a bare `go get -tool` path means @latest, another release.
  quiet go get -tool "k8s.io/kubernetes/cmd/kube-apiserver@$K8S_VERSION" \
    "k8s.io/kubernetes/cmd/kube-controller-manager@$K8S_VERSION" \
    "k8s.io/kubernetes/cmd/kube-scheduler@$K8S_VERSION" "k8s.io/kubernetes/cmd/kubectl@$K8S_VERSION"
  log "kubernetes $K8S_VERSION: compiling (the long part on 2 cores)"
  go build -trimpath -ldflags "-s -w $(k8s_version_ldflags)" -o "$BIN/" \
    k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
    k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubectl
fi

# --- etcd ------------------------------------------------------------------------------------
if ! built etcd; then
  log "etcd $ETCD_VERSION"
  W="$DEST/src/etcd"; rm -rf "$W"; mkdir -p "$W"; cd "$W"
  go mod init local/etcdbin >/dev/null 2>&1
  quiet go get -tool "go.etcd.io/etcd/server/v3@$ETCD_VERSION"
  go build -trimpath -ldflags "-s -w" -o "$BIN/etcd" go.etcd.io/etcd/server/v3
fi

# --- kwok ------------------------------------------------------------------------------------
if ! built kwok; then
  log "kwok $KWOK_VERSION"
  W="$DEST/src/kwok"; rm -rf "$W"; mkdir -p "$W"; cd "$W"
  go mod init local/kwokbin >/dev/null 2>&1
  quiet go get -tool "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION"
  # kwok's Kubernetes libraries at the control plane's own versions (a patch release above what
  # kwok asks for): the packages compiled for the control plane then serve kwok from the build
  # cache, which takes minutes off a cold build on 2 cores.
  k8s_staging_replaces
  quiet go mod tidy
  go build -trimpath -ldflags "-s -w" -o "$BIN/kwok" sigs.k8s.io/kwok/cmd/kwok
  # kwok run alone needs explicit stages: keep the upstream ones next to the binary.
  KWOK_DIR=$(go list -m -f '{{.Dir}}' sigs.k8s.io/kwok)
  rm -rf "$DEST/kwok-stages"; mkdir -p "$DEST/kwok-stages"
  cp -r "$KWOK_DIR/kustomize/stage/." "$DEST/kwok-stages/"
  chmod -R u+w "$DEST/kwok-stages"
fi

# --- helm ------------------------------------------------------------------------------------
skip_helm() { [[ "${CAUSALFLOW_HELM:-1}" =~ ^(0|false|no|off)$ ]]; }
if ! built helm && skip_helm; then
  log "helm skipped (CAUSALFLOW_HELM=0)"
elif ! built helm; then
  log "helm $HELM_VERSION"
  W="$DEST/src/helm"; rm -rf "$W"; mkdir -p "$W"; cd "$W"
  go mod init local/helmbin >/dev/null 2>&1
  HELM_MAJOR=${HELM_VERSION%%.*}
  quiet go get -tool "helm.sh/helm/$HELM_MAJOR/cmd/helm@$HELM_VERSION"
  go build -trimpath -ldflags "-s -w -X helm.sh/helm/$HELM_MAJOR/internal/version.version=$HELM_VERSION" \
    -o "$BIN/helm" "helm.sh/helm/$HELM_MAJOR/cmd/helm"
fi

cd "$HERE"  # out of the sources before they go: the metric chain's build starts from here
rm -rf "$DEST/src"
"$BIN/kube-apiserver" --version
"$BIN/etcd" --version | sed -n 1p  # sed reads it all: with pipefail, head could SIGPIPE etcd (exit 141)
built helm && touch "$DEST/.complete"
log "done: $(du -sh "$BIN" | cut -f1) in $BIN"
metrics_binaries
