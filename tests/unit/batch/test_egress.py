"""The callback's egress guard (ocr_operator.ocrbatch.egress): which addresses the operator sends a
tenant's callback to (a pure function over every written form of an address), names judged by
what they resolve to, and a connection pinned to the address checked. Only loopback is contacted."""

from __future__ import annotations

import asyncio

import pytest

from ocr_operator.ocrbatch import egress

ALLOW_NONE: tuple = ()


@pytest.mark.parametrize("address, why", [
    ("127.0.0.1", "loopback"), ("127.8.9.10", "loopback"), ("::1", "loopback"),
    ("0.0.0.0", "unspecified"), ("::", "unspecified"),
    ("169.254.169.254", "link-local (cloud metadata)"), ("fe80::1", "link-local (cloud metadata)"),
    ("fe80::1%eth0", "link-local (cloud metadata)"), ("fd00:ec2::254", "link-local (cloud metadata)"),
    ("10.96.0.1", "private"), ("172.16.5.4", "private"), ("172.31.255.255", "private"),
    ("192.168.1.1", "private"), ("fd12:3456::1", "private"),
    ("100.64.0.10", "shared (carrier-grade NAT, cluster pods)"),
    ("224.0.0.1", "multicast"), ("ff02::1", "multicast"),
    ("240.0.0.1", "reserved"), ("192.0.2.1", "reserved"), ("2001:db8::1", "reserved"),
    # IPv4 addresses written as IPv6: judged as the IPv4 address they carry.
    ("::ffff:127.0.0.1", "loopback"), ("::ffff:169.254.169.254", "link-local (cloud metadata)"),
    ("::ffff:10.0.0.1", "private"), ("::127.0.0.1", "loopback"), ("64:ff9b::a9fe:a9fe", "link-local (cloud metadata)"),
    ("2002:7f00:0001::", "loopback"), ("2002:0a00:0001::1", "private"),
])
def test_inside_addresses_are_refused_with_what_they_are(address, why):
    assert egress.refusal(address) == why


@pytest.mark.parametrize("address", ["93.184.216.34", "8.8.8.8", "172.32.0.1", "2606:4700::1111",
                                     "::ffff:93.184.216.34", "64:ff9b::808:808"])
def test_public_addresses_may_be_sent_to(address):
    assert egress.refusal(address) is None


def test_the_clusters_own_ranges_are_refused_even_when_public_looking():
    cluster = egress.parse_cidrs("203.1.0.0/16, 2600:1f00::/32")
    assert egress.refusal("203.1.4.5", cluster=cluster) == "the cluster's pod or Service range"
    assert egress.refusal("2600:1f00::9", cluster=cluster) == "the cluster's pod or Service range"
    assert egress.refusal("::ffff:203.1.4.5", cluster=cluster) == "the cluster's pod or Service range"
    assert egress.refusal("203.2.0.1", cluster=cluster) is None


def test_the_allowlist_lets_named_inside_addresses_through_and_only_those():
    allow = egress.parse_cidrs("127.0.0.1 10.20.0.0/16")
    assert egress.refusal("127.0.0.1", allow) is None
    assert egress.refusal("::ffff:127.0.0.1", allow) is None  # the same address, written as IPv6
    assert egress.refusal("127.0.0.2", allow) == "loopback"
    assert egress.refusal("10.20.3.4", allow) is None and egress.refusal("10.21.0.1", allow) == "private"
    # The allowlist wins over the cluster's ranges: the operator's admin named it.
    assert egress.refusal("10.20.3.4", allow, egress.parse_cidrs("10.0.0.0/8")) is None


def test_a_bad_cidr_in_the_settings_is_named():
    with pytest.raises(ValueError, match="'10.0.0.0/33'"):
        egress.parse_cidrs("10.0.0.0/8,10.0.0.0/33")
    assert egress.Policy.from_env({egress.ALLOW_ENV: "127.0.0.1/32", egress.CLUSTER_ENV: ""}).allow == \
        egress.parse_cidrs("127.0.0.1")


def test_a_name_is_refused_when_any_of_its_addresses_is_inside():
    assert egress.check_addresses("hooks.example", ["93.184.216.34"]) == "93.184.216.34"
    with pytest.raises(egress.Refused, match="hooks.example resolves to a private address;") as refused:
        egress.check_addresses("hooks.example", ["93.184.216.34", "10.0.0.5"])
    assert "10.0.0.5" not in str(refused.value)  # the inside address the name resolved to is not told
    with pytest.raises(egress.Refused, match="resolves to no address"):
        egress.check_addresses("hooks.example", [])


def lookup_of(table: dict[str, list[str]], calls: list[str]):
    async def lookup(host: str, port: int) -> list[str]:
        calls.append(host)
        if host not in table:
            raise OSError(f"{host}: no such name")
        return table[host]
    return lookup


def test_pin_resolves_a_name_once_and_judges_what_it_resolved_to():
    calls: list[str] = []
    lookup = lookup_of({"hooks.example": ["93.184.216.34"], "metadata.example": ["169.254.169.254"]}, calls)
    policy = egress.Policy()
    assert asyncio.run(egress.pin("https://hooks.example/ocr", policy, lookup)) == ("hooks.example", 443, "93.184.216.34")
    with pytest.raises(egress.Refused, match="link-local"):
        asyncio.run(egress.pin("http://metadata.example/latest/meta-data", policy, lookup))
    with pytest.raises(egress.Refused, match="loopback"):  # a literal address is judged without a lookup
        asyncio.run(egress.pin("http://[::ffff:7f00:1]:8080/x", policy, lookup))
    assert calls == ["hooks.example", "metadata.example"]


def test_names_the_system_resolves_to_loopback_are_refused():
    # The system resolver itself (getaddrinfo, in the tenant-call pool): "localhost" and the
    # integer form of 127.0.0.1 that inet_aton accepts both come back as loopback.
    for url in ("http://localhost:9/x", "http://2130706433:9/x"):
        with pytest.raises(egress.Refused, match="loopback"):
            asyncio.run(egress.pin(url, egress.Policy()))


def test_the_pinned_resolver_answers_only_the_checked_host():
    resolver = egress.PinnedResolver("hooks.example", "93.184.216.34")
    [entry] = asyncio.run(resolver.resolve("hooks.example", 443))
    assert (entry["host"], entry["hostname"], entry["port"]) == ("93.184.216.34", "hooks.example", 443)
    with pytest.raises(OSError):
        asyncio.run(resolver.resolve("other.example", 443))
