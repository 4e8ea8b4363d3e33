"""What a batch needs before its Job may start, looked up in the API: its OcrService and that
service's Service, its claims, and its Secrets with the keys each field needs.

The OcrService and its Service come from the runtime's caches when they hold them (the
OcrService controller watches both), so a batch adds no watch of its own on them.

Nothing here connects to a batch's storage. The operator talks only to the API server (and to a
callback, through its egress guard): the chart's NetworkPolicy allows it nothing else, no DNS
either, and an S3 endpoint is a tenant's choice. The workers check their input at start, from the
batch's own namespace: a missing bucket or prefix, or refused credentials, ends each index with
the fatal exit (contract.EXIT_FATAL) and a termination message whose reason
(contract.FATAL_REASONS, e.g. InputNotFound) becomes the batch's Failed condition (decide.phase_of).
"""

from __future__ import annotations

from typing import Any, Mapping

from ocr_operator.runtime.controller import Controller, Runtime

from . import decide


async def _lookup(rt: Runtime, services: Controller | None, kind: str, ns: str, name: str) -> dict[str, Any] | None:
    """From the caches when they hold the object, else one GET."""
    if kind == "OcrService":
        if services is not None and (ns, name) in services.cache:
            return services.cache[(ns, name)]
        return await rt.kube.get(kind, ns, name)
    return await rt.read(kind, ns, name)


async def preflight(rt: Runtime, services: Controller | None,
                    batch: Mapping[str, Any]) -> tuple[decide.Missing | None, decide.Found]:
    """The first thing missing (None: go), and what was found."""
    ns, spec = batch["metadata"]["namespace"], batch["spec"]
    service = await _lookup(rt, services, "OcrService", ns, spec["service"])
    endpoint = await _lookup(rt, services, "Service", ns, spec["service"]) if service is not None else None
    claims = {claim: (await rt.kube.get("PersistentVolumeClaim", ns, claim)) is not None
              for _, claim in decide.needed_claims(spec)}
    secrets: dict[str, Mapping[str, Any] | None] = {}
    for _, secret, _ in decide.needed_secrets(spec, service):
        if secret not in secrets:
            got = await rt.kube.get("Secret", ns, secret)
            secrets[secret] = None if got is None else (got.get("data") or {})
    found = decide.Found(service, endpoint, claims, secrets)
    return decide.preflight(spec, found), found
