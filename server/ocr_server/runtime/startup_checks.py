"""Settings that run but do not do what they seem to: warned about at start, not refused."""

from __future__ import annotations

from .config import ServerConfig


def startup_warnings(cfg: ServerConfig) -> list[str]:
    """Settings that run but do not do what they seem to: logged at start, not refused (a request
    with several pages can still fill a batch beyond CONCURRENCY)."""
    r = cfg.runtime
    out = []
    # The slots decoder admits max(CONCURRENCY, its slots) requests, so only generate's and vLLM's
    # batches are held to CONCURRENCY.
    if r.batch_size > r.concurrency and (r.engine == "vllm" or r.decoder == "generate"):
        what = "vLLM's max_num_seqs" if r.engine == "vllm" else "a generate batch"
        out.append(f"BATCH_SIZE={r.batch_size} > CONCURRENCY={r.concurrency}: with single-page requests {what} "
                   f"never holds more than {r.concurrency} pages; raise CONCURRENCY to fill it")
    if r.plugins:
        out.append(f"SERVER_PLUGINS={','.join(r.plugins)}: plugins hook the engine thread (runtime/plugins.py); "
                   "for tests, never set it in production")
    if r.liveness_stall_sec < r.timeout_sec:
        out.append(f"LIVENESS_STALL_SEC={r.liveness_stall_sec:g} < TIMEOUT_SEC={r.timeout_sec:g}: a batch that runs to its "
                   "deadline may fail the liveness probe and restart the pod")
    return out
