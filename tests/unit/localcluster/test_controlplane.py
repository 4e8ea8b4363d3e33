"""The control plane's command lines, audit policy and kubeconfigs (localcluster/controlplane.py)."""

from __future__ import annotations

import base64
from pathlib import Path

import yaml

from localcluster import controlplane

BIN, WORK = Path("/opt/k8s/bin"), Path("/tmp/cluster-x")
PORTS = {"etcd": 2379, "etcd-peer": 2380, "apiserver": 6443, "controller-manager": 10257, "scheduler": 10259,
         "kwok": 10247}
ARGVS = {
    "etcd": controlplane.etcd_argv(BIN, WORK, PORTS),
    "kube-apiserver": controlplane.apiserver_argv(BIN, WORK, PORTS, WORK / "audit.log"),
    "kube-controller-manager": controlplane.controller_manager_argv(BIN, WORK, PORTS),
    "kube-scheduler": controlplane.scheduler_argv(BIN, WORK, PORTS),
    "kwok": controlplane.kwok_argv(BIN, WORK, PORTS),
}


def flag_values(argv: list[str]) -> list[str]:
    return [arg.split("=", 1)[1] for arg in argv[1:] if "=" in arg]


def test_each_component_runs_the_binary_of_its_name_from_the_binaries_folder():
    assert {name: argv[0] for name, argv in ARGVS.items()} == {name: str(BIN / name) for name in ARGVS}


def test_every_file_a_flag_names_lies_in_the_clusters_work_folder():
    """Nothing of one cluster is read from or written to a shared place (two clusters run side by side)."""
    paths = [v for argv in ARGVS.values() for v in flag_values(argv) if v.startswith("/")]
    assert paths and all(Path(p).is_relative_to(WORK) for p in paths), paths


def test_every_address_is_loopback_and_every_port_the_clusters_own():
    addresses = [v for argv in ARGVS.values() for v in flag_values(argv) if "127.0.0.1" in v or "://" in v]
    assert addresses and all("127.0.0.1" in a or a.startswith("https://kubernetes.default") for a in addresses), addresses
    ports = {int(a.rsplit(":", 1)[1]) for a in addresses if a.rsplit(":", 1)[-1].isdigit()}
    ports |= {int(arg.split("=", 1)[1]) for argv in ARGVS.values() for arg in argv if arg.startswith("--secure-port=")}
    assert ports == set(PORTS.values())


def test_the_audit_policy_logs_writes_only_with_the_bodies_of_ocrservice_writes():
    rules = controlplane.audit_policy()["rules"]
    assert rules[0] == {"level": "None", "verbs": ["get", "list", "watch"]}
    body = [r for r in rules if r["level"] == "Request"]
    assert body == [{"level": "Request", "verbs": ["create", "update", "patch"],
                     "resources": [{"group": "ocr.causalflow.dev", "resources": ["ocrservices", "ocrservices/status"]}]}]
    assert rules[-1] == {"level": "Metadata"}  # everything else: who wrote what, without bodies


def test_a_kubeconfig_names_the_server_its_ca_and_the_users_token():
    config = yaml.safe_load(controlplane.kubeconfig("https://127.0.0.1:6443", b"PEM", "alice", "t0k"))
    (cluster,), (user,), (context,) = config["clusters"], config["users"], config["contexts"]
    assert cluster["cluster"] == {"server": "https://127.0.0.1:6443",
                                  "certificate-authority-data": base64.b64encode(b"PEM").decode()}
    assert user == {"name": "alice", "user": {"token": "t0k"}}
    assert context["context"] == {"cluster": cluster["name"], "user": "alice"}
    assert config["current-context"] == context["name"]
