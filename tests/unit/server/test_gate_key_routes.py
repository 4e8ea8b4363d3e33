"""The quality gate's key on the server (http/gatekey.py): where it is accepted."""

from ocr_server.http.gatekey import addressed_to_pod, matches


def test_a_gate_key_matches_only_a_listed_key():
    assert matches("gk-abcdef0123", ("gk-old-000000", "gk-abcdef0123"))
    assert not matches("gk-abcdef0124", ("gk-old-000000", "gk-abcdef0123"))


def test_an_empty_key_never_matches():
    assert not matches("", ("",))


def test_a_request_to_the_pod_ip_with_a_port_is_addressed_to_the_pod():
    assert addressed_to_pod("10.0.3.7:8000", "10.0.3.7")


def test_a_request_through_the_service_name_is_not_addressed_to_the_pod():
    assert not addressed_to_pod("ocr.team.svc:8000", "10.0.3.7")


def test_an_ipv6_pod_address_in_brackets_is_addressed_to_the_pod():
    assert addressed_to_pod("[fd00::5]:8000", "fd00::5")


def test_a_server_that_does_not_know_its_ip_takes_no_gate_request():
    assert not addressed_to_pod("10.0.3.7:8000", None)
