"""kube-score, a third-party checker of Kubernetes manifests, over what we ship and what we create.

It runs over `helm template` of the chart (the default values, the cluster-wide RBAC opt-in and
the chart-testing values with monitoring on) and over the children the operator renders for
examples/production.yaml (its pure render functions, no cluster). Every finding must be one of
the accepted exceptions of charts/causalflow-ocr/ci/kube-score-exceptions.yaml, each explained;
an exception that matches no finding any more fails too, so the list stays true.

kube-score is built from the Go module proxy by localcluster/build-kube-score.sh (`make setup`
runs it; a cached build is a no-op), at the version pinned in localcluster/versions.env.
"""

from __future__ import annotations

import copy
import datetime as dt
import fnmatch
import functools
import json
import subprocess
from pathlib import Path

import pytest
import yaml

from localcluster.versions import K8S_VERSION
from ocr_operator import spec as spec_mod
from ocr_operator.ocrservice.render import render_all
from tests.unit.chart.helm import CHART, ROOT, template

EXCEPTIONS = CHART / "ci" / "kube-score-exceptions.yaml"
BUILD = ROOT / "localcluster" / "build-kube-score.sh"
# Checks kube-score leaves off by default that we pass and keep: a seccomp profile on every pod,
# and container ports that are named, unique and not duplicated.
OPTIONAL_CHECKS = ("container-seccomp-profile", "container-ports-check")
CHART_VALUES = {
    "defaults": (),
    "cluster-wide RBAC": ("--set", "rbac.namespaced=false"),
    "monitoring on (ci values)": ("-f", str(CHART / "ci" / "monitoring-values.yaml")),
}
OK_GRADE = 10  # kube-score's grades: 1 critical, 5 warning, 7 almost OK, 10 OK


@pytest.fixture(scope="module")
def kube_score() -> str:
    """The pinned kube-score, built if this checkout has not built it yet (cached by version)."""
    proc = subprocess.run(["bash", str(BUILD)], capture_output=True, text=True, timeout=1200)
    assert proc.returncode == 0, f"building kube-score failed:\n{proc.stdout}{proc.stderr}"
    binary = subprocess.run(["bash", str(BUILD), "--print-bin"], capture_output=True, text=True,
                            check=True).stdout.strip()
    assert Path(binary).is_file(), binary
    return binary


def score(binary: str, manifests: str) -> set[tuple[str, str, str]]:
    """kube-score's findings in `manifests`: (Kind/name, check id, summary), OK and skipped left out."""
    minor = ".".join(K8S_VERSION.split(".")[:2])  # v1.36
    args = [binary, "score", "-", "--output-format", "json", "--kubernetes-version", minor]
    for check in OPTIONAL_CHECKS:
        args += ["--enable-optional-test", check]
    proc = subprocess.run(args, input=manifests, capture_output=True, text=True, timeout=120)
    # Exit 1 means "found something"; anything else (2: bad input) is an error.
    assert proc.returncode in (0, 1), proc.stderr
    findings = set()
    for obj in json.loads(proc.stdout):
        where = f"{obj['type_meta']['kind']}/{obj['object_meta']['name']}"
        for check in obj["checks"]:
            if check["skipped"] or check["grade"] >= OK_GRADE:
                continue
            for comment in check["comments"] or [{"summary": check["check"]["name"]}]:
                findings.add((where, check["check"]["id"], comment["summary"]))
    return findings


def exceptions() -> list[dict]:
    return yaml.safe_load(EXCEPTIONS.read_text())["exceptions"]


def unexplained(findings: set[tuple[str, str, str]]) -> list[tuple[str, str, str]]:
    def accepted(finding) -> bool:
        where, check, summary = finding
        return any(e["check"] == check and e["summary"] == summary
                   and any(fnmatch.fnmatchcase(where, pattern) for pattern in e["objects"])
                   for e in exceptions())
    return sorted(f for f in findings if not accepted(f))


@functools.cache
def production_children() -> str:
    """What the operator renders for examples/production.yaml, as one multi-document YAML."""
    body = yaml.safe_load((ROOT / "examples" / "production.yaml").read_text())
    body["metadata"].update(uid="00000000-0000-0000-0000-000000000001", generation=1)
    desired = render_all(body, spec_mod.parse(copy.deepcopy(body["spec"])),
                         now=dt.datetime(2025, 1, 6, 12, 0, tzinfo=dt.timezone.utc))
    return yaml.safe_dump_all([obj for obj in desired.objects.values() if obj])


@functools.cache
def chart(values: tuple[str, ...]) -> str:
    return template(extra=values)


def test_kube_score_finds_nothing_in_the_chart_beyond_the_accepted_exceptions(kube_score):
    for name, values in CHART_VALUES.items():
        assert unexplained(score(kube_score, chart(values))) == [], name


def test_kube_score_finds_nothing_in_the_operators_children_beyond_the_accepted_exceptions(kube_score):
    rendered = production_children()
    assert {"Deployment", "HorizontalPodAutoscaler", "NetworkPolicy", "PodDisruptionBudget", "Service"} <= {
        d["kind"] for d in yaml.safe_load_all(rendered)}
    assert unexplained(score(kube_score, rendered)) == []


def test_every_accepted_exception_is_explained_in_one_line_and_still_found(kube_score):
    found = score(kube_score, production_children())
    for values in CHART_VALUES.values():
        found |= score(kube_score, chart(values))
    for e in exceptions():
        assert set(e) == {"check", "summary", "objects", "why"}, e
        assert e["why"].strip() and "\n" not in e["why"].strip(), e
        for pattern in e["objects"]:
            assert any(f[1] == e["check"] and f[2] == e["summary"] and fnmatch.fnmatchcase(f[0], pattern)
                       for f in found), f"stale exception (no such finding any more): {e['check']} on {pattern}"


def test_kube_score_reports_an_operator_pod_that_no_networkpolicy_covers(kube_score):
    """The gate can fail: without the chart's NetworkPolicy the operator pod is a finding."""
    rendered = chart(("--set", "networkPolicy.enabled=false"))
    assert ("Deployment/ocr-causalflow-ocr", "pod-networkpolicy",
            "The pod does not have a matching NetworkPolicy") in unexplained(score(kube_score, rendered))
