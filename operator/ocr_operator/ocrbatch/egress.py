"""Where the operator may send a tenant's completion callback (spec.callback.url).

The URL is the tenant's choice and the operator runs inside the cluster, so without a guard a
batch could make the operator POST to its own loopback, the cloud's metadata service
(169.254.169.254, fd00:ec2::254), or any cluster Service or pod, and read the status and error
back from status.callback: a probe of the inside of the cluster. So the host is resolved once,
every address it resolves to is classified (`refusal`, pure), and the connection goes to the
address that was checked (`PinnedResolver`: no second DNS lookup between the check and the
connect, so a name cannot be rebound to an inside address in between). TLS still checks the
certificate against the URL's host name.

Refused: loopback, unspecified, link-local (metadata), private (RFC 1918, unique-local IPv6),
shared (100.64/10, which clusters use for pods), multicast, reserved and documentation ranges,
and the cluster's own pod and Service ranges (OCR_OPERATOR_CLUSTER_CIDRS), unless the chart's
allowlist (OCR_OPERATOR_CALLBACK_ALLOW_CIDRS, chart value `callbacks.allowCidrs`) names the
address. IPv4 addresses written as IPv6 (::ffff:a.b.c.d, ::a.b.c.d, 64:ff9b::a.b.c.d and
2002:aabb:ccdd::) are judged as the IPv4 address they carry.
"""

from __future__ import annotations

import ipaddress
import os
import socket
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Iterable, Mapping, Sequence
from urllib.parse import urlsplit

from aiohttp.abc import AbstractResolver

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network

ALLOW_ENV = "OCR_OPERATOR_CALLBACK_ALLOW_CIDRS"
CLUSTER_ENV = "OCR_OPERATOR_CLUSTER_CIDRS"
RESOLVE_SECONDS = 5.0
MAX_ADDRESSES = 16


def _nets(*cidrs: str) -> tuple[Network, ...]:
    return tuple(ipaddress.ip_network(c) for c in cidrs)


# (what the range is, in the refusal's words; its networks), first match wins.
REFUSED: tuple[tuple[str, tuple[Network, ...]], ...] = (
    ("loopback", _nets("127.0.0.0/8", "::1/128")),
    ("unspecified", _nets("0.0.0.0/8", "::/128")),
    ("link-local (cloud metadata)", _nets("169.254.0.0/16", "fe80::/10", "fd00:ec2::254/128")),
    ("private", _nets("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "fc00::/7")),
    ("shared (carrier-grade NAT, cluster pods)", _nets("100.64.0.0/10")),
    ("multicast", _nets("224.0.0.0/4", "ff00::/8")),
    ("reserved", _nets("192.0.0.0/24", "192.0.2.0/24", "198.18.0.0/15", "198.51.100.0/24", "203.0.113.0/24",
                       "240.0.0.0/4", "2001:db8::/32", "100::/64", "2001::/23", "fec0::/10")),
)
NAT64 = ipaddress.ip_network("64:ff9b::/96")
SIX_TO_FOUR = ipaddress.ip_network("2002::/16")
V4_COMPATIBLE = ipaddress.ip_network("::/96")


class Refused(Exception):
    """The callback's host is one the operator does not send to; the message says which and why."""


def embedded_v4(addr: Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 address carries (mapped, compatible, NAT64, 6to4), or None."""
    if isinstance(addr, ipaddress.IPv4Address):
        return None
    if addr.ipv4_mapped is not None:
        return addr.ipv4_mapped
    if addr in NAT64 or (addr in V4_COMPATIBLE and int(addr) > 1):
        return ipaddress.IPv4Address(int(addr) & 0xFFFFFFFF)
    if addr in SIX_TO_FOUR:
        return addr.sixtofour
    return None


def parse_cidrs(text: str | None) -> tuple[Network, ...]:
    """Comma- or space-separated CIDRs (a bare address is a /32 or /128); ValueError names a bad one."""
    out = []
    for item in (text or "").replace(",", " ").split():
        try:
            out.append(ipaddress.ip_network(item, strict=False))
        except ValueError:
            raise ValueError(f"{item!r} is not an IP network (CIDR)") from None
    return tuple(out)


def refusal(address: str, allow: Sequence[Network] = (), cluster: Sequence[Network] = ()) -> str | None:
    """Why the operator does not send to `address` (e.g. "loopback"), or None: it may. An address
    in `allow` may always; one in `cluster` (the pod and Service ranges) or a refused range may not."""
    try:
        addr: Address = ipaddress.ip_address(address.split("%", 1)[0])  # a zone id (fe80::1%eth0) dropped
    except ValueError:
        return "not an IP address"
    forms = [addr] + [v4 for v4 in (embedded_v4(addr),) if v4 is not None]
    if any(a in net for a in forms for net in allow if a.version == net.version):
        return None
    for a in forms:
        if any(a in net for net in cluster if a.version == net.version):
            return "the cluster's pod or Service range"
        for what, nets in REFUSED:
            if any(a in net for net in nets if a.version == net.version):
                return what
    return None


def check_addresses(host: str, addresses: Iterable[str], allow: Sequence[Network] = (),
                    cluster: Sequence[Network] = ()) -> str:
    """The address to connect to (the first of `addresses`), when every address `host` resolves to
    may be sent to; Refused otherwise (a name with one inside address is refused whole: which of
    its addresses a client would pick is not the tenant's to steer)."""
    found = list(dict.fromkeys(addresses))[:MAX_ADDRESSES]
    if not found:
        raise Refused(f"{host} resolves to no address")
    for address in found:
        why = refusal(address, allow, cluster)
        if why is not None:
            # A name's inside address is not repeated: the message reaches the batch's status, and
            # the operator's resolver must not become a way to read the cluster's DNS.
            said = f"{host} is a" if host == address else f"{host} resolves to a"
            raise Refused(f"{said} {why} address; the operator sends callbacks only to public addresses "
                          f"and to those the chart's callbacks.allowCidrs names")
    return found[0]


@dataclass(frozen=True)
class Policy:
    """The allowlist and the cluster's ranges, from the operator's environment (the chart sets them)."""

    allow: tuple[Network, ...] = ()
    cluster: tuple[Network, ...] = ()

    @classmethod
    def from_env(cls, env: Mapping[str, str] = os.environ) -> Policy:
        return cls(parse_cidrs(env.get(ALLOW_ENV)), parse_cidrs(env.get(CLUSTER_ENV)))


Lookup = Callable[[str, int], Awaitable[list[str]]]


async def system_lookup(host: str, port: int) -> list[str]:
    """The host's addresses from the system resolver (getaddrinfo, run in the tenant-call pool)."""
    from ocr_operator.runtime.bounded import TENANT_CALLS  # the pool the operator's tenant calls share

    def lookup() -> list[str]:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP)
        return [str(info[4][0]) for info in infos]

    return await TENANT_CALLS.run(lookup, timeout=RESOLVE_SECONDS, tenant=("dns", host), what=f"resolving {host}")


def target(url: str) -> tuple[str, int]:
    """The (host, port) a URL connects to; Refused for one without a host."""
    parts = urlsplit(url)
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        raise Refused(f"{url[:200]!r} has an invalid port") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise Refused(f"{url[:200]!r} is not an http(s) URL with a host")
    return parts.hostname, port


async def pin(url: str, policy: Policy, lookup: Lookup = system_lookup) -> tuple[str, int, str]:
    """(host, port, address) of the URL's host, resolved once and checked; Refused when refused."""
    host, port = target(url)
    try:
        literal = ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        literal = None
    # A lookup that fails (OSError, a timeout) is raised as is: the name may resolve later, so the
    # caller retries it; only an address it resolved to is a refusal.
    addresses = [host] if literal is not None else await lookup(host, port)
    return host, port, check_addresses(host, addresses, policy.allow, policy.cluster)


class PinnedResolver(AbstractResolver):
    """aiohttp's resolver for one connection: `host` is `address` (checked), any other name is
    refused. The URL keeps the host name, so TLS's SNI and certificate check use the name."""

    def __init__(self, host: str, address: str) -> None:
        self.host, self.address = host, address

    async def resolve(self, host: str, port: int = 0, family: int = socket.AF_INET) -> list[dict[str, Any]]:
        if host != self.host:
            raise OSError(f"{host}: not the callback's checked host")
        ip = ipaddress.ip_address(self.address)
        return [{"hostname": host, "host": self.address, "port": port, "proto": 0,
                 "family": socket.AF_INET6 if ip.version == 6 else socket.AF_INET, "flags": socket.AI_NUMERICHOST}]

    async def close(self) -> None:
        return None
