"""The real API server agrees with the contract test's Python evaluation of the CRD.

tests/unit/test_config_contract.py decides "the CRD accepts this spec" with jsonschema and celpy (a
pure-Python CEL) so it can check thousands of specs in seconds. Here a sample of the same generated
specs (every inputSize/baseSize pair, the visual-token values on and next to each crop step) goes
to the local control plane's kube-apiserver with `kubectl apply --dry-run=server`, in one request
stream, and each verdict must match: CEL's integer division, `has()` on defaulted fields and the
schema defaults behave the same in both, with the default engine and with vllm (whose unset token
cap the rules read as 1120). Uses the kwok cluster's API server only; nothing runs.
"""

from __future__ import annotations

import itertools
import re
import uuid

import pytest
import yaml

from tests.unit.test_config_contract import SIZES, crd_errors, ocrservice_spec

pytestmark = pytest.mark.e2e

TOKENS = (None, 256, 257, 543, 544, 545, 688, 689, 1024, 1120)


@pytest.fixture(scope="module")
def contract_ns(cluster, ocr_crd):
    name = f"t-contract-{uuid.uuid4().hex[:5]}"
    cluster.kubectl("create", "namespace", name)
    yield name
    cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)


def sample() -> list[dict]:
    out = []
    for inp, base, lo, hi in itertools.product(SIZES, SIZES, TOKENS, TOKENS):
        if lo is not None and hi is not None and (lo, hi) not in {(256, 256), (257, 543), (257, 544), (545, 688),
                                                                  (545, 687), (689, 1024), (1120, 1120), (544, 257)}:
            continue  # token pairs: a handful per size pair keeps it to one quick request stream
        values = {"inputSize": inp, "baseSize": base, "minVisualTokens": lo, "maxVisualTokens": hi}
        out.append({k: v for k, v in values.items() if v is not None})
    return out


@pytest.mark.parametrize("engine", (None, "vllm"), ids=lambda e: e or "engine-defaulted")
def test_the_api_server_accepts_exactly_the_specs_the_python_crd_check_accepts(cluster, contract_ns, engine):
    specs = {f"c-{i:03d}": inference for i, inference in enumerate(sample())}
    engine_field = {"engine": engine} if engine else {}
    docs = [{"apiVersion": "ocr.causalflow.dev/v1alpha1", "kind": "OcrService",
             "metadata": {"name": name, "namespace": contract_ns},
             "spec": {"image": "registry.invalid/causalflow/ocr-server:1.0", **engine_field, "inference": inference}}
            for name, inference in specs.items()]
    proc = cluster.kubectl("apply", "--dry-run=server", "-f", "-", input=yaml.safe_dump_all(docs), check=False,
                           timeout=120)
    accepted = set(re.findall(r'ocrservice\.ocr\.causalflow\.dev/(c-\d{3}) created', proc.stdout))
    rejected = set(re.findall(r'OcrService\.ocr\.causalflow\.dev "(c-\d{3})" is invalid', proc.stderr))
    assert accepted | rejected == set(specs), f"unparsed kubectl output:\n{proc.stdout[-1500:]}\n{proc.stderr[-1500:]}"
    disagree = []
    for name, inference in specs.items():
        python_ok = not crd_errors(ocrservice_spec(inference, engine))
        if python_ok != (name in accepted):
            disagree.append(f"{inference}: API server {'accepts' if name in accepted else 'rejects'}, "
                            f"Python check {'accepts' if python_ok else 'rejects'}")
    assert disagree == [], "\n".join(disagree)
    assert accepted and rejected, "the sample must hold both verdicts"
    assert all(specs[n].get("inputSize", 768) < specs[n].get("baseSize", 1024) for n in accepted)


def test_the_api_server_accepts_an_ocrservice_that_only_chooses_the_vllm_engine(cluster, contract_ns):
    """spec.engine: vllm beside the required image and nothing else: the schema sets no token cap that
    vLLM refuses (maxVisualTokens has no schema default; the operator fills in 1120), so it is accepted."""
    doc = {"apiVersion": "ocr.causalflow.dev/v1alpha1", "kind": "OcrService",
           "metadata": {"name": "vllm-alone", "namespace": contract_ns},
           "spec": {"image": "registry.invalid/causalflow/ocr-server-vllm:1.0", "engine": "vllm"}}
    proc = cluster.kubectl("apply", "--dry-run=server", "-o", "yaml", "-f", "-", input=yaml.safe_dump(doc),
                           check=False)
    assert proc.returncode == 0, f"spec.engine: vllm alone was refused: {proc.stderr}"
    defaulted = yaml.safe_load(proc.stdout)["spec"]
    assert defaulted["engine"] == "vllm" and "maxVisualTokens" not in defaulted["inference"]
    assert crd_errors(ocrservice_spec({}, "vllm")) == [], "the Python check agrees"
