#!/usr/bin/env python3
"""`make demo`: the whole product on a local cluster, explained step by step.

1. start a local Kubernetes control plane (tests/cluster) with two fake GPU nodes;
2. install the OcrService CRD and run the operator (a local process, like `kopf run`);
3. write a tiny random model into the cache (once);
4. apply examples/minimal.yaml and watch it become Ready;
5. upgrade it to pods that crash and watch the automatic rollback;
6. run the OCR server locally with the tiny model and OCR a generated sample page;
7. clean up everything it started (by PID), or keep the cluster with --keep.

Logs of every process go to .demo/logs/; the terminal only gets progress and the key tables.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import yaml  # noqa: E402

from tests.cluster.cluster import REPO, LocalCluster, free_port, pid_alive  # noqa: E402

DEMO_DIR = ROOT / ".demo"
LOGS = DEMO_DIR / "logs"
CACHE = Path(os.environ.get("CAUSALFLOW_CACHE", Path.home() / ".cache" / "causalflow-ocr"))
MODEL_DIR = CACHE / "demo" / "tiny-model"
STATE_DIR = REPO / ".cluster"  # where `make cluster-up` keeps a running cluster
CRD = ROOT / "crds" / "ocr.causalflow.dev_ocrservices.yaml"
EXAMPLE = ROOT / "examples" / "rollback-demo.yaml"  # short health-check settings: a rollback in seconds
NAMESPACE = "rollback-demo"  # the example's own namespace
PY = sys.executable
SIMULATE_LABEL = "causalflow.dev/simulate"

BOLD, DIM, GREEN, YELLOW, RED, CYAN, RESET = (
    ("\033[1m", "\033[2m", "\033[32m", "\033[33m", "\033[31m", "\033[36m", "\033[0m")
    if sys.stdout.isatty() and not os.environ.get("NO_COLOR") else ("",) * 7
)


class DemoError(RuntimeError):
    """A step did not finish; the message says which and where its log is."""


# --------------------------------------------------------------------------- output

class Narrator:
    def __init__(self, total: int) -> None:
        self.total, self.n, self.t0 = total, 0, time.monotonic()
        self.step_t0 = self.t0

    def elapsed(self) -> str:
        return f"{time.monotonic() - self.t0:5.1f}s"

    def step(self, title: str, *explain: str) -> None:
        self.n += 1
        self.step_t0 = time.monotonic()
        print(f"\n{BOLD}{CYAN}[{self.n}/{self.total}] {title}{RESET}  {DIM}({self.elapsed()}){RESET}", flush=True)
        for line in explain:
            print(f"  {line}")

    def say(self, line: str) -> None:
        print(f"  {line}", flush=True)

    def ok(self, line: str) -> None:
        took = time.monotonic() - self.step_t0
        print(f"  {GREEN}✓{RESET} {line} {DIM}[{took:.1f}s]{RESET}", flush=True)

    def note(self, line: str) -> None:
        print(f"  {YELLOW}!{RESET} {line}", flush=True)

    def table(self, text: str, title: str | None = None) -> None:
        if title:
            print(f"  {DIM}$ {title}{RESET}")
        for line in text.rstrip().splitlines():
            print(f"    {line}")
        sys.stdout.flush()


def wait(predicate, timeout: float, what: str, interval: float = 0.5, log: Path | None = None):
    """Poll until predicate() is truthy; raise DemoError naming `what` (and a log) on timeout."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            last = predicate()
        except DemoError:
            raise
        except Exception as e:  # noqa: BLE001 - a transient error is just "not yet"
            last = e
        if last and not isinstance(last, Exception):
            return last
        time.sleep(interval)
    hint = f"; see {log}" if log else ""
    raise DemoError(f"timed out after {timeout:.0f}s waiting for {what} (last: {last!r}){hint}")


# --------------------------------------------------------------------------- processes

class Processes:
    """Child processes the demo started; stopped by PID, newest first."""

    def __init__(self) -> None:
        self.procs: list[tuple[str, subprocess.Popen]] = []

    def start(self, name: str, argv: list[str], env: dict[str, str], log: Path) -> subprocess.Popen:
        log.parent.mkdir(parents=True, exist_ok=True)
        with open(log, "ab") as out:
            proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    env=env, cwd=ROOT, start_new_session=True)
        self.procs.append((name, proc))
        return proc

    def stop(self, proc: subprocess.Popen, timeout: float = 10) -> None:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)
        self.procs = [(n, p) for n, p in self.procs if p is not proc]

    def stop_all(self) -> list[str]:
        stopped = []
        for name, proc in reversed(list(self.procs)):
            self.stop(proc)
            stopped.append(f"{name} (pid {proc.pid})")
        return stopped


# --------------------------------------------------------------------------- kube helpers

def kubectl(cluster, *args: str, input: str | None = None, check: bool = True) -> str:
    proc = cluster.kubectl(*args, input=input, check=False)
    if check and proc.returncode != 0:
        raise DemoError(f"kubectl {' '.join(args)} failed: {proc.stderr.strip() or proc.stdout.strip()}")
    return proc.stdout


def get_json(cluster, *args: str) -> dict:
    return json.loads(kubectl(cluster, "get", *args, "-o", "json"))


def condition(obj: dict, kind: str) -> dict:
    return next((c for c in obj.get("status", {}).get("conditions", []) if c.get("type") == kind), {})


def ocrs_line(obj: dict) -> str:
    st = obj.get("status", {})
    ready = condition(obj, "Ready")
    phase = (st.get("rollout") or {}).get("phase", "-")
    return (f"Ready={ready.get('status', '-')} ({ready.get('reason', '-')})  "
            f"replicas {st.get('replicaSummary', '-')}  revision {st.get('currentRevision', '-')}  rollout {phase}")


def load_example() -> dict:
    docs = [d for d in yaml.safe_load_all(EXAMPLE.read_text()) if d and d.get("kind") == "OcrService"]
    if not docs:
        raise DemoError(f"{EXAMPLE.relative_to(ROOT)} holds no OcrService")
    obj = docs[0]
    obj["metadata"]["namespace"] = NAMESPACE
    return obj


def operator_argv(liveness_port: int) -> list[str]:
    return [PY, "-m", "ocr_operator", "--namespace", NAMESPACE, "--liveness-host", "127.0.0.1",
            f"--liveness-port={liveness_port}"]


def http_json(url: str, timeout: float = 5, data: bytes | None = None, headers: dict | None = None):
    req = urllib.request.Request(url, data=data, headers=headers or {})
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        return resp.status, json.loads(resp.read() or b"null")


def multipart(field: str, filename: str, payload: bytes, content_type: str) -> tuple[bytes, str]:
    boundary = uuid.uuid4().hex
    body = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"{field}\"; filename=\"{filename}\"\r\n"
            f"Content-Type: {content_type}\r\n\r\n").encode() + payload + f"\r\n--{boundary}--\r\n".encode()
    return body, f"multipart/form-data; boundary={boundary}"


# --------------------------------------------------------------------------- the steps

class Demo:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.say = Narrator(total=7)
        self.procs = Processes()
        self.cluster = None
        self.own_cluster = False
        self.name = None

    # 1
    def start_cluster(self) -> None:
        s = self.say
        s.step("Start a local Kubernetes control plane",
               "etcd, kube-apiserver, kube-controller-manager, kube-scheduler on 127.0.0.1, and kwok",
               "simulating two GPU nodes (8 x nvidia.com/gpu each). No Docker, no GPU: pods are scheduled",
               "and reported Running/Ready by kwok, but no container really runs in them.")
        state = STATE_DIR / "state.json"
        if state.exists():
            attached = LocalCluster.attach(STATE_DIR)
            if attached.pids and all(pid_alive(p) for p in attached.pids.values()):
                self.cluster = attached
                s.ok(f"reusing the running cluster in {STATE_DIR} (make cluster-up, or make demo DEMO_ARGS=--keep)")
                return
        workdir = STATE_DIR if self.args.keep else None
        if workdir is not None:
            shutil.rmtree(workdir, ignore_errors=True)
        bin_dir = Path(subprocess.run(["bash", str(REPO / "tests" / "cluster" / "build-binaries.sh"), "--print-dir"],
                                      capture_output=True, text=True, check=True).stdout.strip())
        if not (bin_dir.parent / ".complete").exists():
            s.note("building the control plane's binaries from the Go module proxy first (once; long)")
            bin_dir = None  # LocalCluster builds them, with progress
        self.cluster = LocalCluster(workdir=workdir, bin_dir=bin_dir, quiet=True)
        self.own_cluster = True
        self.cluster.start()
        s.ok(f"control plane up in {self.cluster.started_seconds:.1f}s at {self.cluster.server}")
        s.table(kubectl(self.cluster, "get", "nodes", "-o",
                        "custom-columns=NODE:.metadata.name,GPU:.status.capacity.nvidia\\.com/gpu,"
                        "PRODUCT:.metadata.labels.nvidia\\.com/gpu\\.product,"
                        "READY:.status.conditions[?(@.type=='Ready')].status"),
                "kubectl get nodes")

    # 2
    def install_and_run_operator(self) -> None:
        s, c = self.say, self.cluster
        s.step("Install the OcrService CRD and run the operator",
               "The CRD is the API: a structural schema with defaults, CEL validation, status and scale",
               "subresources. The operator (kopf) runs here as a local process; in a real cluster the",
               "Helm chart (charts/causalflow-ocr) runs the same code in a Deployment.")
        kubectl(c, "apply", "--server-side", "--force-conflicts", "-f", str(CRD))
        wait(lambda: condition(get_json(c, "crd", "ocrservices.ocr.causalflow.dev"), "Established").get("status") == "True",
             30, "the CRD to be Established")
        kubectl(c, "apply", "-f", "-", input=kubectl(c, "create", "namespace", NAMESPACE,
                                                    "--dry-run=client", "-o", "yaml"))
        port = free_port()
        env = dict(c.env, KUBECONFIG=str(getattr(c, "operator_kubeconfig", c.kubeconfig)),
                   PYTHONUNBUFFERED="1")
        log = LOGS / "operator.log"
        proc = self.procs.start("operator", operator_argv(port), env, log)

        def live():
            if proc.poll() is not None:
                raise DemoError(f"the operator exited with code {proc.returncode}; see {log}")
            return http_json(f"http://127.0.0.1:{port}/healthz", timeout=2)[0] == 200

        try:
            wait(live, 60, "the operator's liveness endpoint", log=log)
        except DemoError as e:
            if proc.poll() is not None:
                raise DemoError(f"the operator exited with code {proc.returncode}; see {log}") from e
            raise
        s.ok(f"CRD established; operator running (pid {proc.pid}), watching namespace {NAMESPACE!r}; log: {log.relative_to(ROOT)}")

    # 3
    def tiny_model(self) -> None:
        s = self.say
        s.step("Write a tiny model",
               "A randomly initialised model with the real DeepSeek-OCR 2 architecture, key names and",
               "special tokens but tiny widths: it loads in seconds on a CPU. Its text output is MEANINGLESS.")
        if (MODEL_DIR / "config.json").exists() and not self.args.fresh_model:
            s.ok(f"cached at {MODEL_DIR}")
            return
        shutil.rmtree(MODEL_DIR, ignore_errors=True)
        MODEL_DIR.parent.mkdir(parents=True, exist_ok=True)
        log = LOGS / "tiny-model.log"
        LOGS.mkdir(parents=True, exist_ok=True)
        with open(log, "wb") as out:
            rc = subprocess.run([PY, "-m", "ocr_server.testing.tiny_model", str(MODEL_DIR)], cwd=ROOT,
                                stdout=out, stderr=subprocess.STDOUT, timeout=600).returncode
        if rc != 0 or not (MODEL_DIR / "config.json").exists():
            raise DemoError(f"writing the tiny model failed (exit {rc}); see {log}")
        size = sum(f.stat().st_size for f in MODEL_DIR.rglob("*") if f.is_file()) / 1e6
        s.ok(f"wrote {MODEL_DIR} ({size:.0f} MB)")

    # 4
    def apply_example(self) -> None:
        s, c = self.say, self.cluster
        obj = load_example()
        self.name = obj["metadata"]["name"]
        s.step(f"Apply {EXAMPLE.relative_to(ROOT)}",
               f"OcrService {self.name!r}: 2 replicas, 1 GPU each, short health-check settings so the rollback",
               "below takes seconds. The operator renders a Deployment (GPU request, startup/readiness/",
               "liveness probes on /health/*), a Service, a ConfigMap with the server config and a PDB;",
               "a revision counts as good once all its pods stay Ready for settleSeconds (8 s here).")
        kubectl(c, "apply", "-f", "-", input=kubectl(c, "create", "namespace", NAMESPACE, "--dry-run=client", "-o", "yaml"))
        if kubectl(c, "get", "ocrs", self.name, "-n", NAMESPACE, "--ignore-not-found", "-o", "name").strip():
            s.say("removing the OcrService a previous run left in this cluster (and, by ownerReferences, its children)")
            kubectl(c, "delete", "ocrs", self.name, "-n", NAMESPACE, "--cascade=foreground", "--timeout=90s")
        kubectl(c, "apply", "-f", "-", input=yaml.safe_dump(obj))
        seen = None

        def ready():
            nonlocal seen
            o = get_json(c, "ocrs", self.name, "-n", NAMESPACE)
            line = ocrs_line(o)
            if line != seen:
                s.say(f"{DIM}ocrs/{self.name}:{RESET} {line}")
                seen = line
            good = o.get("status", {}).get("lastGoodRevision")
            return condition(o, "Ready").get("status") == "True" and good and good == o["status"].get("currentRevision")

        wait(ready, self.args.timeout, f"OcrService {self.name} to become Ready", log=LOGS / "operator.log")
        s.ok(f"{self.name} is Ready and its revision is recorded as the last good one")
        s.table(kubectl(c, "get", "ocrs,deploy,svc,hpa,pdb,pods", "-n", NAMESPACE),
                f"kubectl -n {NAMESPACE} get ocrs,deploy,svc,hpa,pdb,pods")
        s.say(f"{DIM}(no HPA: this example sets a fixed replicas: 2; pod IPs are kwok's fake addresses){RESET}")

    # 5
    def failing_upgrade(self) -> None:
        s, c = self.say, self.cluster
        before = get_json(c, "ocrs", self.name, "-n", NAMESPACE)
        good = before["status"]["lastGoodRevision"]
        image = before["spec"]["image"]
        bad_image = image.rsplit(":", 1)[0] + ":1.1.0-broken"
        s.step("Upgrade to a broken version, and watch the automatic rollback",
               f"New image {bad_image.rsplit('/', 1)[-1]}, and a pod label that makes kwok crash its",
               "container (CrashLoopBackOff), as a real broken image would. The Deployment starts a new",
               "pod next to the old ones (maxUnavailable 0: they keep serving); the operator sees the",
               "crash loop, writes the last good pod template back into the Deployment, and says why.")
        patch = {"spec": {"image": bad_image, "podLabels": {SIMULATE_LABEL: "crashloop"}}}
        kubectl(c, "patch", "ocrs", self.name, "-n", NAMESPACE, "--type=merge", "-p", json.dumps(patch))
        seen = None

        def rolled_back():
            nonlocal seen
            o = get_json(c, "ocrs", self.name, "-n", NAMESPACE)
            st = o.get("status", {})
            line = ocrs_line(o)
            if line != seen:
                s.say(f"{DIM}ocrs/{self.name}:{RESET} {line}")
                seen = line
            phase = (st.get("rollout") or {}).get("phase")
            return phase == "RolledBack" and st.get("currentRevision") == good and st.get("failedRevision")

        wait(rolled_back, self.args.timeout, "the automatic rollback", log=LOGS / "operator.log")
        o = get_json(c, "ocrs", self.name, "-n", NAMESPACE)
        st = o["status"]
        s.ok(f"rolled back: revision {st['failedRevision']} failed ({st.get('failedReason')}), "
             f"the Deployment runs {st['currentRevision']} again")
        s.table(kubectl(c, "get", "ocrs", self.name, "-n", NAMESPACE, "-o", "wide"),
                f"kubectl -n {NAMESPACE} get ocrs {self.name} -o wide")
        conds = "\n".join(
            f"{x['type']:<15} {x['status']:<6} {x.get('reason', ''):<24} {x.get('message', '')[:90]}"
            for x in st.get("conditions", []))
        s.table("TYPE            STATUS REASON                   MESSAGE\n" + conds, "status.conditions")
        events = kubectl(c, "get", "events", "-n", NAMESPACE, "--field-selector",
                         f"involvedObject.kind=OcrService,involvedObject.uid={o['metadata']['uid']},type=Warning",
                         "-o", "custom-columns=TYPE:.type,REASON:.reason,MESSAGE:.message")
        s.table(events, f"kubectl -n {NAMESPACE} get events --field-selector type=Warning,involvedObject.kind=OcrService")
        s.table(kubectl(c, "get", "rs,pods", "-n", NAMESPACE, "-o",
                        "custom-columns=NAME:.metadata.name,REVISION:.metadata.labels.ocr\\.causalflow\\.dev/revision,"
                        "DESIRED:.spec.replicas,PHASE:.status.phase"),
                f"kubectl -n {NAMESPACE} get rs,pods   (the failed revision's ReplicaSet is scaled to 0)")
        deploy = get_json(c, "deploy", self.name, "-n", NAMESPACE)
        running = deploy["spec"]["template"]["spec"]["containers"][0]["image"]
        s.say(f"Deployment image: {running.rsplit('/', 1)[-1]}; the spec still asks for {bad_image.rsplit('/', 1)[-1]}.")
        s.say("The operator will not retry that revision until the spec changes: fix it and apply to roll forward.")

    # 6
    def ocr_locally(self) -> None:
        s = self.say
        s.step("OCR a sample page with the real server and the tiny model",
               "The same server the pods would run (python -m ocr_server), here on 127.0.0.1 with the",
               "tiny model on the CPU. The text will be gibberish: the weights are random. What is real:",
               "the request path, the global view + crops layout, token counts, timings, the JSON shape.")
        sample = DEMO_DIR / "sample-page.png"
        subprocess.run([PY, str(ROOT / "hack" / "sample-page.py"), str(sample)], check=True,
                       capture_output=True, cwd=ROOT)
        port = free_port()
        env = dict(os.environ, MODEL_PATH=str(MODEL_DIR), HOST="127.0.0.1", PORT=str(port), DEVICE="cpu",
                   MAX_NEW_TOKENS="64", TIMEOUT_SEC="300", LOG_LEVEL="warning", PYTHONUNBUFFERED="1")
        log = LOGS / "server.log"
        proc = self.procs.start("ocr-server", [PY, "-m", "ocr_server"], env, log)
        base = f"http://127.0.0.1:{port}"

        def healthy():
            if proc.poll() is not None:
                raise DemoError(f"the server exited with code {proc.returncode}; see {log}")
            try:
                return http_json(base + "/health", timeout=2)
            except urllib.error.HTTPError:
                return None  # 503 while the model loads

        try:
            status, health = wait(healthy, 300, "the server's /health to answer 200", log=log)
        except DemoError:
            if proc.poll() is not None:
                raise DemoError(f"the server exited with code {proc.returncode}; see {log}") from None
            raise
        s.ok(f"server ready on {base} (pid {proc.pid}): GET /health -> {status}, "
             f"device {health.get('device')}, tiny={health.get('tiny')}")
        body, ctype = multipart("file", "sample-page.png", sample.read_bytes(), "image/png")
        t0 = time.monotonic()
        try:
            status, result = http_json(base + "/v1/ocr", timeout=600, data=body, headers={"Content-Type": ctype})
        except urllib.error.HTTPError as e:
            raise DemoError(f"POST /v1/ocr answered {e.code}: {e.read()[:300]!r}") from None
        took = time.monotonic() - t0
        s.ok(f"POST /v1/ocr {sample.relative_to(ROOT)} -> {status} in {took:.1f}s")
        s.table(summarize(result), "response (abridged)")
        (DEMO_DIR / "ocr-response.json").write_text(json.dumps(result, indent=2, ensure_ascii=False))
        s.say(f"full response: {(DEMO_DIR / 'ocr-response.json').relative_to(ROOT)}")
        self.procs.stop(proc)

    # 7
    def finish(self) -> None:
        s = self.say
        s.step("Clean up")
        stopped = self.procs.stop_all()
        if stopped:
            s.ok("stopped " + ", ".join(stopped))
        if self.cluster is not None and self.own_cluster and not self.args.keep:
            self.cluster.stop()
            s.ok("stopped the local control plane")
        elif self.cluster is not None:
            s.ok("the cluster keeps running:")
            print(f"\n    export PATH={self.cluster.bin_dir}:$PATH")
            print(f"    export KUBECONFIG={self.cluster.kubeconfig}")
            print(f"    kubectl -n {NAMESPACE} get ocrs,deploy,svc,hpa,pods")
            print(f"    .venv/bin/python -m ocr_operator --namespace {NAMESPACE}   # run the operator again")
            print("    make cluster-down                                          # stop it\n")

    def abort(self) -> None:
        """Stop whatever was started, after a failure or Ctrl-C."""
        self.procs.stop_all()
        if self.cluster is not None and self.own_cluster and not self.args.keep:
            self.cluster.stop()


def summarize(result) -> str:
    """The interesting parts of an OCR response, one line each (unknown shapes fall back to JSON)."""
    if not isinstance(result, dict):
        return json.dumps(result)[:400]
    lines = []
    model = result.get("model")
    if isinstance(model, dict):
        lines.append(f"model:   {model.get('name')}  (revision {model.get('revision')})")
    layout = result.get("layout") or {}
    if layout:
        w, h = (layout.get("image_size") or ["?", "?"])[:2]
        g = "x".join(map(str, layout.get("global_view") or []))
        c = "x".join(map(str, layout.get("crop_size") or []))
        grid = "x".join(map(str, layout.get("crop_grid") or []))
        lines.append(f"layout:  image {w}x{h} -> global view {g} + {layout.get('crops')} crops of {c} "
                     f"(grid {grid}) = {layout.get('visual_tokens')} visual tokens")
    usage = result.get("usage") or {}
    if usage:
        lines.append(f"usage:   {usage.get('visual_tokens')} visual tokens, {usage.get('generated_tokens')} "
                     f"generated tokens, {usage.get('pages')} page(s)")
    timings = result.get("timings") or {}
    if timings:
        lines.append("timings: " + ", ".join(f"{k.removesuffix('_ms')} {v:.0f} ms" for k, v in timings.items()
                                              if isinstance(v, (int, float))))
    lines.append(f"blocks:  {len(result.get('blocks') or [])} parsed blocks with pixel boxes "
                 f"(the random text contains no layout markup)")
    text = result.get("text") or ""
    lines.append(f"text:    {json.dumps(text[:90], ensure_ascii=False)}...  <- random weights: MEANINGLESS")
    if result.get("notice"):
        lines.append(f"notice:  {result['notice']}")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description="CausalFlow OCR demo on a local cluster (make demo)")
    parser.add_argument("--keep", action="store_true",
                        help="leave the local cluster running at the end and print its KUBECONFIG line")
    parser.add_argument("--timeout", type=float, default=120, help="seconds each cluster step may take")
    parser.add_argument("--fresh-model", action="store_true", help="rewrite the cached tiny model")
    parser.add_argument("--skip-server", action="store_true", help="skip step 6 (the local OCR request)")
    args = parser.parse_args()
    DEMO_DIR.mkdir(exist_ok=True)
    shutil.rmtree(LOGS, ignore_errors=True)
    LOGS.mkdir(parents=True)
    demo = Demo(args)
    print(f"{BOLD}CausalFlow OCR demo{RESET}: an OcrService on a local cluster, an automatic rollback, "
          f"and one OCR request.\n{DIM}process logs: {LOGS.relative_to(ROOT)}/{RESET}")
    try:
        demo.start_cluster()
        demo.install_and_run_operator()
        demo.tiny_model()
        demo.apply_example()
        demo.failing_upgrade()
        if args.skip_server:
            demo.say.step("OCR a sample page (skipped: --skip-server)")
        else:
            demo.ocr_locally()
        demo.finish()
    except KeyboardInterrupt:
        print(f"\n{YELLOW}interrupted: cleaning up{RESET}")
        demo.abort()
        return 130
    except (DemoError, subprocess.CalledProcessError) as e:
        print(f"\n{RED}demo failed at step {demo.say.n}: {e}{RESET}", file=sys.stderr)
        demo.abort()
        return 1
    except BaseException:
        demo.abort()
        raise
    print(f"{BOLD}{GREEN}demo finished in {time.monotonic() - demo.say.t0:.0f}s{RESET}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
