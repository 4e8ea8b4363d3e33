"""`python -m ocr_server`: read and validate the config, check the model directory, serve.

Config and model-directory problems stop the process here with exit code 2 and a message naming
the key, before the port opens. Weight problems stop it from the background loader (exit 3).
"""

from __future__ import annotations

import logging
import os
import sys


def main() -> int:
    from .runtime import gcpause

    gcpause.pause()  # until the model is loaded (runtime/gcpause.py): a start's CPU, -12 %, and -10 % more by freezing
    from .engines.checkpoint import validate_model_dir
    from .runtime import checksums, modelcache
    from .runtime.config import ConfigError, load_config
    from .runtime.startup_checks import startup_warnings

    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    log = logging.getLogger("ocr_server")
    try:
        cfg = load_config()
        logging.getLogger().setLevel(cfg.service.log_level.upper())
        for warning in startup_warnings(cfg):
            log.warning("%s", warning)
        # A fetched model's cache key stays locked until this process exits: never evicted under it.
        held = modelcache.hold(cfg.model.model_dir)
        # A missing or empty weights directory (a wrong mount, a typo in MODEL_PATH) is named before
        # the engine imports torch: a crash-looping pod says why at once instead of after seconds of CPU.
        validate_model_dir(cfg)
        from .engines.factory import create_engine
        from .runtime.plugins import load_plugins

        hooks = load_plugins(cfg.runtime.plugins)  # SERVER_PLUGINS: none unless a test names one
        engine = create_engine(cfg)
        engine.inspect()
        # spec.model.checksums (the operator's model-checksums.json beside CONFIG_FILE), before any weight loads.
        checksums.verify_configured(cfg.model.model_dir, os.environ.get("CONFIG_FILE"), log,
                                    require=cfg.model.require_checksums)
    except ConfigError as exc:
        log.error("configuration error: %s", exc)
        print(f"ocr_server: configuration error: {exc}", file=sys.stderr)
        return 2
    except (checksums.ChecksumError, modelcache.KeyGone) as exc:
        log.error("%s", exc)
        print(f"ocr_server: {exc}", file=sys.stderr)
        return 2

    from .http.app import build_app
    from .http.server import serve

    app = build_app(cfg, engine, hooks=hooks)
    app.state.model_cache_lock = held  # the open descriptor is the lock: kept for the process's life
    log.info("listening on %s://%s:%d (model loads in the background; /health answers 503 until ready)",
             "https" if cfg.service.tls_cert_file else "http", cfg.service.host, cfg.service.port)
    serve(app, cfg)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
