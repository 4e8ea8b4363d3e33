#!/usr/bin/env bash
# Build versitygw (the S3 server) from the Go module proxy, cached by version (build-go-tool.sh).
# `--print-bin` prints where the binary is.
exec bash "$(dirname "${BASH_SOURCE[0]}")/build-go-tool.sh" versitygw "$@"
