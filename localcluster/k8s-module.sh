# Sourced by build-binaries.sh and build-node-binaries.sh, after versions.sh and their own
# `quiet` and GOLOG: what both need to build commands of k8s.io/kubernetes at K8S_VERSION.

# k8s.io/kubernetes replaces its staging modules (k8s.io/api, client-go, ...) with local paths;
# the module in the current directory gets them at their published versions, v0.<minor>.<patch>.
k8s_staging_replaces() {
  local staging="v0.${K8S_VERSION#v1.}" gomod m
  gomod=$(go mod download -json "k8s.io/kubernetes@$K8S_VERSION" 2>>"$GOLOG" | python3 -c 'import json,sys; print(json.load(sys.stdin)["GoMod"])')
  for m in $(sed -n 's|^[[:space:]]*\(k8s.io/[^ ]*\) => \./staging/.*|\1|p' "$gomod"); do
    quiet go mod edit -replace="$m=$m@$staging"
  done
}

# The -X flags that make the binaries report K8S_VERSION (`kubectl version`, /version, the node's
# kubeletVersion) instead of v0.0.0.
k8s_version_ldflags() {
  local minor=${K8S_VERSION#v1.} flags="" pkg
  minor=${minor%%.*}
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    flags="$flags -X $pkg.gitVersion=$K8S_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean"
  done
  echo "$flags"
}
