"""The operator pod's checksum annotation is a string whatever digits its hash happens to have.

A sha256 prefix of only decimal digits (one render in ~1,800) reads as a YAML integer unless quoted;
the API server then refuses the whole Deployment ("expected string"), so `helm install` fails for a
release whose namespace happened to hash that way.
"""

import hashlib
import shutil

from tests.unit.chart.helm import CHART, by_kind, run_helm


def _text_hashing_to_digits_only() -> tuple[str, str]:
    """A template body with no actions (its include is the text itself) whose checksum is all digits."""
    for n in range(1_000_000):
        text = f"# rbac stand-in {n}\n"
        digest = hashlib.sha256(text.encode()).hexdigest()[:16]
        if digest.isdigit():
            return text, digest
    raise AssertionError("no digits-only sha256 prefix in a million texts")


def test_the_rbac_checksum_annotation_stays_a_string_when_the_hash_is_all_digits(tmp_path):
    text, digest = _text_hashing_to_digits_only()
    chart = tmp_path / "chart"
    shutil.copytree(CHART, chart)
    (chart / "templates" / "rbac.yaml").write_text(text)
    rendered = run_helm("template", "ocr", str(chart), "--namespace", "ocr-system").stdout
    [deployment] = by_kind(rendered, "Deployment")
    annotations = deployment["spec"]["template"]["metadata"]["annotations"]
    assert annotations["checksum/rbac"] == digest
