"""The chart's CRDs are crds/ocr.causalflow.dev_ocrservices.yaml and ocr.causalflow.dev_ocrbatches.yaml,
wrapped for safe upgrades; the replicas admission policy is crds/ocr.causalflow.dev_replicas-policy.yaml
with the chart's users."""

import yaml

from tests.unit.chart.helm import CHART, ROOT, by_kind, template

SOURCES = [ROOT / "crds" / "ocr.causalflow.dev_ocrservices.yaml", ROOT / "crds" / "ocr.causalflow.dev_ocrbatches.yaml"]


POLICY = ROOT / "crds" / "ocr.causalflow.dev_replicas-policy.yaml"


def test_chart_copies_of_the_crds_folder_are_byte_for_byte():
    for source in sorted((ROOT / "crds").glob("*.yaml")):
        assert (CHART / "files" / source.name).read_bytes() == source.read_bytes(), (
            f"charts/causalflow-ocr/files/{source.name} differs from crds/: run make generate"
        )


def test_rendered_replicas_policy_is_the_crds_folders_with_the_autoscaler_users_from_values():
    rendered = template({"replicasPolicy.autoscalerUsers[0]": "system:serviceaccount:kube-system:my-hpa"})
    source = {d["kind"]: d for d in yaml.safe_load_all(POLICY.read_text())}
    [policy] = by_kind(rendered, "ValidatingAdmissionPolicy")
    [binding] = by_kind(rendered, "ValidatingAdmissionPolicyBinding")
    assert binding["spec"] == source["ValidatingAdmissionPolicyBinding"]["spec"]
    variables = {v["name"]: v["expression"] for v in policy["spec"]["variables"]}
    assert variables["autoscalers"] == '["system:serviceaccount:kube-system:my-hpa"]'
    want = source["ValidatingAdmissionPolicy"]["spec"]
    assert {k: v for k, v in policy["spec"].items() if k != "variables"} == {
        k: v for k, v in want.items() if k != "variables"}
    assert [v["name"] for v in policy["spec"]["variables"]] == [v["name"] for v in want["variables"]]
    assert policy["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "Helm"


def test_replicas_policy_comes_and_stays_with_the_crd():
    rendered = template()
    for kind in ("ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"):
        [obj] = by_kind(rendered, kind)
        assert obj["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    rendered = template({"crds.install": "false"})
    assert by_kind(rendered, "ValidatingAdmissionPolicy") == by_kind(rendered, "ValidatingAdmissionPolicyBinding") == []


def test_rendered_crds_equal_the_crds_folders_apart_from_helm_metadata():
    rendered = {c["metadata"]["name"]: c for c in by_kind(template(), "CustomResourceDefinition")}
    sources = [yaml.safe_load(path.read_text()) for path in SOURCES]
    assert sorted(rendered) == sorted(s["metadata"]["name"] for s in sources)
    for source in sources:
        crd = rendered[source["metadata"]["name"]]
        assert crd["spec"] == source["spec"]
        for key, value in source["metadata"].get("labels", {}).items():
            assert crd["metadata"]["labels"][key] == value


def test_rendered_crds_are_kept_on_uninstall_by_default():
    crds = by_kind(template(), "CustomResourceDefinition")
    assert len(crds) == 2
    for crd in crds:
        assert crd["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"


def test_crds_keep_false_drops_the_keep_annotation():
    crds = by_kind(template({"crds.keep": "false"}), "CustomResourceDefinition")
    assert len(crds) == 2
    for crd in crds:
        assert "helm.sh/resource-policy" not in crd["metadata"].get("annotations", {})


def test_crds_install_false_renders_no_crd():
    assert by_kind(template({"crds.install": "false"}), "CustomResourceDefinition") == []


def test_chart_has_no_crds_folder_that_helm_would_never_upgrade():
    assert not (CHART / "crds").exists()
