"""What the chart renders as a string stays one, whatever digits it happens to hold.

A plain YAML scalar of decimal digits reads as an integer: a sha256 prefix of digits only (one
render in ~1,800), a namespace or release named `2024`. The API server then refuses the whole object
("expected string"), so `helm install` fails for a release that happened to be named or hashed so.
"""

import hashlib
import shutil

import kubernetes_validate

from tests.unit.chart.helm import CHART, by_kind, objects, run_helm
from tests.unit.chart.test_chart_render import K8S_VERSION

EVERYTHING_ON = ("--set-string", "watchNamespaces={789}", "--set", "monitoring.serviceMonitor.enabled=true",
                 "--set", "monitoring.prometheusRule.enabled=true", "--set", "monitoring.dashboard.enabled=true")


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


def _metadata_strings(obj: dict) -> dict[str, object]:
    """The name, namespace, labels and annotations of an object and of its pod template, by path."""
    found: dict[str, object] = {}
    for where, meta in (("metadata", obj.get("metadata") or {}),
                        ("template", ((obj.get("spec") or {}).get("template") or {}).get("metadata") or {})):
        for key in ("name", "namespace"):
            if key in meta:
                found[f"{where}.{key}"] = meta[key]
        for group in ("labels", "annotations"):
            for key, value in (meta.get(group) or {}).items():
                found[f"{where}.{group}[{key}]"] = value
    return found


def test_a_release_and_namespaces_named_by_digits_render_names_labels_and_annotations_as_strings():
    for rbac in ("true", "false"):
        rendered = objects(run_helm("template", "123", str(CHART), "--namespace", "456",
                                    "--set", f"rbac.namespaced={rbac}", *EVERYTHING_ON).stdout)
        assert {o["metadata"].get("namespace") for o in rendered} >= ({"456", "789"} if rbac == "true" else {"456"})
        for obj in rendered:
            not_strings = {k: v for k, v in _metadata_strings(obj).items() if not isinstance(v, str)}
            assert not not_strings, f"{obj['kind']} {obj['metadata'].get('name')}: {not_strings}"
            if not obj["apiVersion"].startswith("monitoring.coreos.com/"):
                kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
