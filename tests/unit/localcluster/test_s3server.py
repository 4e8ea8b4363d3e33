"""The harness's S3 server (localcluster/s3server.py): versitygw listens only where it may, keeps its
credentials off the command line, and leaves nothing behind when stopped."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from localcluster.nodeconfig import NODE_IP
from localcluster.s3server import LOOPBACK, S3Server, S3ServerError, gateway_argv, gateway_env, listen_addresses


@pytest.mark.parametrize("hosts", [("0.0.0.0",), ("",), (LOOPBACK, "10.1.2.3"), ("::",), ()])
def test_any_listen_address_but_loopback_and_the_node_ip_is_refused(hosts):
    with pytest.raises(S3ServerError, match="hosts"):
        listen_addresses(hosts, 9000)


def test_listens_on_loopback_and_the_node_ip_each_once():
    assert listen_addresses((LOOPBACK, NODE_IP, LOOPBACK), 9000) == [f"{LOOPBACK}:9000", f"{NODE_IP}:9000"]


def test_credentials_go_in_the_environment_and_the_callers_vgw_settings_do_not(monkeypatch, tmp_path):
    monkeypatch.setenv("VGW_WEBUI", ":7071")  # would open a second listener
    argv = gateway_argv(Path("/bin/versitygw"), [f"{LOOPBACK}:9000"], tmp_path)
    env = gateway_env("cfo-key", "s3cr3t", "us-east-1", tmp_path)
    assert not any("s3cr3t" in a for a in argv)
    assert env["ROOT_SECRET_KEY"] == "s3cr3t" and env["ROOT_ACCESS_KEY"] == "cfo-key"
    assert set(env) == {"PATH", "TMPDIR", "ROOT_ACCESS_KEY", "ROOT_SECRET_KEY", "VGW_REGION"}


def _listening(pid: int) -> set[str]:
    out = subprocess.run(["ss", "-H", "-ltnp"], capture_output=True, text=True, check=True).stdout
    return {line.split()[3] for line in out.splitlines() if f"pid={pid}," in line}


def test_started_server_listens_only_on_its_loopback_port_and_stop_leaves_nothing():
    s3 = S3Server().start()
    pid, workdir = s3.pid, s3.dir
    try:
        assert _listening(pid) == {f"{LOOPBACK}:{s3.port}"}
        assert s3.secret_key not in Path(f"/proc/{pid}/cmdline").read_text()
    finally:
        s3.stop()
    assert s3.proc.returncode is not None and not Path(f"/proc/{pid}").exists()  # exited and reaped
    assert not workdir.exists()


def test_an_access_log_names_each_requests_client_address():
    import boto3

    with S3Server(access_log=True) as s3:
        boto3.client("s3", endpoint_url=s3.endpoint, aws_access_key_id=s3.access_key,
                     aws_secret_access_key=s3.secret_key, region_name=s3.region).create_bucket(Bucket="docs")
        assert s3.clients() == [(LOOPBACK, "s3_CreateBucket")]
        assert not any(s3.secret_key in a for a in s3.proc.args)
