"""`python -m ocr_operator` arguments: which namespaces it watches and where liveness listens."""

from __future__ import annotations

import pytest

from ocr_operator.__main__ import parse_args


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
