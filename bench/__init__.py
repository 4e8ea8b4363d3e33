"""Benchmarks: timing goals as ratios measured in one run (run each file as a script; see docs)."""
