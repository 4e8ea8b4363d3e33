"""The chart's RBAC rules against the operator's tables of kinds: the OcrService's children
(ocrservice/children.py), the OcrBatch controller's (ocrbatch/kinds.py) and the runtime's own
(runtime/kinds.py: its Events and the leader-election Lease).

Reads the rules straight from templates/_rbac_rules.tpl (plain YAML inside a `define`), so it
needs no helm binary: a kind added to the table without a rule, or a verb granted that the
table does not need, fails here.
"""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from ocr_operator.ocrbatch import kinds as batch_kinds
from ocr_operator.ocrservice import children
from ocr_operator.runtime.kinds import EVENT, LEASE, rbac_rules

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


def needed() -> dict[tuple[str, str], frozenset[str]]:
    """What both controllers' tables and the runtime's Events need, a resource two use (pods,
    events) with the verbs of both."""
    out: dict[tuple[str, str], frozenset[str]] = {}
    for table in (children.rbac_rules(), batch_kinds.rbac_rules(), rbac_rules([EVENT])):
        for key, verbs in table.items():
            out[key] = out.get(key, frozenset()) | verbs
    return out


def test_every_child_kind_and_pods_get_exactly_the_verbs_the_table_needs():
    chart, need = granted(rules("causalflow-ocr.namespacedRules")), needed()
    for (group, resource), verbs in children.rbac_rules().items():
        assert verbs <= chart.get((group, resource), frozenset())
        assert chart.get((group, resource)) == need[(group, resource)], f"{group or 'core'}/{resource}: chart {sorted(chart.get((group, resource), ()))}, tables {sorted(need[(group, resource)])}"


def test_every_ocrbatch_kind_and_subresource_gets_exactly_the_verbs_the_batch_table_needs():
    chart, need = granted(rules("causalflow-ocr.namespacedRules")), needed()
    for (group, resource), verbs in batch_kinds.rbac_rules().items():
        assert verbs <= chart.get((group, resource), frozenset())
        assert chart.get((group, resource)) == need[(group, resource)], f"{group or 'core'}/{resource}: chart {sorted(chart.get((group, resource), ()))}, tables {sorted(need[(group, resource)])}"


def test_the_events_the_runtime_posts_and_the_batches_read_get_exactly_the_verbs_they_need():
    chart = granted(rules("causalflow-ocr.namespacedRules"))
    assert chart[(EVENT.group, EVENT.plural)] == frozenset(EVENT.verbs) | batch_kinds.rbac_rules()[("", "events")]
    assert "list" in chart[(EVENT.group, EVENT.plural)] and "watch" not in chart[(EVENT.group, EVENT.plural)]


def test_the_chart_grants_nothing_beyond_the_tables_but_the_ocrservice_s_subresources():
    own = {("ocr.causalflow.dev", "ocrservices/status"), ("ocr.causalflow.dev", "ocrservices/finalizers")}
    extra = (set(granted(rules("causalflow-ocr.namespacedRules"))) - set(children.rbac_rules())
             - set(batch_kinds.rbac_rules()) - set(rbac_rules([EVENT, children.OCRSERVICE])) - own)
    assert not extra, f"rules without a kind in the tables: {sorted(extra)}"


def test_the_ocrservice_itself_is_read_and_watched_only():
    chart = granted(rules("causalflow-ocr.namespacedRules"))
    assert chart[(children.OCRSERVICE.group, children.OCRSERVICE.plural)] == frozenset(children.OCRSERVICE.verbs)


def test_leader_election_gets_exactly_the_verbs_the_lease_needs_and_get_update_only_on_its_own():
    rule_list = rules("causalflow-ocr.leaderElectionRules")
    assert granted(rule_list) == rbac_rules([LEASE])
    for rule in rule_list:  # create cannot name an object; everything else names the one Lease
        assert rule["verbs"] == ["create"] or rule.get("resourceNames") == [RELEASE_NAME], rule


def test_no_wildcards_and_secrets_never_listed_watched_updated_or_deleted():
    """Secrets: read by name (an OcrBatch's), created and patched (the gate key's own, a JSON patch
    that tests its ownerReference first); never listed or watched, never replaced or deleted."""
    for name in ("causalflow-ocr.namespacedRules", "causalflow-ocr.clusterRules", "causalflow-ocr.leaderElectionRules"):
        for (group, resource), verbs in granted(rules(name)).items():
            assert "*" not in (group, resource) and "*" not in verbs
            assert resource != "secrets" or verbs == {"get", "create", "patch"}, verbs


def test_the_kinds_the_operator_applies_are_watched_whole_and_the_others_by_label():
    """The cache knows every name taken in a namespace for the kinds the apply writes (its ownership
    check asks nothing); pods, Jobs and ReplicaSets, which it never applies, are watched by the managed-by label."""
    import kopf

    from ocr_operator import settings, wiring

    watched = {(k.group, k.version, k.plural) for k in wiring.WATCHED}
    assert set(settings.UNFILTERED) | set(settings.LABEL_FILTERED) == watched
    assert set(settings.LABEL_FILTERED) == {("", "v1", "pods"), ("batch", "v1", "jobs"), ("apps", "v1", "replicasets")}
    assert ("monitoring.coreos.com", "v1", "servicemonitors") in settings.UNFILTERED
    configured = kopf.OperatorSettings()
    settings.configure(configured)
    selected = {(sel.group, sel.version, sel.any_name) for sel in configured.watching.label_selectors}
    assert selected == set(settings.LABEL_FILTERED)
