"""build_app(config, engine): the FastAPI app; the engine loads in the background after the port opens.

While loading and warming up, /health answers 503 (Retry-After) and /v1/ocr answers 503: ready
means loaded and warmed up (engines/warmup.py; WARMUP=0 skips it). A load or warm-up that fails (missing
tensors, wrong vocabulary) logs why and exits the process; so does an engine that dies while
serving (vLLM launcher's terminate_if_errored): the kubelet restarts the pod.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import time
from contextlib import asynccontextmanager
from typing import AsyncIterator, TypeVar

from fastapi import FastAPI

from ocr_limits.quality import GATE_KEY_FILE_ENV, GOLDEN_DIR_ENV, POD_IP_ENV
from ocr_limits.request_classes import BATCH

from .. import __version__
from ..engines.api import OcrEngine, PreparedPage
from ..engines.warmup import run_warmup
from ..runtime import credentials, gcpause
from ..runtime.config import ServerConfig
from ..runtime.metrics import Metrics
from ..runtime.plugins import EngineHooks
from ..serving.service import OcrServing
from ..serving.shadow import Shadow
from .budget import BodyBudget, BodyBudgetMiddleware
from .golden_routes import router as golden_router
from .openai_routes import router as openai_router
from .routes import router
from .shadow_routes import router as shadow_router

log = logging.getLogger("ocr_server")
EXIT_LOAD_FAILED = 3
EXIT_ENGINE_DEAD = 4
P = TypeVar("P", bound=PreparedPage)


def _exit_soon(loop: asyncio.AbstractEventLoop, code: int) -> None:
    def _bye() -> None:
        logging.shutdown()
        sys.stderr.flush()
        os._exit(code)

    loop.call_later(0.3, _bye)


def build_app(cfg: ServerConfig, engine: OcrEngine[P], *, hooks: EngineHooks | None = None,
              exit_on_failure: bool = True) -> FastAPI:
    metrics = Metrics(cfg.service.revision)
    service = OcrServing(cfg, engine, metrics, hooks)

    async def load_in_background() -> None:
        try:
            await load_and_warm_up()
        finally:
            gcpause.resume()  # paused by __main__ for the start-up's allocations (a no-op once the load resumed it)

    async def load_and_warm_up() -> None:
        loop = asyncio.get_running_loop()
        if cfg.runtime.load_delay_sec:
            await asyncio.sleep(cfg.runtime.load_delay_sec)
        t0 = time.monotonic()
        try:
            info = await loop.run_in_executor(None, engine.load)
        except Exception as exc:  # noqa: BLE001 - any load failure stops the server
            service.load_error = str(exc)
            log.error("model load failed, not serving: %s", exc)
            if exit_on_failure:
                _exit_soon(loop, EXIT_LOAD_FAILED)
            return
        finally:
            gcpause.resume()  # the start's objects frozen, the collector on for the warm-up's cycles
        if info.device.startswith("cuda"):
            metrics.enable_gpu(int(info.device.split(":")[1]) if ":" in info.device else 0)

        def on_fatal(exc: BaseException) -> None:
            log.critical("engine failure (%s): exiting so the pod is restarted", exc)
            if exit_on_failure:
                _exit_soon(loop, EXIT_ENGINE_DEAD)

        service.start(on_fatal)
        loaded_s = time.monotonic() - t0
        if cfg.runtime.warmup:
            try:
                gpu = info.device.startswith("cuda")
                report = await service.on_engine_thread(lambda: run_warmup(engine, cfg.runtime.max_new_tokens, gpu=gpu))
            except Exception as exc:  # noqa: BLE001 - a model that cannot generate must not serve
                service.load_error = f"warm-up failed: {exc}"
                log.error("warm-up failed, not serving: %s", exc)
                if exit_on_failure:
                    _exit_soon(loop, EXIT_LOAD_FAILED)
                return
            metrics.warmup_seconds.set(report.seconds)
        service.mark_ready()
        log.info("ready: model %s revision %s on %s (%s), %s layout, loaded in %.1fs, %s",
                 info.name, info.revision, info.device, info.dtype, info.layout, loaded_s,
                 f"warmed up in {time.monotonic() - t0 - loaded_s:.1f}s" if cfg.runtime.warmup else "warm-up off (WARMUP=0)")

    s = cfg.service
    keys = credentials.KeyStore(credentials.load_keys(s.api_keys_file) if s.api_keys_file else s.api_keys)
    # The quality gate's keys (gatekey.py), from the operator's gate-key Secret, re-read like API_KEYS_FILE.
    gate_file = os.environ.get(GATE_KEY_FILE_ENV) or None
    gate_keys = credentials.KeyStore(credentials.load_keys(gate_file) if gate_file else ())
    pod_ip = os.environ.get(POD_IP_ENV) or None
    # Shadow pages (serving/shadow.py): only where the gate can arm them; its noise replays are
    # batch-class requests that bypass the result cache.
    shadow = Shadow(lambda data, opts: service.ocr(data, opts, use_cache=False, request_class=BATCH),
                    metrics) if gate_file and pod_ip else None

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        task = asyncio.create_task(load_in_background())
        # server.py puts uvicorn's SSLContext here: a renewed certificate is loaded into it.
        watched = credentials.watches(s.api_keys_file, keys, s.tls_cert_file, s.tls_key_file,
                                 app.state.tls_context)
        if gate_file:
            watched.append(credentials.Watch("gate_keys", (gate_file,), lambda c: gate_keys.replace(
                c, f"{GATE_KEY_FILE_ENV}={gate_file}")))
        watcher = asyncio.create_task(credentials.watch(watched, lambda name, result: metrics.reloads.labels(
            name, result).inc())) if watched else None
        yield
        task.cancel()
        if watcher is not None:
            watcher.cancel()
        if shadow is not None:
            await shadow.close()
        await service.stop()

    app = FastAPI(title="CausalFlow OCR server", version=__version__, lifespan=lifespan)
    app.state.config = cfg
    app.state.service = service
    app.state.metrics = metrics
    app.state.api_keys = keys
    app.state.gate_keys = gate_keys
    app.state.pod_ip = pod_ip
    app.state.shadow = shadow
    app.state.log = log
    app.state.tls_context = None  # server.py sets uvicorn's SSLContext here before serving over TLS
    app.include_router(router)
    app.include_router(openai_router)
    app.state.golden_dir = os.environ.get(GOLDEN_DIR_ENV) or None  # the quality gate's pages (serving/golden.py)
    app.include_router(golden_router)
    app.include_router(shadow_router)
    # Request bodies are reserved in one budget before they are read (budget.py, routes.read_body).
    app.add_middleware(BodyBudgetMiddleware, budget=BodyBudget(s.max_inflight_body_bytes))
    return app
