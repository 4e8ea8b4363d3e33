"""bench/vllm_compare.py's verdict: this server's throughput against vLLM's own server, its failures and its TTFT."""

from __future__ import annotations

from bench.vllm_compare import summarise


def run(server: str, k: int, duration: float, ttft_ms: float = 30_000, failed: int = 0, tokens: int = 128,
        tpot_ms: float = 80) -> dict:
    return {"server": server, "round": k, "failed": failed, "duration_s": duration, "total_output_tokens": tokens,
            "output_throughput": tokens / duration, "median_ttft_ms": ttft_ms, "server_cpu_s_per_request": duration / 5,
            "mean_tpot_ms": tpot_ms}


def test_as_fast_as_vllm_with_a_ttft_of_the_same_order_passes():
    s = summarise([run("ours", 0, 80), run("vllm", 0, 84), run("vllm", 1, 82), run("ours", 1, 86)], min_ratio=0.95)
    assert (s["passed"], s["why_failed"], s["overall"], s["per_round"]) == (True, [], 1.0, [1.05, 0.953])


def test_a_slower_server_fails_naming_its_share_of_vllms_throughput():
    s = summarise([run("ours", 0, 100), run("vllm", 0, 90)], min_ratio=0.95)
    assert s["why_failed"] == ["output tokens/s 0.900x vLLM's server's (< 0.95)"] and not s["passed"]


def test_failed_requests_fail_the_comparison_even_when_it_is_fast():
    s = summarise([run("ours", 0, 80, failed=7), run("vllm", 0, 80)], min_ratio=0.95)
    assert s["why_failed"] == ["ours round 0: 7 failed requests"]


def test_a_first_chunk_sent_before_any_token_fails_as_a_ttft_that_is_not_the_first_token():
    s = summarise([run("ours", 0, 80, ttft_ms=100), run("vllm", 0, 80, ttft_ms=30_000)], min_ratio=0.95)
    assert s["why_failed"] == ["median TTFT 100 ms against vLLM's 30000 ms: not the first token"]


def test_a_time_per_output_token_above_the_bound_fails_naming_both_servers_figures():
    s = summarise([run("ours", 0, 80, tpot_ms=130), run("vllm", 0, 80, tpot_ms=80)], min_ratio=0.95, max_tpot_ratio=1.5)
    assert s["why_failed"] == ["time per output token 130 ms against vLLM's 80 ms (> 1.5x)"]
    assert summarise([run("ours", 0, 80, tpot_ms=110), run("vllm", 0, 80, tpot_ms=80)], 0.95, 1.5)["passed"]
