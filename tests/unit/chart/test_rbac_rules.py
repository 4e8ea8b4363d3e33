"""The chart's RBAC rules against the operator's one table of children (children.KINDS) and the
OcrBatch controller's (batch/kinds.py).

Reads the rules straight from templates/_rbac_rules.tpl (plain YAML inside a `define`), so it
needs no helm binary: a kind added to the table without a rule, or a verb granted that the
table does not need, fails here.
"""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from ocr_operator import children
from ocr_operator.batch import kinds as batch_kinds

RULES = Path(__file__).resolve().parents[3] / "charts" / "causalflow-ocr" / "templates" / "_rbac_rules.tpl"


RELEASE_NAME = "RELEASE-NAME"  # what an `include` of the release's full name reads as here


def rules(name: str) -> list[dict]:
    text = RULES.read_text()
    body = re.search(r'\{\{-? define "' + re.escape(name) + r'" -?\}\}(.*?)\{\{-? end \}\}', text, re.S)
    assert body, f"no define {name} in {RULES}"
    return yaml.safe_load(re.sub(r"\{\{.*?\}\}", RELEASE_NAME, body.group(1))) or []


def granted(rule_list: list[dict]) -> dict[tuple[str, str], frozenset[str]]:
    out: dict[tuple[str, str], set[str]] = {}
    for rule in rule_list:
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                out.setdefault((group, resource), set()).update(rule["verbs"])
    return {k: frozenset(v) for k, v in out.items()}


def test_every_child_kind_and_pods_get_exactly_the_verbs_the_table_needs():
    chart = granted(rules("causalflow-ocr.namespacedRules"))
    for (group, resource), verbs in children.rbac_rules().items():
        assert chart.get((group, resource)) == verbs, f"{group or 'core'}/{resource}: chart {sorted(chart.get((group, resource), ()))}, table {sorted(verbs)}"


def test_every_ocrbatch_kind_and_subresource_gets_exactly_the_verbs_the_batch_table_needs():
    chart = granted(rules("causalflow-ocr.namespacedRules"))
    for (group, resource), verbs in batch_kinds.rbac_rules().items():
        assert chart.get((group, resource)) == verbs, f"{group or 'core'}/{resource}: chart {sorted(chart.get((group, resource), ()))}, table {sorted(verbs)}"


def test_the_chart_grants_nothing_beyond_the_tables_but_the_ocrservice_and_its_events():
    own = {("ocr.causalflow.dev", "ocrservices"), ("ocr.causalflow.dev", "ocrservices/status"),
           ("ocr.causalflow.dev", "ocrservices/finalizers"), ("", "events")}
    extra = (set(granted(rules("causalflow-ocr.namespacedRules"))) - set(children.rbac_rules())
             - set(batch_kinds.rbac_rules()) - own)
    assert not extra, f"rules without a kind in children.KINDS: {sorted(extra)}"


def test_leader_election_gets_exactly_the_verbs_the_lease_needs_and_get_update_only_on_its_own():
    rule_list = rules("causalflow-ocr.leaderElectionRules")
    assert granted(rule_list) == children.leader_election_rules()
    for rule in rule_list:  # create cannot name an object; everything else names the one Lease
        assert rule["verbs"] == ["create"] or rule.get("resourceNames") == [RELEASE_NAME], rule


def test_no_wildcards_and_secrets_only_read_by_name():
    for name in ("causalflow-ocr.namespacedRules", "causalflow-ocr.clusterRules", "causalflow-ocr.leaderElectionRules"):
        for (group, resource), verbs in granted(rules(name)).items():
            assert "*" not in (group, resource) and "*" not in verbs
            assert resource != "secrets" or verbs == {"get"}, verbs


def test_the_watched_kinds_are_the_ones_kopf_is_told_to_filter_by_label():
    from ocr_operator import settings

    assert set(settings.CHILD_RESOURCES) == {(k.group, k.version, k.plural) for k in children.watched()}
    assert ("monitoring.coreos.com", "v1", "servicemonitors") in settings.CHILD_RESOURCES
