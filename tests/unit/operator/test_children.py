"""One table of children: render, names, REST paths and garbage collection all follow it."""

from __future__ import annotations

from ocr_operator import labels, wiring
from ocr_operator.ocrservice import children, naming, revisions
from ocr_operator.ocrservice.render import KINDS, render_all

from .helpers import owner, parsed

FULL = {"autoscaling": {"minReplicas": 1, "maxReplicas": 2, "targetGPUUtilization": 70},
        "resources": {"gpus": 1}, "networkPolicy": {"enabled": True}, "podDisruptionBudget": {"enabled": True},
        "serviceMonitor": {"enabled": True}}


def test_render_produces_exactly_the_table_children_in_apply_order():
    body = owner(FULL)
    desired = render_all(body, parsed(body))
    assert tuple(desired.objects) == KINDS == tuple(c.key for c in children.CHILDREN
                                                    if c.key not in ("RevisionHistory", "QualityRecords"))


def test_every_rendered_child_has_the_table_kind_and_name_and_a_controller_owner_reference():
    body = owner(FULL)
    desired = render_all(body, parsed(body))
    objects = {**desired.objects, "RevisionHistory": revisions.render_history(body, revisions.parse_history(None, limit=3))}
    names = children.child_names("ocr")
    for key, obj in objects.items():
        if obj is None:
            continue
        assert obj["kind"] == children.BY_KEY[key].kind, key
        assert obj["metadata"]["name"] == names[key], key
        assert obj["metadata"]["ownerReferences"] == [naming.owner_reference("ocr", body["metadata"]["uid"])], key
        assert obj["metadata"]["labels"][labels.LABEL_MANAGED_BY] == labels.FIELD_MANAGER, key


def test_every_kind_in_the_table_is_known_to_the_operators_client_and_every_child_has_a_kind():
    for kind in children.KINDS.values():
        assert kind in wiring.KINDS and kind.path("ns", "x").endswith(f"/{kind.plural}/x")
    for child in children.CHILDREN:
        assert child.kind in children.KINDS


def test_child_names_do_not_collide():
    names = [(children.BY_KEY[k].kind, n) for k, n in children.child_names("ocr").items()]
    assert len(names) == len(set(names))
