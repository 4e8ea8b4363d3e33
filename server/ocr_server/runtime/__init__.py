"""What the process runs on: configuration, errors, metrics, credential reload, liveness, timeouts,
weight checksums and plugins. The lowest layer: it imports nothing of the engines, serving or HTTP."""
