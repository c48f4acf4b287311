"""Safe fetching against a local fake website; every connection stays on 127.0.0.1."""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Iterator

import httpx
import pytest

from deepresearch_dagster.core.web import fetch as fetch_module
from deepresearch_dagster.core.web.fetch import (
    FetchError,
    FetchPolicy,
    UnsafeURLError,
    address_block_reason,
    check_url,
    clear_robots_cache,
    fetch_url,
    is_address_allowed,
)
from tests.fakes.website import ARTICLE_PARAGRAPHS, ARTICLE_TITLE, PDF_TEXT, PLAIN_TEXT, FakeWebsite

LOOPBACK = FetchPolicy(allow_loopback=True)


@pytest.fixture(scope="module")
def site() -> Iterator[FakeWebsite]:
    with FakeWebsite(slow_seconds=3.0) as website:
        yield website


@pytest.fixture(autouse=True)
def fresh_robots() -> Iterator[None]:
    clear_robots_cache()
    yield
    clear_robots_cache()


class FakeDNS:
    """Answers for names ending in .test: ``dns.answers[name]`` is a list of successive answers (the last one
    repeats); unknown names fail like NXDOMAIN. Every lookup is recorded in ``dns.lookups``."""

    def __init__(self) -> None:
        self.answers: dict[str, list[list[str]]] = {}
        self.lookups: list[str] = []

    def getaddrinfo(self, host: str, port: int, *args: object, **kwargs: object) -> list:
        self.lookups.append(host)
        if host not in self.answers:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        queue = self.answers[host]
        answer = queue.pop(0) if len(queue) > 1 else queue[0]
        infos: list = []
        for address in answer:
            ip = ipaddress.ip_address(address)
            if ip.version == 4:
                infos.append((socket.AF_INET, socket.SOCK_STREAM, 6, "", (address, port)))
            else:
                infos.append((socket.AF_INET6, socket.SOCK_STREAM, 6, "", (address, port, 0, 0)))
        return infos


@pytest.fixture
def fake_dns(monkeypatch: pytest.MonkeyPatch) -> FakeDNS:
    dns = FakeDNS()
    real = socket.getaddrinfo

    def getaddrinfo(host: str, port: int, *args: object, **kwargs: object) -> list:
        if str(host).endswith(".test"):
            return dns.getaddrinfo(host, port, *args, **kwargs)
        return real(host, port, *args, **kwargs)  # type: ignore[arg-type]  # IP literals: no network involved

    # socket.getaddrinfo is also what httpx would use to connect: patching it proves we never look up again.
    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    return dns


# ---------------------------------------------------------------------------------------------- SSRF guard


@pytest.mark.parametrize(
    ("address", "reason"),
    [
        ("127.0.0.1", "loopback"),
        ("127.8.9.10", "loopback"),
        ("::1", "loopback"),
        ("169.254.169.254", "cloud metadata"),
        ("169.254.1.1", "link-local"),
        ("10.0.0.1", "private"),
        ("172.16.5.4", "private"),
        ("192.168.1.1", "private"),
        ("100.64.0.1", "carrier-grade NAT"),
        ("100.127.255.254", "carrier-grade NAT"),
        ("224.0.0.1", "multicast"),
        ("0.0.0.0", "unspecified"),
        ("240.0.0.1", "reserved"),
        ("255.255.255.255", "reserved"),
        ("::", "unspecified"),
        ("fe80::1", "link-local"),
        ("fc00::1", "private"),
        ("ff02::1", "multicast"),
        ("::ffff:10.0.0.1", "private"),  # IPv4-mapped
        ("::ffff:127.0.0.1", "loopback"),
        ("::ffff:169.254.169.254", "cloud metadata"),
        ("::10.0.0.1", "private"),  # IPv4-compatible
        ("64:ff9b::a9fe:a9fe", "cloud metadata"),  # NAT64 of 169.254.169.254
        ("2002:0a00:0001::", "private"),  # 6to4 of 10.0.0.1
        ("2002:7f00:0001::1", "loopback"),  # 6to4 of 127.0.0.1
        ("2001:0:4136:e378:8000:63bf:f5ff:fffe", "private"),  # Teredo client 10.0.0.1
        ("93.184.216.34", None),
        ("8.8.8.8", None),
        ("::ffff:8.8.8.8", None),
        ("2002:5db8:d822::", "6to4"),  # 6to4 of 93.184.216.34: deprecated, in the special-purpose registry
        ("64:ff9b::808:808", None),  # NAT64 of 8.8.8.8 (DNS64 on IPv6-only networks)
        ("2606:4700:4700::1111", None),
    ],
)
def test_address_classification(address: str, reason: str | None) -> None:
    assert address_block_reason(ipaddress.ip_address(address)) == reason


def test_policy_switches_are_separate() -> None:
    loopback, metadata, private = (ipaddress.ip_address(a) for a in ("127.0.0.1", "169.254.169.254", "10.0.0.1"))
    public = ipaddress.ip_address("93.184.216.34")

    assert [is_address_allowed(ip, FetchPolicy()) for ip in (loopback, metadata, private, public)] == [
        False,
        False,
        False,
        True,
    ]
    assert [is_address_allowed(ip, LOOPBACK) for ip in (loopback, metadata, private)] == [True, False, False]
    only_private = FetchPolicy(allow_private=True)
    # Cloud metadata stays refused whatever the switches say.
    assert [is_address_allowed(ip, only_private) for ip in (loopback, metadata, private)] == [False, False, True]
    # Never a valid HTTP target, whatever the switches say.
    everything = FetchPolicy(allow_loopback=True, allow_private=True)
    assert not is_address_allowed(ipaddress.ip_address("0.0.0.0"), everything)
    assert not is_address_allowed(ipaddress.ip_address("224.0.0.1"), everything)


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1/",
        "http://127.0.0.1:8080/admin",
        "http://169.254.169.254/latest/meta-data",
        "http://[::ffff:127.0.0.1]/",
        "http://[::1]:9000/",
        "http://10.0.0.1/",
        "http://100.64.1.2/",
        "http://0.0.0.0:3000/",
        "ftp://example.org/file.txt",
        "file:///etc/passwd",
        "gopher://example.org/",
        "http://user:pw@example.org/",
        "https://token@example.org/",
    ],
)
def test_default_policy_refuses(url: str) -> None:
    with pytest.raises(UnsafeURLError):
        fetch_url(url)


def test_default_policy_refuses_the_local_site_without_connecting(site: FakeWebsite) -> None:
    before = len(site.requests)
    with pytest.raises(UnsafeURLError, match="loopback"):
        fetch_url(site.url("/article"))
    assert len(site.requests) == before


def test_any_bad_dns_answer_refuses(fake_dns: FakeDNS) -> None:
    fake_dns.answers["mixed.test"] = [["93.184.216.34", "10.0.0.1"]]
    with pytest.raises(UnsafeURLError, match=r"private address 10\.0\.0\.1"):
        check_url("http://mixed.test/", FetchPolicy())


def test_public_dns_answer_passes(fake_dns: FakeDNS) -> None:
    fake_dns.answers["public.test"] = [["93.184.216.34", "2606:4700:4700::1111"]]
    target = check_url("https://public.test/path?q=1#frag", FetchPolicy())
    assert [str(ip) for ip in target.addresses] == ["93.184.216.34", "2606:4700:4700::1111"]
    assert str(target.url) == "https://public.test/path?q=1"


def test_connects_to_the_checked_address_only(site: FakeWebsite, fake_dns: FakeDNS) -> None:
    # A rebinding resolver: first answer loopback (allowed here), then the metadata service.
    fake_dns.answers["rebind.test"] = [["127.0.0.1"], ["169.254.169.254"]]
    url = f"http://rebind.test:{site.port}/echo-host"

    page = fetch_url(url, FetchPolicy(allow_loopback=True, respect_robots=False))

    assert page.text == f"rebind.test:{site.port}"  # the server saw the real Host header
    assert fake_dns.lookups == ["rebind.test"]  # resolved once; the connection used the checked IP


def test_falls_back_to_the_next_checked_address(site: FakeWebsite, fake_dns: FakeDNS) -> None:
    fake_dns.answers["multi.test"] = [["127.0.0.2", "127.0.0.1"]]  # nothing listens on 127.0.0.2
    page = fetch_url(f"http://multi.test:{site.port}/echo-host", FetchPolicy(allow_loopback=True, respect_robots=False))
    assert page.text == f"multi.test:{site.port}"


def test_https_request_is_pinned_with_sni(fake_dns: FakeDNS) -> None:
    fake_dns.answers["secure.test"] = [["93.184.216.34"]]
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:  # MockTransport: nothing leaves the process
        seen.append(request)
        if request.url.path == "/robots.txt":
            return httpx.Response(404)
        return httpx.Response(200, headers={"Content-Type": "text/plain"}, content=b"hello over tls")

    with httpx.Client(transport=httpx.MockTransport(handler)) as client:
        page = fetch_url("https://secure.test/doc", client=client)

    assert page.text == "hello over tls"
    assert page.final_url == "https://secure.test/doc"
    request = seen[-1]
    assert str(request.url) == "https://93.184.216.34/doc"
    assert request.headers["Host"] == "secure.test"
    assert request.extensions["sni_hostname"] == "secure.test"  # certificate checked against the name
    assert request.headers["Connection"] == "close"
    assert [r.url.path for r in seen] == ["/robots.txt", "/doc"]


def test_unresolvable_host(fake_dns: FakeDNS) -> None:
    with pytest.raises(FetchError, match=r"could not resolve host 'nowhere\.test'"):
        check_url("http://nowhere.test/", FetchPolicy())


# ---------------------------------------------------------------------------------------------- fetching


def test_fetches_html_article(site: FakeWebsite) -> None:
    page = fetch_url(site.url("/article"), LOOPBACK)

    assert page.status == 200
    assert page.content_type == "text/html"
    assert page.title == ARTICLE_TITLE
    assert all(p in page.text for p in ARTICLE_PARAGRAPHS)
    assert "do-not-extract-this-script" not in page.text
    assert page.final_url == page.url == site.url("/article")
    assert page.redirects == []
    assert not page.truncated
    assert page.bytes > 0


def test_sends_user_agent(site: FakeWebsite) -> None:
    fetch_url(site.url("/plain"), LOOPBACK.model_copy(update={"user_agent": "test-agent/9"}))
    headers = next(h for path, h in reversed(site.requests) if path == "/plain")
    assert headers["User-Agent"] == "test-agent/9"


def test_plain_text_is_decoded_with_its_charset(site: FakeWebsite) -> None:
    page = fetch_url(site.url("/plain"), LOOPBACK)
    assert page.content_type == "text/plain"
    assert page.title is None
    assert page.text == PLAIN_TEXT  # served as ISO-8859-1


def test_markdown_passes_through(site: FakeWebsite) -> None:
    page = fetch_url(site.url("/notes.md"), LOOPBACK)
    assert page.text.startswith("# Notes")


def test_undeclared_type_is_sniffed(site: FakeWebsite) -> None:
    page = fetch_url(site.url("/no-type"), LOOPBACK)
    assert page.content_type == "text/html"
    assert page.title == ARTICLE_TITLE


def test_redirect_chain_is_followed_and_recorded(site: FakeWebsite) -> None:
    page = fetch_url(site.url("/redirect/1"), LOOPBACK)

    assert page.url == site.url("/redirect/1")
    assert page.redirects == [site.url("/redirect/2"), site.url("/article")]  # fragment dropped
    assert page.final_url == site.url("/article")
    assert page.title == ARTICLE_TITLE


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("/redirect/metadata", r"cloud metadata address 169\.254\.169\.254"),
        ("/redirect/private", r"private address 10\.0\.0\.1"),
        ("/redirect/ftp", "scheme 'ftp'"),
    ],
)
def test_redirect_hops_are_rechecked(site: FakeWebsite, path: str, message: str) -> None:
    # Loopback is allowed (the site itself), but the hop it redirects to is not.
    with pytest.raises(UnsafeURLError, match=message):
        fetch_url(site.url(path), LOOPBACK)


def test_redirect_limit(site: FakeWebsite) -> None:
    with pytest.raises(FetchError, match="too many redirects"):
        fetch_url(site.url("/redirect/loop"), LOOPBACK.model_copy(update={"max_redirects": 3}))
    with pytest.raises(FetchError, match="too many redirects"):
        fetch_url(site.url("/redirect/1"), LOOPBACK.model_copy(update={"max_redirects": 1}))


def test_size_cap_truncates(site: FakeWebsite) -> None:
    page = fetch_url(site.url("/huge"), LOOPBACK.model_copy(update={"max_bytes": 50_000}))
    assert page.truncated
    assert page.bytes == 50_000
    assert len(page.text) == 50_000


def test_binary_is_refused(site: FakeWebsite) -> None:
    with pytest.raises(FetchError, match="unsupported content type 'application/octet-stream'"):
        fetch_url(site.url("/binary"), LOOPBACK)


def test_pdf_text_is_extracted(site: FakeWebsite) -> None:
    page = fetch_url(site.url("/doc.pdf"), LOOPBACK)
    assert page.content_type == "application/pdf"
    assert page.title == "Fake grid report"
    assert PDF_TEXT in page.text


@pytest.mark.parametrize(("path", "status"), [("/missing", 404), ("/error", 500)])
def test_http_errors(site: FakeWebsite, path: str, status: int) -> None:
    with pytest.raises(FetchError, match=f"HTTP {status}"):
        fetch_url(site.url(path), LOOPBACK)


def test_slow_server_times_out(site: FakeWebsite) -> None:
    with pytest.raises(FetchError, match="timed out"):
        fetch_url(site.url("/slow"), LOOPBACK.model_copy(update={"read_timeout": 0.3}))


def test_connection_refused() -> None:
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with pytest.raises(FetchError, match="could not connect"):
        fetch_url(f"http://127.0.0.1:{port}/", LOOPBACK.model_copy(update={"respect_robots": False}))


def test_caller_client_is_used_without_auto_redirects(site: FakeWebsite) -> None:
    with httpx.Client(follow_redirects=True) as client:
        page = fetch_url(site.url("/redirect/1"), LOOPBACK, client=client)
        with pytest.raises(UnsafeURLError):
            fetch_url(site.url("/redirect/metadata"), LOOPBACK, client=client)
    assert page.redirects[-1] == site.url("/article")


# ---------------------------------------------------------------------------------------------- robots.txt


def test_robots_disallow(site: FakeWebsite) -> None:
    with pytest.raises(FetchError, match=r"disallowed by robots\.txt"):
        fetch_url(site.url("/private/secret"), LOOPBACK)
    with pytest.raises(FetchError, match=r"disallowed by robots\.txt"):  # also when reached by a redirect
        fetch_url(site.url("/redirect/private-page"), LOOPBACK)


def test_robots_can_be_ignored(site: FakeWebsite) -> None:
    page = fetch_url(site.url("/private/secret"), LOOPBACK.model_copy(update={"respect_robots": False}))
    assert "secret page" in page.text


def test_robots_is_cached_per_host(site: FakeWebsite) -> None:
    before = site.paths().count("/robots.txt")
    fetch_url(site.url("/article"), LOOPBACK)
    fetch_url(site.url("/plain"), LOOPBACK)
    assert site.paths().count("/robots.txt") == before + 1


def test_missing_robots_allows_everything() -> None:
    with FakeWebsite(robots_txt=None) as bare:
        page = fetch_url(bare.url("/private/secret"), LOOPBACK)
        assert "secret page" in page.text
        assert "/robots.txt" in bare.paths()


def test_robots_fetch_goes_through_the_guard(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    real = fetch_module._get

    def spy(url: str, *args: object, **kwargs: object) -> object:
        calls.append(url)
        return real(url, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(fetch_module, "_get", spy)
    with pytest.raises(UnsafeURLError):
        fetch_url("http://169.254.169.254/latest/meta-data")
    assert calls == ["http://169.254.169.254/latest/meta-data"]  # refused before robots.txt was even tried
