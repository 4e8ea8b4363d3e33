"""The GATE job with shadow pages (gaterun.run, shadowrun.py): it arms every serving pod with the
held pod's URL and the gate key, sends the golden pages, asks the serving pods until enough copies
are judged or maxSeconds passed, and disarms each for the final results; a serving pod that
refuses or answers too much is recorded, not a crash.

The pods are aiohttp servers on loopback addresses of their own (127.0.0.2-4), on one port as pods
are: two serving pods that report the copies they judged (one more at each GET) and the held pod
that answers the golden pages."""

from __future__ import annotations

import asyncio
import socket
import time

from aiohttp import web

from ocr_operator import spec as S
from ocr_operator.ocrservice import gaterun, shadowrun
from ocr_operator.ocrservice.rollout import gate as G
from ocr_operator.ocrservice.rollout import pages as PG
from tests.unit.operator.test_quality import ATTEMPT, golden

SERVING = (("old-1", "127.0.0.2"), ("old-2", "127.0.0.3"))
HELD = "127.0.0.4"
KEY = "gk-test"


def copy(n: int) -> dict:
    return {"sha256": f"{n:064x}", "servingSha256": "s" * 64, "candidateSha256": "c" * 64, "distance": 0.25,
            "status": None, "servingOutcome": "ok", "candidateOutcome": "ok", "seconds": 0.1, "error": None}


class Pod:
    """One pod's server: PUT/GET/DELETE /v1/shadow (a serving pod) and POST /v1/ocr (the held pod)."""

    def __init__(self, *, arm_status: int = 200, ocr_status: int = 200, huge: bool = False) -> None:
        self.arm_status, self.ocr_status, self.huge = arm_status, ocr_status, huge
        self.calls: list[tuple[str, str, str, str]] = []  # (method, path, Host, Authorization)
        self.armed_with: dict | None = None
        self.pages: list[dict] = []

    def body(self, armed: bool) -> dict:
        return {"id": (self.armed_with or {}).get("id"), "armed": armed, "sampled": len(self.pages), "pending": 0,
                "pages": list(self.pages), "noise": [{"sha256": "n" * 64, "distance": 0.05}]}

    async def handle(self, request: web.Request) -> web.StreamResponse:
        self.calls.append((request.method, request.path, request.headers.get("Host", ""),
                           request.headers.get("Authorization", "")))
        if request.path == "/v1/ocr":
            if self.ocr_status != 200:
                return web.json_response({"error": {"type": "internal"}}, status=self.ocr_status)
            return web.json_response({"text": "hello", "usage": {"generated_tokens": 1}, "pages": [{"outcome": "ok"}]})
        if request.method == "PUT":
            if self.arm_status != 200:
                return web.json_response({"error": {"type": "shadow_unavailable"}}, status=self.arm_status)
            self.armed_with = await request.json()
            return web.json_response(self.body(True))
        if self.huge:
            return web.Response(body=b"x" * (shadowrun.MAX_ANSWER_BYTES + 1), content_type="application/json")
        if request.method == "GET":
            self.pages.append(copy(len(self.pages) + 100 * len(self.calls)))  # one more copy judged at each GET
            return web.json_response(self.body(True))
        return web.json_response(self.body(False))  # DELETE: the final results


async def start(pods: dict[str, Pod]) -> tuple[list[web.AppRunner], int]:
    """Each pod's server on its own address, all on one port."""
    for _ in range(20):
        with socket.socket() as s:
            s.bind((HELD, 0))
            port = s.getsockname()[1]
        runners = []
        try:
            for ip, pod in pods.items():
                app = web.Application()
                app.router.add_route("*", "/{tail:.*}", pod.handle)
                runner = web.AppRunner(app)
                await runner.setup()
                runners.append(runner)
                await web.TCPSite(runner, ip, port).start()
            return runners, port
        except OSError:
            for runner in runners:
                await runner.cleanup()
    raise RuntimeError("no port free on every loopback address")


def run_gate(pods: dict[str, Pod], shadow: S.Shadow) -> tuple[G.Result, float]:
    pages = PG.read_pages(golden({"a.png": b"AAAA"}, {"a.png": "hello"}), "golden")
    job = G.Job(G.GATE, "new", "new-1", HELD, ATTEMPT, pages.digest, SERVING)

    async def go() -> tuple[G.Result, float]:
        runners, port = await start(pods)
        try:
            target = gaterun.Target(port, False, 16, 30, KEY, shadow)
            t0 = time.monotonic()
            return await gaterun.run(job, pages, target), time.monotonic() - t0
        finally:
            for runner in runners:
                await runner.cleanup()

    return asyncio.run(go())


def test_every_serving_pod_is_armed_with_the_held_pods_url_and_the_gate_key_addressed_to_its_ip():
    pods = {"127.0.0.2": Pod(), "127.0.0.3": Pod(), HELD: Pod()}
    shadow = S.Shadow(sample_percent=50, max_pages=2, max_seconds=30, noise_pages=1)
    run_gate(pods, shadow)
    for ip in ("127.0.0.2", "127.0.0.3"):
        put = pods[ip].calls[0]
        assert put[:2] == ("PUT", "/v1/shadow") and put[2].startswith(f"{ip}:") and put[3] == f"Bearer {KEY}"
        port = put[2].split(":")[1]
        assert pods[ip].armed_with == {"id": ATTEMPT, "target": f"http://{HELD}:{port}", "samplePercent": 50,
                                       "maxPages": 2, "maxSeconds": 30, "noisePages": 1, "timeoutSeconds": 30}


def test_the_job_stops_once_max_pages_are_judged_and_takes_each_pods_final_results():
    pods = {"127.0.0.2": Pod(), "127.0.0.3": Pod(), HELD: Pod()}
    result, took = run_gate(pods, S.Shadow(max_pages=4, max_seconds=60))
    assert took < 10  # two rounds of GETs (2 pages each), not maxSeconds
    assert [c[0] for c in pods["127.0.0.2"].calls] == ["PUT", "GET", "GET", "DELETE"]
    assert result.error is None and [o.text for o in result.outputs] == ["hello"]
    assert len(result.shadow.pages) == 4 and result.shadow.noise == (0.05, 0.05) and result.shadow.errors == ()
    assert result.shadow.armed == ("old-1", "old-2")


def test_the_job_stops_waiting_at_max_seconds_with_the_pages_judged_by_then():
    pods = {"127.0.0.2": Pod(), "127.0.0.3": Pod(), HELD: Pod()}
    result, took = run_gate(pods, S.Shadow(max_pages=256, max_seconds=3))  # below the API's minimum, for a short test
    assert 2.5 < took < 8
    assert 2 <= len(result.shadow.pages) < 256 and result.shadow.seconds >= 3


def test_a_serving_pod_that_refuses_the_arm_is_recorded_and_the_others_still_count():
    pods = {"127.0.0.2": Pod(arm_status=404), "127.0.0.3": Pod(), HELD: Pod()}
    result, _ = run_gate(pods, S.Shadow(max_pages=2, max_seconds=30))
    assert result.error is None and result.shadow.armed == ("old-2",)
    assert [c[0] for c in pods["127.0.0.2"].calls] == ["PUT"]  # never asked again
    (error,) = result.shadow.errors
    assert error.startswith("pod old-1: PUT /v1/shadow: HTTP 404: "), error


def test_a_serving_pods_answer_over_the_bound_is_an_error_not_read_whole():
    pods = {"127.0.0.2": Pod(huge=True), "127.0.0.3": Pod(), HELD: Pod()}
    result, _ = run_gate(pods, S.Shadow(max_pages=2, max_seconds=4))
    assert result.shadow.armed == ("old-1", "old-2")
    assert [e for e in result.shadow.errors if e.startswith("pod old-1: DELETE /v1/shadow: an answer longer than")]


def test_golden_pages_that_fail_disarm_the_serving_pods():
    pods = {"127.0.0.2": Pod(), "127.0.0.3": Pod(), HELD: Pod(ocr_status=500)}
    result, took = run_gate(pods, S.Shadow(max_seconds=60))
    assert result.error is not None and result.error.startswith("page a.png: HTTP 500") and result.shadow is None
    assert took < 10 and [c[0] for c in pods["127.0.0.2"].calls] == ["PUT", "DELETE"]
