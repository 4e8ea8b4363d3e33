"""In a pod the operator finds the API server from the kubelet's environment, not through cluster DNS."""

from __future__ import annotations

from ocr_operator.handlers import in_cluster_server


def test_the_service_host_and_port_from_the_pods_environment_name_the_api_server():
    env = {"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443"}
    assert in_cluster_server(env) == "https://10.96.0.1:443"


def test_an_ipv6_service_host_is_bracketed():
    env = {"KUBERNETES_SERVICE_HOST": "fd00:10:96::1", "KUBERNETES_SERVICE_PORT": "6443"}
    assert in_cluster_server(env) == "https://[fd00:10:96::1]:6443"


def test_outside_a_pod_there_is_no_in_cluster_server():
    assert in_cluster_server({}) is None
    assert in_cluster_server({"KUBERNETES_SERVICE_HOST": "10.96.0.1"}) is None
