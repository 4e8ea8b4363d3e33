#!/usr/bin/env python3
"""Copy the API files from crds/ into the Helm chart (byte for byte): the OcrService and OcrBatch
CRDs and the admission policy that guards spec.replicas of autoscaled OcrServices.

Helm charts cannot read files outside their own directory, so the chart keeps copies at
charts/causalflow-ocr/files/; templates/crd.yaml and templates/replicas-policy.yaml wrap them
(keep annotation, install toggles, the autoscaler users from values). Run this after editing
crds/; `--check` exits 1 when a copy is stale (tests/unit/chart/test_chart_crd.py makes the same
check).
"""

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCES = sorted((ROOT / "crds").glob("*.yaml"))
FILES = ROOT / "charts" / "causalflow-ocr" / "files"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only report whether a copy is stale")
    args = parser.parse_args()
    stale = 0
    for source in SOURCES:
        copy = FILES / source.name
        want = source.read_bytes()
        if copy.exists() and copy.read_bytes() == want:
            print(f"{copy.relative_to(ROOT)} is up to date")
            continue
        if args.check:
            print(f"{copy.relative_to(ROOT)} differs from {source.relative_to(ROOT)}: run hack/sync-chart-crd.py")
            stale += 1
            continue
        FILES.mkdir(parents=True, exist_ok=True)
        copy.write_bytes(want)
        print(f"wrote {copy.relative_to(ROOT)} from {source.relative_to(ROOT)}")
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
