"""`python -m ocr_server.checksums DIR`: the weights' sha256 list for spec.model.checksums (runtime/checksums.py)."""

from .runtime.checksums import main

if __name__ == "__main__":
    raise SystemExit(main())
