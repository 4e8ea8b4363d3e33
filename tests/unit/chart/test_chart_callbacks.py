"""The chart's callback allowlist and cluster ranges reach the operator as the settings its egress
guard reads (ocrbatch/egress.py), and only when set."""

from __future__ import annotations

from ocr_operator.ocrbatch import egress
from tests.unit.chart.helm import by_kind, template


def _env(rendered: str) -> dict[str, str]:
    [deployment] = by_kind(rendered, "Deployment")
    [container] = deployment["spec"]["template"]["spec"]["containers"]
    return {e["name"]: e.get("value") for e in container["env"]}


def test_the_callback_allowlist_and_cluster_ranges_become_the_guards_settings():
    env = _env(template({"callbacks.allowCidrs": "{127.0.0.1/32,10.96.40.0/24}",
                         "callbacks.clusterCidrs": "{100.100.0.0/16}"}))
    policy = egress.Policy.from_env(env)
    assert egress.refusal("10.96.40.7", policy.allow, policy.cluster) is None
    assert egress.refusal("10.96.41.7", policy.allow, policy.cluster) == "private"
    assert egress.refusal("100.100.3.4", policy.allow, policy.cluster) == "the cluster's pod or Service range"


def test_by_default_the_guard_has_no_allowlist():
    env = _env(template({}))
    assert egress.ALLOW_ENV not in env and egress.CLUSTER_ENV not in env
