"""The engine protocol: everything the serving layer asks of an engine, typed end to end.

Two engines serve the same API: `transformers.engine.Engine` (one engine thread, the slots decoder
or generate()) and `vllm.engine.VllmEngine` (vLLM's async engine in-process). The service needs,
from either: inspect/load, the crop plan of a page, its prompt checked against the tokenizer,
`prepare` (one page -> one PreparedPage), a Runner whose `submit(page)` answers a Generated, a
streaming detokenizer, and a synchronous `generate_batch` for the warm-up. An engine is generic in
its own prepared page (P): the service hands back exactly what `prepare` gave it. Everything
around it (auth, limits, cache, PDF, metrics, health, TLS) stays shared.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass, field
from typing import Callable, Protocol, TypeVar

from PIL import Image

from ocr_limits.request_classes import INTERACTIVE

from ..runtime.config import ServerConfig
from ..runtime.metrics import Metrics
from ..runtime.plugins import EngineHooks
from .crops import CropPlan
from .detokenize import IncrementalDecoder

TD_TOKENS = ("<td>", "</td>")  # the official n-gram guard lets tables repeat their cell tags


class StartupError(RuntimeError):
    """The engine refuses to serve (missing tensors, vocabulary mismatch...)."""


@dataclass(frozen=True)
class NGramSettings:
    """The windowed no-repeat n-gram guard of one request (vLLM's vllm_xargs names in comments)."""

    size: int = 20  # ngram_size; 0 disables the guard
    window: int = 90  # window_size
    whitelist: frozenset[int] = frozenset()  # whitelist_token_ids, on top of <td> and </td>


@dataclass(kw_only=True)
class PreparedPage:
    """One page ready for an engine (built in a worker thread); each engine adds its own inputs.

    The service sets the request's fields after `prepare`: its deadline, n-gram guard, minimum
    tokens and class, and on_token on the page it streams."""

    plan: CropPlan
    max_new_tokens: int
    input_ids: list[int] = field(default_factory=list)  # the prompt ids the model reads (vLLM: after generation)
    deadline: float = math.inf  # time.monotonic()
    cancelled: threading.Event = field(default_factory=threading.Event)
    ngram: NGramSettings | None = None  # None: the server's runtime.ngram_size / ngram_window
    min_new_tokens: int = 0  # EOS is not chosen before this many new tokens (vLLM's min_tokens)
    request_class: str = INTERACTIVE  # engines/scheduling.py: interactive pages are taken before batch ones
    # Called from the engine thread with each token this row keeps, as it is generated (streaming).
    on_token: Callable[[int], None] | None = None


@dataclass
class Generated:
    token_ids: list[int]
    raw: str
    finished: bool  # ended with EOS (False: stopped by max_new_tokens or deadline)
    stopped_early: bool  # deadline or cancellation


@dataclass(frozen=True)
class ModelInfo:
    name: str
    revision: str
    layout: str
    tiny: bool
    device: str
    dtype: str
    decoder: str = "generate"  # generate | slots (DECODER)
    # Token ids whose repetition is no loop: the n-gram guard's whitelist (TD_TOKENS), which the page
    # outcome classifier (serving/outcome.py) leaves out too, so a table of empty cells reads ok.
    repeat_allowed: frozenset[int] = frozenset()


@dataclass(frozen=True)
class DecoderReport:
    """What /health says about the transformers engine's decoder: which one, and for slots its size."""

    decoder: str
    slots: int | None = None
    kv_max_len: int | None = None
    kv_bytes_per_slot: int | None = None
    kv_buckets: tuple[int, ...] | None = None
    cuda_graphs: int | None = None
    graph_capture_seconds: float | None = None
    decode_step: str | None = None  # compiled | eager: what the step runs as, after any fall-back at capture
    attention: str | None = None  # flex | bucket: likewise

    def as_dict(self) -> dict[str, object]:
        out: dict[str, object] = {"decoder": self.decoder}
        if self.slots is not None:
            out.update(slots=self.slots, kv_max_len=self.kv_max_len, kv_bytes_per_slot=self.kv_bytes_per_slot,
                       kv_buckets=list(self.kv_buckets or ()), cuda_graphs=self.cuda_graphs,
                       graph_capture_seconds=self.graph_capture_seconds, decode_step=self.decode_step,
                       attention=self.attention)
        return out


@dataclass(frozen=True)
class GraphCapture:
    """The decode step's CUDA graphs captured during the warm-up: how many, in how long."""

    graphs: int
    seconds: float


@dataclass(frozen=True)
class RunnerContext:
    """What a runner is given: metrics, what to call when the engine dies, whether an interactive
    request is inside the server (batch pages wait then: the slots runner), and the plugins'
    engine hooks (runtime/plugins.py)."""

    metrics: Metrics
    on_fatal: Callable[[BaseException], None]
    interactive_inside: Callable[[], bool] = lambda: False
    hooks: EngineHooks = field(default_factory=EngineHooks)


P = TypeVar("P", bound=PreparedPage)
P_in = TypeVar("P_in", bound=PreparedPage, contravariant=True)  # a runner only takes pages in
T = TypeVar("T")


class Runner(Protocol[P_in]):
    """Where the service sends prepared pages: the batcher, the slots runner, or vLLM's engine."""

    @property
    def capacity(self) -> int:
        """Pages decoded at once, the floor of admission's limit (0: none; CONCURRENCY caps it)."""
        ...

    def start(self) -> None: ...

    async def stop(self) -> None: ...

    async def submit(self, page: P_in) -> Generated:
        """The page's result, or DeadlineExceeded / EngineFailure."""
        ...

    async def on_engine_thread(self, fn: Callable[[], T]) -> T:
        """Run fn on the thread that runs batches (the warm-up must warm that thread's state)."""
        ...

    def stalled_for(self) -> float:
        """Seconds the engine has owed work without progress (runtime/liveness.py); 0 when idle or
        when it keeps no such clock (vLLM: its engine core dying exits the process instead)."""
        ...


class OcrEngine(Protocol[P]):
    cfg: ServerConfig
    info: ModelInfo | None  # set by load()

    def inspect(self) -> None:
        """Read the model directory's config and check the settings against it; no weights. Raises ConfigError."""
        ...

    def load(self) -> ModelInfo: ...

    def crop_bounds(self, max_visual_tokens: int | None) -> tuple[int, int]:
        """(min, max) crop count for a request."""
        ...

    def plan(self, image: Image.Image, max_visual_tokens: int | None = None) -> CropPlan: ...

    def check_prompt(self, text: str, param: str) -> int:
        """A caller's prompt tokenized as this engine will; BadInput for framing special tokens or too many."""
        ...

    def prepare(self, image: Image.Image, *, prompt_mode: str, max_visual_tokens: int | None, max_new_tokens: int,
                prompt: str | None = None) -> P: ...

    def stream_decoder(self) -> IncrementalDecoder: ...

    def generate_batch(self, pages: list[P]) -> list[Generated]:
        """Synchronously, every page to its end (the warm-up, benches, tests)."""
        ...

    def runner(self, ctx: RunnerContext) -> Runner[P]: ...

    def decoder_report(self) -> DecoderReport | None:
        """For /health; None when the engine has no decoder of its own to report (vLLM)."""
        ...

    def capture_graphs(self) -> GraphCapture | None:
        """Capture the decode step's CUDA graphs (the warm-up, on a GPU); None when there are none to capture."""
        ...


def ensure_loaded(engine: OcrEngine[P]) -> ModelInfo:
    """The engine's ModelInfo once loaded; RuntimeError before (a caller that asks early is a bug)."""
    if engine.info is None:
        raise RuntimeError("the engine is not loaded yet")
    return engine.info
