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
# The package's postinst only registers a systemd unit; nothing is started here.
$SUDO apt-get install -y --no-install-recommends prometheus \
  || { $SUDO apt-get update -q && $SUDO apt-get install -y --no-install-recommends prometheus; }
