"""SSRF: every range of the IANA IPv4/IPv6 special-purpose registries and every known cloud metadata
address is refused before any connection (first, middle and last address of each range, and each
IPv4 entry in its IPv4-mapped and NAT64 disguises)."""

from __future__ import annotations

import ipaddress

import httpx
import pytest

from deepresearch_dagster.core.errors import UnsafeURLError
from deepresearch_dagster.core.web.fetch import (
    BLOCKED_RANGES,
    CLOUD_METADATA,
    NEVER,
    SPECIAL_PURPOSE_IPV4,
    SPECIAL_PURPOSE_IPV6,
    FetchPolicy,
    address_block_reason,
    fetch_url,
    is_address_allowed,
)

# The registries as published by IANA (iana-ipv4-special-registry, iana-ipv6-special-registry),
# written out independently of the implementation's table: the table must cover each of them.
IANA_IPV4 = [
    "0.0.0.0/8", "0.0.0.0/32", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16", "172.16.0.0/12",
    "192.0.0.0/24", "192.0.0.0/29", "192.0.0.8/32", "192.0.0.9/32", "192.0.0.10/32", "192.0.0.170/32",
    "192.0.0.171/32", "192.0.2.0/24", "192.31.196.0/24", "192.52.193.0/24", "192.88.99.0/24", "192.168.0.0/16",
    "192.175.48.0/24", "198.18.0.0/15", "198.51.100.0/24", "203.0.113.0/24", "240.0.0.0/4", "255.255.255.255/32",
]  # fmt: skip
IANA_IPV6 = [
    "::1/128", "::/128", "::ffff:0:0/96", "64:ff9b::/96", "64:ff9b:1::/48", "100::/64", "100:0:0:1::/64",
    "2001::/23", "2001::/32", "2001:1::1/128", "2001:1::2/128", "2001:1::3/128", "2001:2::/48", "2001:3::/32",
    "2001:4:112::/48", "2001:10::/28", "2001:20::/28", "2001:30::/28", "2001:db8::/32", "2002::/16",
    "2620:4f:8000::/48", "3fff::/20", "5f00::/16", "fc00::/7", "fe80::/10",
]  # fmt: skip
OTHER = ["224.0.0.0/4", "ff00::/8", "fec0::/10"]  # multicast, deprecated site-local
METADATA = ["169.254.169.254", "168.63.129.16", "fd00:ec2::254", "100.100.100.200", "169.254.170.2", "192.0.0.192"]


def _samples(network: str) -> list[ipaddress.IPv4Address | ipaddress.IPv6Address]:
    net = ipaddress.ip_network(network)
    first, last = net.network_address, net.broadcast_address
    middle = net.network_address + net.num_addresses // 2
    out = [first, middle, last]
    if net.version == 4:  # the same address in IPv6 disguises
        for ip in list(out):
            out.append(ipaddress.IPv6Address(f"::ffff:{ip}"))
            out.append(ipaddress.IPv6Address(int(ipaddress.IPv6Address("64:ff9b::")) + int(ip)))
    return list(dict.fromkeys(out))


def _url(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> str:
    return f"http://[{ip}]/" if ip.version == 6 else f"http://{ip}/"


# ::ffff:0:0/96 and 64:ff9b::/96 are IPv4 addresses in disguise (DNS64 answers 64:ff9b::a.b.c.d for every
# IPv4-only site on an IPv6-only network): they are judged by the embedded address, so their probes are the
# disguised forms of every IPv4 entry above (see _samples), not the public middle of the prefix.
TRANSLATION = {"::ffff:0:0/96", "64:ff9b::/96"}
ALL_PROBES = sorted(
    {ip for net in IANA_IPV4 + IANA_IPV6 + OTHER if net not in TRANSLATION for ip in _samples(net)}
    | {ipaddress.ip_address(a) for a in METADATA},
    key=lambda ip: (ip.version, int(ip)),
)


def test_every_registry_entry_is_in_the_table() -> None:
    table = [r.network for r in BLOCKED_RANGES]
    for entry in IANA_IPV4 + IANA_IPV6 + OTHER:
        net = ipaddress.ip_network(entry)
        assert any(net.version == t.version and net.subnet_of(t) for t in table), entry  # type: ignore[arg-type]
    assert {str(r.network.network_address) for r in CLOUD_METADATA} >= set(METADATA)
    assert len(SPECIAL_PURPOSE_IPV4) >= 18 and len(SPECIAL_PURPOSE_IPV6) >= 20


def test_every_probe_is_refused_before_connecting(record) -> None:
    connections: list[str] = []

    def transport(request: httpx.Request) -> httpx.Response:
        connections.append(str(request.url))
        return httpx.Response(200, text="should never be reached")

    refused = 0
    allowed: list[str] = []
    with httpx.Client(transport=httpx.MockTransport(transport)) as client:
        for ip in ALL_PROBES:
            try:
                fetch_url(_url(ip), FetchPolicy(), client=client)
            except UnsafeURLError:
                refused += 1
            else:
                allowed.append(str(ip))
    ok = refused == len(ALL_PROBES) and not connections
    record(
        "SSRF: IANA special-purpose v4+v6 + metadata",
        "100 % refused, 0 connections",
        f"{refused}/{len(ALL_PROBES)} refused ({100 * refused / len(ALL_PROBES):.0f} %), "
        f"{len(connections)} connections",
        ok,
    )
    assert allowed == [] and connections == []


def test_issue_probes_are_refused(record) -> None:
    probes = ["192.0.0.8", "192.0.0.9", "192.0.0.13", "168.63.129.16", "3fff::1", "3fff:fff:ffff::1", "198.18.0.1",
              "100.64.0.1", "64:ff9b:1::a00:1", "2001:db8::1", "fd00:ec2::254", "100.100.100.200"]  # fmt: skip
    reasons = {p: address_block_reason(ipaddress.ip_address(p)) for p in probes}
    ok = all(reasons.values())
    record(
        "SSRF: the issue's misses (192.0.0.8/29, 168.63.129.16, 3fff::/20 …)",
        "refused",
        f"{sum(map(bool, reasons.values()))}/{len(probes)} refused",
        ok,
    )
    assert ok, reasons


@pytest.mark.parametrize("address", METADATA)
def test_metadata_is_refused_whatever_the_switches(address: str) -> None:
    everything = FetchPolicy(allow_loopback=True, allow_private=True)
    ip = ipaddress.ip_address(address)
    assert not is_address_allowed(ip, everything)
    assert not is_address_allowed(ipaddress.IPv6Address(f"::ffff:{ip}") if ip.version == 4 else ip, everything)


def test_escape_hatches_still_work() -> None:
    loopback = FetchPolicy(allow_loopback=True)
    private = FetchPolicy(allow_private=True)
    assert is_address_allowed(ipaddress.ip_address("127.0.0.1"), loopback)
    assert is_address_allowed(ipaddress.ip_address("::1"), loopback)
    assert not is_address_allowed(ipaddress.ip_address("10.0.0.1"), loopback)
    assert is_address_allowed(ipaddress.ip_address("10.0.0.1"), private)
    assert is_address_allowed(ipaddress.ip_address("192.0.2.7"), private)
    assert not is_address_allowed(ipaddress.ip_address("127.0.0.1"), private)
    for r in BLOCKED_RANGES:
        if r.category == NEVER:
            ip = r.network.network_address
            assert not is_address_allowed(ip, FetchPolicy(allow_loopback=True, allow_private=True)), ip


def test_public_addresses_pass() -> None:
    for address in (
        "93.184.216.34",
        "8.8.8.8",
        "1.1.1.1",
        "2606:4700:4700::1111",
        "::ffff:8.8.8.8",
        "64:ff9b::808:808",
    ):
        assert address_block_reason(ipaddress.ip_address(address)) is None, address
