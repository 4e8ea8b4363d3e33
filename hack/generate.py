#!/usr/bin/env python3
"""Write every generated file of the repository from its source (`make generate`).

- crds/ocr.causalflow.dev_ocrservices.yaml and ocr.causalflow.dev_ocrbatches.yaml: the CRDs, from
  the typed API models (operator/ocr_operator/api);
- charts/causalflow-ocr/files/: byte-for-byte copies of crds/*.yaml (a Helm chart cannot read files
  outside its folder), the hand-written admission policy crds/ocr.causalflow.dev_replicas-policy.yaml
  included;
- docs/reference/ocrservice.md and ocrbatch.md: the field tables between their BEGIN/END markers,
  from the same CRD documents (hack/crd_reference.py);
- docs/reference/server-configuration.md: the server-limits table, from ocr_limits and the fields
  that set each setting (hack/limits_table.py).

    hack/generate.py                 write what is stale
    hack/generate.py --check         exit 1 when a file is stale (nothing written)
    hack/generate.py --root DIR      another checkout (the tests run it on a copy)

`make test` runs the check, and so does tests/unit/test_generate.py: what is committed is what
this writes.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # hack.*, run as a script
from hack import crd_reference, limits_table  # noqa: E402
from ocr_operator.api import crd  # noqa: E402
from ocr_operator.api.ocrbatch import OCRBATCH  # noqa: E402
from ocr_operator.api.ocrservice import OCRSERVICE  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
KINDS = (OCRSERVICE, OCRBATCH)
CHART_FILES = Path("charts/causalflow-ocr/files")
HAND_WRITTEN = (Path("crds/ocr.causalflow.dev_replicas-policy.yaml"),)
REFERENCE = Path("docs/reference")
# The pages whose marked part is generated: kind -> (page, BEGIN marker, END marker).
PAGES = {OCRSERVICE.kind: (REFERENCE / "ocrservice.md", "<!-- BEGIN OCRSERVICE REFERENCE -->",
                           "<!-- END OCRSERVICE REFERENCE -->"),
         OCRBATCH.kind: (REFERENCE / "ocrbatch.md", "<!-- BEGIN OCRBATCH REFERENCE -->", "<!-- END OCRBATCH REFERENCE -->")}
SERVER_CONFIGURATION = REFERENCE / "server-configuration.md"


def outputs(root: Path = ROOT) -> dict[Path, str]:
    """Every generated file (path relative to `root`) and the text it must hold."""
    out = {Path("crds") / kind.filename: crd.to_yaml(kind) for kind in KINDS}
    sources = {**out, **{path: (root / path).read_text() for path in HAND_WRITTEN}}
    out.update({CHART_FILES / path.name: text for path, text in sources.items()})
    for kind in KINDS:
        page, begin, end = PAGES[kind.kind]
        out[page] = crd_reference.splice((root / page).read_text(), crd_reference.render(crd.document(kind)), begin, end)
    out[SERVER_CONFIGURATION] = crd_reference.splice((root / SERVER_CONFIGURATION).read_text(),
                                                     limits_table.table() + "\n", limits_table.BEGIN, limits_table.END)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only report stale files (exit 1 if any)")
    parser.add_argument("--root", type=Path, default=ROOT, help="the checkout to write into")
    args = parser.parse_args(argv)
    stale = []
    for path, text in outputs(args.root).items():
        target = args.root / path
        if target.exists() and target.read_text() == text:
            continue
        stale.append(path)
        if not args.check:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text)
            print(f"wrote {path}")
    if args.check and stale:
        print("stale (run make generate): " + ", ".join(map(str, stale)))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
