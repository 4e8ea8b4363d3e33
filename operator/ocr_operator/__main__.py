"""`python -m ocr_operator [--namespace NS ...|--all-namespaces] [--liveness-port PORT]`."""

from __future__ import annotations

import argparse
import logging
import os
import sys

import kopf


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="ocr-operator", description="CausalFlow OCR operator (OcrService).")
    scope = p.add_mutually_exclusive_group()
    scope.add_argument("-n", "--namespace", action="append", default=[],
                       help="watch only this namespace (repeatable; glob patterns allowed)")
    scope.add_argument("-A", "--all-namespaces", action="store_true", help="watch every namespace (default)")
    p.add_argument("--liveness-host", default=os.environ.get("OCR_OPERATOR_LIVENESS_HOST", "0.0.0.0"))
    p.add_argument("--liveness-port", type=int, default=int(os.environ.get("OCR_OPERATOR_LIVENESS_PORT", "8080")),
                   help="port of kopf's liveness endpoint /healthz (0 disables it)")
    p.add_argument("--workers", type=int, default=None, help="concurrent reconciles (default 8)")
    p.add_argument("-v", "--verbose", action="store_true")
    p.add_argument("--debug", action="store_true")
    args = p.parse_args(argv)
    env_ns = os.environ.get("OCR_OPERATOR_NAMESPACES", "")
    if not args.namespace and not args.all_namespaces and env_ns:
        args.namespace = [n for n in env_ns.split(",") if n]
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.workers:
        os.environ["OCR_OPERATOR_WORKERS"] = str(args.workers)
    kopf.configure(debug=args.debug, verbose=args.verbose, log_format=kopf.LogFormat.FULL)
    logging.getLogger("ocr_operator").setLevel(logging.DEBUG if args.debug else logging.INFO)
    for noisy in ("httpx2", "httpx", "httpcore", "httpcore2", "hpack", "h2"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    if not (args.verbose or args.debug):
        # kopf logs every watch event's handler run ("Handler ... succeeded"): one per pod event.
        logging.getLogger("kopf.objects").setLevel(logging.WARNING)
    from . import handlers  # noqa: F401  (registers the handlers)

    liveness = f"http://{args.liveness_host}:{args.liveness_port}/healthz" if args.liveness_port else None
    kopf.run(
        standalone=True,
        clusterwide=not args.namespace,
        namespaces=args.namespace,
        liveness_endpoint=liveness,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
