"""Which test servers the zygote may fork (tests/zygote.py): a server whose import-time environment
differs from the zygote's starts afresh; a variable torch writes while it runs does not count."""

from __future__ import annotations

import os
import sys
import tempfile

import pytest

from tests.zygote import FORKS, Zygote, _child


def zygote_with(env: dict[str, str], module: str = "ocr_server") -> Zygote:
    one = Zygote.__new__(Zygote)  # compatible() and fork()'s check read only these
    one.env, one.module = env, module
    return one


def test_a_thread_setting_other_than_the_zygotes_starts_the_server_afresh():
    zygote = zygote_with({"OMP_NUM_THREADS": "1", "PATH": "/bin"})
    assert zygote.compatible({"OMP_NUM_THREADS": "1", "PATH": "/usr/bin", "MODEL_PATH": "/m"})
    assert not zygote.compatible({"OMP_NUM_THREADS": "2"})
    assert not zygote.compatible({"OMP_NUM_THREADS": "1", "PYTHONHASHSEED": "0"})


def test_the_inductor_cache_dir_torch_wrote_into_the_test_process_does_not_prevent_a_fork():
    zygote = zygote_with({"OMP_NUM_THREADS": "1"})
    assert zygote.compatible({"OMP_NUM_THREADS": "1", "TORCHINDUCTOR_CACHE_DIR": "/tmp/torchinductor_root"})


def test_the_servers_zygote_forks_the_stand_in_and_refuses_a_module_it_did_not_import_for(tmp_path):
    assert "ocr_server_testing.stand_in" in FORKS["ocr_server"]
    with pytest.raises(ValueError, match="does not run ocr_operator"):
        zygote_with({}).fork({}, tmp_path, tmp_path / "log", module="ocr_operator")


def test_a_forked_server_takes_the_temporary_directory_of_its_request_not_the_zygotes(tmp_path):
    """tempfile caches gettempdir() once a process asked for it, as the zygote has: its child must
    read the request's TMPDIR (each test server's own directory) again."""
    own = tmp_path / "own"
    own.mkdir()
    (tmp_path / "where_temp.py").write_text("import tempfile\nopen('where', 'w').write(tempfile.gettempdir())\n")
    tempfile.gettempdir()  # cached in this process, the child's parent
    parent = os.getpid()
    pid = os.fork()
    if pid == 0:  # the child: as the zygote's fork runs a server
        sys.path.insert(0, str(tmp_path))
        _child("ocr_server", {"module": "where_temp", "log": str(tmp_path / "log"), "cwd": str(tmp_path),
                              "env": {"TMPDIR": str(own)}}, parent)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, (tmp_path / "log").read_text()
    assert (tmp_path / "where").read_text() == str(own)
