"""Certificates and keys for the local control plane, made with the openssl CLI.

One CA signs the API server's serving certificate (so clients verify TLS for real, no
`insecure-skip-tls-verify`); the service-account signing key is separate. Admins and the
controllers authenticate with bearer tokens from a static token file, which keeps the
harness free of client certificates.

Every key is ECDSA P-256 (what kubeadm makes with `encryptionAlgorithm: ECDSA-P256`): openssl
writes one in milliseconds where an RSA-2048 key takes a quarter of a second of CPU, and a test run
makes about fifty (the clusters', the servers' TLS tests', the real node's Secrets); an ECDSA
handshake also signs in a fraction of RSA's time.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Pki:
    ca_cert: Path
    ca_key: Path
    serving_cert: Path
    serving_key: Path
    sa_key: Path
    sa_pub: Path


CURVE = ("-pkeyopt", "ec_paramgen_curve:prime256v1")
NEW_KEY = ("-newkey", "ec", *CURVE, "-nodes")


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def make_pki(directory: Path) -> Pki:
    """Write a CA, an API server certificate for loopback and an SA key pair into `directory`."""
    d = directory
    d.mkdir(parents=True, exist_ok=True)
    _openssl("req", "-x509", *NEW_KEY, "-days", "30",
             "-keyout", "ca.key", "-out", "ca.crt", "-subj", "/CN=causalflow-local-ca", cwd=d)
    (d / "serving.ext").write_text(
        "basicConstraints=CA:FALSE\n"
        "keyUsage=digitalSignature\n"
        "extendedKeyUsage=serverAuth,clientAuth\n"
        "subjectAltName=IP:127.0.0.1,IP:::1,IP:10.96.0.1,DNS:localhost,DNS:kubernetes,"
        "DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local\n"
    )
    _openssl("req", *NEW_KEY, "-keyout", "serving.key", "-out", "serving.csr",
             "-subj", "/CN=kube-apiserver", cwd=d)
    _openssl("x509", "-req", "-in", "serving.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
             "-CAcreateserial", "-days", "30", "-out", "serving.crt", "-extfile", "serving.ext", cwd=d)
    _openssl("genpkey", "-algorithm", "EC", *CURVE, "-out", "sa.key", cwd=d)
    _openssl("pkey", "-in", "sa.key", "-pubout", "-out", "sa.pub", cwd=d)
    return Pki(d / "ca.crt", d / "ca.key", d / "serving.crt", d / "serving.key", d / "sa.key", d / "sa.pub")


def self_signed(directory: Path, name: str, cn: str = "localhost", *, san: str = "DNS:localhost,IP:127.0.0.1",
                days: int = 30, serial: int | None = None) -> tuple[Path, Path]:
    """A throwaway self-signed serving certificate and its key, `name`.crt and `name`.key in
    `directory` (a loopback extension server's, a TLS test's, a Secret's)."""
    directory.mkdir(parents=True, exist_ok=True)
    _openssl("req", "-x509", *NEW_KEY, "-days", str(days), *(["-set_serial", str(serial)] if serial is not None else []),
             "-keyout", f"{name}.key", "-out", f"{name}.crt", "-subj", f"/CN={cn}",
             "-addext", f"subjectAltName={san}", cwd=directory)
    return directory / f"{name}.crt", directory / f"{name}.key"
