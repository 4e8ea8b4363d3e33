#!/usr/bin/env bash
# Installs Debian's `prometheus` package (prometheus + promtool) when either binary is missing:
# the monitoring tests run promtool and a real Prometheus. `make test` / `make test-unit` call it.
set -euo pipefail
if command -v prometheus >/dev/null && command -v promtool >/dev/null; then
  exit 0
fi
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO=sudo; fi
export DEBIAN_FRONTEND=noninteractive
# `make test` runs its set-up steps side by side: wait for another step's apt run, not fail on it.
APT=($SUDO apt-get -o DPkg::Lock::Timeout=600)
# The package's postinst only registers a systemd unit; nothing is started here.
"${APT[@]}" install -y --no-install-recommends prometheus \
  || { "${APT[@]}" update -q && "${APT[@]}" install -y --no-install-recommends prometheus; }
