"""Fault test on the REAL node: the API-key Secret and the TLS Secret of a serving OcrService are
updated while clients keep sending through its Service; the running pod takes both without a
restart or a rollout.

The operator mounts both Secrets as whole volumes (never subPath), so kubelet rewrites their files
when the Secrets change (within its syncFrequency, 10 s on the harness's node:
localcluster/realnode.py kubelet_config), and the server re-reads them every 2 s
(ocr_server/runtime/credentials.py). Clients never retry: every answer counts. One client keeps one
connection open and moves to the new key only once the old one is refused; another opens a new
connection per request and records which certificate it was shown.
"""

from __future__ import annotations

import socket
import ssl
import threading
import time
from pathlib import Path

import httpx
import pytest
import yaml

from localcluster.nodeconfig import kubelet_config
from tests.e2e.realnode_fixtures import pod_ready, real_ocrservice, server_pods, service_client, wait_service_connects
from tests.server import samples
from tests.server.secret_volume import self_signed
from localcluster.waiting import wait_for

pytestmark = [pytest.mark.realnode, pytest.mark.slow]

KEY_OLD, KEY_NEW = "rotation-old-key-0001", "rotation-new-key-0002"
SERIAL_OLD, SERIAL_NEW = 0x0A01, 0x0B02
# Between two OCR requests of the keyed client: a few a second, through the whole rotation (so none
# of its moments goes unasked), without the pod and the client running a page back to back for a minute.
PACE_SECONDS = 0.2


def _sync_seconds() -> float:
    """The harness kubelet's syncFrequency, from the config it is started with (a pure function)."""
    value = kubelet_config(Path("/nonexistent"), 0, 0)["syncFrequency"]
    assert value.endswith("s"), value
    return float(value[:-1])


def _secret(kind: str, name: str, namespace: str, **data: str) -> str:
    """A Secret manifest to `kubectl apply` (create or update)."""
    if kind == "tls":
        body = {"type": "kubernetes.io/tls", "stringData": {"tls.crt": data["cert"], "tls.key": data["key"]}}
    else:
        body = {"type": "Opaque", "stringData": {"api-keys": data["keys"]}}
    return yaml.safe_dump({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": namespace},
                           **body})


class Clients:
    """The two clients' loops and what every request got (no retries)."""

    def __init__(self, cluster, namespace: str, name: str, ca: Path, dns: str) -> None:
        self.ocr = service_client(cluster, namespace, name, https=True, server_name=dns, ca=ca, timeout=60)
        self.address = self.ocr.base.split("//", 1)[1].rsplit(":", 1)
        self.context = ssl.create_default_context(cafile=str(ca))
        self.dns = dns
        self.key = KEY_OLD
        self.keys_rotated = threading.Event()
        self.stop = threading.Event()
        self.answers: list[tuple[float, str, int | str]] = []  # (time, key, status or error)
        self.serials: list[tuple[float, int | str]] = []  # (time, serial or error) per new connection
        self.page = samples.png(300, 200, seed=11)

    def keyed_loop(self) -> None:
        while not self.stop.is_set():
            key = self.key
            try:
                status: int | str = self.ocr.ocr(self.page, headers={"Authorization": f"Bearer {key}"}).status_code
            except httpx.HTTPError as exc:
                status = repr(exc)
            self.answers.append((time.monotonic(), key, status))
            if status == 401 and key == KEY_OLD and self.keys_rotated.is_set():
                self.key = KEY_NEW  # the old key is refused: move to the new one, resend nothing
            self.stop.wait(PACE_SECONDS)

    def handshake_loop(self) -> None:
        while not self.stop.is_set():
            try:
                with socket.create_connection((self.address[0], int(self.address[1])), timeout=10) as raw:
                    with self.context.wrap_socket(raw, server_hostname=self.dns) as s:
                        serial: int | str = int(s.getpeercert()["serialNumber"], 16)
                        s.sendall(f"GET /health HTTP/1.1\r\nHost: {self.dns}\r\nConnection: close\r\n\r\n".encode())
                        head = s.recv(4096)
                        if not head.startswith(b"HTTP/1.1 200 "):
                            serial = f"health answered {head[:40]!r}"
            except (OSError, ssl.SSLError) as exc:
                serial = repr(exc)
            self.serials.append((time.monotonic(), serial))
            time.sleep(0.2)


def test_rotated_keys_and_a_renewed_certificate_reach_the_serving_pod_without_a_failed_request(
        cluster, namespace, ocr, ocr_operator, product_images, model_pvc, tmp_path):
    sync = _sync_seconds()
    bound = 2 * sync + 2 + 15  # two pod syncs (jitter), the server's 2 s poll, a loaded machine
    image = product_images.on_node("server")
    dns = f"rotating.{namespace}.svc"
    old_cert, old_key = self_signed(tmp_path, "old", SERIAL_OLD, san=f"DNS:{dns}")
    new_cert, new_key = self_signed(tmp_path, "new", SERIAL_NEW, san=f"DNS:{dns}")
    cluster.kubectl("apply", "-f", "-", input=_secret("tls", "rotating-tls", namespace, cert=old_cert.decode(),
                                                     key=old_key.decode()))
    cluster.kubectl("apply", "-f", "-", input=_secret("keys", "rotating-keys", namespace, keys=KEY_OLD))
    ocr.apply(real_ocrservice("rotating", image, model={"pvc": {"claimName": model_pvc, "subPath": "weights"}},
                              auth={"secretName": "rotating-keys"}, tls={"secretName": "rotating-tls"}))
    ocr.wait_ready("rotating", timeout=300)
    wait_service_connects(cluster, namespace, "rotating")
    (pod,) = [p for p in server_pods(cluster, namespace, "rotating") if pod_ready(p)]
    mounts = {m["name"]: m for m in pod["spec"]["containers"][0]["volumeMounts"]}
    assert "subPath" not in mounts["api-keys"] and "subPath" not in mounts["tls"]

    ca = tmp_path / "both.crt"
    ca.write_bytes(old_cert + new_cert)  # the clients trust both: what they were shown is the serial
    clients = Clients(cluster, namespace, "rotating", ca, dns)
    threads = [threading.Thread(target=clients.keyed_loop), threading.Thread(target=clients.handshake_loop)]
    for t in threads:
        t.start()
    try:
        wait_for(lambda: sum(1 for _, k, s in clients.answers if k == KEY_OLD and s == 200) >= 2, timeout=60,
                 message="two answers with the old key")
        keys_at = time.monotonic()
        cluster.kubectl("apply", "-f", "-", input=_secret("keys", "rotating-keys", namespace, keys=KEY_NEW))
        clients.keys_rotated.set()
        wait_for(lambda: sum(1 for _, k, s in clients.answers if k == KEY_NEW and s == 200) >= 2,
                 timeout=bound + 30, message="two answers with the new key")
        cert_at = time.monotonic()
        cluster.kubectl("apply", "-f", "-", input=_secret("tls", "rotating-tls", namespace, cert=new_cert.decode(),
                                                         key=new_key.decode()))
        wait_for(lambda: any(s == SERIAL_NEW for _, s in clients.serials), timeout=bound + 30,
                 message="a new connection shown the renewed certificate")
        renewed = next(t for t, s in clients.serials if s == SERIAL_NEW) - cert_at
        time.sleep(3)  # a few more requests on both clients after the renewal
    finally:
        clients.stop.set()
        for t in threads:
            t.join(90)
        clients.ocr.close()

    refused = [a for a in clients.answers if a[2] == 401]
    failed = [a for a in clients.answers if a[2] not in (200, 401)]
    bad_handshakes = [s for _, s in clients.serials if not isinstance(s, int)]
    print(f"\n{len(clients.answers)} OCR requests, {len(clients.serials)} new TLS connections; old key refused "
          f"{refused[0][0] - keys_at:.1f}s after the Secret update, new certificate served {renewed:.1f}s after "
          f"its update (kubelet syncFrequency {sync:g}s)" if refused else "")
    assert not failed, failed[:5]
    assert not bad_handshakes, bad_handshakes[:5]
    assert len(refused) == 1 and refused[0][1] == KEY_OLD and refused[0][0] > keys_at, refused
    assert refused[0][0] - keys_at <= bound and renewed <= bound
    assert all(s == 200 for _, k, s in clients.answers if k == KEY_NEW)
    assert {s for t, s in clients.serials if t < cert_at} == {SERIAL_OLD}
    assert [s for t, s in clients.serials if t > cert_at + renewed] and \
        {s for t, s in clients.serials if t > cert_at + renewed} == {SERIAL_NEW}  # never back to the old one
    (now,) = server_pods(cluster, namespace, "rotating")
    assert now["metadata"]["name"] == pod["metadata"]["name"]  # no rollout: the template did not change
    assert now["status"]["containerStatuses"][0]["restartCount"] == 0
