"""kopf settings: what the operator asks of kopf, and what it spares it."""

from __future__ import annotations

import kopf

from ocr_operator.runtime.kube import request_resource
from ocr_operator.settings import configure


def test_kopf_builds_no_diff_base_for_the_watched_bodies():
    """kopf's default diff base deep-copies every body on every event; with only on.event
    handlers the operator needs none."""
    settings = kopf.OperatorSettings()
    configure(settings)
    storage = settings.persistence.diffbase_storage
    pod = kopf.Body({"metadata": {"name": "p", "labels": {"a": "b"}}, "spec": {"containers": [{"name": "c"}]}})
    assert storage.build(body=pod) == {}
    assert storage.fetch(body=pod) is None


def test_requests_are_counted_by_resource_and_subresource():
    assert request_resource("/api/v1/namespaces/a/pods") == "pods"
    assert request_resource("/apis/apps/v1/namespaces/a/deployments/web") == "deployments"
    assert request_resource("/apis/ocr.causalflow.dev/v1alpha1/namespaces/a/ocrservices/web/status") == "ocrservices/status"
    assert request_resource("/apis/monitoring.coreos.com/v1") == "discovery"
    assert request_resource("/api/v1/namespaces") == "namespaces"


def test_kopf_lets_a_per_object_worker_go_half_a_second_after_its_last_event():
    """Each idle worker keeps the last body it handled: the default 5 s holds a whole burst's."""
    settings = kopf.OperatorSettings()
    configure(settings)
    assert settings.queueing.idle_timeout == 0.5
