#!/usr/bin/env bash
# Build the real node's binaries from the Go module proxy, cached by version (see build-binaries.sh
# for the control plane; this has its own cache key, so a node change never rebuilds the control plane).
#
# kubelet + kube-proxy: the same wrapper-module approach as the control plane (k8s.io/kubernetes
#   replaces its staging modules with local paths, so the wrapper replaces them with the published
#   versions); they share the Go build cache with the control plane's build.
# containerd, ctr, containerd-shim-runc-v2: `go get -tool`, without the btrfs/devmapper/zfs
#   snapshotters (cgo libraries this machine lacks; the node uses overlayfs).
# CNI plugins bridge, host-local, loopback, portmap.
# crictl: the CRI client the harness uses to remove pod sandboxes (with CNI DEL) that a killed
#   kubelet left behind.
# pause and causalflow-nodetest: the small static programs in localcluster/nodeimages/, the
#   sandbox ("pause") image and the real-node tests' image; rebuilt when their source changes.
# runc, iptables, conntrack and nft come from Debian: installed with apt-get when missing and root.
#
# Output: $CAUSALFLOW_CACHE/<node key>/bin/; `.complete` marks a finished build. A lock makes
# concurrent callers wait for one build instead of racing.
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/versions.sh"  # K8S_VERSION, CONTAINERD_VERSION, CNI_PLUGINS_VERSION, CRICTL_VERSION
CNI_VERSION=$CNI_PLUGINS_VERSION
CACHE_ROOT=${CAUSALFLOW_CACHE:-$HOME/.cache/causalflow-ocr}
KEY="node_k8s-${K8S_VERSION}_containerd-${CONTAINERD_VERSION}_cni-${CNI_VERSION}_crictl-${CRICTL_VERSION}"
DEST="$CACHE_ROOT/$KEY"
BIN="$DEST/bin"
SRC_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/nodeimages"
source "$(dirname "$SRC_DIR")/k8s-module.sh"  # k8s_staging_replaces, k8s_version_ldflags
DEBIAN_PACKAGES=(runc iptables conntrack nftables)
DEBIAN_COMMANDS=(runc iptables conntrack nft)

if [[ "${1:-}" == "--print-dir" ]]; then echo "$BIN"; exit 0; fi

mkdir -p "$DEST"
exec 9>"$DEST/.lock"
flock 9

start=$(date +%s)
log() { printf '[build-node-binaries %4ss] %s\n' "$(( $(date +%s) - start ))" "$*"; }

# --- Debian packages the node runs (not Go binaries) -------------------------------------------
missing=()
for i in "${!DEBIAN_COMMANDS[@]}"; do
  command -v "${DEBIAN_COMMANDS[$i]}" >/dev/null || missing+=("${DEBIAN_PACKAGES[$i]}")
done
if (( ${#missing[@]} )); then
  if [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null; then
    log "installing Debian packages: ${missing[*]}"
    for try in 1 2 3 4 5 6; do  # another apt run may hold the lock for a while
      DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -q "${missing[@]}" >"$DEST/apt.log" 2>&1 && break
      (( try == 6 )) && { tail -20 "$DEST/apt.log"; log "apt-get install ${missing[*]} failed"; exit 1; }
      sleep 10
    done
  else
    log "missing ${missing[*]} (not root or no apt-get): the real node cannot run here"
  fi
fi

# --- the two small programs (source hash, so an edit rebuilds them in a second) -----------------
# -dwarf=false: no DWARF for stripped binaries (see build-binaries.sh).
export CGO_ENABLED=0 GOFLAGS="-buildvcs=false -gcflags=all=-dwarf=false" GOTOOLCHAIN=local
SRC_HASH=$(cd "$SRC_DIR" && find . -type f \( -name '*.go' -o -name go.mod \) | LC_ALL=C sort | xargs sha256sum | sha256sum | cut -c1-16)
if [[ ! -f "$BIN/.nodeimages-$SRC_HASH" ]]; then
  mkdir -p "$BIN"
  (cd "$SRC_DIR" && go build -trimpath -ldflags "-s -w" -o "$BIN/pause" ./pause \
                 && go build -trimpath -ldflags "-s -w" -o "$BIN/causalflow-nodetest" ./nodetest)
  rm -f "$BIN"/.nodeimages-*; touch "$BIN/.nodeimages-$SRC_HASH"
  log "pause and causalflow-nodetest built ($SRC_HASH)"
fi

if [[ -f "$DEST/.complete" ]]; then echo "node binaries: cached at $BIN"; exit 0; fi

mkdir -p "$BIN" "$DEST/src"
built() { for b in "$@"; do [[ -x "$BIN/$b" ]] || return 1; done; }
GOLOG="$DEST/go.log"; : > "$GOLOG"
quiet() { "$@" >>"$GOLOG" 2>&1 || { tail -40 "$GOLOG"; log "failed: $*"; exit 1; }; }

# --- CNI plugins ------------------------------------------------------------------------------
if ! built bridge host-local loopback portmap; then
  log "CNI plugins $CNI_VERSION"
  W="$DEST/src/cni"; rm -rf "$W"; mkdir -p "$W"; cd "$W"
  go mod init local/cnibins >/dev/null 2>&1
  P=github.com/containernetworking/plugins/plugins
  quiet go get -tool "$P/main/bridge@$CNI_VERSION" "$P/main/loopback@$CNI_VERSION" \
    "$P/ipam/host-local@$CNI_VERSION" "$P/meta/portmap@$CNI_VERSION"
  go build -trimpath -ldflags "-s -w -X github.com/containernetworking/plugins/pkg/utils/buildversion.BuildVersion=$CNI_VERSION" \
    -o "$BIN/" "$P/main/bridge" "$P/main/loopback" "$P/ipam/host-local" "$P/meta/portmap"
fi

# --- containerd -------------------------------------------------------------------------------
if ! built containerd ctr containerd-shim-runc-v2; then
  log "containerd $CONTAINERD_VERSION"
  W="$DEST/src/containerd"; rm -rf "$W"; mkdir -p "$W"; cd "$W"
  go mod init local/containerdbins >/dev/null 2>&1
  C=github.com/containerd/containerd/v2
  quiet go get -tool "$C/cmd/containerd@$CONTAINERD_VERSION" "$C/cmd/ctr@$CONTAINERD_VERSION" \
    "$C/cmd/containerd-shim-runc-v2@$CONTAINERD_VERSION"
  go build -trimpath -tags "no_btrfs no_devmapper no_zfs" \
    -ldflags "-s -w -X $C/version.Version=$CONTAINERD_VERSION -X $C/version.Package=$C" \
    -o "$BIN/" "$C/cmd/containerd" "$C/cmd/ctr" "$C/cmd/containerd-shim-runc-v2"
fi
# The image preload (localcluster/imagestore.py) starts as soon as containerd and ctr are here.
touch "$BIN/.containerd-built"

# --- crictl -----------------------------------------------------------------------------------
if ! built crictl; then
  log "crictl $CRICTL_VERSION"
  W="$DEST/src/crictl"; rm -rf "$W"; mkdir -p "$W"; cd "$W"
  go mod init local/crictlbin >/dev/null 2>&1
  quiet go get -tool "sigs.k8s.io/cri-tools/cmd/crictl@$CRICTL_VERSION"
  go build -trimpath -ldflags "-s -w -X sigs.k8s.io/cri-tools/pkg/version.Version=$CRICTL_VERSION" \
    -o "$BIN/crictl" sigs.k8s.io/cri-tools/cmd/crictl
fi

# --- kubelet and kube-proxy -------------------------------------------------------------------
if ! built kubelet kube-proxy; then
  log "kubelet + kube-proxy $K8S_VERSION: resolving modules"
  W="$DEST/src/k8s"; rm -rf "$W"; mkdir -p "$W"; cd "$W"
  printf 'module local/k8snodebins\n\ngo 1.26.0\n\ngodebug default=go1.26\n' > go.mod
  k8s_staging_replaces
  quiet go get -tool "k8s.io/kubernetes/cmd/kubelet@$K8S_VERSION" "k8s.io/kubernetes/cmd/kube-proxy@$K8S_VERSION"
  log "kubelet + kube-proxy $K8S_VERSION: compiling"
  go build -trimpath -ldflags "-s -w $(k8s_version_ldflags)" -o "$BIN/" k8s.io/kubernetes/cmd/kubelet k8s.io/kubernetes/cmd/kube-proxy
fi

rm -rf "$DEST/src"
"$BIN/kubelet" --version
"$BIN/containerd" --version
touch "$DEST/.complete"
log "done: $(du -sh "$BIN" | cut -f1) in $BIN"
