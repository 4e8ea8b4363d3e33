"""The worker's configuration (ocr_batch_worker.config): defaults from ocr_limits, errors naming the field."""

import json

import pytest

from ocr_limits.batch import batch_setting
from ocr_batch_worker.config import ConfigError, load, parse

BASE = {"serviceUrl": "http://ocr.ns.svc:8080/", "input": {"pvc": {"path": "/in"}}, "output": {"pvc": {"path": "/out"}}}


def test_a_minimal_configuration_takes_the_ocrbatch_defaults():
    cfg = parse(BASE, 0)
    assert cfg.service_url == "http://ocr.ns.svc:8080" and (cfg.input.kind, cfg.input.path) == ("pvc", "/in")
    assert cfg.shards == batch_setting("parallelism").default
    assert cfg.concurrency == batch_setting("concurrencyPerWorker").default
    assert cfg.max_document_bytes == batch_setting("limits.maxDocumentBytes").default
    assert cfg.max_pages == batch_setting("limits.maxPagesPerDocument").default
    assert cfg.options == {}


def test_options_become_the_servers_form_fields():
    cfg = parse({**BASE, "options": {"mode": "free", "maxNewTokens": 100}}, 0)
    assert cfg.options == {"prompt_mode": "free", "max_new_tokens": "100"}


@pytest.mark.parametrize("change, index, field", [
    ({"serviceUrl": "ftp://x"}, 0, "serviceUrl"),
    ({"input": {"pvc": {"path": "/a"}, "s3": {"url": "s3://b/p"}}}, 0, "input"),
    ({"output": {"pvc": {"path": "relative"}}}, 0, "output.pvc.path"),
    ({"input": {"s3": {"url": "http://b/p"}}}, 0, "input.s3.url"),
    ({"options": {"mode": "fast"}}, 0, "options.mode"),
    ({"options": {"mode": "free", "prompt": "x"}}, 0, "options.prompt"),
    ({"options": {"maxNewTokens": 0}}, 0, "options.maxNewTokens"),
    ({"options": {"temperature": 1}}, 0, "options.temperature"),
    ({"parallelism": 65}, 0, "parallelism"),
    ({"parallelism": 2}, 2, "JOB_COMPLETION_INDEX"),
    ({"limits": {"maxDocumentBytes": "big"}}, 0, "limits.maxDocumentBytes"),
    ({"concurrencyPerWorker": True}, 0, "concurrencyPerWorker"),
    ({"apiKeyFile": "key"}, 0, "apiKeyFile"),
])
def test_an_invalid_configuration_is_refused_naming_the_field(change, index, field):
    with pytest.raises(ConfigError, match=f"^{field}"):
        parse({**BASE, **change}, index)


def test_it_is_read_from_the_mounted_file_and_the_job_index(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**BASE, "parallelism": 3}))
    cfg = load({"BATCH_CONFIG_FILE": str(path), "JOB_COMPLETION_INDEX": "2"})
    assert (cfg.index, cfg.shards) == (2, 3)


@pytest.mark.parametrize("env, says", [
    ({}, "BATCH_CONFIG_FILE"),
    ({"BATCH_CONFIG": "[1]"}, "BATCH_CONFIG is not a JSON object"),
    ({"BATCH_CONFIG": "{"}, "BATCH_CONFIG is not JSON"),
    # Deeper than the interpreter's recursion limit: a ConfigError, not the parser's RecursionError
    ({"BATCH_CONFIG": "[" * 100_000 + "]" * 100_000}, "BATCH_CONFIG is nested more than 64 deep"),
    # Bytes that are not UTF-8 (os.environ holds them as lone surrogates)
    ({"BATCH_CONFIG": '{"a": "\udcff"}'}, "BATCH_CONFIG is not JSON"),
    ({"BATCH_CONFIG": json.dumps(BASE), "JOB_COMPLETION_INDEX": "-1"}, "JOB_COMPLETION_INDEX"),
    ({"BATCH_CONFIG_FILE": "/nonexistent/config.json"}, "cannot be read"),
])
def test_a_missing_or_malformed_configuration_is_refused(env, says):
    with pytest.raises(ConfigError, match=says):
        load(env)


def test_a_configuration_file_that_is_not_utf8_is_refused_naming_it(tmp_path):
    path = tmp_path / "config.json"
    path.write_bytes(b'{"service": "\xff"}')
    with pytest.raises(ConfigError, match="BATCH_CONFIG_FILE is not JSON"):
        load({"BATCH_CONFIG_FILE": str(path)})


def test_the_worker_sends_the_first_key_of_an_api_keys_file_as_the_server_reads_it():
    from ocr_batch_worker.program import first_key

    assert first_key("# rotated 2026-12\n\n key-new-0001 , key-old-0001\nkey-3\n") == "key-new-0001"
    assert first_key("only-one-key") == "only-one-key"
    assert first_key("# nothing\n , \n") is None


def test_a_server_name_that_is_not_a_dns_name_is_refused_naming_the_field():
    base = {"serviceUrl": "https://10.96.0.7:8080", "input": {"pvc": {"path": "/in"}},
            "output": {"pvc": {"path": "/out"}}, "parallelism": 1}
    assert parse({**base, "serverName": "invoices.ocr.svc"}, index=0).server_name == "invoices.ocr.svc"
    for bad in ("Invoices.ocr.svc", "a" * 300, "x/y", 7):
        with pytest.raises(ConfigError, match="serverName: must be a DNS name"):
            parse({**base, "serverName": bad}, index=0)
