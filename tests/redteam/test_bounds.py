"""Bounded in time: slow-loris pages, trickling and hanging search providers (a total wall-clock
deadline, not a per-chunk timeout) and model-chosen regular expressions (ReDoS)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from deepresearch_dagster.core.errors import FetchError, SearchError, ToolError
from deepresearch_dagster.core.store.artifacts import ArtifactReader, ArtifactStore
from deepresearch_dagster.core.tools.artifact_tools import artifact_tools
from deepresearch_dagster.core.tools.base import Toolbox
from deepresearch_dagster.core.web.fetch import FetchPolicy, fetch_url
from deepresearch_dagster.core.web.search import SearXNGSearch

from .servers import TricklingServer

TOTAL = 2.0  # the deadline under test
SLACK = 1.5  # scheduling on a loaded 2-core CI machine


@pytest.mark.parametrize(
    ("mode", "interval", "case"),
    [
        ("body", 15.0, "fetch: slow-loris body, 1 byte / 15 s (read timeout 20 s)"),
        ("body", 0.2, "fetch: body trickling 1 byte / 0.2 s"),
        ("headers", 1.0, "fetch: headers trickling 1 byte / 1 s"),
        ("hang", 0.0, "fetch: server accepts and never answers"),
    ],
)
def test_fetch_has_a_total_deadline(mode: str, interval: float, case: str, record) -> None:
    policy = FetchPolicy(allow_loopback=True, respect_robots=False, read_timeout=20.0, total_timeout=TOTAL)
    with TricklingServer(mode, interval) as server:
        started = time.monotonic()
        with pytest.raises(FetchError) as failed:
            fetch_url(server.base_url + "/page", policy)
        elapsed = time.monotonic() - started
    ok = elapsed < TOTAL + SLACK and "timed out" in str(failed.value)
    record(case, f"FetchError within {TOTAL:g}+{SLACK:g} s", f"{elapsed:.2f} s: {failed.value}", ok)
    assert ok


def test_robots_and_page_share_one_deadline(record) -> None:
    policy = FetchPolicy(allow_loopback=True, respect_robots=True, read_timeout=20.0, total_timeout=TOTAL)
    with TricklingServer("body", 0.3) as server:
        started = time.monotonic()
        with pytest.raises(FetchError):
            fetch_url(server.base_url + "/page", policy)
        elapsed = time.monotonic() - started
    ok = elapsed < TOTAL + SLACK
    record("fetch: trickling robots.txt + page", f"one {TOTAL:g} s deadline for both", f"{elapsed:.2f} s", ok)
    assert ok


@pytest.mark.parametrize(("mode", "interval"), [("body", 0.3), ("headers", 0.5), ("hang", 0.0)])
def test_search_provider_has_a_total_deadline(mode: str, interval: float, record) -> None:
    with TricklingServer(mode, interval, content_type="application/json") as server:
        provider = SearXNGSearch(server.base_url, timeout=TOTAL)
        started = time.monotonic()
        with pytest.raises(SearchError) as failed:
            provider.search("sodium batteries")
        elapsed = time.monotonic() - started
        provider.close()
    ok = elapsed < TOTAL + SLACK
    record(
        f"search: provider {mode} ({interval:g} s/byte)",
        f"SearchError within {TOTAL:g}+{SLACK:g} s",
        f"{elapsed:.2f} s: {failed.value}",
        ok,
    )
    assert ok


@pytest.mark.parametrize("pattern", ["(a+)+$", "(a|aa)+$", "(a*)*b", "^(\\w+\\s?)*$", "(x+x+)+y", "(a)\\1+$"])
def test_grep_pattern_cannot_pin_a_core(tmp_path: Path, pattern: str, record) -> None:
    store = ArtifactStore(tmp_path / "artifacts", "k")
    store.write_raw("plan", "long.txt", "a" * 50_000 + "!\n" + "x" * 5_000 + "\nordinary line\n")
    tools = Toolbox(artifact_tools(ArtifactReader(store.raw_dir("plan"))))
    started = time.monotonic()
    matches = tools.call("grep_artifacts", {"pattern": pattern}).content["matches"]
    elapsed = time.monotonic() - started
    ok = elapsed < 5.0  # milliseconds with RE2; a backtracking engine takes minutes, even idle
    record(
        f"grep_artifacts ReDoS {pattern!r} on a 50k-char line",
        "answer within 5 s (RE2)",
        f"{elapsed:.3f} s, {len(matches)} matches",
        ok,
    )
    assert ok


def test_grep_total_time_limit_is_a_clear_tool_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, record) -> None:
    store = ArtifactStore(tmp_path / "artifacts", "k")
    store.write_raw("plan", "a.txt", "line\n" * 1000)
    monkeypatch.setattr(ArtifactReader, "GREP_TIMEOUT_S", 0.0)
    with pytest.raises(ToolError) as failed:
        Toolbox(artifact_tools(ArtifactReader(store.raw_dir("plan")))).call("grep_artifacts", {"pattern": "zzz"})
    ok = "took longer than" in str(failed.value)
    record("grep_artifacts over its wall budget", "one-line tool error", str(failed.value), ok)
    assert ok


def test_ordinary_grep_still_works(tmp_path: Path) -> None:
    store = ArtifactStore(tmp_path / "artifacts", "k")
    store.write_raw("plan", "a.txt", "Sodium-ion cells\nlithium cells\n")
    reader = ArtifactReader(store.raw_dir("plan"))
    assert [m["line"] for m in reader.grep("SODIUM|lithium")] == [1, 2]
    assert reader.grep("[unclosed")[0:0] == []  # an invalid pattern is searched literally


def test_a_hanging_dns_lookup_is_bounded(monkeypatch: pytest.MonkeyPatch, record) -> None:
    import socket

    release = __import__("threading").Event()

    def hanging(*args: object, **kwargs: object) -> list:
        release.wait(30)
        raise socket.gaierror(socket.EAI_AGAIN, "never answered")

    monkeypatch.setattr(socket, "getaddrinfo", hanging)
    started = time.monotonic()
    try:
        with pytest.raises(FetchError) as failed:
            fetch_url("http://slow-dns.test/page", FetchPolicy(connect_timeout=1.0, total_timeout=TOTAL))
    finally:
        release.set()
    elapsed = time.monotonic() - started
    ok = elapsed < 1.0 + SLACK and "DNS" in str(failed.value)
    record(
        "fetch: DNS lookup that never answers",
        "FetchError within the connect timeout",
        f"{elapsed:.2f} s: {failed.value}",
        ok,
    )
    assert ok
