#!/usr/bin/env python3
"""Copy the OcrService CRD from crds/ into the Helm chart (byte for byte).

Helm charts cannot read files outside their own directory, so the chart keeps a copy at
charts/causalflow-ocr/files/ and templates/crd.yaml wraps it (keep annotation, crds.install
toggle). Run this after editing crds/; `--check` exits 1 when the copy is stale
(tests/unit/chart/test_chart_crd.py makes the same check).
"""

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT / "crds" / "ocr.causalflow.dev_ocrservices.yaml"
COPY = ROOT / "charts" / "causalflow-ocr" / "files" / "ocr.causalflow.dev_ocrservices.yaml"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only report whether the copy is stale")
    args = parser.parse_args()
    want = SOURCE.read_bytes()
    have = COPY.read_bytes() if COPY.exists() else b""
    if want == have:
        print(f"{COPY.relative_to(ROOT)} is up to date")
        return 0
    if args.check:
        print(f"{COPY.relative_to(ROOT)} differs from {SOURCE.relative_to(ROOT)}: run hack/sync-chart-crd.py")
        return 1
    COPY.parent.mkdir(parents=True, exist_ok=True)
    COPY.write_bytes(want)
    print(f"wrote {COPY.relative_to(ROOT)} from {SOURCE.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
