"""What a batch needs before its Job may start, looked up: its OcrService and that service's
Service, its claims, its Secrets, and an S3 input listed the way its workers will list it.

The OcrService and its Service come from the runtime's caches when they hold them (the
OcrService controller watches both), so a batch adds no watch of its own on them.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import logging
from typing import Any, Hashable, Mapping

from ocr_batch_worker.config import ConfigError, Location
from ocr_batch_worker.storage import StoreError, TooManyObjects, open_store
from ocr_operator.runtime.bounded import TENANT_CALLS, Busy
from ocr_operator.runtime.controller import Controller, Runtime

from . import decide, egress

log = logging.getLogger(__name__)

S3_CHECK_SECONDS = 20.0
# The listing's own bounds: the thread it holds in the tenant-call pool is free again within
# about (connect + read) x attempts, whatever the endpoint does; its answers are read up to
# s3.MAX_ANSWER_BYTES.
S3_TIMEOUTS = (3.0, 8.0)
S3_RETRIES = {"max_attempts": 2, "mode": "standard"}


async def s3_input_error(s3: Mapping[str, Any], secret_data: Mapping[str, str], tenant: Hashable | None = None) -> str | None:
    """Why the S3 input cannot be listed (no such bucket or prefix, credentials refused, no answer),
    or None: the workers' own check (storage.open_store, S3Store.list), made once before the Job.
    It runs in the tenant-call pool (runtime.bounded), one at a time per `tenant` (the batch's
    namespace), never in the event loop's default executor, so a slow endpoint holds neither the
    batch reconcile workers nor the threads other work uses."""
    env = {f"INPUT_{k}": base64.b64decode(v).decode(errors="replace") for k, v in secret_data.items()
           if k.startswith("AWS_")}
    endpoint = env.get("INPUT_AWS_ENDPOINT_URL")
    if endpoint and await _inside(endpoint):
        return None  # the workers list it themselves, from the batch's namespace

    def check() -> str | None:
        try:
            open_store(Location("s3", s3["url"]), "input", env, timeouts=S3_TIMEOUTS, retries=S3_RETRIES).list(1)
        except TooManyObjects:
            return None  # more than one object: it exists
        except (ConfigError, StoreError) as exc:
            return str(exc)[:500]
        return None

    try:
        return await TENANT_CALLS.run(check, timeout=S3_CHECK_SECONDS, tenant=("s3-preflight", tenant),
                                      what=f"listing {s3['url']}")
    except asyncio.TimeoutError:
        return f"{s3['url']} did not answer within {S3_CHECK_SECONDS:.0f} s"
    except Busy:
        return f"{s3['url']}: an earlier check of this namespace's S3 input has not ended yet; asked again later"


async def _inside(endpoint: str) -> bool:
    """Whether the S3 endpoint is an address the egress guard refuses (loopback, link-local,
    private, the cluster's; egress.py): the operator does not connect there on a tenant's word (the
    error would tell the tenant what answers inside), it leaves the check to the workers. A name
    that does not resolve now is listed as before (and reported)."""
    try:
        await egress.pin(endpoint, egress.Policy.from_env())
    except egress.Refused as exc:
        log.info("S3 preflight of %s left to the workers: %s", endpoint[:200], exc)
        return True
    except (OSError, ValueError, asyncio.TimeoutError, Busy):
        return False
    return False


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
    missing = decide.preflight(spec, found)
    if missing is None and "s3" in spec["input"]:
        error = await s3_input_error(spec["input"]["s3"], secrets.get(spec["input"]["s3"]["credentialsSecret"]) or {},
                                     tenant=ns)
        missing = decide.preflight(spec, dataclasses.replace(found, input_error=error))
    return missing, found
