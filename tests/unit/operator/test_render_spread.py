"""spec.topologySpreadConstraints on the pods: as given, and without labelSelector counting this
OcrService's own pods, each revision apart (pod-template-hash)."""

from __future__ import annotations

import pytest

from ocr_operator import spec as S
from ocr_operator.ocrservice import naming
from ocr_operator.ocrservice.render import render_all

from .helpers import owner, parsed

BY_NODE = {"maxSkew": 1, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "DoNotSchedule"}


def pod_spec(spec: dict) -> dict:
    body = owner(spec)
    return render_all(body, parsed(body)).objects["Deployment"]["spec"]["template"]["spec"]


def test_a_constraint_without_a_selector_counts_this_ocrservices_pods_per_revision():
    [got] = pod_spec({"topologySpreadConstraints": [BY_NODE]})["topologySpreadConstraints"]
    assert got == {**BY_NODE, "labelSelector": {"matchLabels": naming.selector_labels("ocr")},
                   "matchLabelKeys": ["pod-template-hash"]}
    deployment = render_all(owner({}), parsed(owner({}))).objects["Deployment"]
    assert got["labelSelector"] == deployment["spec"]["selector"]  # the very pods the Deployment owns


def test_a_constraint_with_its_own_selector_or_keys_is_copied_as_written():
    theirs = {**BY_NODE, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "ScheduleAnyway",
              "labelSelector": {"matchLabels": {"team": "ocr"}}, "minDomains": 2}
    keys = {**BY_NODE, "labelSelector": {}, "matchLabelKeys": ["ocr.causalflow.dev/revision"]}
    got = pod_spec({"topologySpreadConstraints": [theirs, keys]})["topologySpreadConstraints"]
    assert got[0] == theirs
    assert got[1]["matchLabelKeys"] == ["ocr.causalflow.dev/revision"]  # theirs kept, the selector filled in


def test_no_constraint_renders_none():
    assert "topologySpreadConstraints" not in pod_spec({})


@pytest.mark.parametrize("constraint, field", [
    ({"maxSkew": 0, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "DoNotSchedule"}, "maxSkew"),
    ({"maxSkew": 1, "whenUnsatisfiable": "DoNotSchedule"}, "topologyKey"),
    ({**BY_NODE, "whenUnsatisfiable": "Sometimes"}, "whenUnsatisfiable"),
    ({**BY_NODE, "nodeTaintsPolicy": "Maybe"}, "nodeTaintsPolicy"),
    ({**BY_NODE, "labelSelector": {"matchExpressions": [{"key": "team", "operator": "Like"}]}},
     "labelSelector.matchExpressions[0].operator"),
])
def test_an_invalid_constraint_is_refused_naming_its_field(constraint, field):
    with pytest.raises(S.SpecError) as err:
        S.parse({"image": "img", "topologySpreadConstraints": [constraint]})
    assert f"spec.topologySpreadConstraints[0].{field}" in str(err.value)
