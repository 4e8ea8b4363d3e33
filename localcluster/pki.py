"""Certificates and keys for the local control plane, made with the openssl CLI.

One CA signs the API server's serving certificate (so clients verify TLS for real, no
`insecure-skip-tls-verify`); the service-account signing key is separate. Admins and the
controllers authenticate with bearer tokens from a static token file, which keeps the
harness free of client certificates.
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


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def make_pki(directory: Path) -> Pki:
    """Write a CA, an API server certificate for loopback and an SA key pair into `directory`."""
    d = directory
    d.mkdir(parents=True, exist_ok=True)
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "30",
             "-keyout", "ca.key", "-out", "ca.crt", "-subj", "/CN=causalflow-local-ca", cwd=d)
    (d / "serving.ext").write_text(
        "basicConstraints=CA:FALSE\n"
        "keyUsage=digitalSignature,keyEncipherment\n"
        "extendedKeyUsage=serverAuth,clientAuth\n"
        "subjectAltName=IP:127.0.0.1,IP:::1,IP:10.96.0.1,DNS:localhost,DNS:kubernetes,"
        "DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local\n"
    )
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "serving.key", "-out", "serving.csr",
             "-subj", "/CN=kube-apiserver", cwd=d)
    _openssl("x509", "-req", "-in", "serving.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
             "-CAcreateserial", "-days", "30", "-out", "serving.crt", "-extfile", "serving.ext", cwd=d)
    _openssl("genrsa", "-out", "sa.key", "2048", cwd=d)
    _openssl("rsa", "-in", "sa.key", "-pubout", "-out", "sa.pub", cwd=d)
    return Pki(d / "ca.crt", d / "ca.key", d / "serving.crt", d / "serving.key", d / "sa.key", d / "sa.pub")


def self_signed(directory: Path, name: str, cn: str = "localhost") -> tuple[Path, Path]:
    """A throwaway serving certificate for a loopback extension server (the metrics adapter)."""
    directory.mkdir(parents=True, exist_ok=True)
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "30",
             "-keyout", f"{name}.key", "-out", f"{name}.crt", "-subj", f"/CN={cn}",
             "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1", cwd=directory)
    return directory / f"{name}.crt", directory / f"{name}.key"
