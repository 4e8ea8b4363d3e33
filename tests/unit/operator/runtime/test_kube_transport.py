"""The operator's API client over real HTTP on loopback (an aiohttp server standing in for the
API server's REST surface): the kubeconfig's credentials are sent, a rotated token file is
re-read after a 401, and API errors come back as ApiError with the server's reason."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from aiohttp import web
from lightkube.config.kubeconfig import KubeConfig

from ocr_operator.runtime.kube import ApiError, Kube

from .kit import CONFIGMAP, IDENTITY


def run(coro):
    return asyncio.new_event_loop().run_until_complete(coro)


async def raised(coro) -> ApiError:
    """The ApiError that awaiting `coro` raises."""
    with pytest.raises(ApiError) as err:
        await coro
    return err.value


def kubeconfig(server: str, user: dict) -> KubeConfig:
    return KubeConfig.from_dict({
        "apiVersion": "v1", "kind": "Config", "current-context": "test",
        "clusters": [{"name": "c", "cluster": {"server": server}}],
        "users": [{"name": "u", "user": user}],
        "contexts": [{"name": "test", "context": {"cluster": "c", "user": "u"}}],
    })


async def serve(accepted: set[str], seen: list[str]):
    """An API server that accepts only the bearer tokens in `accepted` and records every
    Authorization header it gets."""

    async def configmap(request: web.Request) -> web.Response:
        seen.append(request.headers.get("Authorization", ""))
        if request.headers.get("Authorization") not in {f"Bearer {t}" for t in accepted}:
            return web.json_response({"kind": "Status", "reason": "Unauthorized", "message": "Unauthorized"},
                                     status=401)
        name = request.match_info["name"]
        if name == "slow":
            await asyncio.sleep(1.5)
        if name == "missing":
            return web.json_response({"kind": "Status", "reason": "NotFound",
                                      "message": f'configmaps "{name}" not found'}, status=404)
        if request.method == "PATCH":
            return web.json_response({"kind": "Status", "reason": "Invalid",
                                      "message": "spec.replicas: Invalid value: -1"}, status=422)
        return web.json_response({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}})

    async def configmaps(request: web.Request) -> web.Response:
        """A LIST, two objects a page (the client asks for more; a server may give fewer)."""
        seen.append(f"{request.headers.get('User-Agent')} list continue={request.query.get('continue', '')}")
        start = int(request.query.get("continue") or 0)
        names = ["a", "b", "c", "d", "e"][start:start + 2]
        more = start + 2 < 5
        return web.json_response({"kind": "ConfigMapList", "metadata": {"continue": str(start + 2) if more else ""},
                                  "items": [{"metadata": {"name": n}} for n in names]})

    app = web.Application()
    app.router.add_route("*", "/api/v1/namespaces/{ns}/configmaps/{name}", configmap)
    app.router.add_route("GET", "/api/v1/namespaces/{ns}/configmaps", configmaps)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    return runner, f"http://127.0.0.1:{port}"


def test_a_rotated_token_file_is_read_again_after_a_401(tmp_path: Path):
    token = tmp_path / "token"
    token.write_text("first\n")
    seen: list[str] = []

    async def scenario():
        accepted = {"first"}
        runner, url = await serve(accepted, seen)
        kube = Kube(IDENTITY, [CONFIGMAP], kubeconfig(url, {"tokenFile": str(token)}))
        try:
            assert (await kube.get("ConfigMap", "ns", "a"))["metadata"]["name"] == "a"
            token.write_text("second\n")  # the kubelet rotates the projected token
            accepted.clear()
            accepted.add("second")
            assert (await kube.get("ConfigMap", "ns", "b"))["metadata"]["name"] == "b"
            assert (await kube.get("ConfigMap", "ns", "c"))["metadata"]["name"] == "c"
        finally:
            await kube.close()
            await runner.cleanup()

    run(scenario())
    assert seen == ["Bearer first", "Bearer first", "Bearer second", "Bearer second"]


def test_a_refused_static_token_is_an_unauthorized_api_error_not_a_loop(tmp_path: Path):
    seen: list[str] = []

    async def scenario():
        runner, url = await serve({"right"}, seen)
        kube = Kube(IDENTITY, [CONFIGMAP], kubeconfig(url, {"token": "wrong"}))
        try:
            return await raised(kube.get("ConfigMap", "ns", "a"))
        finally:
            await kube.close()
            await runner.cleanup()

    err = run(scenario())
    assert (err.status, err.reason) == (401, "Unauthorized")
    assert seen == ["Bearer wrong"]


def test_not_found_is_none_and_a_rejected_write_names_the_field():
    async def scenario():
        runner, url = await serve({"t"}, [])
        kube = Kube(IDENTITY, [CONFIGMAP], kubeconfig(url, {"token": "t"}))
        try:
            missing = await kube.get("ConfigMap", "ns", "missing")
            return missing, await raised(kube.merge_patch("ConfigMap", "ns", "a", {"data": {}})), kube.by_request
        finally:
            await kube.close()
            await runner.cleanup()

    missing, err, by_request = run(scenario())
    assert missing is None
    assert err.status == 422 and "spec.replicas" in err.message
    assert by_request == {"GET configmaps": 1, "PATCH configmaps": 1}


def test_the_api_server_unreachable_is_a_retryable_503():
    async def scenario():
        runner, url = await serve({"t"}, [])
        await runner.cleanup()  # nothing listens there any more
        kube = Kube(IDENTITY, [CONFIGMAP], kubeconfig(url, {"token": "t"}))
        try:
            return await raised(kube.get("ConfigMap", "ns", "a"))
        finally:
            await kube.close()

    err = run(scenario())
    assert err.status == 503 and err.retryable


def test_an_api_server_that_does_not_answer_in_time_is_a_retryable_503():
    async def scenario():
        runner, url = await serve({"t"}, [])
        kube = Kube(IDENTITY, [CONFIGMAP], kubeconfig(url, {"token": "t"}), timeout=0.2)
        try:
            started = asyncio.get_running_loop().time()
            err = await raised(kube.get("ConfigMap", "ns", "slow"))
            return err, asyncio.get_running_loop().time() - started
        finally:
            await kube.close()
            await runner.cleanup()

    err, waited = run(scenario())
    assert err.status == 503 and err.retryable
    assert waited < 1.0


def test_a_list_follows_its_pages_and_gives_every_item_its_kind():
    seen: list[str] = []

    async def scenario():
        runner, url = await serve({"t"}, seen)
        kube = Kube(IDENTITY, [CONFIGMAP], kubeconfig(url, {"token": "t"}))
        try:
            return await kube.list("ConfigMap", "ns")
        finally:
            await kube.close()
            await runner.cleanup()

    items = run(scenario())
    assert [i["metadata"]["name"] for i in items] == ["a", "b", "c", "d", "e"]
    assert {(i["apiVersion"], i["kind"]) for i in items} == {("v1", "ConfigMap")}
    assert seen == [f"{IDENTITY.user_agent} list continue=", f"{IDENTITY.user_agent} list continue=2",
                    f"{IDENTITY.user_agent} list continue=4"]
