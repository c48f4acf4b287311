"""Safe URL fetching for research tools: SSRF guard, pinned addresses, manual redirects, size cap, robots.txt.

Every hop is checked the same way: http(s) only, no credentials in the URL, every resolved address must be
public (unless the policy allows loopback / private targets), and the request goes to the address that was
checked (the URL's host becomes the ``Host`` header and TLS server name), so a second DNS answer cannot
rebind the connection to an internal service.
"""

from __future__ import annotations

import codecs
import ipaddress
import re
import socket
import threading
import urllib.robotparser
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import httpx
from pydantic import BaseModel, Field

from deepresearch_dagster.core.web.extract import extract_html, extract_pdf, html_links

from ..errors import FetchError, UnsafeURLError
from .deadline import deadline, deadline_client, expired, remaining

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

_REDIRECT_STATUSES = {301, 302, 303, 307, 308}
_HTML_TYPES = {"text/html", "application/xhtml+xml"}
_TEXT_TYPES = {"text/plain", "text/markdown", "text/x-markdown", "text/csv", "application/json"}
_PDF_TYPES = {"application/pdf", "application/x-pdf"}
_ROBOTS_MAX_BYTES = 500_000  # RFC 9309 asks crawlers to read at least 500 KiB of robots.txt
_NAT64_PREFIX = bytes.fromhex("0064ff9b") + bytes(8)  # 64:ff9b::/96 embeds an IPv4 address
_META_CHARSET = re.compile(rb"""<meta[^>]+charset\s*=\s*["']?\s*([A-Za-z0-9._:-]+)""", re.IGNORECASE)


class FetchPolicy(BaseModel):
    """What the fetcher may contact and how much it may read."""

    allow_loopback: bool = False  # 127.0.0.0/8 and ::1 (tests, a research server on the same machine)
    allow_private: bool = False  # private, link-local, CGNAT, reserved ranges (self-hosted intranet targets)
    max_bytes: int = Field(default=5_000_000, gt=0)  # streamed body cap; reading stops beyond it
    connect_timeout: float = Field(default=5.0, gt=0)
    read_timeout: float = Field(default=20.0, gt=0)  # per socket read
    # Wall clock for the whole fetch (robots.txt, every redirect hop, the body): a server that
    # trickles one byte per read_timeout still fails at this deadline.
    total_timeout: float = Field(default=60.0, gt=0)
    max_redirects: int = Field(default=5, ge=0)
    respect_robots: bool = True
    user_agent: str = "deepresearch-dagster/0.1 (+https://github.com/)"


class FetchedPage(BaseModel):
    url: str  # as requested
    final_url: str  # after redirects
    status: int
    content_type: str  # media type without parameters
    title: str | None
    text: str  # extracted main text
    bytes: int  # body bytes read (at most max_bytes)
    truncated: bool  # the body was longer than max_bytes
    redirects: list[str]  # every URL we were redirected to, in order; the last one is final_url
    links: list[str] = []  # an HTML page's absolute link targets (provenance for later fetches)


@dataclass(frozen=True)
class CheckedTarget:
    """A URL that passed the checks, with the addresses it may be fetched from."""

    url: httpx.URL
    addresses: tuple[IPAddress, ...]


# ---------------------------------------------------------------------------------------------- address policy


# Categories: which policy switch may open a range. "never": nothing legitimate serves HTTP there
# (0.0.0.0 means "this host", multicast, broadcast) or it is a cloud metadata service.
LOOPBACK, PRIVATE, NEVER = "loopback", "private", "never"


@dataclass(frozen=True)
class BlockedRange:
    network: ipaddress.IPv4Network | ipaddress.IPv6Network
    reason: str
    category: str  # LOOPBACK, PRIVATE or NEVER


def _ranges(*rows: tuple[str, str, str]) -> tuple[BlockedRange, ...]:
    return tuple(BlockedRange(ipaddress.ip_network(net), reason, category) for net, reason, category in rows)


# Cloud metadata services, refused whatever the policy says (checked before the registries).
CLOUD_METADATA = _ranges(
    ("169.254.169.254/32", "cloud metadata", NEVER),  # AWS, GCP, Azure, DigitalOcean, OpenStack IMDS
    ("169.254.170.2/32", "cloud metadata", NEVER),  # AWS ECS task metadata / credentials
    ("169.254.170.23/32", "cloud metadata", NEVER),  # AWS EKS pod identity agent
    ("168.63.129.16/32", "cloud metadata", NEVER),  # Azure WireServer (a public address)
    ("100.100.100.200/32", "cloud metadata", NEVER),  # Alibaba Cloud metadata
    ("192.0.0.192/32", "cloud metadata", NEVER),  # Oracle Cloud metadata
    ("fd00:ec2::254/128", "cloud metadata", NEVER),  # AWS IMDS over IPv6
    ("fd00:ec2::23/128", "cloud metadata", NEVER),  # AWS EKS pod identity agent over IPv6
)

# IANA IPv4 Special-Purpose Address Registry (every entry, RFC 6890 and updates), plus multicast.
# First match wins, so the more specific entries come first.
SPECIAL_PURPOSE_IPV4 = _ranges(
    ("0.0.0.0/8", "unspecified", NEVER),  # "this network" (0.0.0.0/32 "this host" included)
    ("10.0.0.0/8", "private", PRIVATE),
    ("100.64.0.0/10", "carrier-grade NAT", PRIVATE),  # shared address space, RFC 6598
    ("127.0.0.0/8", "loopback", LOOPBACK),
    ("169.254.0.0/16", "link-local", PRIVATE),
    ("172.16.0.0/12", "private", PRIVATE),
    ("192.0.0.0/24", "IETF protocol assignment", PRIVATE),  # incl. 192.0.0.0/29 DS-Lite, .8, .9, .10, .170, .171
    ("192.0.2.0/24", "documentation", PRIVATE),  # TEST-NET-1
    ("192.31.196.0/24", "AS112", PRIVATE),
    ("192.52.193.0/24", "AMT", PRIVATE),
    ("192.88.99.0/24", "6to4 relay anycast", PRIVATE),  # deprecated
    ("192.168.0.0/16", "private", PRIVATE),
    ("192.175.48.0/24", "AS112", PRIVATE),  # direct delegation AS112 service
    ("198.18.0.0/15", "benchmarking", PRIVATE),
    ("198.51.100.0/24", "documentation", PRIVATE),  # TEST-NET-2
    ("203.0.113.0/24", "documentation", PRIVATE),  # TEST-NET-3
    ("224.0.0.0/4", "multicast", NEVER),
    ("255.255.255.255/32", "reserved", NEVER),  # limited broadcast
    ("240.0.0.0/4", "reserved", PRIVATE),
)

# IANA IPv6 Special-Purpose Address Registry (every entry), plus the other non-unicast blocks.
# ::ffff:0:0/96 (IPv4-mapped) and 64:ff9b::/96 (NAT64 well-known prefix) are IPv4 addresses in
# disguise: they are judged by the IPv4 address they embed (see address_block), which the test
# checks for every IPv4 entry above. Anything outside 2000::/3 (global unicast) is refused too.
SPECIAL_PURPOSE_IPV6 = _ranges(
    ("::/128", "unspecified", NEVER),
    ("::1/128", "loopback", LOOPBACK),
    ("::ffff:0:0/96", "IPv4-mapped", PRIVATE),  # reached only when the embedded address is refused
    ("64:ff9b::/96", "NAT64", PRIVATE),  # idem
    ("64:ff9b:1::/48", "local-use NAT64", PRIVATE),
    ("100::/64", "discard-only", PRIVATE),
    ("100:0:0:1::/64", "dummy prefix", PRIVATE),
    ("2001::/32", "Teredo", PRIVATE),
    ("2001:1::1/128", "IETF protocol assignment", PRIVATE),  # PCP anycast
    ("2001:1::2/128", "IETF protocol assignment", PRIVATE),  # TURN anycast
    ("2001:1::3/128", "IETF protocol assignment", PRIVATE),  # DNS-SD SRP anycast
    ("2001:2::/48", "benchmarking", PRIVATE),
    ("2001:3::/32", "AMT", PRIVATE),
    ("2001:4:112::/48", "AS112", PRIVATE),
    ("2001:10::/28", "ORCHID", PRIVATE),  # deprecated
    ("2001:20::/28", "ORCHIDv2", PRIVATE),
    ("2001:30::/28", "drone remote ID", PRIVATE),
    ("2001::/23", "IETF protocol assignment", PRIVATE),
    ("2001:db8::/32", "documentation", PRIVATE),
    ("2002::/16", "6to4", PRIVATE),
    ("2620:4f:8000::/48", "AS112", PRIVATE),
    ("3fff::/20", "documentation", PRIVATE),
    ("5f00::/16", "SRv6 SIDs", PRIVATE),
    ("fc00::/7", "private", PRIVATE),  # unique-local
    ("fe80::/10", "link-local", PRIVATE),
    ("fec0::/10", "private", PRIVATE),  # deprecated site-local
    ("ff00::/8", "multicast", NEVER),
)

BLOCKED_RANGES = CLOUD_METADATA + SPECIAL_PURPOSE_IPV4 + SPECIAL_PURPOSE_IPV6
_GLOBAL_UNICAST_V6 = ipaddress.ip_network("2000::/3")


def address_block(ip: IPAddress) -> BlockedRange | None:
    """The blocked range ``ip`` falls in (None when it is a public unicast address)."""
    if isinstance(ip, ipaddress.IPv6Address):
        embedded = _embedded_ipv4(ip)
        for inner in embedded:  # a tunnel to a refused IPv4 address is refused for that reason
            found = address_block(inner)
            if found is not None:
                return found
        if embedded and (ip.ipv4_mapped is not None or ip.packed[:12] == _NAT64_PREFIX):
            return None  # mapped / NAT64 forms are just the (public) IPv4 address in disguise
    for blocked in BLOCKED_RANGES:
        if ip.version == blocked.network.version and ip in blocked.network:
            return blocked
    if isinstance(ip, ipaddress.IPv6Address) and ip not in _GLOBAL_UNICAST_V6:
        return BlockedRange(_GLOBAL_UNICAST_V6, "reserved", PRIVATE)
    if not ip.is_global:  # a backstop: Python's table may know a range this list does not
        return BlockedRange(ipaddress.ip_network(ip), "non-global", PRIVATE)
    return None


def address_block_reason(ip: IPAddress) -> str | None:
    """Why ``ip`` is not a public unicast address (None when it is)."""
    found = address_block(ip)
    return None if found is None else found.reason


def is_address_allowed(ip: IPAddress, policy: FetchPolicy) -> bool:
    found = address_block(ip)
    if found is None:
        return True
    if found.category == LOOPBACK:
        return policy.allow_loopback
    if found.category == PRIVATE:
        return policy.allow_private
    return False


def check_address(ip: IPAddress, policy: FetchPolicy) -> None:
    """Raise UnsafeURLError unless the policy allows connecting to ``ip``."""
    if not is_address_allowed(ip, policy):
        raise UnsafeURLError(f"refusing to fetch from {address_block_reason(ip)} address {ip}")


def check_url(url: str | httpx.URL, policy: FetchPolicy) -> CheckedTarget:
    """Validate one hop: scheme, credentials, and every address the host resolves to.

    Raises UnsafeURLError when the URL must not be fetched, FetchError when it cannot be parsed or resolved.
    """
    try:
        parsed = url if isinstance(url, httpx.URL) else httpx.URL(url.strip())
    except (httpx.InvalidURL, TypeError, ValueError) as exc:
        raise FetchError(f"invalid URL {url!r}: {exc}") from exc
    if parsed.scheme not in ("http", "https"):
        raise UnsafeURLError(f"refusing scheme {parsed.scheme or '(none)'!r}: only http and https URLs are fetched")
    if parsed.userinfo:
        raise UnsafeURLError("refusing a URL with credentials (user:password@host)")
    if not parsed.host:
        raise FetchError(f"URL has no host: {url}")
    port = parsed.port or (443 if parsed.scheme == "https" else 80)
    addresses = _resolve(parsed.host, port, policy.connect_timeout)
    for ip in addresses:  # ANY bad answer refuses: the resolver could hand out either one on connect
        check_address(ip, policy)
    return CheckedTarget(url=parsed.copy_with(fragment=None), addresses=addresses)


def _embedded_ipv4(ip: ipaddress.IPv6Address) -> list[ipaddress.IPv4Address]:
    """IPv4 addresses an IPv6 address tunnels to (mapped, compatible, NAT64, 6to4, Teredo)."""
    if ip.ipv4_mapped is not None:
        return [ip.ipv4_mapped]
    packed = ip.packed
    if packed[:12] == bytes(12) and int(ip) > 1:  # deprecated IPv4-compatible ::a.b.c.d (not :: or ::1)
        return [ipaddress.IPv4Address(packed[12:])]
    if packed[:12] == _NAT64_PREFIX:
        return [ipaddress.IPv4Address(packed[12:])]
    if ip.sixtofour is not None:
        return [ip.sixtofour]
    if ip.teredo is not None:
        server, client = ip.teredo
        return [client, server]
    return []


def _getaddrinfo(host: str, port: int, timeout: float) -> list:
    """``socket.getaddrinfo`` bounded in time (the resolver has no timeout of its own we control):
    the lookup runs in a daemon thread and is abandoned after ``timeout`` (capped by the deadline)."""
    left = remaining()
    limit = max(0.0, min(timeout, left)) if left is not None else timeout
    outcome: dict[str, Any] = {}

    def lookup() -> None:
        try:
            outcome["infos"] = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except BaseException as exc:  # handed to the caller's thread
            outcome["error"] = exc

    worker = threading.Thread(target=lookup, name=f"resolve {host}", daemon=True)
    worker.start()
    worker.join(limit)
    if worker.is_alive():
        raise FetchError(f"could not resolve host {host!r}: no DNS answer within {limit:g} s")
    if "error" in outcome:
        raise outcome["error"]
    return outcome["infos"]


def _resolve(host: str, port: int, timeout: float = 5.0) -> tuple[IPAddress, ...]:
    try:
        literal = ipaddress.ip_address(host)
    except ValueError:
        literal = None
    if literal is not None:
        return (literal,)
    try:
        infos = _getaddrinfo(host, port, timeout)
    except (socket.gaierror, UnicodeError, OSError) as exc:
        raise FetchError(f"could not resolve host {host!r}: {exc}") from exc
    addresses: list[IPAddress] = []
    for family, _type, _proto, _name, sockaddr in infos:
        if family not in (socket.AF_INET, socket.AF_INET6):
            continue
        ip = ipaddress.ip_address(str(sockaddr[0]).split("%", 1)[0])  # drop an IPv6 zone id
        if ip not in addresses:
            addresses.append(ip)
    if not addresses:
        raise FetchError(f"host {host!r} has no IP address")
    return tuple(addresses)


# ---------------------------------------------------------------------------------------------- pinned requests


@contextmanager
def _open(client: httpx.Client, target: CheckedTarget, policy: FetchPolicy, *, accept: str) -> Iterator[httpx.Response]:
    """Stream a GET of ``target`` from one of its checked addresses (never re-resolving the host name)."""
    url = target.url
    headers = {"Host": url.netloc.decode("ascii"), "User-Agent": policy.user_agent, "Accept": accept}
    extensions: dict[str, str] = {}
    if url.scheme == "https" and not _is_ip_literal(url.host):
        # TLS must present and verify the real name, not the IP we connect to.
        extensions["sni_hostname"] = url.raw_host.decode("ascii")
        # The pool keys connections by IP: never let another host name reuse a TLS session verified for this one.
        headers["Connection"] = "close"
    timeout = httpx.Timeout(policy.read_timeout, connect=policy.connect_timeout, pool=policy.connect_timeout)
    last_error: httpx.ConnectError | None = None
    for ip in target.addresses:
        request = client.build_request(
            "GET", url.copy_with(host=str(ip)), headers=headers, timeout=timeout, extensions=extensions
        )
        try:
            response = client.send(request, stream=True, follow_redirects=False)
        except httpx.ConnectError as exc:  # try the next checked address, like a browser would
            last_error = exc
            continue
        except httpx.TimeoutException as exc:
            raise _timed_out(url, policy, exc) from exc
        except httpx.HTTPError as exc:
            if expired():
                raise _timed_out(url, policy, exc) from exc
            raise FetchError(f"error fetching {url}: {exc or type(exc).__name__}") from exc
        try:
            yield response
        finally:
            response.close()
        return
    raise FetchError(f"could not connect to {url.host}: {last_error}")


def _timed_out(url: httpx.URL, policy: FetchPolicy, exc: Exception) -> FetchError:
    if expired():
        return FetchError(f"timed out fetching {url}: exceeded the total deadline of {policy.total_timeout:g} s")
    return FetchError(f"timed out fetching {url} ({type(exc).__name__})")


def _is_ip_literal(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


@contextmanager
def _client_for(policy: FetchPolicy, client: httpx.Client | None) -> Iterator[httpx.Client]:
    if client is not None:
        yield client
        return
    # trust_env=False: requests must go straight to the checked address, not through an HTTP(S)_PROXY.
    # The deadline transport caps every socket operation by the fetch's total deadline.
    with deadline_client(follow_redirects=False, trust_env=False) as own:
        yield own


def _read_capped(response: httpx.Response, policy: FetchPolicy, url: httpx.URL) -> tuple[bytes, bool]:
    """Read at most ``max_bytes`` of the (decompressed) body; True when more was available.
    Checks the total deadline after every chunk too (a caller's own client has no deadline transport)."""
    max_bytes = policy.max_bytes
    chunks: list[bytes] = []
    size = 0
    try:
        for chunk in response.iter_bytes():
            if expired():
                raise _timed_out(url, policy, TimeoutError())
            if size + len(chunk) > max_bytes:
                chunks.append(chunk[: max_bytes - size])
                return b"".join(chunks), True
            chunks.append(chunk)
            size += len(chunk)
    except httpx.TimeoutException as exc:
        raise _timed_out(url, policy, exc) from exc
    except httpx.HTTPError as exc:
        if expired():
            raise _timed_out(url, policy, exc) from exc
        raise FetchError(f"error reading {url}: {exc or type(exc).__name__}") from exc
    if expired():  # the last read may have returned just as the deadline passed
        raise _timed_out(url, policy, TimeoutError())
    return b"".join(chunks), False


# ---------------------------------------------------------------------------------------------- robots.txt

_robots_cache: dict[tuple[str, str, int], urllib.robotparser.RobotFileParser | None] = {}
_robots_lock = threading.Lock()
_ROBOTS_CACHE_SIZE = 2048  # hosts; a long-running process starts over rather than grow without bound


def clear_robots_cache() -> None:
    with _robots_lock:
        _robots_cache.clear()


def _robots_allows(target: CheckedTarget, policy: FetchPolicy, client: httpx.Client) -> bool:
    url = target.url
    key = (url.scheme, url.host, url.port or (443 if url.scheme == "https" else 80))
    with _robots_lock:
        cached = key in _robots_cache
        parser = _robots_cache.get(key)
    if not cached:
        parser = _load_robots(url, policy, client)
        if parser is not None:
            with _robots_lock:
                if len(_robots_cache) >= _ROBOTS_CACHE_SIZE:
                    _robots_cache.clear()
                _robots_cache[key] = parser
    return True if parser is None else parser.can_fetch(policy.user_agent, str(url))


def _load_robots(
    url: httpx.URL, policy: FetchPolicy, client: httpx.Client
) -> urllib.robotparser.RobotFileParser | None:
    """Parse the origin's robots.txt; None (= allow, not cached) when the server could not answer."""
    parser = urllib.robotparser.RobotFileParser()
    robots_policy = policy.model_copy(update={"respect_robots": False, "max_bytes": _ROBOTS_MAX_BYTES})
    robots_url = str(url.copy_with(raw_path=b"/robots.txt"))
    try:
        response, body, _truncated, _hops = _get(robots_url, robots_policy, client, any_type=True)
    except UnsafeURLError:
        raise
    except FetchError:
        # The site is down or slow: let the page fetch itself report the real error.
        return None
    if response.status_code in (401, 403):
        parser.disallow_all = True  # same reading as urllib.robotparser: access-controlled means "keep out"
    elif 400 <= response.status_code < 500:
        parser.allow_all = True  # no robots.txt: everything is allowed
    elif response.status_code >= 500:
        return None
    else:
        charset = _valid_charset(response.charset_encoding) or "utf-8"
        parser.parse(body.decode(charset, errors="replace").splitlines())
    return parser


# ---------------------------------------------------------------------------------------------- fetching


def _get(
    url: str, policy: FetchPolicy, client: httpx.Client, *, accept: str = "*/*", any_type: bool = False
) -> tuple[httpx.Response, bytes, bool, list[str]]:
    """GET with per-hop checks and manual redirects; returns (response, body, truncated, redirect URLs).

    The body is read only for final responses below 400 whose content type we can use (or ``any_type``),
    so refused downloads cost no bandwidth.
    """
    redirects: list[str] = []
    target = check_url(url, policy)
    while True:
        if policy.respect_robots and not _robots_allows(target, policy, client):
            raise FetchError(f"disallowed by robots.txt: {target.url}")
        with _open(client, target, policy, accept=accept) as response:
            if response.status_code in _REDIRECT_STATUSES and "location" in response.headers:
                if len(redirects) >= policy.max_redirects:
                    raise FetchError(f"too many redirects (more than {policy.max_redirects}) from {url}")
                try:
                    next_url = target.url.join(response.headers["location"].strip())
                except httpx.InvalidURL as exc:
                    raise FetchError(f"invalid redirect location {response.headers['location']!r}") from exc
                target = check_url(next_url, policy)  # re-check scheme and address on every hop
                redirects.append(str(target.url))
                continue
            if response.status_code >= 400 or not (any_type or _is_supported(_media_type(response))):
                return response, b"", False, redirects
            body, truncated = _read_capped(response, policy, target.url)
            return response, body, truncated, redirects


def _is_supported(media: str) -> bool:
    # An undeclared type is read and sniffed (see _sniff).
    return media in _HTML_TYPES or media in _TEXT_TYPES or media in _PDF_TYPES or media == ""


def fetch_url(url: str, policy: FetchPolicy | None = None, client: httpx.Client | None = None) -> FetchedPage:
    """Fetch ``url`` safely and return its main text.

    Raises UnsafeURLError when any hop is refused by the SSRF guard, FetchError for every other failure
    (robots.txt, HTTP status >= 400, unsupported content, timeouts, connection errors).
    """
    policy = policy or FetchPolicy()
    with deadline(policy.total_timeout), _client_for(policy, client) as http:
        accept = "text/html,application/xhtml+xml,text/plain;q=0.9,text/markdown;q=0.9,application/pdf;q=0.8,*/*;q=0.1"
        response, body, truncated, redirects = _get(url, policy, http, accept=accept)
    final_url = redirects[-1] if redirects else str(httpx.URL(url.strip()).copy_with(fragment=None))
    status = response.status_code
    if status >= 400:
        raise FetchError(f"HTTP {status} {response.reason_phrase} for {final_url}")
    media = _media_type(response) or _sniff(body)
    title, text = _extract(media, body, response, final_url)
    links = html_links(_decode(body, response, sniff_meta=True), final_url) if media in _HTML_TYPES else []
    return FetchedPage(
        url=url,
        final_url=final_url,
        status=status,
        content_type=media,
        title=title,
        text=text,
        bytes=len(body),
        truncated=truncated,
        redirects=redirects,
        links=links,
    )


def _extract(media: str, body: bytes, response: httpx.Response, url: str) -> tuple[str | None, str]:
    if media in _HTML_TYPES:
        try:
            return extract_html(_decode(body, response, sniff_meta=True), url=url)
        except Exception as exc:  # a parser crash on hostile markup is a failed fetch, not a crashed run
            raise FetchError(f"could not extract text from {url}: {exc}") from exc
    if media in _TEXT_TYPES:
        return None, _decode(body, response, sniff_meta=False)
    if media in _PDF_TYPES:
        try:
            return extract_pdf(body)
        except Exception as exc:  # pypdf raises many types on damaged or truncated files
            raise FetchError(f"could not read PDF from {url}: {exc}") from exc
    raise FetchError(f"unsupported content type {media or 'unknown'!r} at {url}")


def _media_type(response: httpx.Response) -> str:
    return response.headers.get("content-type", "").split(";", 1)[0].strip().lower()


def _sniff(body: bytes) -> str:
    """Content type of a response that did not declare one."""
    head = body[:1024].lstrip().lower()
    if head.startswith(b"%pdf-"):
        return "application/pdf"
    if head.startswith((b"<!doctype html", b"<html")) or b"<body" in head:
        return "text/html"
    if b"\x00" not in body[:4096]:
        return "text/plain"
    return "application/octet-stream"


def _decode(body: bytes, response: httpx.Response, *, sniff_meta: bool) -> str:
    charset = _valid_charset(response.charset_encoding)
    if charset is None and sniff_meta:
        match = _META_CHARSET.search(body[:4096])
        charset = _valid_charset(match.group(1).decode("ascii", "ignore")) if match else None
    return body.decode(charset or "utf-8", errors="replace")


def _valid_charset(name: str | None) -> str | None:
    if not name:
        return None
    try:
        return codecs.lookup(name.strip()).name
    except LookupError:
        return None
