"""`python -m ocr_operator [--namespace NS ...|--all-namespaces] [--liveness-port PORT] [--metrics-port PORT]
[--log-level LEVEL] [--leader-elect [--leader-elect-resource-namespace NS] [--leader-elect-resource-name NAME]]`."""

from __future__ import annotations

import argparse
import logging
import os
import secrets
import signal
import socket
import sys
import threading
from pathlib import Path
from typing import Mapping

import kopf

from ocr_operator.runtime import leader

LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}
SERVICE_ACCOUNT_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
DEFAULT_LEASE_NAME = "causalflow-ocr-operator"
_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off", "")

log = logging.getLogger("ocr_operator")


def env_flag(env: Mapping[str, str], name: str, default: bool) -> bool:
    value = env.get(name)
    if value is None:
        return default
    if value.strip().lower() in _TRUE + _FALSE:
        return value.strip().lower() in _TRUE
    raise SystemExit(f"{name}: {value!r} is not a boolean (true or false)")


def env_number(env: Mapping[str, str], name: str, kind: type, default: float) -> float:
    value = env.get(name)
    if value is None:
        return default
    try:
        return kind(value)
    except ValueError:
        raise SystemExit(f"{name}: {value!r} is not {'an integer' if kind is int else 'a number'}") from None


def own_namespace(env: Mapping[str, str] = os.environ, sa_file: Path = SERVICE_ACCOUNT_NAMESPACE) -> str:
    """The pod's namespace: POD_NAMESPACE (the chart sets it), else the service account's; '' outside a pod."""
    if env.get("POD_NAMESPACE"):
        return env["POD_NAMESPACE"]
    try:
        return sa_file.read_text().strip()
    except OSError:
        return ""


def identity(env: Mapping[str, str] = os.environ) -> str:
    """Who holds the Lease: the pod (or host) name, plus a random suffix so a restarted process
    with the same name is a new candidate and never mistakes its predecessor's record for its own."""
    return f"{(env.get('POD_NAME') or socket.gethostname())[:100]}_{secrets.token_hex(4)}"


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
    le = p.add_argument_group("leader election", "one replica reconciles, the others stand by "
                              "(a coordination.k8s.io Lease; docs/operations/high-availability.md)")
    le.add_argument("--leader-elect", action=argparse.BooleanOptionalAction,
                    default=env_flag(os.environ, "OCR_OPERATOR_LEADER_ELECT", False),
                    help="reconcile only while holding the Lease (off by default for a local process; "
                         "the chart turns it on)")
    le.add_argument("--leader-elect-resource-namespace", metavar="NS",
                    default=os.environ.get("OCR_OPERATOR_LEADER_ELECT_NAMESPACE"),
                    help="the Lease's namespace (default: the pod's, POD_NAMESPACE)")
    le.add_argument("--leader-elect-resource-name", metavar="NAME",
                    default=os.environ.get("OCR_OPERATOR_LEADER_ELECT_NAME", DEFAULT_LEASE_NAME),
                    help=f"the Lease's name (default {DEFAULT_LEASE_NAME})")
    le.add_argument("--leader-elect-lease-duration", type=int, metavar="SECONDS",
                    default=env_number(os.environ, "OCR_OPERATOR_LEADER_ELECT_LEASE_DURATION", int, 15),
                    help="seconds a standby waits after the holder's last renewal before taking over (15)")
    le.add_argument("--leader-elect-renew-deadline", type=float, metavar="SECONDS",
                    default=env_number(os.environ, "OCR_OPERATOR_LEADER_ELECT_RENEW_DEADLINE", float, 10),
                    help="seconds the leader keeps trying to renew before it stops (exits) (10)")
    le.add_argument("--leader-elect-retry-period", type=float, metavar="SECONDS",
                    default=env_number(os.environ, "OCR_OPERATOR_LEADER_ELECT_RETRY_PERIOD", float, 2),
                    help="seconds between attempts to acquire or renew (2)")
    args = p.parse_args(argv)
    env_ns = os.environ.get("OCR_OPERATOR_NAMESPACES", "")
    if not args.namespace and not args.all_namespaces and env_ns:
        args.namespace = [n for n in env_ns.split(",") if n]
    args.election = election_config(args, p) if args.leader_elect else None
    return args


def election_config(args: argparse.Namespace, parser: argparse.ArgumentParser) -> leader.ElectionConfig:
    cfg = leader.ElectionConfig(
        namespace=args.leader_elect_resource_namespace or own_namespace(), name=args.leader_elect_resource_name,
        identity=identity(), lease_duration=args.leader_elect_lease_duration,
        renew_deadline=args.leader_elect_renew_deadline, retry_period=args.leader_elect_retry_period)
    errors = leader.config_errors(cfg)
    if errors:
        parser.error("; ".join(errors))
    return cfg


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
    from ocr_operator import handlers  # (registers the handlers)

    handlers.STATE.namespaces = list(args.namespace) or None
    if args.metrics_port:
        from ocr_operator.metrics import METRICS

        METRICS.serve(args.metrics_port, args.metrics_host)
    if args.election is None:
        run_operator(args)
        return 0
    return run_elected(args, args.election)


def run_operator(args: argparse.Namespace) -> None:
    """kopf with the handlers: the watches, the controller, the reconciles; until SIGTERM/SIGINT."""
    from ocr_operator import handlers, wiring
    from ocr_operator.runtime.discovery import new_insights, survive_lost_apis

    liveness = f"http://{args.liveness_host}:{args.liveness_port}/healthz" if args.liveness_port else None
    handlers.STATE.insights = new_insights()  # shared with kopf, so discovery can ask it to rescan
    def discovery():  # the runtime's, once kopf's startup handler built it
        runtime = handlers.STATE.runtime
        return runtime.discovery if runtime is not None else None

    def permitted(resource: str, namespace: str | None, allowed: bool) -> None:
        if (found := discovery()) is not None:
            found.permitted(resource, namespace, allowed)

    def known_refused(resource: str, namespace: str | None) -> bool:
        return (found := discovery()) is not None and found.is_refused(resource, namespace)

    # An optional API's CRD deleted under a watch, or its watch refused, must not stop the
    # operator (runtime/discovery.py).
    survive_lost_apis(handlers.STATE.insights, {k.group for k in wiring.OPTIONAL}, permitted, known_refused)
    kopf.run(
        insights=handlers.STATE.insights,
        standalone=True,
        clusterwide=not args.namespace,
        namespaces=args.namespace,
        liveness_endpoint=liveness,
    )


def _exit_lost() -> None:
    """The lease is lost: exit now, mid-reconcile if need be (controller-runtime's way); the
    kubelet restarts the process, which stands by until the lease is free again."""
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    os._exit(1)


def run_elected(args: argparse.Namespace, cfg: leader.ElectionConfig) -> int:
    """Stand by (serving /healthz) until this process holds the Lease, then run the operator;
    on SIGTERM release the Lease after the reconciles stopped, so a standby takes over at once."""
    from ocr_operator.labels import IDENTITY
    from ocr_operator.runtime.election import Elector, StandbyHealth

    stopping = threading.Event()
    previous = {sig: signal.signal(sig, lambda *_: stopping.set()) for sig in (signal.SIGTERM, signal.SIGINT)}
    elector = Elector(cfg, on_lost=_exit_lost, identity=IDENTITY).start()
    health = StandbyHealth(args.liveness_host, args.liveness_port, elector.health).start() if args.liveness_port else None
    log.info("leader election: %s standing by for lease %s/%s (duration %d s, renew deadline %.1f s, "
             "retry %.1f s)", cfg.identity, cfg.namespace, cfg.name, cfg.lease_duration, cfg.renew_deadline,
             cfg.retry_period)
    try:
        leading = elector.wait_leading(stopping)
    finally:
        if health is not None:
            health.stop()  # the port is kopf's from now on (or nobody's)
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if not leading:
        elector.stop(release=True)
        if stopping.is_set():
            log.info("leader election: stopped while standing by")
            return 0
        log.error("leader election: the elector stopped: %s", elector.error)
        return 1
    try:
        run_operator(args)
    finally:
        elector.stop(release=True)  # only now: no reconcile of ours is still writing
    return 0


if __name__ == "__main__":
    sys.exit(main())
