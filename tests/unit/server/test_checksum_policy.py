"""A missing checksum file is logged, and with REQUIRE_CHECKSUMS=true it stops start-up naming the setting."""

from __future__ import annotations

import json
import logging

import pytest

from ocr_server.runtime import checksums
from ocr_server.runtime.checksums import ChecksumError
from ocr_server.runtime.config import ConfigError, load_config

LOG = logging.getLogger("ocr_server.test_checksums")


def _model(tmp_path):
    d = tmp_path / "m"
    d.mkdir()
    (d / "w.safetensors").write_bytes(b"w" * 10)
    return d


def test_a_missing_checksum_file_is_logged_as_a_warning(tmp_path, caplog):
    config = tmp_path / "config.yaml"
    config.write_text("{}")
    with caplog.at_level(logging.WARNING):
        assert checksums.verify_configured(_model(tmp_path), str(config), LOG) == 0
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings and "not verified" in warnings[0].getMessage() and "REQUIRE_CHECKSUMS" in warnings[0].getMessage()


def test_no_config_file_at_all_is_logged_as_a_warning(tmp_path, caplog):
    with caplog.at_level(logging.WARNING):
        checksums.verify_configured(_model(tmp_path), None, LOG)
    assert any("not verified" in r.getMessage() for r in caplog.records if r.levelno == logging.WARNING)


def test_strict_mode_stops_on_a_missing_checksum_file_naming_the_setting(tmp_path):
    config = tmp_path / "config.yaml"
    config.write_text("{}")
    with pytest.raises(ChecksumError, match="REQUIRE_CHECKSUMS=true"):
        checksums.verify_configured(_model(tmp_path), str(config), LOG, require=True)


def test_strict_mode_stops_on_an_empty_checksum_list(tmp_path):
    config = tmp_path / "config.yaml"
    config.write_text("{}")
    (tmp_path / checksums.FILE_NAME).write_text("{}")
    with pytest.raises(ChecksumError, match="REQUIRE_CHECKSUMS=true"):
        checksums.verify_configured(_model(tmp_path), str(config), LOG, require=True)


def test_strict_mode_passes_when_the_listed_files_match(tmp_path, caplog):
    d = _model(tmp_path)
    config = tmp_path / "config.yaml"
    config.write_text("{}")
    (tmp_path / checksums.FILE_NAME).write_text(json.dumps(checksums.compute(d)))
    with caplog.at_level(logging.WARNING):
        assert checksums.verify_configured(d, str(config), LOG, require=True) == 1
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_require_checksums_is_a_boolean_setting_off_by_default():
    assert load_config(env={}).model.require_checksums is False
    assert load_config(env={"REQUIRE_CHECKSUMS": "true"}).model.require_checksums is True
    with pytest.raises(ConfigError, match="REQUIRE_CHECKSUMS='maybe'"):
        load_config(env={"REQUIRE_CHECKSUMS": "maybe"})
