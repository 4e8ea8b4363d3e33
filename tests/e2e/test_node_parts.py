"""The real node's pure parts, without a cluster: the leftover diff and the one-binary image archive."""

from __future__ import annotations

import hashlib
import json
import tarfile

from localcluster import machine
from localcluster.nodeimage import docker_archive, image_ref


def test_leftovers_names_what_was_added_removed_and_changed():
    before = {"links": {"eth0"}, "sysctls": {"net/ipv4/ip_forward": "0", "kernel/panic": "1"}}
    after = {"links": {"eth0", "cfo-pods"}, "sysctls": {"net/ipv4/ip_forward": "1", "kernel/panic": "1",
                                                       "net/ipv4/new_key": "5"}}
    assert machine.leftovers(before, after) == {
        "links": ["+ cfo-pods"], "sysctls": ["net/ipv4/ip_forward: '0' -> '1'"]}
    assert machine.leftovers(after, before)["links"] == ["- cfo-pods"]
    assert machine.leftovers(before, before) == {}


def test_volatile_sysctls_are_left_out_but_all_and_default_interface_settings_are_kept():
    assert machine.VOLATILE_SYSCTL.search("net/ipv4/conf/veth1234/forwarding")
    assert machine.VOLATILE_SYSCTL.search("kernel/random/uuid")
    for key in ("net/ipv4/conf/all/forwarding", "net/ipv4/conf/default/rp_filter", "vm/overcommit_memory",
                "kernel/panic_on_oops", "kernel/keys/root_maxkeys", "net/ipv4/ip_forward"):
        assert not machine.VOLATILE_SYSCTL.search(key), key


def test_docker_archive_is_reproducible_and_names_its_layer_by_content(tmp_path):
    binary = tmp_path / "pause"
    binary.write_bytes(b"\x7fELF not really")
    ref = image_ref("pause", binary)
    assert ref == f"localhost/causalflow/pause:{hashlib.sha256(binary.read_bytes()).hexdigest()[:12]}"
    a = docker_archive(ref, binary, ["/pause"], tmp_path / "a.tar")
    b = docker_archive(ref, binary, ["/pause"], tmp_path / "b.tar")
    assert a.read_bytes() == b.read_bytes()
    with tarfile.open(a) as tar:
        manifest = json.load(tar.extractfile("manifest.json"))[0]
        assert manifest["RepoTags"] == [ref]
        layer = tar.extractfile(manifest["Layers"][0]).read()
        config = json.load(tar.extractfile(manifest["Config"]))
    assert config["rootfs"]["diff_ids"] == ["sha256:" + hashlib.sha256(layer).hexdigest()]
    assert config["config"]["Entrypoint"] == ["/pause"] and config["os"] == "linux"
    with tarfile.open(fileobj=__import__("io").BytesIO(layer)) as inner:
        member = inner.getmember("pause")
        assert member.mode == 0o755 and inner.extractfile(member).read() == binary.read_bytes()


def test_one_real_node_per_machine_a_live_owner_blocks_a_dead_one_does_not(tmp_path, monkeypatch):
    import pytest

    from localcluster.realnode import RealNode, RealNodeInUse, owner_file

    monkeypatch.setenv("CAUSALFLOW_CACHE", str(tmp_path / "cache"))
    first, second = RealNode(tmp_path / "a", tmp_path), RealNode(tmp_path / "b", tmp_path)
    first.claim()
    assert json.loads(owner_file().read_text())["workdir"] == str(tmp_path / "a")
    first.claim()  # the same cluster again (a restart of its node): still its own
    with pytest.raises(RealNodeInUse, match=str(tmp_path / "a")):
        second.claim()  # this process, the owner of "a", is alive
    owner_file().write_text(json.dumps({"workdir": str(tmp_path / "a"), "pid": 2 ** 22 + 1}))  # no such pid
    second.claim()
    assert json.loads(owner_file().read_text())["workdir"] == str(tmp_path / "b")
