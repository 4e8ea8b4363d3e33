"""Both engines behind the same server: identical tokens, and the server's suite with the same assertions.

Equivalence: same pages, same weights, greedy, n-gram guard on.

Each engine runs as a real server process in its own virtual environment (transformers here,
vLLM in .venv-vllm), both serving the --for-vllm tiny model (the real vision tower, a tiny language
model with a sharp output head). Compared over HTTP with `return_token_ids`: the generated ids of
a page alone, and of the same page inside a concurrent mix of differently sized pages (global view
only, and 2 crops: the transformers engine batches them with left padding, vLLM schedules them
continuously). The global page asks a prompt of the caller's own (a grounding query, its end of
text held back to the budget by min_new_tokens), the crop page the free document prompt: so the
same requests prove both prompt paths. When they differ, the assertion
names the first cause in the chain: the crop grid, the prompt ids (image placeholders and text), or
the first differing generated position.

The second half runs the server's own checks (bad input, auth, limits, cache, PDF, metrics,
deadlines, 429) against the vLLM engine, with the assertions the transformers engine meets in the
modules of tests/server (test_bad_input, test_layouts_and_auth, test_http_ocr, test_concurrency),
on global-view pages with few new tokens. They are not run again on the transformers engine here:
with this model's full-size vision tower each page costs most of a minute of CPU, and the cheap
tiny model already covers that engine's answers to them.

Cost on 2 cores: the full-size vision tower dominates (each view, global or crop, is seconds of
CPU on either engine), so the module starts each server once, for both halves, and the mix holds
the two kinds of page: no crops, and the fewest crops that exercise them (2). What a larger grid
adds happens before the vision tower: the crops' order and the number of image tokens, which the
model then only concatenates (local views, global view, separator). test_preprocessing_matches_vllm
compares exactly that for grids up to 2 x 3, the most image tokens the processor gives, pixels and
prompt ids to the bit, without a model pass. (A 2 x 3 page here cost four more crop passes per
engine than this one.) The caller's own prompt rides on the global page instead of a page of its
own (one full-size vision pass less per engine), and the vLLM server holds three requests, so that
its overload check puts at most two pages into the engine.
"""

from __future__ import annotations

import base64
import concurrent.futures
from typing import Any

import asyncio
import re
import time

import httpx
import pytest

from . import samples
from .conftest import start_engine_server, wait_for
from .test_bad_input import CASES as BAD_INPUT_CASES
from .test_bad_input import assert_clear_json_4xx

# The module's servers start once and serve every test: a vLLM start and the full-size vision
# tower on a page with crops take minutes on a busy 2-core machine (a vLLM start took 11 minutes at a
# load average of 16), more than the suite's default timeout.
pytestmark = [pytest.mark.server, pytest.mark.timeout(2400)]
NEW_TOKENS = 40  # past the guard's n-gram size (20): the random model loops, so the guard must act
NGRAM = 20
ENV = {
    "MAX_VISUAL_TOKENS": "1120",  # vLLM's processor allows 6 crops: the server must too
    "MAX_NEW_TOKENS": str(NEW_TOKENS),
    "TIMEOUT_SEC": "900",
    # Two slots and one queue place: the mix's two pages at once, and a flood held at three, so that
    # it puts at most two pages into the engine (each a full-size vision-tower pass) before the 429s.
    "CONCURRENCY": "2",
    "BATCH_SIZE": "2",
    "BATCH_WAIT_MS": "300",  # the mix's pages share one transformers batch
    "QUEUE_SIZE": "1",
    "MAX_BODY_BYTES": str(2 * 1024 * 1024),
    "MAX_PAGES": "3",
    "API_KEYS": "engine-test-key-0001",
    # One thread per engine: the two servers run side by side on 2 cores, next to other test
    # workers; an OpenMP pool per server as wide as the machine would only oversubscribe it.
    "OMP_NUM_THREADS": "1",
    "VLLM_CPU_OMP_THREADS_BIND": "nobind",
    # vLLM gives a model step 300 s and its start 600 s before it declares the worker hung: the mix's
    # vision encoder (11 views in one step, when it held a 2 x 3 page) took longer than that on one
    # busy core in `make test`.
    "VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS": "1800",
    "VLLM_ENGINE_READY_TIMEOUT_S": "1800",
}
AUTH = {"Authorization": "Bearer engine-test-key-0001"}
ENGINES = ("transformers", "vllm")
# (width, height) -> expected crops
PAGES = {"global": ((600, 500), 0), "2 crops": ((1400, 700), 2)}
# The global page's prompt: a grounding query (no document prompt), every token of the budget generated.
CALLERS_PROMPT = {"prompt": "Locate <|ref|>the title<|/ref|> in the image.", "min_new_tokens": NEW_TOKENS}
REF_TOKEN = 128816  # <|ref|>


@pytest.fixture(scope="module")
def servers(tiny_vllm, tmp_path_factory):
    """Both engines' servers, started together (vLLM's start overlaps the other's first page)."""
    tmp = tmp_path_factory.mktemp("engines")
    env = {"MODEL_PATH": str(tiny_vllm), **ENV}
    started = {engine: start_engine_server(tmp, engine, env, wait_ready=False) for engine in ENGINES}
    yield started
    for server in started.values():
        server.stop()


def page_body(name: str, compress_level: int = 6) -> dict[str, Any]:
    """The page as PNG bytes; another `compress_level` gives other bytes of the same pixels, so
    the server's result cache (keyed by the bytes) does not answer a page seen before."""
    (width, height), _ = PAGES[name]
    data = samples.encode(samples.page(width, height, seed=7), compress_level=compress_level)
    body = {"image": base64.b64encode(data).decode(), "prompt_mode": "free", "return_token_ids": True}
    return {**body, **CALLERS_PROMPT} if name == "global" else body


def ocr(server, name: str, compress_level: int = 6) -> dict[str, Any]:
    wait_for(server, 200, timeout=1800)
    r = httpx.post(server.url + "/v1/ocr", json=page_body(name, compress_level), headers=AUTH, timeout=900)
    assert r.status_code == 200, r.text
    return r.json()


def run(server, names: list[str], compress_level: int = 6) -> dict[str, dict[str, Any]]:
    """The pages at once (a concurrent mix), or one page."""
    with concurrent.futures.ThreadPoolExecutor(len(names)) as pool:
        return dict(zip(names, pool.map(lambda n: ocr(server, n, compress_level), names)))


def difference(a: dict[str, Any], b: dict[str, Any]) -> str | None:
    """The first cause of a difference between two engines' answers for one page, or None."""
    pa, pb = a["pages"][0], b["pages"][0]
    if pa["layout"] != pb["layout"]:
        return f"crop plan differs: transformers {pa['layout']} vs vLLM {pb['layout']}"
    ia, ib = pa["prompt_token_ids"][0], pb["prompt_token_ids"][0]
    if ia != ib:
        at = next((i for i, (x, y) in enumerate(zip(ia, ib)) if x != y), min(len(ia), len(ib)))
        return (f"prompt ids differ at position {at} of {len(ia)}/{len(ib)} "
                f"(transformers {ia[max(0, at - 2):at + 3]} vs vLLM {ib[max(0, at - 2):at + 3]})")
    ta, tb = pa["token_ids"][0], pb["token_ids"][0]
    if ta != tb:
        at = next((i for i, (x, y) in enumerate(zip(ta, tb)) if x != y), min(len(ta), len(tb)))
        return (f"same prompt ({len(ia)} ids), generated tokens differ first at step {at}: transformers "
                f"{ta[at:at + 3]} vs vLLM {tb[at:at + 3]} (a numerical near-tie of the two best logits, or the "
                f"n-gram guard acting differently) ; transformers {ta} ; vLLM {tb}")
    return None


def repeated_ngram(tokens: list[int], n: int = NGRAM, window: int = 90) -> bool:
    """Whether some generated token completes an n-gram already seen in the window (the guard bans it)."""
    for end in range(n, len(tokens) + 1):
        gram = tokens[end - n:end]
        start = max(0, end - 1 - window)
        earlier = [tokens[i:i + n] for i in range(start, end - n)]
        if gram in earlier:
            return True
    return False


@pytest.fixture(scope="module")
def answers(servers) -> dict[str, dict[str, dict[str, dict[str, Any]]]]:
    """Per engine: the global page alone, then the mix's pages at once. Both engines at once."""
    def one_engine(engine: str) -> dict[str, dict[str, dict[str, Any]]]:
        server = servers[engine]
        # The mix's global page is the lone page's pixels in other bytes: generated again, in the mix.
        return {"alone": run(server, ["global"]), "mix": run(server, list(PAGES), compress_level=1)}

    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        done = dict(zip(servers, pool.map(one_engine, servers)))
    return done


def test_each_engine_shows_each_page_with_the_expected_crops(answers):
    for engine, got in answers.items():
        for name, ((width, height), crops) in PAGES.items():
            page = got["mix"][name]["pages"][0]
            assert page["layout"]["crops"] == crops, (engine, name, page["layout"])
            assert page["usage"]["generated_tokens"] == len(page["token_ids"][0]) > 0
            assert got["mix"][name]["cached"] is False, (engine, name)  # generated in the mix
            assert got["mix"][name]["notice"] and "meaningless" in got["mix"][name]["notice"]


def test_a_page_alone_gets_identical_tokens_from_both_engines(answers):
    cause = difference(answers["transformers"]["alone"]["global"], answers["vllm"]["alone"]["global"])
    assert cause is None, cause


@pytest.mark.parametrize("name", list(PAGES))
def test_each_page_of_a_concurrent_mix_gets_identical_tokens_from_both_engines(answers, name):
    cause = difference(answers["transformers"]["mix"][name], answers["vllm"]["mix"][name])
    assert cause is None, cause


def test_a_page_gets_the_same_tokens_alone_and_inside_the_mix(answers):
    for engine, got in answers.items():
        alone = got["alone"]["global"]["pages"][0]["token_ids"]
        assert got["mix"]["global"]["pages"][0]["token_ids"] == alone, engine


def test_the_ngram_guard_acts_in_both_engines(answers):
    """The tiny model loops; with the guard on, no 20-gram repeats within the window in either engine."""
    for engine, got in answers.items():
        for name, answer in got["mix"].items():
            tokens = answer["pages"][0]["token_ids"][0]
            assert len(tokens) == NEW_TOKENS or answer["pages"][0]["finished"], (engine, name, len(tokens))
            assert not repeated_ngram(tokens), (engine, name, tokens)


def test_a_prompt_of_the_callers_own_and_min_tokens_read_the_same_on_both_engines(answers):
    """The global page's grounding query (not one of the two document prompts) with the end of text
    held to the budget: both engines read the same prompt ids, <|ref|> as its token, and generate
    the same, full-length answer, alone and inside the mix."""
    for engine, got in answers.items():
        for when in ("alone", "mix"):
            page = got[when]["global"]["pages"][0]
            assert page["prompt_token_ids"][0].count(REF_TOKEN) == 1, (engine, when)
            assert len(page["token_ids"][0]) == NEW_TOKENS, (engine, when, page["token_ids"][0])
    for when in ("alone", "mix"):
        cause = difference(answers["transformers"][when]["global"], answers["vllm"][when]["global"])
        assert cause is None, (when, cause)


def test_the_vllm_engines_sockets_and_rendezvous_file_stay_in_its_servers_temporary_directory(servers, answers):
    """vLLM's engine leaves its IPC sockets and its rendezvous file in the temporary directory (TMPDIR):
    in its server's own, removed with the test's files, not eight more entries in /tmp per start."""
    left = sorted(servers["vllm"].temp_dir.iterdir())
    assert any(p.name.startswith("vllm_dist_") for p in left), left
    assert any(p.is_socket() for p in left), left


# --- the server's suite, the same assertions on each engine ---------------------------------------

@pytest.fixture
def engine_server(servers, answers):
    """The vLLM engine's server, after the equivalence pages (so their answers are in its cache)."""
    server = servers["vllm"]
    wait_for(server, 200, timeout=1800)
    return server


def metric(text: str, name: str, labels: str = "") -> float:
    m = re.search(rf"^{re.escape(name)}{re.escape(labels)} ([0-9.e+-]+)$", text, re.M)
    return float(m.group(1)) if m else 0.0


@pytest.mark.parametrize("case,request_kw,status,etype", BAD_INPUT_CASES, ids=[c[0] for c in BAD_INPUT_CASES])
def test_bad_input_is_a_clear_json_4xx_on_the_vllm_engine(engine_server, case, request_kw, status, etype):
    with engine_server.client(headers=AUTH) as c:
        assert_clear_json_4xx(c, case, request_kw, status, etype)


def test_a_missing_or_wrong_key_is_401_and_probes_stay_open_on_the_vllm_engine(engine_server):
    with engine_server.client() as c:
        page = {"file": ("p.png", samples.png(64, 64), "image/png")}
        assert c.post("/v1/ocr", files=page).status_code == 401
        r = c.post("/v1/ocr", files=page, headers={"Authorization": "Bearer wrong-key-123456"})
        assert r.status_code == 401 and r.json()["error"]["type"] == "unauthorized"
        for path in ("/health", "/health/live", "/health/ready", "/metrics"):
            assert c.get(path).status_code == 200, path


def test_a_repeated_page_is_a_cache_hit_on_the_vllm_engine(engine_server):
    with engine_server.client(headers=AUTH) as c:
        before = metric(c.get("/metrics").text, "ocr_cache_hits_total")
        r = c.post("/v1/ocr", json=page_body("global"))
        after = metric(c.get("/metrics").text, "ocr_cache_hits_total")
    assert r.status_code == 200 and r.json()["cached"] is True
    assert after == before + 1


def test_pdf_pages_give_results_per_page_and_count_in_metrics_on_the_vllm_engine(engine_server):
    with engine_server.client(headers=AUTH, timeout=900) as c:
        before = c.get("/metrics").text
        r = c.post("/v1/ocr", files={"file": ("doc.pdf", samples.pdf(2), "application/pdf")}, data={"max_new_tokens": "4"})
        after = c.get("/metrics").text
    assert r.status_code == 200, r.text
    body = r.json()
    assert [p["page"] for p in body["pages"]] == [1, 2] and body["usage"]["pages"] == 2
    assert body["pages"][0]["layout"]["image_size"] == [400, 300]
    assert body["usage"]["visual_tokens"] == 2 * 256 and 2 <= body["usage"]["generated_tokens"] <= 8
    assert set(body) >= {"text", "raw", "blocks", "layout", "usage", "timings", "model", "cached", "notice"}
    ok = '{class="interactive",endpoint="/v1/ocr",status="200"}'
    assert metric(after, "ocr_requests_total", ok) == metric(before, "ocr_requests_total", ok) + 1
    assert metric(after, "ocr_visual_tokens_count") == metric(before, "ocr_visual_tokens_count") + 2
    assert metric(after, "ocr_generated_tokens_count") == metric(before, "ocr_generated_tokens_count") + 2
    assert metric(after, "ocr_model_loaded") == 1


def test_a_request_past_its_deadline_gets_504_and_frees_its_slot_on_the_vllm_engine(engine_server):
    with engine_server.client(headers=AUTH) as c:
        before = metric(c.get("/metrics").text, "ocr_in_flight_requests")
        r = c.post("/v1/ocr", files={"file": ("p.png", samples.png(500, 400, seed=31), "image/png")},
                   data={"timeout_sec": "2"})
        assert r.status_code == 504, r.text
        assert r.json()["error"]["type"] == "deadline_exceeded"
        assert c.get("/health").status_code == 200
        assert metric(c.get("/metrics").text, "ocr_in_flight_requests") == before
    deadline = time.monotonic() + 30  # and vLLM itself stopped working on it
    while "aborted in vLLM" not in engine_server.log() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert "aborted in vLLM" in engine_server.log()


async def _flood(url: str, n: int) -> list[httpx.Response]:
    async with httpx.AsyncClient(base_url=url, timeout=120, headers=AUTH) as c:
        return await asyncio.gather(*(
            c.post("/v1/ocr", files={"file": ("p.png", samples.png(300 + i, 200, seed=200 + i), "image/png")},
                   data={"timeout_sec": "1", "max_new_tokens": "1"}) for i in range(n)))


def test_overload_answers_429_with_retry_after_on_the_vllm_engine(engine_server):
    """CONCURRENCY 2 + QUEUE_SIZE 1 hold three requests; of five at once, at least two get 429 at once."""
    held = int(ENV["CONCURRENCY"]) + int(ENV["QUEUE_SIZE"])
    responses = asyncio.run(_flood(engine_server.url, held + 2))
    codes = sorted(r.status_code for r in responses)
    refused = [r for r in responses if r.status_code == 429]
    assert len(refused) >= 2, codes
    assert all(int(r.headers["retry-after"]) >= 1 and r.json()["error"]["type"] == "queue_full" for r in refused), codes
    assert set(codes) <= {200, 429, 504}, codes
