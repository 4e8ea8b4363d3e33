"""bench/soak.py's judgement: what counts as a broken promise, and when a soak passes."""

from __future__ import annotations

import random

from bench.soak import BAD_INPUTS, Outcome, judge, rss_growth, verdict, window_summary


def outcome(kind: str, result: str, seconds: float = 1.0) -> Outcome:
    return Outcome(at=0.0, kind=kind, result=result, seconds=seconds)


def test_a_good_request_fails_unless_answered_200():
    assert not outcome("image", "200").failed
    assert outcome("image", "429").failed
    assert outcome("stream", "503").failed


def test_a_bad_input_must_get_a_4xx_and_nothing_else():
    assert not outcome("bad", "400").failed
    assert not outcome("bad", "413").failed
    assert outcome("bad", "200").failed
    assert outcome("bad", "500").failed


def test_a_transport_error_fails_and_a_deliberate_cancel_does_not():
    assert outcome("image", "error:ReadTimeout").failed
    assert not outcome("cancel", "cancelled").failed


def test_window_summary_counts_5xx_and_takes_percentiles_of_answered_requests_only():
    w = window_summary([outcome("image", "200", 1.0), outcome("image", "200", 3.0),
                        outcome("pdf", "502", 50.0), outcome("bad", "400", 0.1)])
    assert (w["requests"], w["failed"], w["fivexx"]) == (4, 1, 1)
    assert w["latency_s"]["p99"] == 3.0
    assert w["by_kind"]["image"] == {"200": 2}


def test_rss_growth_compares_the_medians_of_the_first_and_last_quarters():
    assert rss_growth([100, 100, 100, 100, 104, 104, 104, 104]) == 0.04
    assert rss_growth([100]) is None


def test_a_transient_peak_in_one_sample_is_not_growth_but_a_steady_climb_is():
    steady_with_peak = [1000, 1010, 990, 1000, 1400, 1000, 1005, 995]
    assert abs(rss_growth(steady_with_peak)) < 0.05
    assert rss_growth([1000, 1000, 1050, 1100, 1150, 1200, 1250, 1300]) > 0.2


def test_verdict_fails_on_memory_growth_restarts_or_broken_promises_and_passes_otherwise():
    clean = window_summary([outcome("image", "200")])
    assert verdict(clean, {"pod-a": 0.01}, {"pod-a": 0}, 0.05) == []
    assert "RSS grew" in verdict(clean, {"pod-a": 0.06}, {"pod-a": 0}, 0.05)[0]
    assert "restarted" in verdict(clean, {"pod-a": 0.0}, {"pod-a": 1}, 0.05)[0]
    broken = window_summary([outcome("image", "500")])
    assert "broke a promise" in verdict(broken, {"pod-a": 0.0}, {"pod-a": 0}, 0.05)[0]


def test_every_bad_input_builds_a_multipart_request():
    rng = random.Random(0)
    for make in BAD_INPUTS:
        files, data = make(rng)
        name, payload, ctype = files["file"]
        assert payload and ctype and isinstance(data, dict)


def test_judge_reads_restarts_and_memory_from_the_windows_after_warm_up():
    def window(minute: float, rss: int, restarts: int) -> dict:
        return {"minute": minute, "pods": {"pod-a": {"rss_bytes": rss, "open_fds": 12, "restarts": restarts}}}

    summary = window_summary([outcome("image", "200")])
    windows = [window(1, 5000, 0), window(2, 1000, 0), window(3, 1000, 0), window(4, 1000, 1)]
    judged = judge(windows, summary, warmup=120, max_growth=0.05)
    assert judged["rss_growth"] == {"pod-a": 0.0}  # the warm-up sample (5000) is not the baseline
    assert judged["restarts"] == {"pod-a": 1}
    assert not judged["passed"]


def test_a_window_whose_pods_could_not_be_read_is_a_missed_sample_not_a_verdict():
    def window(minute: float, pods: dict) -> dict:
        return {"minute": minute, "pods": pods}

    pod = {"pod-a": {"rss_bytes": 1000, "open_fds": 12, "restarts": 0}}
    windows = [window(1, pod), window(2, {}), window(3, pod)]
    windows[1]["sample_error"] = "TimeoutExpired: kubectl get pods"
    judged = judge(windows, window_summary([outcome("image", "200")]), warmup=0, max_growth=0.05)
    assert judged["passed"] and judged["missed_samples"] == 1


def test_a_pod_replaced_during_the_soak_fails_it():
    windows = [{"minute": 1, "pods": {"pod-a": {"rss_bytes": 1000, "open_fds": 12, "restarts": 0}}},
               {"minute": 2, "pods": {"pod-b": {"rss_bytes": 1000, "open_fds": 12, "restarts": 0}}}]
    judged = judge(windows, window_summary([outcome("image", "200")]), warmup=0, max_growth=0.05)
    assert any("pods changed" in why for why in judged["why_failed"])


class _Unreadable:
    def __init__(self) -> None:
        self.namespace, self.instance = "ns", "svc"

    def kubectl(self, *args: str) -> str:
        raise TimeoutError("kubectl timed out")


def test_a_failed_pod_read_is_reported_and_does_not_raise():
    from bench.soak import Pods

    u = _Unreadable()
    stats, error = Pods(u.kubectl, u.namespace, u.instance).sample()
    assert stats == {} and "TimeoutError" in error
