"""`python -m ocr_operator` arguments: which namespaces it watches and where liveness listens."""

from __future__ import annotations

import logging

import pytest

from ocr_operator.__main__ import configure_logging, parse_args


def test_without_arguments_it_watches_all_namespaces():
    args = parse_args([])
    assert args.namespace == [] and args.liveness_port == 8080


def test_namespaces_can_be_given_repeatedly():
    assert parse_args(["-n", "a", "--namespace", "b"]).namespace == ["a", "b"]


def test_namespaces_and_all_namespaces_exclude_each_other():
    with pytest.raises(SystemExit):
        parse_args(["-n", "a", "--all-namespaces"])


def test_namespaces_can_come_from_the_environment(monkeypatch):
    monkeypatch.setenv("OCR_OPERATOR_NAMESPACES", "x,y")
    assert parse_args([]).namespace == ["x", "y"]
    assert parse_args(["-A"]).namespace == []


@pytest.mark.parametrize("level,expected", [("debug", logging.DEBUG), ("info", logging.INFO),
                                            ("warning", logging.WARNING), ("error", logging.ERROR)])
def test_each_log_level_sets_exactly_that_level(level, expected):
    configure_logging(parse_args(["--log-level", level]).log_level)
    assert logging.getLogger().level == expected
    assert logging.getLogger("ocr_operator").getEffectiveLevel() == expected
    # info is info: kopf's per-event handler lines only at debug
    assert (logging.getLogger("kopf.objects").getEffectiveLevel() <= logging.INFO) == (level == "debug")


def test_the_default_level_is_info_and_verbose_means_debug():
    assert parse_args([]).log_level == "info"
    assert parse_args(["--verbose"]).log_level == "debug"
