"""Developer scripts: generators, sync checks and the demo (run each as a script; see docs)."""
