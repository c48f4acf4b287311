"""extract_html's memo (sha256 of settings, URL and page) and its skipped recall pass change no result."""

from pathlib import Path

import pytest

from deepresearch_dagster.core.web import extract as extract_module
from deepresearch_dagster.core.web.extract import (
    clear_extract_cache,
    extract_cache_info,
    extract_cache_key,
    extract_html,
)

PAGES = Path(__file__).resolve().parents[2] / "fixtures" / "web_pages"


def _article(words: str) -> str:
    sentence = "says something long enough to be kept as prose here."
    body = "".join(f"<p>{words} paragraph {i} {sentence}</p>" for i in range(8))
    head = "<html><head><title>Cache test</title></head>"
    return f"{head}<body><article><h1>Cache test</h1>{body}</article></body></html>"


@pytest.fixture(autouse=True)
def _fresh() -> None:
    clear_extract_cache()


def test_the_same_page_is_extracted_once() -> None:
    html = _article("Otters")
    first = extract_html(html, "https://example.org/a")
    second = extract_html(html, "https://example.org/a")
    assert first == second and "Otters paragraph 3" in first[1]
    assert extract_cache_info()["misses"] == 1 and extract_cache_info()["hits"] == 1


def test_changed_page_bytes_are_extracted_again() -> None:
    url = "https://example.org/a"
    _, before = extract_html(_article("Otters"), url)
    _, after = extract_html(_article("Beavers"), url)
    assert "Beavers" in after and "Otters" not in after and "Otters" in before
    assert extract_cache_info()["misses"] == 2 and extract_cache_info()["hits"] == 0


def test_the_key_covers_url_and_extractor_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    html = _article("Otters")
    key = extract_cache_key(html, "https://example.org/a")
    assert key != extract_cache_key(html, "https://example.org/b") != extract_cache_key(html, None)
    assert extract_cache_key(html, "") != extract_cache_key(html, None)
    assert key != extract_cache_key(html + " ", "https://example.org/a")
    monkeypatch.setattr(extract_module, "_SETTINGS_KEY", extract_module._SETTINGS_KEY + "/changed")
    assert extract_cache_key(html, "https://example.org/a") != key


def test_a_cached_result_is_what_a_fresh_extraction_returns() -> None:
    html = (PAGES / "v8-blog" / "source.html").read_text("utf-8")
    cached = extract_html(html)
    assert extract_html(html) == cached == extract_module._extract_html(html, None)


@pytest.mark.parametrize("name", sorted(p.name for p in PAGES.iterdir() if (p / "source.html").is_file()))
def test_skipping_the_recall_pass_changes_nothing(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    html = (PAGES / name / "source.html").read_text("utf-8")
    fast = extract_module._extract_html(html, None)
    monkeypatch.setattr(extract_module, "_word_bound", lambda tree: 10**12)  # recall mode always runs
    assert extract_module._extract_html(html, None) == fast


@pytest.mark.parametrize("name", sorted(p.name for p in PAGES.iterdir() if (p / "source.html").is_file()))
def test_recall_mode_never_has_more_words_than_the_bound(name: str) -> None:
    tree = extract_module._load((PAGES / name / "source.html").read_text("utf-8"))
    assert tree is not None
    recall = extract_module._trafilatura(tree, None, favor_recall=True)
    assert extract_module._words(recall) <= extract_module._word_bound(tree)


@pytest.mark.parametrize("name", sorted(p.name for p in PAGES.iterdir() if (p / "source.html").is_file()))
def test_the_title_is_the_one_extract_metadata_gives(name: str) -> None:
    import trafilatura

    tree = extract_module._load((PAGES / name / "source.html").read_text("utf-8"))
    meta = trafilatura.extract_metadata(tree)
    assert extract_module._metadata_title(tree) == (meta.title if meta is not None else None)


def test_json_ld_article_bodies_count_towards_the_bound() -> None:
    body = " ".join(f"word{i}" for i in range(400))
    html = (
        '<html><head><script type="application/ld+json">{"@type": "NewsArticle", "articleBody": "'
        + body
        + '"}</script><script>var a = 1;</script></head><body><p>Short teaser.</p></body></html>'
    )
    tree = extract_module._load(html)
    assert tree is not None and extract_module._word_bound(tree) >= 400
