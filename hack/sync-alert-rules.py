#!/usr/bin/env python3
"""Copy the chart's alert rules into the operator package (byte for byte): one source of the alerts.

charts/causalflow-ocr/files/prometheus-rules.yaml is the source: the chart ships it as a
PrometheusRule, promtool checks and unit-tests it. The operator renders the same alerts for one
OcrService (spec.monitoring.prometheusRule) and must carry them inside its Python package (its image
holds no chart), so operator/ocr_operator/ocrservice/render/prometheus-rules.yaml is a generated copy; the
source's header says so, and the copy, being byte for byte, says it too. Run this after editing the
source; `--check` exits 1 when the copy is stale (tests/docs/test_alert_rules_sync.py makes the
same check).
"""

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT / "charts" / "causalflow-ocr" / "files" / "prometheus-rules.yaml"
COPY = ROOT / "operator" / "ocr_operator" / "ocrservice" / "render" / "prometheus-rules.yaml"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only report whether the copy is stale")
    args = parser.parse_args()
    source, copy = SOURCE.relative_to(ROOT), COPY.relative_to(ROOT)
    want = SOURCE.read_bytes()
    if COPY.exists() and COPY.read_bytes() == want:
        print(f"{copy} is up to date")
        return 0
    if args.check:
        print(f"{copy} differs from {source}: run hack/sync-alert-rules.py")
        return 1
    COPY.write_bytes(want)
    print(f"wrote {copy} from {source}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
