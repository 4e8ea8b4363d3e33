"""`helm test` for the causalflow-ocr chart (standard library only; runs in the operator image).

With the operator's own ServiceAccount it checks that:
1. the OcrService CRD is Established,
2. the ServiceAccount may list OcrServices in every watched namespace (its RBAC works),
3. the operator's liveness endpoint answers 200 (kopf is running and healthy).
Each check prints one line; any failure exits 1 with the reason.
"""

import json
import os
import ssl
import sys
import urllib.error
import urllib.request

SA = "/var/run/secrets/kubernetes.io/serviceaccount"
API = os.environ.get("KUBERNETES_API", "https://kubernetes.default.svc")
TOKEN_FILE = os.environ.get("TOKEN_FILE", SA + "/token")
CA_FILE = os.environ.get("CA_FILE", SA + "/ca.crt")
NAMESPACES = [n for n in os.environ.get("WATCH_NAMESPACES", "").split(",") if n]
HEALTH_URL = os.environ.get("HEALTH_URL", "")
CRD = "ocrservices.ocr.causalflow.dev"


def api_get(path):
    with open(TOKEN_FILE) as f:
        token = f.read().strip()
    ctx = ssl.create_default_context(cafile=CA_FILE)
    req = urllib.request.Request(API + path, headers={"Authorization": "Bearer " + token})
    with urllib.request.urlopen(req, context=ctx, timeout=10) as resp:
        return json.load(resp)


def check(name, fn):
    try:
        detail = fn()
    except urllib.error.HTTPError as e:
        print(f"FAIL {name}: HTTP {e.code} {e.reason}")
        sys.exit(1)
    except Exception as e:  # noqa: BLE001 - any failure is a failed test, with its reason
        print(f"FAIL {name}: {type(e).__name__}: {e}")
        sys.exit(1)
    print(f"ok   {name}: {detail}")


def crd_established():
    # list with a field selector: the operator's role may list and watch CRDs, not get them
    found = api_get("/apis/apiextensions.k8s.io/v1/customresourcedefinitions?fieldSelector=metadata.name%3D" + CRD)
    if not found["items"]:
        raise RuntimeError(f"{CRD} is not installed")
    crd = found["items"][0]
    conds = {c["type"]: c["status"] for c in crd.get("status", {}).get("conditions", [])}
    if conds.get("Established") != "True":
        raise RuntimeError(f"{CRD} is not Established: {conds}")
    return "Established"


def list_ocrservices():
    paths = [f"/apis/ocr.causalflow.dev/v1alpha1/namespaces/{ns}/ocrservices" for ns in NAMESPACES]
    counts = []
    for path in paths or ["/apis/ocr.causalflow.dev/v1alpha1/ocrservices"]:
        counts.append(len(api_get(path)["items"]))
    where = ",".join(NAMESPACES) or "all namespaces"
    return f"{sum(counts)} OcrService(s) in {where}"


def operator_live():
    with urllib.request.urlopen(HEALTH_URL, timeout=10) as resp:
        if resp.status != 200:
            raise RuntimeError(f"HTTP {resp.status}")
    return f"200 from {HEALTH_URL}"


if __name__ == "__main__":
    check("CRD", crd_established)
    check("RBAC", list_ocrservices)
    if HEALTH_URL:
        check("liveness", operator_live)
    print("all checks passed")
