"""The alert rules have one source, the chart's rule file; the operator's copy is generated from it
(hack/sync-alert-rules.py), and every alert has its runbook in the docs, anchored by its name."""

import re
import subprocess
import sys

import yaml

from tests.docs.pages import DOCS, ROOT, anchors

SOURCE = ROOT / "charts" / "causalflow-ocr" / "files" / "prometheus-rules.yaml"
COPY = ROOT / "operator" / "ocr_operator" / "ocrservice" / "render" / "prometheus-rules.yaml"
SYNC = ROOT / "hack" / "sync-alert-rules.py"
RUNBOOKS = DOCS / "operations" / "runbooks.md"


def alerts() -> list[dict]:
    return [r for g in yaml.safe_load(SOURCE.read_text())["groups"] for r in g["rules"] if "alert" in r]


def test_the_operators_copy_is_generated_from_the_charts_rule_file():
    assert COPY.read_bytes() == SOURCE.read_bytes(), "run .venv/bin/python hack/sync-alert-rules.py"
    result = subprocess.run([sys.executable, str(SYNC), "--check"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_rule_file_says_which_file_is_the_source_and_how_the_copy_is_made():
    header = SOURCE.read_text().split("groups:", 1)[0]
    for name in ("charts/causalflow-ocr/files/prometheus-rules.yaml", "operator/ocr_operator/ocrservice/render/prometheus-rules.yaml",
                 "hack/sync-alert-rules.py", "do not edit the copy"):
        assert name in " ".join(line.lstrip("# ") for line in header.splitlines()), name


def test_sync_check_reports_a_stale_copy(tmp_path):
    """The script compares bytes: run on a copy of the two files where the copy differs."""
    script = SYNC.read_text().replace('ROOT = Path(__file__).resolve().parent.parent', f'ROOT = Path({str(tmp_path)!r})')
    for path in (SOURCE, COPY):
        target = tmp_path / path.relative_to(ROOT)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(path.read_bytes())
    (tmp_path / COPY.relative_to(ROOT)).write_text("groups: []\n")
    (tmp_path / "sync.py").write_text(script)
    stale = subprocess.run([sys.executable, str(tmp_path / "sync.py"), "--check"], capture_output=True, text=True, timeout=60)
    assert stale.returncode == 1 and "hack/sync-alert-rules.py" in stale.stdout
    subprocess.run([sys.executable, str(tmp_path / "sync.py")], check=True, capture_output=True, timeout=60)
    assert (tmp_path / COPY.relative_to(ROOT)).read_bytes() == SOURCE.read_bytes()


def test_every_alert_has_a_runbook_section_and_every_section_an_alert():
    names = {rule["alert"] for rule in alerts()}
    sections = re.findall(r"^## (\S+)\s*$", RUNBOOKS.read_text(), re.M)
    assert sorted(sections) == sorted(names)


def test_the_rule_files_name_no_runbook_address_and_every_alerts_anchor_is_on_the_runbooks_page():
    """runbook_url is added where the chart or the operator is told where the docs live
    (runbookBaseURL + '#' + the alert's name in lower case): that anchor must be on the page."""
    runbook_anchors = anchors(RUNBOOKS)
    for rule in alerts():
        assert "runbook_url" not in rule["annotations"], rule["alert"]
        assert rule["alert"].lower() in runbook_anchors, f"docs/operations/runbooks.md has no section '## {rule['alert']}'"
