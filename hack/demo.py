#!/usr/bin/env python3
"""`make demo`: the whole product on a local cluster, explained step by step.

1. start a local Kubernetes control plane (localcluster) with two fake GPU nodes (kwok) and one
   real kubelet node (`real-node-0`: containerd + runc, real containers);
2. install the OcrService CRD and run the operator (a local process, like `kopf run`);
3. build the server image from Dockerfile.server with the tiny random model baked in (cached after
   the first run) and import it into the real node;
4. apply examples/rollback-demo.yaml on the real node and watch its pods start, load the model and
   pass their probes;
   on the real node the example also gets spec.rollout.qualityGate (two generated golden pages in a
   ConfigMap): the first revision's outputs on them are recorded as the baseline;
5. upgrade it to weights the image does not carry (spec.model.path): the new container really exits
   at startup, and the operator rolls the Deployment back;
6. upgrade it to a worse model: tiny model B (same architecture, other random weights, generated
   once into .demo/models/ and mounted by a hostPath PersistentVolume). Its pod starts and passes
   its probes, but the readiness gate holds it out of the Service while the operator OCRs the golden
   pages on it: they read far from the baseline, the revision fails with QualityRegression and is
   rolled back before any client reaches it;
7. OCR a generated sample page through the OcrService's Service (its own pods answer);
8. clean up everything it started (by PID), or keep the cluster with --keep.

Where this machine cannot run the real node (not root, or another cluster holds it), steps 3-7 fall
back to kwok: the pods are simulated, the crash is a kwok failure stage, the quality gate is
skipped (no real pod reads the golden pages) and no OCR is served.
Logs of every process go to .demo/logs/; the terminal only gets progress and the key tables.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import yaml  # noqa: E402

from hack.demo_objects import (  # noqa: E402
    CONTROL_PLANE, CRASH_PATCH, CRD, DEMO_DIR, EXAMPLE, GOLDEN, GOLDEN_PAGES, LOGS, MISSING_MODEL, MODELS_DIR,
    MODEL_B_CLAIM, MODEL_B_PV, MODEL_NAME, NAMESPACE, PY, REAL_NODE_SPEC, SIMULATE_LABEL, STATE_DIR,
    golden_configmap, load_example, model_b_claim, model_b_patch, operator_argv, tiny_model_b)
from hack.demo_support import (  # noqa: E402
    BOLD, DIM, GREEN, RED, RESET, YELLOW, DemoError, Narrator, Processes, condition, get_json, http_json, kubectl,
    merged, multipart, ocrs_line, summarize, wait)
from localcluster.cluster import REPO, LocalCluster  # noqa: E402
from localcluster.machine import pid_alive  # noqa: E402
from localcluster.ports import free_port  # noqa: E402
from localcluster.nodeconfig import NODE_NAME  # noqa: E402

# --------------------------------------------------------------------------- the steps


class Demo:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.say = Narrator(total=8)
        self.procs = Processes()
        self.cluster = None
        self.own_cluster = False
        self.name = None
        self.image = None  # the server image on the real node; None: kwok only
        self.no_real_node = None  # why there is no real node
        self.seen = None  # the OcrService's state line last printed

    @property
    def real(self) -> bool:
        return self.image is not None

    def observe(self) -> dict:
        """The OcrService now; its one-line state is printed when it differs from the last one
        printed (self.seen: None at the start of a step's wait prints the first)."""
        o = get_json(self.cluster, "ocrs", self.name, "-n", NAMESPACE)
        line = ocrs_line(o)
        if line != self.seen:
            self.say.say(f"{DIM}ocrs/{self.name}:{RESET} {line}")
            self.seen = line
        return o

    # 1
    def start_cluster(self) -> None:
        s = self.say
        s.step("Start a local Kubernetes cluster",
               "etcd, kube-apiserver, kube-controller-manager, kube-scheduler on 127.0.0.1; kwok simulating",
               "two GPU nodes (8 x nvidia.com/gpu each, nothing runs in their pods); and, where this machine can run it, one real node,",
               f"{NODE_NAME}: kubelet + containerd + runc + kube-proxy, whose pods are real containers on a",
               "bridge of this machine (it advertises 4 fake nvidia.com/gpu: the server runs on the CPU).")
        state = STATE_DIR / "state.json"
        if state.exists():
            attached = LocalCluster.attach(STATE_DIR)
            if attached.pids and all(pid_alive(p) for p in attached.pids.values()):
                self.cluster = attached
                if attached.real_node is None or not attached.real_node.alive():
                    attached.real_node = None
                    self.no_real_node = f"the running cluster in {STATE_DIR} has no real node"
                s.ok(f"reusing the running cluster in {STATE_DIR} (make cluster-up, or make demo DEMO_ARGS=--keep)")
                return
        workdir = STATE_DIR if self.args.keep else None
        if workdir is not None:
            shutil.rmtree(workdir, ignore_errors=True)
        # No metric chain (Prometheus, prometheus-adapter: the demo autoscales nothing) and no helm
        # (the operator runs as a local process): the demo neither builds nor starts them;
        # `make cluster-up` and the tests do.
        os.environ.setdefault("CAUSALFLOW_METRIC_CHAIN", "0")
        os.environ.setdefault("CAUSALFLOW_HELM", "0")
        bin_dir = Path(subprocess.run(["bash", str(REPO / "localcluster" / "build-binaries.sh"), "--print-dir"],
                                      capture_output=True, text=True, check=True).stdout.strip())
        if not all((bin_dir / name).is_file() for name in CONTROL_PLANE):
            s.note("building the control plane's binaries from the Go module proxy first (once; long)")
            bin_dir = None  # LocalCluster builds them, with progress
        self.cluster = LocalCluster(workdir=workdir, bin_dir=bin_dir, quiet=True, metric_chain=False)
        self.own_cluster = True
        self.cluster.start()
        if self.cluster.real_node is None:
            self.no_real_node = self.cluster.real_node_skipped
        s.ok(f"cluster up in {self.cluster.started_seconds:.1f}s at {self.cluster.server}")
        s.table(kubectl(self.cluster, "get", "nodes", "-o",
                        "custom-columns=NODE:.metadata.name,KIND:.metadata.labels.causalflow\\.dev/node-kind,"
                        "GPU:.status.capacity.nvidia\\.com/gpu,"
                        "INTERNAL-IP:.status.addresses[?(@.type=='InternalIP')].address,"
                        "RUNTIME:.status.nodeInfo.containerRuntimeVersion,"
                        "READY:.status.conditions[?(@.type=='Ready')].status"),
                "kubectl get nodes")
        if self.no_real_node:
            s.note(f"no real node ({self.no_real_node}): the OcrService's pods will be kwok's simulations")

    # 2
    def install_and_run_operator(self) -> None:
        s, c = self.say, self.cluster
        s.step("Install the OcrService CRD and run the operator",
               "The CRD is the API: a structural schema with defaults, CEL validation, status and scale",
               "subresources, and an admission policy that keeps an autoscaled OcrService's size for its",
               "HPA. The operator (kopf) runs here as a local process; in a real cluster the",
               "Helm chart (charts/causalflow-ocr) runs the same code in a Deployment.")
        kubectl(c, "apply", "--server-side", "--force-conflicts", "-f", str(CRD.parent))
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

        wait(live, 60, "the operator's liveness endpoint", log=log)
        s.ok(f"CRD established; operator running (pid {proc.pid}), watching namespace {NAMESPACE!r}; log: {log.relative_to(ROOT)}")

    # 3
    def server_image(self) -> None:
        s, c = self.say, self.cluster
        s.step("Build the server image and import it into the real node",
               "Dockerfile.server built without a daemon (buildah), on a local Debian base image (no",
               "registry is reachable here), with a tiny randomly initialised model baked in at the",
               "server's default model path: the real DeepSeek-OCR 2 architecture with tiny widths, so it",
               "loads in seconds on a CPU. Its text output is MEANINGLESS. Cached: a rebuild is seconds.")
        if self.no_real_node:
            s.note(f"skipped: no real node ({self.no_real_node})")
            return
        from localcluster.imagebuild import ensure_images

        log = LOGS / "images.log"
        with open(log, "a") as out:  # open until the import: Images.import_into() logs too
            def note(line: str) -> None:
                out.write(line + "\n")
                out.flush()
                if any(w in line for w in ("building", "streamed", "built")):
                    s.say(f"{DIM}{line[:110]}{RESET}")

            s.say(f"{DIM}building or reusing the images (the first build installs torch: long); log: "
                  f"{log.relative_to(ROOT)}{RESET}")
            images = ensure_images(log=note, kinds=("server", "server_tiny"))  # the operator runs here, not in a pod
            ref = images.server_tiny
            if c.has_image(ref):
                s.ok(f"{ref} is already in {NODE_NAME}'s containerd")
            else:
                s.say(f"{DIM}importing {ref} into {NODE_NAME}'s containerd (the layers it lacks: "
                      f"minutes the first time, torch is in it){RESET}")
                t0 = time.monotonic()
                images.import_into(c, ref)
                s.ok(f"imported {ref} into {NODE_NAME} in {time.monotonic() - t0:.0f}s")
        self.image = ref

    def demo_ocrservice(self) -> dict:
        obj = load_example()
        if self.real:
            obj["spec"] = merged(obj["spec"], REAL_NODE_SPEC)
            obj["spec"]["image"] = self.image
        return obj

    # 4
    def apply_example(self) -> None:
        s, c = self.say, self.cluster
        obj = self.demo_ocrservice()
        self.name = obj["metadata"]["name"]
        spec = obj["spec"]
        where = (f"on {NODE_NAME} (nodeSelector + toleration), image {self.image}" if self.real
                 else "on the kwok nodes (simulated pods)")
        s.step(f"Apply {EXAMPLE.relative_to(ROOT)}",
               f"OcrService {self.name!r}: {spec['replicas']} replicas, 1 GPU each, {where}.",
               "The operator renders a Deployment (GPU request, startup/readiness/liveness probes on",
               "/health/*), a Service, a ConfigMap with the server config and a PDB; a revision counts as",
               f"good once all its pods stay Ready for settleSeconds ({spec['rollout']['settleSeconds']} s here).")
        if self.real:
            s.say(f"{DIM}for real pods the demo sets modelLoadTimeoutSeconds {spec['rollout']['modelLoadTimeoutSeconds']}"
                  f" (the example's is sized for kwok) and inference.maxNewTokens {spec['inference']['maxNewTokens']}{RESET}")
            gate = spec["rollout"]["qualityGate"]
            s.say(f"and spec.rollout.qualityGate: {len(GOLDEN_PAGES)} golden pages (hack/sample-page.py's page at "
                  f"{', '.join(f'{w}x{h}' for w, h in GOLDEN_PAGES.values())}) in ConfigMap {GOLDEN},")
            s.say(f"maxPageDistance {gate['maxPageDistance']}, maxMeanDistance {gate['maxMeanDistance']}, "
                  f"{gate['maxNewTokens']} new tokens a page. Its pods carry a readiness gate: the first one")
            s.say("joins the Service once the operator has OCRed the pages on it; this first revision has")
            s.say("nothing to compare with, so its outputs are recorded as the baseline of the next upgrade.")
            kubectl(c, "apply", "--server-side", "--force-conflicts", "-f", "-", input=yaml.safe_dump(golden_configmap()))
        if kubectl(c, "get", "ocrs", self.name, "-n", NAMESPACE, "--ignore-not-found", "-o", "name").strip():
            s.say("removing the OcrService a previous run left in this cluster (and, by ownerReferences, its children)")
            kubectl(c, "delete", "ocrs", self.name, "-n", NAMESPACE, "--cascade=foreground", "--timeout=90s")
        kubectl(c, "apply", "-f", "-", input=yaml.safe_dump(obj))
        self.seen = None

        def ready():
            o = self.observe()
            good = o.get("status", {}).get("lastGoodRevision")
            return condition(o, "Ready").get("status") == "True" and good and good == o["status"].get("currentRevision")

        timeout = self.args.timeout + (spec["rollout"]["modelLoadTimeoutSeconds"] if self.real else 0)
        wait(ready, timeout, f"OcrService {self.name} to become Ready", log=LOGS / "operator.log")
        s.ok(f"{self.name} is Ready and its revision is recorded as the last good one")
        if self.real:
            gate = condition(get_json(c, "ocrs", self.name, "-n", NAMESPACE), "QualityGate")
            s.say(f"QualityGate={gate.get('status')} ({gate.get('reason')}): {gate.get('message')}")
        s.table(kubectl(c, "get", "ocrs,deploy,svc,pdb", "-n", NAMESPACE),
                f"kubectl -n {NAMESPACE} get ocrs,deploy,svc,pdb")
        s.table(kubectl(c, "get", "pods", "-n", NAMESPACE, "-o", "wide"), f"kubectl -n {NAMESPACE} get pods -o wide")
        if not self.real:
            s.say(f"{DIM}(pod IPs are kwok's fake addresses: nothing runs in these pods){RESET}")
            return
        pod = sorted(p["metadata"]["name"] for p in get_json(c, "pods", "-n", NAMESPACE)["items"])[0]
        logs = kubectl(c, "logs", pod, "-n", NAMESPACE)
        lines = [ln for ln in logs.splitlines()
                 if any(k in ln for k in ("listening on", "weights loaded", "warm-up done", "ready: model"))]
        s.table("\n".join(ln[:150] for ln in lines) or logs[-800:], f"kubectl -n {NAMESPACE} logs {pod}   (abridged)")

    # 5
    def failing_upgrade(self) -> None:
        s, c = self.say, self.cluster
        before = get_json(c, "ocrs", self.name, "-n", NAMESPACE)
        good = before["status"]["lastGoodRevision"]
        if self.real:
            patch = CRASH_PATCH
            s.step("Upgrade to a broken version, and watch the automatic rollback",
                   f"spec.model.path {MISSING_MODEL}: weights this image does not carry. The Deployment starts",
                   "a new pod next to the old ones (maxUnavailable 0: they keep serving); its server exits at",
                   "startup naming the missing directory, the kubelet restarts it into CrashLoopBackOff, and",
                   "the operator writes the last good pod template back into the Deployment and says why.")
        else:
            bad_image = before["spec"]["image"].rsplit(":", 1)[0] + ":1.1.0-broken"
            patch = {"spec": {"image": bad_image, "podLabels": {SIMULATE_LABEL: "crashloop"}}}
            s.step("Upgrade to a broken version, and watch the automatic rollback",
                   f"New image {bad_image.rsplit('/', 1)[-1]}, and a pod label that makes kwok crash its",
                   "container (CrashLoopBackOff), as a real broken image would. The Deployment starts a new",
                   "pod next to the old ones (maxUnavailable 0: they keep serving); the operator sees the",
                   "crash loop, writes the last good pod template back into the Deployment, and says why.")
        old_pods = {p["metadata"]["name"] for p in get_json(c, "pods", "-n", NAMESPACE)["items"]}
        kubectl(c, "patch", "ocrs", self.name, "-n", NAMESPACE, "--type=merge", "-p", json.dumps(patch))
        self.seen = None
        crashed: dict[str, str] = {}

        def rolled_back():
            if self.real and not crashed:
                for p in get_json(c, "pods", "-n", NAMESPACE)["items"]:
                    st = (p["status"].get("containerStatuses") or [{}])[0]
                    if p["metadata"]["name"] not in old_pods and st.get("lastState", {}).get("terminated"):
                        crashed["pod"] = p["metadata"]["name"]
                        crashed["exit"] = str(st["lastState"]["terminated"]["exitCode"])
                        crashed["log"] = kubectl(c, "logs", crashed["pod"], "-n", NAMESPACE, "--previous", check=False)
            st = self.observe().get("status", {})
            phase = (st.get("rollout") or {}).get("phase")
            return phase == "RolledBack" and st.get("currentRevision") == good and st.get("failedRevision")

        wait(rolled_back, self.args.timeout, "the automatic rollback", log=LOGS / "operator.log")
        o = get_json(c, "ocrs", self.name, "-n", NAMESPACE)
        st = o["status"]
        s.ok(f"rolled back: revision {st['failedRevision']} failed ({st.get('failedReason')}), "
             f"the Deployment runs {st['currentRevision']} again")
        if crashed:
            error = [ln for ln in crashed["log"].splitlines() if "error" in ln.lower()] or crashed["log"].splitlines()[-3:]
            s.table("\n".join(ln[:150] for ln in error[-3:]),
                    f"kubectl -n {NAMESPACE} logs {crashed['pod']} --previous   (exit code {crashed['exit']})")
        s.table(kubectl(c, "get", "ocrs", self.name, "-n", NAMESPACE, "-o", "wide"),
                f"kubectl -n {NAMESPACE} get ocrs {self.name} -o wide")
        conds = "\n".join(
            f"{x['type']:<15} {x['status']:<7} {x.get('reason', ''):<24} {x.get('message', '')[:90]}"
            for x in st.get("conditions", []))
        s.table("TYPE            STATUS  REASON                   MESSAGE\n" + conds, "status.conditions")
        events = kubectl(c, "get", "events", "-n", NAMESPACE, "--field-selector",
                         f"involvedObject.kind=OcrService,involvedObject.uid={o['metadata']['uid']},type=Warning",
                         "-o", "custom-columns=TYPE:.type,REASON:.reason,MESSAGE:.message")
        s.table(events, f"kubectl -n {NAMESPACE} get events --field-selector type=Warning,involvedObject.kind=OcrService")
        s.table(kubectl(c, "get", "rs", "-n", NAMESPACE, "-o",
                        "custom-columns=NAME:.metadata.name,REVISION:.metadata.labels.ocr\\.causalflow\\.dev/revision,"
                        "DESIRED:.spec.replicas,READY:.status.readyReplicas"),
                f"kubectl -n {NAMESPACE} get rs   (the failed revision's ReplicaSet is scaled to 0)")
        s.say("The operator will not retry that revision until the spec changes: fix it and apply to roll forward.")

    # 6
    def worse_model(self) -> None:
        s, c = self.say, self.cluster
        s.step("Upgrade to a worse model, and watch the quality gate stop it",
               "Tiny model B: the same architecture and tokenizer as the image's model, other random weights",
               "(generated once into .demo/models/, mounted by a hostPath PersistentVolume: spec.model.pvc).",
               "Its pod loads and passes every probe, so no health check can tell it is worse; the readiness",
               "gate keeps it out of the Service while the operator OCRs the golden pages on it and compares",
               "them with the baseline. They read far apart: the revision fails with QualityRegression and",
               "is rolled back like a crash, before any client reaches it.")
        if not self.real:
            s.note(f"skipped: no real node ({self.no_real_node}); kwok's pods run no server, so there is no page "
                   "to OCR and nothing for the gate to compare")
            return
        before = get_json(c, "ocrs", self.name, "-n", NAMESPACE)
        good, crashed = before["status"]["lastGoodRevision"], before["status"].get("failedRevision")
        sub = tiny_model_b()
        model_b_claim(c)
        s.ok(f"tiny model B in {(MODELS_DIR / sub).relative_to(ROOT)}/{MODEL_NAME}; PVC {MODEL_B_CLAIM} Bound to "
             f"PV {MODEL_B_PV}")
        patch = model_b_patch(sub)
        kubectl(c, "patch", "ocrs", self.name, "-n", NAMESPACE, "--type=merge", "-p", json.dumps(patch))
        t0 = time.monotonic()
        self.seen, held = None, {}

        def stopped():
            o = self.observe()
            st = o.get("status", {})
            gate = st.get("qualityGate") or {}
            if not held and gate.get("phase") == "Running" and gate.get("revision") not in (None, good):
                held["pods"] = kubectl(c, "get", "pods", "-n", NAMESPACE, "-o", "wide")
            if st.get("currentRevision") not in (None, good) and st.get("lastGoodRevision") == st.get("currentRevision"):
                raise DemoError(f"model B passed the quality gate ({gate.get('message')}); see {LOGS / 'operator.log'}")
            return (o["metadata"]["generation"] == st.get("observedGeneration")
                    and (st.get("rollout") or {}).get("phase") == "RolledBack" and st.get("currentRevision") == good
                    and st.get("failedRevision") not in (None, crashed) and st.get("failedRevision") == st.get("desiredRevision"))

        wait(stopped, self.args.timeout, "the quality gate's verdict and the rollback", log=LOGS / "operator.log")
        o = get_json(c, "ocrs", self.name, "-n", NAMESPACE)
        st = o["status"]
        gate, bad = st.get("qualityGate") or {}, st["failedRevision"]
        s.ok(f"revision {bad} (model B) failed: {st.get('failedReason')} {time.monotonic() - t0:.1f}s after the patch "
             f"(the gate: {gate.get('seconds')}s on pod {gate.get('pod')}); the Deployment runs {good} again")
        if held:
            s.table(held["pods"], f"kubectl -n {NAMESPACE} get pods -o wide   (while the gate ran: model B's pod "
                                  "Running, its container ready, the readiness gate 0/1: not in the Service)")
        pages = "\n".join(f"{p['name']:<18} {p['distance']:.4f}" for p in gate.get("pages") or [])
        s.table(f"PAGE               DISTANCE   (against {gate.get('against')})\n{pages}",
                "status.qualityGate.pages")
        cond = condition(o, "QualityGate")
        s.table(f"QualityGate={cond.get('status')} ({cond.get('reason')})\n{cond.get('message')}",
                "status.conditions[QualityGate]")
        events = kubectl(c, "get", "events", "-n", NAMESPACE, "--sort-by=.lastTimestamp", "--field-selector",
                         f"involvedObject.kind=OcrService,involvedObject.uid={o['metadata']['uid']}",
                         "-o", "custom-columns=TYPE:.type,REASON:.reason,MESSAGE:.message").splitlines()
        mine = [ln for ln in events[1:] if bad in ln]
        s.table("\n".join(events[:1] + mine), f"kubectl -n {NAMESPACE} get events   (those of revision {bad})")
        s.table(kubectl(c, "get", "ocrs", self.name, "-n", NAMESPACE, "-o", "wide"),
                f"kubectl -n {NAMESPACE} get ocrs {self.name} -o wide")
        s.say("Model B's pod never became an endpoint of the Service: clients reached only the old pods.")

    # 7
    def ocr_through_the_service(self) -> None:
        s, c = self.say, self.cluster
        s.step("OCR a sample page through the OcrService's Service",
               "POST /v1/ocr to the Service's ClusterIP from this machine: kube-proxy's rules send it to one",
               f"of the pods on {NODE_NAME}, where the server runs the tiny model on the CPU. The text is",
               "gibberish (random weights); what is real: the request path, the global view + crops layout,",
               "token counts, timings, the JSON shape.")
        if not self.real:
            s.note(f"skipped: no real node ({self.no_real_node}); kwok's pods serve nothing")
            return
        sample = DEMO_DIR / "sample-page.png"
        subprocess.run([PY, str(ROOT / "hack" / "sample-page.py"), str(sample)], check=True,
                       capture_output=True, cwd=ROOT)
        svc = get_json(c, "svc", self.name, "-n", NAMESPACE)
        base = f"http://{svc['spec']['clusterIP']}:{svc['spec']['ports'][0]['port']}"
        status, health = wait(lambda: http_json(base + "/health", timeout=5), 30,
                              f"GET {base}/health through the Service")
        s.ok(f"GET {base}/health -> {status}: model {health.get('model')!r}, device {health.get('device')}")
        body, ctype = multipart("file", "sample-page.png", sample.read_bytes(), "image/png")
        t0 = time.monotonic()
        try:
            status, result = http_json(base + "/v1/ocr", timeout=600, data=body, headers={"Content-Type": ctype})
        except urllib.error.HTTPError as e:
            raise DemoError(f"POST /v1/ocr answered {e.code}: {e.read()[:300]!r}") from None
        took = time.monotonic() - t0
        s.ok(f"POST {base}/v1/ocr {sample.relative_to(ROOT)} -> {status} in {took:.1f}s")
        s.table(summarize(result), "response (abridged)")
        (DEMO_DIR / "ocr-response.json").write_text(json.dumps(result, indent=2, ensure_ascii=False))
        s.say(f"full response: {(DEMO_DIR / 'ocr-response.json').relative_to(ROOT)}")

    # 8
    def finish(self) -> None:
        s = self.say
        s.step("Clean up")
        stopped = self.procs.stop_all()
        if stopped:
            s.ok("stopped " + ", ".join(stopped))
        if self.cluster is not None and self.own_cluster and not self.args.keep:
            self.cluster.stop()
            s.ok("stopped the local cluster" + (" (the real node's containers, mounts, bridges and rules with it)"
                                               if self.cluster.real_node is not None else ""))
        elif self.cluster is not None:
            s.ok("the cluster keeps running:")
            print(f"\n    export PATH={self.cluster.bin_dir}:$PATH")
            print(f"    export KUBECONFIG={self.cluster.kubeconfig}")
            if self.image:
                print(f"    export CAUSALFLOW_SERVER_IMAGE={self.image}")
            print(f"    kubectl -n {NAMESPACE} get ocrs,deploy,svc,pods -o wide")
            print(f"    .venv/bin/python -m ocr_operator --namespace {NAMESPACE}   # run the operator again")
            print("    make cluster-down                                          # stop it\n")

    def abort(self) -> None:
        """Stop whatever was started, after a failure or Ctrl-C."""
        self.procs.stop_all()
        if self.cluster is not None and self.own_cluster and not self.args.keep:
            self.cluster.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description="CausalFlow OCR demo on a local cluster (make demo)")
    parser.add_argument("--keep", action="store_true",
                        help="leave the local cluster running at the end and print its KUBECONFIG line")
    parser.add_argument("--timeout", type=float, default=120, help="seconds each cluster step may take")
    parser.add_argument("--skip-ocr", action="store_true", help="skip step 7 (the OCR request through the Service)")
    args = parser.parse_args()
    DEMO_DIR.mkdir(exist_ok=True)
    shutil.rmtree(LOGS, ignore_errors=True)
    LOGS.mkdir(parents=True)
    demo = Demo(args)
    print(f"{BOLD}CausalFlow OCR demo{RESET}: an OcrService on a local cluster, an automatic rollback, "
          f"a quality gate stopping a worse model, and one OCR request.\n{DIM}process logs: {LOGS.relative_to(ROOT)}/{RESET}")
    try:
        demo.start_cluster()
        demo.install_and_run_operator()
        demo.server_image()
        demo.apply_example()
        demo.failing_upgrade()
        demo.worse_model()
        if args.skip_ocr:
            demo.say.step("OCR a sample page through the Service (skipped: --skip-ocr)")
        else:
            demo.ocr_through_the_service()
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
