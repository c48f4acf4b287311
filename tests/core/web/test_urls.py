from __future__ import annotations

from dataclasses import dataclass

import pytest

from deepresearch_dagster.core.web.urls import dedupe_by_url, is_tracking_param, normalize_url


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        # scheme and host case; the path keeps its case
        ("HTTPS://Example.COM/Some/Path", "https://example.com/Some/Path"),
        # default ports dropped, others kept
        ("http://example.com:80/a", "http://example.com/a"),
        ("https://example.com:443/a", "https://example.com/a"),
        ("https://example.com:80/a", "https://example.com:80/a"),
        ("http://example.com:8080/a", "http://example.com:8080/a"),
        # fragment dropped
        ("https://example.com/a#section-2", "https://example.com/a"),
        ("https://example.com/a?x=1#top", "https://example.com/a?x=1"),
        # empty path becomes "/"
        ("https://example.com", "https://example.com/"),
        ("https://example.com?b=1", "https://example.com/?b=1"),
        # path left alone apart from that (no slash collapsing, no trailing-slash games)
        ("https://example.com//a//b/", "https://example.com//a//b/"),
        # IDN hosts in ASCII (punycode)
        ("https://Bücher.example/akkus", "https://xn--bcher-kva.example/akkus"),
        ("https://xn--bcher-kva.example/akkus", "https://xn--bcher-kva.example/akkus"),
        # IPv6 literal keeps its brackets; default port still dropped
        ("http://[::1]:80/p", "http://[::1]/p"),
        # user info and non-default ports survive
        ("https://user:pw@Example.com:8443/", "https://user:pw@example.com:8443/"),
        # surrounding whitespace
        ("  https://example.com/a  ", "https://example.com/a"),
    ],
)
def test_normalize_url_basics(raw: str, expected: str) -> None:
    assert normalize_url(raw) == expected


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("https://e.com/a?utm_source=x&utm_medium=y&utm_campaign=z", "https://e.com/a"),
        ("https://e.com/a?id=7&fbclid=abc&gclid=def", "https://e.com/a?id=7"),
        ("https://e.com/a?mc_cid=1&mc_eid=2&msclkid=3&ref=hn&ref_src=twsrc", "https://e.com/a"),
        ("https://e.com/a?igshid=1&_ga=2&yclid=3&spm=4&q=keep", "https://e.com/a?q=keep"),
        # tracking names are matched case-insensitively; other names are not touched
        ("https://e.com/a?UTM_Source=x&Ref=y&reference=z", "https://e.com/a?reference=z"),
        # an all-tracking query leaves no dangling "?"
        ("https://e.com/?utm_source=x", "https://e.com/"),
    ],
)
def test_normalize_url_drops_tracking_params(raw: str, expected: str) -> None:
    assert normalize_url(raw) == expected


def test_normalize_url_sorts_query_and_keeps_encoding() -> None:
    assert normalize_url("https://e.com/s?b=2&a=1&c=3") == "https://e.com/s?a=1&b=2&c=3"
    # values keep their percent-encoding; repeated keys keep a stable order; empty pieces go
    assert normalize_url("https://e.com/s?q=a%20b&q=a+c&&z") == "https://e.com/s?q=a%20b&q=a+c&z"
    assert normalize_url("https://e.com/s?q=2&q=1") == "https://e.com/s?q=1&q=2"


def test_variants_of_one_page_normalize_equal() -> None:
    variants = [
        "https://Example.com/solid-state?utm_source=newsletter&b=2&a=1#intro",
        "https://example.com:443/solid-state?a=1&b=2",
        "HTTPS://EXAMPLE.COM/solid-state?b=2&a=1&fbclid=zzz",
    ]
    assert len({normalize_url(v) for v in variants}) == 1


def test_normalize_url_tolerates_odd_input() -> None:
    assert normalize_url("mailto:Someone@Example.com") == "mailto:Someone@Example.com"
    assert normalize_url("/relative/path?b=1&a=2") == "/relative/path?a=2&b=1"
    assert normalize_url("http://[::1") == "http://[::1"  # unparseable: returned as is, no exception
    assert normalize_url("http://example.com:abc/") == "http://example.com:abc/"


def test_is_tracking_param() -> None:
    assert is_tracking_param("utm_anything")
    assert is_tracking_param("GCLID")
    assert not is_tracking_param("id")
    assert not is_tracking_param("utm")


@dataclass
class Hit:
    url: str
    label: str


def test_dedupe_by_url_keeps_first_occurrence_in_order() -> None:
    items = [
        Hit("https://example.com/a?utm_source=x", "first a"),
        Hit("https://b.example/", "b"),
        Hit("https://EXAMPLE.com:443/a#frag", "second a"),
        Hit("https://b.example", "second b"),
        Hit("https://c.example/", "c"),
    ]
    assert [h.label for h in dedupe_by_url(items)] == ["first a", "b", "c"]
    # items themselves are returned untouched
    assert dedupe_by_url(items)[0].url == "https://example.com/a?utm_source=x"


def test_dedupe_by_url_custom_key() -> None:
    rows = [{"link": "http://e.com:80/x"}, {"link": "http://e.com/x"}, {"link": "http://e.com/y"}]
    assert dedupe_by_url(rows, key=lambda r: r["link"]) == [rows[0], rows[2]]
    assert dedupe_by_url([]) == []
