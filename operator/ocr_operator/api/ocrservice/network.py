"""How the OcrService is reached and watched: its Service, API keys, TLS, NetworkPolicy, PDB and monitoring."""

from __future__ import annotations

import ipaddress
from typing import Any

from ..fields import PERCENT_UP_TO_100, Constraints, IntOrString, Rule, api, model
from .pods import RESERVED_LABEL_PREFIXES, reserved_labels_rule


@model
class ServiceSpec:
    type: str = api("Service type.", enum=("ClusterIP", "NodePort", "LoadBalancer"), default="ClusterIP")
    port: int = api("Port of the Service and of the server ({env}).", setting="PORT")
    annotations: tuple[tuple[str, str], ...] = api("Annotations on the Service (e.g. for a cloud load balancer).",
                                                   max_properties=64)


@model
class Auth:
    secret_name: str = api("Secret in this namespace holding the keys.", min_length=1, max_length=253, required=True,
                           sets_env=("API_KEYS_FILE", "API_KEYS"))
    key: str = api("Key inside the Secret.", min_length=1, max_length=253, default="api-keys")


@model
class TlsSpec:
    __description__ = ("Serve HTTPS with a kubernetes.io/tls Secret, mounted at /etc/ocr/tls and passed as "
                       "TLS_CERT_FILE/TLS_KEY_FILE; probes and the Service switch to HTTPS. ocr-server serves HTTPS on "
                       "its port when both are set.")

    secret_name: str = api("kubernetes.io/tls Secret in this namespace.", min_length=1, max_length=253, required=True,
                           sets_env=("TLS_CERT_FILE", "TLS_KEY_FILE"))


def _is_cidr(text: str) -> bool:
    try:
        ipaddress.ip_network(text, strict=False)
    except ValueError:
        return False
    return "/" in text


@model
class NetworkPolicySpec:
    enabled: bool = api("Create the NetworkPolicy.", default=False)
    allow_same_namespace: bool = api("Admit every pod of this namespace.", default=True)
    allowed_namespaces: tuple[str, ...] = api("Names of other namespaces whose pods are admitted.", max_items=32,
                                              item=Constraints(max_length=63))
    allowed_cidrs: tuple[str, ...] = api(
        "IP blocks admitted (e.g. a load balancer's range).", json="allowedCIDRs", max_items=32,
        item=Constraints(max_length=64, rules=(Rule("isCIDR(self)", "spec.networkPolicy.allowedCIDRs[] must be a "
                                                    "CIDR such as 10.0.0.0/8", holds=_is_cidr),)))


@model
class PdbSpec:
    enabled: bool = api("Create the PodDisruptionBudget.", default=True)
    max_unavailable: IntOrString = api("Pods that voluntary disruptions (node drains) may take down at once (a count, "
                                       "or a percentage up to '100%').", default=1, minimum=0,
                                       pattern=PERCENT_UP_TO_100)


def _extra_labels(kind: str, selector: str, field: str) -> Any:
    """The user's labels on a monitoring object of `kind` (spec.monitoring.<field>.labels): bounded,
    the operator's own prefixes refused."""
    reserved = " and ".join(f"{p}*" for p in RESERVED_LABEL_PREFIXES)
    return api(f"Extra labels on the {kind} (to match a Prometheus {selector}). The {reserved} keys are reserved.",
               max_properties=16, rules=(reserved_labels_rule(f"spec.monitoring.{field}.labels"),))


@model
class ServiceMonitorSpec:
    enabled: bool = api("Create the ServiceMonitor.", default=False)
    interval: str = api("Scrape interval.", pattern="^[0-9]+(ms|s|m|h)$", default="30s")
    labels: tuple[tuple[str, str], ...] = _extra_labels("ServiceMonitor", "serviceMonitorSelector", "serviceMonitor")


@model
class PrometheusRuleSpec:
    """spec.monitoring.prometheusRule: this OcrService's own alert rules (render/prometheusrule.py)."""

    enabled: bool = api("Create the PrometheusRule.", default=False)
    labels: tuple[tuple[str, str], ...] = _extra_labels("PrometheusRule", "ruleSelector", "prometheusRule")


@model
class Monitoring:
    __description__ = "Prometheus scraping of the server's /metrics, and this OcrService's alert rules."

    service_monitor: ServiceMonitorSpec = api(
        "A monitoring.coreos.com/v1 ServiceMonitor (created only when its CRD is installed).", default={})
    prometheus_rule: PrometheusRuleSpec = api(
        "A monitoring.coreos.com/v1 PrometheusRule with this OcrService's own alerts (created only when its CRD is "
        "installed): the chart's alerts (files/prometheus-rules.yaml: GPU memory, p95 latency, error rate, failed "
        "health checks, Degraded, RolledBack, rollout stuck, at maxReplicas) with the same thresholds, every selector "
        "narrowed to this OcrService. Use it or the chart's cluster-wide PrometheusRule for a service, not both.",
        default={})
