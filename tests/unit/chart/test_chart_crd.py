"""The chart's OcrService CRD is crds/ocr.causalflow.dev_ocrservices.yaml, wrapped for safe upgrades."""

import yaml

from tests.unit.chart.helm import CHART, ROOT, by_kind, template

SOURCE = ROOT / "crds" / "ocr.causalflow.dev_ocrservices.yaml"
COPY = CHART / "files" / "ocr.causalflow.dev_ocrservices.yaml"


def test_chart_copy_of_the_crd_is_byte_for_byte_crds_folder():
    assert COPY.read_bytes() == SOURCE.read_bytes(), (
        "charts/causalflow-ocr/files/ differs from crds/: run hack/sync-chart-crd.py"
    )


def test_rendered_crd_equals_crds_folder_apart_from_helm_metadata():
    [rendered] = by_kind(template(), "CustomResourceDefinition")
    source = yaml.safe_load(SOURCE.read_text())
    assert rendered["spec"] == source["spec"]
    assert rendered["metadata"]["name"] == source["metadata"]["name"]
    for key, value in source["metadata"].get("labels", {}).items():
        assert rendered["metadata"]["labels"][key] == value


def test_rendered_crd_is_kept_on_uninstall_by_default():
    [crd] = by_kind(template(), "CustomResourceDefinition")
    assert crd["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"


def test_crds_keep_false_drops_the_keep_annotation():
    [crd] = by_kind(template({"crds.keep": "false"}), "CustomResourceDefinition")
    assert "helm.sh/resource-policy" not in crd["metadata"].get("annotations", {})


def test_crds_install_false_renders_no_crd():
    assert by_kind(template({"crds.install": "false"}), "CustomResourceDefinition") == []


def test_chart_has_no_crds_folder_that_helm_would_never_upgrade():
    assert not (CHART / "crds").exists()
