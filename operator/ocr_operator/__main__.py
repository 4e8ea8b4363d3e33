"""`python -m ocr_operator [--namespace NS ...|--all-namespaces] [--liveness-port PORT] [--metrics-port PORT] [--log-level LEVEL]`."""

from __future__ import annotations

import argparse
import logging
import os
import sys

import kopf

LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="ocr-operator", description="CausalFlow OCR operator (OcrService).")
    scope = p.add_mutually_exclusive_group()
    scope.add_argument("-n", "--namespace", action="append", default=[],
                       help="watch only this namespace (repeatable; glob patterns allowed)")
    scope.add_argument("-A", "--all-namespaces", action="store_true", help="watch every namespace (default)")
    p.add_argument("--liveness-host", default=os.environ.get("OCR_OPERATOR_LIVENESS_HOST", "0.0.0.0"))
    p.add_argument("--liveness-port", type=int, default=int(os.environ.get("OCR_OPERATOR_LIVENESS_PORT", "8080")),
                   help="port of kopf's liveness endpoint /healthz (0 disables it)")
    p.add_argument("--metrics-host", default=os.environ.get("OCR_OPERATOR_METRICS_HOST", "0.0.0.0"))
    p.add_argument("--metrics-port", type=int, default=int(os.environ.get("OCR_OPERATOR_METRICS_PORT", "8081")),
                   help="port of the operator's Prometheus metrics, /metrics (0 disables it)")
    p.add_argument("--workers", type=int, default=None, help="concurrent reconciles (default 8)")
    p.add_argument("--log-level", choices=LEVELS, default=os.environ.get("OCR_OPERATOR_LOG_LEVEL", "info"),
                   help="the root logger's level, one to one (debug adds kopf's per-event lines)")
    p.add_argument("-v", "--verbose", "--debug", dest="log_level", action="store_const", const="debug",
                   help="same as --log-level=debug")
    args = p.parse_args(argv)
    env_ns = os.environ.get("OCR_OPERATOR_NAMESPACES", "")
    if not args.namespace and not args.all_namespaces and env_ns:
        args.namespace = [n for n in env_ns.split(",") if n]
    return args


def configure_logging(level: str) -> None:
    """`level` is the root logger's level, exactly (the chart's logLevel passes it through)."""
    kopf.configure(debug=level == "debug", log_format=kopf.LogFormat.FULL)
    logging.getLogger().setLevel(LEVELS[level])
    logging.getLogger("ocr_operator").setLevel(LEVELS[level])
    for noisy in ("aiohttp", "httpx2", "httpcore2"):
        logging.getLogger(noisy).setLevel(max(logging.WARNING, LEVELS[level]))
    if level != "debug":
        # kopf logs every watch event's handler run ("Handler ... succeeded"): one per pod event.
        logging.getLogger("kopf.objects").setLevel(max(logging.WARNING, LEVELS[level]))


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.workers:
        os.environ["OCR_OPERATOR_WORKERS"] = str(args.workers)
    configure_logging(args.log_level)
    from . import handlers  # (registers the handlers)

    handlers.STATE.namespaces = list(args.namespace) or None
    if args.metrics_port:
        from .metrics import METRICS

        METRICS.serve(args.metrics_port, args.metrics_host)

    liveness = f"http://{args.liveness_host}:{args.liveness_port}/healthz" if args.liveness_port else None
    from .rescan import new_insights

    handlers.STATE.insights = new_insights()  # shared with kopf, so the controller can ask it to rescan
    kopf.run(
        insights=handlers.STATE.insights,
        standalone=True,
        clusterwide=not args.namespace,
        namespaces=args.namespace,
        liveness_endpoint=liveness,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
