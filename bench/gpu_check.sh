#!/usr/bin/env bash
# One prepared run for a GPU machine that returns every figure: the bf16 token-identity check of the
# two decoders (bench/slots_check.py) and the bench (bench/server_bench.py) on the full-size random
# architecture. Documented in docs/development/benchmarks.md ("The slots decoder: the GPU check").
#
#   bench/gpu_check.sh --prepare   # here, with the package index: wheels -> bench/.wheels (bench/gpu_wheels.py)
#   bench/gpu_check.sh             # on the GPU machine, from the repository root: files under $OUT
#
# The GPU machine's python3 is a venv's interpreter (Python 3.12) holding torch and an older
# transformers, and it reaches no package index. pip, with no index, takes from bench/.wheels what
# that python3 lacks (the pinned transformers, the server's web stack, pypdfium2, pydantic) into a
# --target folder on PYTHONPATH; the repository's packages are used from the tree.
#
# The plan, 8 minutes on an H200 (bench/gpu_run.py runs the phases; --plan changes the budgets).
# A phase's deadline is the start plus its budget and every earlier one's, so time left over
# carries on; a phase cut at its deadline leaves the figures it has written so far.
#   install   25 s  pip from local wheels into /tmp/gpu-check/site, then every import checked
#   model     40 s  the full-size architecture, random bf16 weights (native layout) -> /tmp/gpu-check/model
#   identity  85 s  8 pages x 256 tokens: generate() alone vs the slots decoder, 4 slots, then the same
#                   with the step compiled by inductor -> identity.json
#   raw      120 s  the raw engine, 64 pages x 512 tokens: the slots decoder (throughput, prefill at 1
#                   and 8 pages together, ms per step per experts implementation), sequential and
#                   generate() on 4, then ms per step with the step compiled by inductor -> bench.json
#   server   160 s  the server (DECODER=slots) at 1, 64, 32 and 8 clients, in that order, then at 64
#                   with each --server-variants (DECODE_COMPILE=true, PREPROCESS_MODE=processes) -> bench.json
#   profile   50 s  prefill ms per page at 1..16 pages together, the profiler's kernels, SAM's folded
#                   attention against transformers' own, preprocessing beside the engine thread -> profile.json
# --phases runs some of them (install and model first on a fresh machine).
# Scratch goes to /tmp/gpu-check; $OUT (default /tmp/gpu-check-out) gets gpu_check.log, phases.json,
# identity.json, bench.json and profile.json, each under 16 MiB. `make gpu-replica` runs this same script on the
# CPU in a replica of that machine's Python (bench/gpu_replica.py), and `make test` a short variant.
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1

if [[ "${1:-}" == "--prepare" ]]; then
    shift
    exec "${PREPARE_PYTHON:-.venv/bin/python}" bench/gpu_wheels.py "$@"
fi
exec python3 bench/gpu_run.py --out "${OUT:-/tmp/gpu-check-out}" "$@"
