"""The objects an OcrBatch runs as (ocr_operator.ocrbatch.render): the workers' ConfigMap and Indexed Job."""

import json

from ocr_batch_worker import config, contract
from ocr_operator.ocrbatch import render

SETTINGS = render.WorkerSettings(image="registry.example/ocr-operator:1", progress_interval=5)


def batch(**spec_over) -> dict:
    spec = {"service": "invoices", "input": {"pvc": {"claimName": "docs", "path": "/in"}},
            "output": {"pvc": {"claimName": "results", "path": "/"}}, "parallelism": 3,
            "concurrencyPerWorker": 4, "limits": {"maxDocumentBytes": 100 * 1024 * 1024}, **spec_over}
    return {"apiVersion": "ocr.causalflow.dev/v1alpha1", "kind": "OcrBatch",
            "metadata": {"name": "archive", "namespace": "ocr", "uid": "u-1"}, "spec": spec}


def worker_config(b) -> config.WorkerConfig:
    cm = render.render_configmap(b, "http://10.96.0.7:8080", SETTINGS)
    return config.parse(json.loads(cm["data"][render.CONFIG_KEY]), index=2)


def test_the_configmap_is_a_configuration_the_worker_accepts():
    cfg = worker_config(batch(options={"mode": "free", "maxNewTokens": 64}))
    assert cfg.service_url == "http://10.96.0.7:8080"
    assert (cfg.input.path, cfg.output.path) == ("/batch/input/in", "/batch/output")
    assert (cfg.shards, cfg.index, cfg.concurrency, cfg.progress_interval) == (3, 2, 4, 5.0)
    assert cfg.options == {"prompt_mode": "free", "max_new_tokens": "64"}


def test_input_and_output_on_one_claim_mount_it_once():
    b = batch(output={"pvc": {"claimName": "docs", "path": "/out"}})
    cfg = worker_config(b)
    assert (cfg.input.path, cfg.output.path) == ("/batch/volume/in", "/batch/volume/out")
    pod = render.render_job(b, SETTINGS)["spec"]["template"]["spec"]
    assert [v["persistentVolumeClaim"]["claimName"] for v in pod["volumes"] if "persistentVolumeClaim" in v] == ["docs"]


def test_the_job_is_indexed_one_index_per_shard_with_per_index_retries():
    job = render.render_job(batch(deadlineSeconds=3600), SETTINGS)
    spec = job["spec"]
    assert (spec["completionMode"], spec["completions"], spec["parallelism"]) == ("Indexed", 3, 3)
    assert spec["backoffLimitPerIndex"] == render.BACKOFF_LIMIT_PER_INDEX
    assert spec["activeDeadlineSeconds"] == 3600
    rules = spec["podFailurePolicy"]["rules"]
    assert rules[0] == {"action": "FailIndex", "onExitCodes": {"containerName": "worker", "operator": "In",
                                                                 "values": [contract.EXIT_FATAL]}}
    assert rules[1]["action"] == "Ignore" and rules[1]["onPodConditions"] == [{"type": "DisruptionTarget"}]
    assert job["metadata"]["ownerReferences"] == [{"apiVersion": "ocr.causalflow.dev/v1alpha1", "kind": "OcrBatch",
                                                   "name": "archive", "uid": "u-1", "controller": True,
                                                   "blockOwnerDeletion": True}]
    assert "activeDeadlineSeconds" not in render.render_job(batch(), SETTINGS)["spec"]



def test_a_batch_created_suspended_makes_its_job_suspended_and_otherwise_leaves_it_to_the_default():
    assert render.render_job(batch(suspend=True), SETTINGS)["spec"]["suspend"] is True
    assert "suspend" not in render.render_job(batch(), SETTINGS)["spec"]

def test_the_worker_runs_the_operator_image_restricted_with_memory_for_two_documents():
    pod = render.render_job(batch(), SETTINGS)["spec"]["template"]["spec"]
    [c] = pod["containers"]
    assert (c["image"], c["command"]) == (SETTINGS.image, ["python", "-m", "ocr_batch_worker"])
    assert c["resources"]["limits"]["memory"] == "456Mi"  # 256 Mi + 2 x 100 Mi
    assert c["securityContext"] == {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                                    "capabilities": {"drop": ["ALL"]}}
    assert pod["securityContext"]["runAsNonRoot"] and pod["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault"
    assert pod["restartPolicy"] == "Never" and pod["automountServiceAccountToken"] is False
    mounts = {m["mountPath"]: m.get("readOnly", False) for m in c["volumeMounts"]}
    assert mounts["/batch/input"] is True and mounts["/batch/output"] is False


def test_the_workers_labels_tie_them_to_the_batch_and_never_to_an_ocrservice():
    labels = render.render_job(batch(), SETTINGS)["spec"]["template"]["metadata"]["labels"]
    assert labels[render.LABEL_BATCH] == "archive"
    assert labels["app.kubernetes.io/managed-by"] == "causalflow-ocr-operator"  # seen by the filtered watch
    assert "app.kubernetes.io/instance" not in labels


def test_s3_credentials_come_from_the_secret_as_environment_never_from_the_configmap():
    b = batch(input={"s3": {"url": "s3://docs/in/", "credentialsSecret": "s3-creds"}})
    [c] = render.render_job(b, SETTINGS)["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e.get("valueFrom", {}).get("secretKeyRef") for e in c["env"]}
    assert env["INPUT_AWS_ACCESS_KEY_ID"] == {"name": "s3-creds", "key": "AWS_ACCESS_KEY_ID"}
    assert env["INPUT_AWS_ENDPOINT_URL"] == {"name": "s3-creds", "key": "AWS_ENDPOINT_URL", "optional": True}
    cm = render.render_configmap(b, "http://10.96.0.7:8080", SETTINGS)
    assert json.loads(cm["data"]["config.json"])["input"] == {"s3": {"url": "s3://docs/in/"}}


def test_an_ocrservice_s_api_keys_are_mounted_read_only_and_named_in_the_configuration():
    b = batch()
    pod = render.render_job(b, SETTINGS, api_key=("keys", "api-keys"))["spec"]["template"]["spec"]
    [volume] = [v for v in pod["volumes"] if v["name"] == "api-keys"]
    assert volume["secret"] == {"secretName": "keys", "defaultMode": 0o440, "items": [{"key": "api-keys", "path": "api-keys"}]}
    [mount] = [m for m in pod["containers"][0]["volumeMounts"] if m["name"] == "api-keys"]
    assert mount == {"name": "api-keys", "mountPath": "/var/run/ocr-batch/auth", "readOnly": True}
    cm = render.render_configmap(b, "http://10.96.0.7:8080", SETTINGS, api_key=True)
    assert config.parse(json.loads(cm["data"][render.CONFIG_KEY]), index=0).api_key_file == render.API_KEY_FILE
    assert "api-keys" not in [v["name"] for v in render.render_job(b, SETTINGS)["spec"]["template"]["spec"]["volumes"]]
    assert worker_config(b).api_key_file is None


def test_over_https_the_workers_trust_the_certificate_s_ca_and_check_the_service_name():
    b, tls = batch(), render.Tls("cert", "ca.crt", "invoices.ocr.svc")
    pod = render.render_job(b, SETTINGS, tls=tls)["spec"]["template"]["spec"]
    [volume] = [v for v in pod["volumes"] if v["name"] == "service-ca"]
    assert volume["secret"]["items"] == [{"key": "ca.crt", "path": "ca.crt"}]  # never the private key
    assert {"name": "service-ca", "mountPath": "/var/run/ocr-batch/tls", "readOnly": True} in \
        pod["containers"][0]["volumeMounts"]
    cm = render.render_configmap(b, "https://10.96.0.7:8080", SETTINGS, tls=tls)
    cfg = config.parse(json.loads(cm["data"][render.CONFIG_KEY]), index=0)
    assert (cfg.service_url, cfg.ca_file, cfg.server_name) == ("https://10.96.0.7:8080", render.CA_FILE, "invoices.ocr.svc")


def test_the_workers_go_where_the_ocrservice_pods_may():
    placement = {"nodeSelector": {"pool": "gpu"}, "tolerations": [{"key": "gpu", "operator": "Exists"}]}
    pod = render.render_job(batch(), SETTINGS, placement=placement)["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"pool": "gpu"} and pod["tolerations"] == placement["tolerations"]


def test_the_workers_pod_name_comes_from_the_downward_api_to_name_its_progress_object():
    """Each pod attempt of an index writes its own progress object (results.progress_key)."""
    c = render.render_job(batch(), SETTINGS)["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e for e in c["env"]}
    assert env[contract.POD_NAME_ENV]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.name"}}
