#!/usr/bin/env bash
# One prepared run for a GPU machine, under 8 minutes: the bf16 token-identity check of the two
# decoders (bench/slots_check.py) and the server bench (bench/server_bench.py) on the full-size
# random architecture. Documented in docs/development/benchmarks.md.
#
#   bench/gpu_check.sh --prepare   # here, with the package index: the wheels the GPU machine lacks -> bench/.wheels
#   bench/gpu_check.sh             # on the GPU machine, from the repository root; figures under $OUT
#
# The GPU machine has its own torch and an older transformers and reaches no package index: it gets
# the transformers this project pins (pure Python) and the pure-Python server dependencies from
# bench/.wheels, in a virtual environment on top of its own packages (--system-site-packages), so
# that its torch is the one used. The repository's packages are used from the tree (PYTHONPATH).
set -euo pipefail
cd "$(dirname "$0")/.."
WHEELS=bench/.wheels
PURE=(huggingface_hub fastapi starlette uvicorn h11 anyio sniffio idna python-multipart prometheus-client httpx
      httpcore certifi typing-extensions typing-inspection annotated-types click typer shellingham rich
      markdown-it-py mdurl pygments tqdm packaging filelock fsspec hf-xet)

if [[ "${1:-}" == "--prepare" ]]; then
    py=.venv/bin/python
    pin=$("$py" -c 'import transformers; print(transformers.__version__)')
    mkdir -p "$WHEELS"
    "$py" -m pip download -q --no-deps -d "$WHEELS" "transformers==$pin"
    for pkg in "${PURE[@]}"; do
        version=$("$py" -c "import importlib.metadata as m; print(m.version('$pkg'))" 2>/dev/null) || continue
        "$py" -m pip download -q --no-deps --only-binary=:all: -d "$WHEELS" "$pkg==$version" 2>/dev/null \
            || echo "no wheel for $pkg==$version (the GPU machine must have it)"
    done
    # Compiled dependencies whose versions transformers or the server need, for the Pythons a GPU image may have.
    for pkg in tokenizers safetensors pydantic pydantic-core pypdfium2 regex; do
        version=$("$py" -c "import importlib.metadata as m; print(m.version('$pkg'))")
        for pyver in 3.10 3.11 3.12 3.13; do
            "$py" -m pip download -q --no-deps --only-binary=:all: --python-version "$pyver" \
                --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
                -d "$WHEELS" "$pkg==$version" 2>/dev/null || true
        done
    done
    du -sh "$WHEELS"
    exit 0
fi

OUT=${OUT:-/tmp/gpu-check}
mkdir -p "$OUT"
start=$(date +%s)
pin=$(ls "$WHEELS"/transformers-*.whl 2>/dev/null | head -1)
if [[ -z "$pin" ]]; then
    echo "no transformers wheel in $WHEELS: run bench/gpu_check.sh --prepare where the package index is reachable" >&2
    exit 2
fi
python3 -m venv --system-site-packages "$OUT/venv"
PY="$OUT/venv/bin/python"
# pip keeps what the machine already has when it satisfies the pins, and installs the rest from the wheels;
# one package at a time, so that one missing piece is reported without stopping the others.
for req in "$pin" fastapi uvicorn python-multipart prometheus-client httpx pypdfium2; do
    "$PY" -m pip install -q --no-index --find-links "$WHEELS" "$req" 2>&1 | tail -2 || echo "could not install $req"
done
export PYTHONPATH="$PWD/limits:$PWD/server:$PWD/server_testing:$PWD${PYTHONPATH:+:$PYTHONPATH}"
"$PY" - <<'EOF'
import importlib, torch
print("torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.get_device_name(0) if torch.cuda.is_available() else "NO GPU")
for name in ("transformers", "tokenizers", "fastapi", "uvicorn", "pydantic", "httpx", "pypdfium2", "PIL"):
    try:
        print(name, getattr(importlib.import_module(name), "__version__", "?"))
    except Exception as exc:  # noqa: BLE001 - report every missing piece, then fail below
        print(name, "MISSING:", exc)
import ocr_server.engines.transformers.slots  # noqa: F401 - the tree's server imports with this transformers
EOF

echo "== the full-size random architecture, bf16, written once for both runs"
[[ -f "$OUT/model/config.json" ]] || "$PY" -c "
from pathlib import Path
from bench.server_bench import write_model
write_model(Path('$OUT/model'), True, 'official')"

echo "== token identity, bf16: generate vs slots (sharpened head)"
timeout 180 "$PY" bench/slots_check.py --device cuda --model-path "$OUT/model" --pages 8 --new-tokens 256 --slots 4 \
    --experts batched_mm --json "$OUT/identity.json" | tail -12 || echo "identity check failed or ran out of time (rc $?)"

echo "== bench: sequential, generate, slots raw, slots through the server at 1/8/32/64 clients"
left=$(( 470 - ($(date +%s) - start) ))
timeout "$left" "$PY" bench/server_bench.py --engines transformers --model-path "$OUT/model" --device cuda --size 1024 \
    --new-tokens 512 --images 64 --reference-pages 8 --batch-size 8 --clients 1,8,32,64 --experts-compare \
    --json "$OUT/bench.json" 2> "$OUT/bench.log" | sed -n '/^transformers:/,$p' \
    || { echo "bench failed or ran out of time (rc $?)"; tail -20 "$OUT/bench.log"; }
echo "== done in $(( $(date +%s) - start )) s; figures in $OUT"
