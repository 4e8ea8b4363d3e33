"""The control plane's command lines, audit policy and kubeconfigs: pure functions of the binaries'
folder, the cluster's work folder and its ports (cluster.py starts the processes and waits for them).

Every path a flag names lives under the work folder: `pki/` (pki.py writes it), `tokens.csv`, the
audit policy, the kubeconfigs, kwok's config. Every port is the cluster's own free loopback port.
"""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import yaml


def audit_policy() -> dict[str, Any]:
    """Writes only (reads and leader leases are noise): metadata for each, and for OcrServices (their
    status too) the request body, so a write a test did not expect (test_operator_idle's) says which
    fields it changed."""
    return {
        "apiVersion": "audit.k8s.io/v1", "kind": "Policy", "omitStages": ["RequestReceived"],
        "rules": [
            {"level": "None", "verbs": ["get", "list", "watch"]},
            {"level": "None", "resources": [{"group": "coordination.k8s.io", "resources": ["leases"]}]},
            {"level": "Request", "verbs": ["create", "update", "patch"],
             "resources": [{"group": "ocr.causalflow.dev", "resources": ["ocrservices", "ocrservices/status"]}]},
            {"level": "Metadata"},
        ],
    }


def etcd_argv(bin_dir: Path, workdir: Path, ports: dict[str, int]) -> list[str]:
    p, pp = ports["etcd"], ports["etcd-peer"]
    return [
        str(bin_dir / "etcd"), "--name=default", f"--data-dir={workdir / 'etcd'}",
        f"--listen-client-urls=http://127.0.0.1:{p}", f"--advertise-client-urls=http://127.0.0.1:{p}",
        f"--listen-peer-urls=http://127.0.0.1:{pp}", f"--initial-advertise-peer-urls=http://127.0.0.1:{pp}",
        f"--initial-cluster=default=http://127.0.0.1:{pp}", "--unsafe-no-fsync",
        "--auto-compaction-retention=1", "--quota-backend-bytes=4294967296", "--log-level=warn",
    ]


def apiserver_argv(bin_dir: Path, workdir: Path, ports: dict[str, int], audit_log: Path) -> list[str]:
    pki = workdir / "pki"
    return [
        str(bin_dir / "kube-apiserver"),
        f"--etcd-servers=http://127.0.0.1:{ports['etcd']}",
        "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1",
        f"--secure-port={ports['apiserver']}",
        f"--tls-cert-file={pki / 'serving.crt'}", f"--tls-private-key-file={pki / 'serving.key'}",
        f"--token-auth-file={workdir / 'tokens.csv'}",
        f"--service-account-key-file={pki / 'sa.pub'}",
        f"--service-account-signing-key-file={pki / 'sa.key'}",
        "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
        "--service-cluster-ip-range=10.96.0.0/16",
        "--authorization-mode=Node,RBAC", "--allow-privileged=true",
        # 127.0.0.1 is not a valid Endpoints address, so the apiserver must not publish itself.
        "--endpoint-reconciler-type=none",
        # Aggregation (the custom-metrics APIService) proxies with this client identity.
        f"--proxy-client-cert-file={pki / 'serving.crt'}", f"--proxy-client-key-file={pki / 'serving.key'}",
        f"--requestheader-client-ca-file={pki / 'ca.crt'}", "--requestheader-allowed-names=",
        "--requestheader-username-headers=X-Remote-User", "--requestheader-group-headers=X-Remote-Group",
        "--requestheader-extra-headers-prefix=X-Remote-Extra-",
        f"--audit-policy-file={workdir / 'audit-policy.yaml'}", f"--audit-log-path={audit_log}",
        "--audit-log-maxsize=200", "--audit-log-format=json",
        # logs/exec/port-forward reach the real node at its IP, never by resolving its name
        # (which would ask the machine's outside resolver).
        "--kubelet-preferred-address-types=InternalIP",
        "--profiling=false", "--v=1",
    ]


def controller_manager_argv(bin_dir: Path, workdir: Path, ports: dict[str, int]) -> list[str]:
    pki, kubeconfig = workdir / "pki", workdir / "controller-manager.kubeconfig"
    return [
        str(bin_dir / "kube-controller-manager"), f"--kubeconfig={kubeconfig}",
        f"--authentication-kubeconfig={kubeconfig}", f"--authorization-kubeconfig={kubeconfig}",
        "--leader-elect=false", "--bind-address=127.0.0.1",
        f"--secure-port={ports['controller-manager']}",
        f"--service-account-private-key-file={pki / 'sa.key'}", f"--root-ca-file={pki / 'ca.crt'}",
        "--use-service-account-credentials=false",
        # Test speed: the HPA looks every 2 s; scale-down speed comes from each HPA's behavior.
        "--horizontal-pod-autoscaler-sync-period=2s",
        "--kube-api-qps=200", "--kube-api-burst=400", "--concurrent-deployment-syncs=10",
        "--concurrent-replicaset-syncs=10", "--concurrent-gc-syncs=20", "--v=1",
    ]


def scheduler_argv(bin_dir: Path, workdir: Path, ports: dict[str, int]) -> list[str]:
    kubeconfig = workdir / "scheduler.kubeconfig"
    return [
        str(bin_dir / "kube-scheduler"), f"--kubeconfig={kubeconfig}",
        f"--authentication-kubeconfig={kubeconfig}", f"--authorization-kubeconfig={kubeconfig}",
        "--leader-elect=false", "--bind-address=127.0.0.1",
        f"--secure-port={ports['scheduler']}", "--kube-api-qps=200", "--kube-api-burst=400", "--v=1",
    ]


def kwok_argv(bin_dir: Path, workdir: Path, ports: dict[str, int]) -> list[str]:
    return [
        str(bin_dir / "kwok"), f"--kubeconfig={workdir / 'kwok.kubeconfig'}",
        f"--config={workdir / 'kwok.yaml'}",
        # Only the fake nodes: with --manage-all-nodes kwok would also take over the real node.
        "--manage-all-nodes=false", "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
        "--cidr=10.0.0.0/16", "--node-ip=10.0.0.1", "--node-lease-duration-seconds=40",
        f"--server-address=127.0.0.1:{ports['kwok']}",
    ]


def kubeconfig(server: str, ca_pem: bytes, user: str, token: str) -> str:
    """A kubeconfig (YAML text) for one token user of the cluster at `server`."""
    return yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "causalflow-local",
        "clusters": [{"name": "causalflow-local", "cluster": {
            "server": server, "certificate-authority-data": base64.b64encode(ca_pem).decode()}}],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [{"name": "causalflow-local", "context": {"cluster": "causalflow-local", "user": user}}],
    })
