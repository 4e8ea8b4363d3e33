"""Free TCP ports on loopback for the processes the tests and the harness start.

Picked outside the kernel's ephemeral port range (/proc/sys/net/ipv4/ip_local_port_range). The
usual trick, binding port 0 and closing it, returns an ephemeral port, and the kernel hands the
same range to every outgoing connection as its local port: between the pick and the process's
own bind, any client connection of a busy test run can take it ("bind: address already in
use"; one such collision on Prometheus' port failed a whole test unit's cluster). Below the
range only another listener can take a port, and a random pick checked by a bind makes that rare;
ports handed out by this process are not handed out again.
"""

from __future__ import annotations

import random
import socket
from pathlib import Path

LOWEST = 10000
_handed_out: set[int] = set()


def ephemeral_range() -> tuple[int, int]:
    try:
        low, high = (int(x) for x in Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    except (OSError, ValueError):
        low, high = 32768, 60999  # Linux's default
    return low, high


def candidate_range() -> tuple[int, int]:
    """Ports no outgoing connection gets: below the ephemeral range, else above it."""
    low, high = ephemeral_range()
    return (LOWEST, low - 1) if low - 1 - LOWEST >= 1000 else (high + 1, 65535)


def free_port(host: str = "127.0.0.1") -> int:
    first, last = candidate_range()
    for _ in range(500):
        port = random.randint(first, last)
        if port in _handed_out:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind((host, port))
            except OSError:
                continue
        _handed_out.add(port)
        return port
    raise RuntimeError(f"no free port on {host} in {first}..{last} after 500 tries")
