"""spec.model.source.s3's render (render/modelfetch.py): the model-fetch init container, its
credentials by secretKeyRef, the cache volume by kind, and the server's read-only view of it."""

from __future__ import annotations

import pytest

from ocr_operator.ocrservice.render import modelfetch as M
from ocr_operator.ocrservice.render import render_all

from .helpers import owner, parsed

SOURCE = {"s3": {"url": "s3://models/ocr/v1/", "credentialsSecret": "model-store"}}


def pod_spec(model: dict) -> dict:
    body = owner({"model": model})
    return render_all(body, parsed(body)).objects["Deployment"]["spec"]["template"]["spec"]


def init(spec: dict, name: str = "model-fetch") -> dict:
    return next(c for c in spec["initContainers"] if c["name"] == name)


def volume(spec: dict, name: str) -> dict:
    return next(v for v in spec["volumes"] if v["name"] == name)


def test_the_fetch_runs_the_server_image_with_the_secrets_keys_by_reference_and_no_key_in_the_pod():
    spec = pod_spec({"source": SOURCE})
    fetch, server = init(spec), spec["containers"][0]
    assert fetch["image"] == server["image"] and fetch["command"] == ["python", "-m", "ocr_server.fetch"]
    env = {e["name"]: e for e in fetch["env"]}
    assert env["FETCH_URL"]["value"] == "s3://models/ocr/v1/"
    assert env["AWS_ACCESS_KEY_ID"]["valueFrom"] == {"secretKeyRef": {"name": "model-store", "key": "AWS_ACCESS_KEY_ID"}}
    assert env["AWS_ENDPOINT_URL"]["valueFrom"]["secretKeyRef"]["optional"] is True
    assert not any(e["name"].startswith("AWS_") for e in server["env"])
    assert fetch["terminationMessagePolicy"] == "File" and fetch["securityContext"]["runAsNonRoot"] is True


def test_the_node_cache_is_a_hostpath_under_node_root_handed_to_the_servers_user_and_read_only_in_the_server():
    spec = pod_spec({"source": {"s3": {**SOURCE["s3"], "cache": {"kind": "Node", "nodeRoot": "/data/models",
                                                                 "maxBytes": 10**11}}}})
    assert volume(spec, M.CACHE_VOLUME)["hostPath"] == {"path": "/data/models", "type": "DirectoryOrCreate"}
    owner_c = init(spec, M.OWNER_CONTAINER)
    assert owner_c["securityContext"]["capabilities"] == {"drop": ["ALL"], "add": ["CHOWN"]}
    assert [c["name"] for c in spec["initContainers"]] == [M.OWNER_CONTAINER, M.FETCH_CONTAINER]
    assert {e["name"]: e.get("value") for e in init(spec)["env"]}["FETCH_CACHE_MAX_BYTES"] == str(10**11)
    mounts = {m["name"]: m for m in spec["containers"][0]["volumeMounts"]}
    assert mounts[M.CACHE_VOLUME]["readOnly"] and mounts[M.LINK_VOLUME]["readOnly"]
    assert mounts[M.LINK_VOLUME]["mountPath"] == "/models"


def test_the_default_cache_is_the_node_cache_at_the_default_root():
    spec = pod_spec({"source": SOURCE})
    assert volume(spec, M.CACHE_VOLUME)["hostPath"]["path"] == "/var/lib/causalflow-ocr/models"


def test_an_emptydir_cache_adds_its_bound_to_the_servers_ephemeral_storage_and_needs_no_root_container():
    spec = pod_spec({"source": {"s3": {**SOURCE["s3"], "cache": {"kind": "EmptyDir", "maxBytes": 8 * 2**30}}}})
    assert volume(spec, M.CACHE_VOLUME)["emptyDir"] == {"sizeLimit": str(8 * 2**30)}
    assert [c["name"] for c in spec["initContainers"]] == [M.FETCH_CONTAINER]
    storage = spec["containers"][0]["resources"]["limits"]["ephemeral-storage"]
    assert storage == f"{1536 + 8 * 1024}Mi" == init(spec)["resources"]["limits"]["ephemeral-storage"]


def test_spec_checksums_reach_the_fetcher_through_the_configmap_file():
    spec = pod_spec({"source": SOURCE, "checksums": {"model.safetensors": "a" * 64}})
    env = {e["name"]: e.get("value") for e in init(spec)["env"]}
    assert env["FETCH_CHECKSUMS_FILE"] == "/etc/ocr/model-checksums.json"
    assert "FETCH_CHECKSUMS_FILE" not in {e["name"] for e in init(pod_spec({"source": SOURCE}))["env"]}


def test_a_pvc_source_renders_no_fetch():
    spec = pod_spec({"pvc": {"claimName": "weights"}})
    assert "initContainers" not in spec


def test_the_outage_budget_reaches_the_fetcher_and_adds_to_its_bound_and_the_startup_budget():
    for given, budget in ((None, 300), (0, 0), (3600, 3600)):
        source = {"s3": {**SOURCE["s3"], **({} if given is None else {"maxOutageSeconds": given})}}
        env = {e["name"]: e.get("value") for e in init(pod_spec({"source": source}))["env"]}
        assert env["FETCH_MAX_OUTAGE_SECONDS"] == str(budget)
        assert env["FETCH_TIMEOUT_SECONDS"] == str(M.FETCH_TIMEOUT_SECONDS + budget)
        body = owner({"model": {"source": source}})
        assert M.fetch_seconds(parsed(body)) == M.FETCH_TIMEOUT_SECONDS + budget
    with pytest.raises(Exception, match="3600"):
        parsed(owner({"model": {"source": {"s3": {**SOURCE["s3"], "maxOutageSeconds": 3601}}}}))
