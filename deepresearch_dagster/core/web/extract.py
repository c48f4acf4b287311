"""HTML and PDF to plain text: main-content extraction (trafilatura), full visible text, and a token-F1 metric.

This is the project's one HTML-to-text module:

- ``extract_html`` — the main content of a web page (article body without navigation, related links, footer);
- ``html_to_text`` — every visible block of a simple document (corpus pages, HTML a tool returned), for callers
  that must not lose anything to a main-content guess;
- ``html_visible_text`` — all visible text of a fragment, one string.

``extract_html`` is trafilatura in precision mode on trafilatura's own parse of the page, after two structural
repairs: layout tables (a whole article inside a cell) become divs, and an article split into several sibling
containers of the same class (``article__chunks`` and the like) is joined into one, since trafilatura takes the
first matching container only. Measured with ``benchmarks/extraction_f1.py`` on a DEV split of the Article
Extraction Benchmark pages, then confirmed on a held-out split nobody looked at (figures in that script's output).

Cost (it is most of a web research's local CPU): the title comes from trafilatura's own title rules without the
rest of its metadata pass (dates, authors, licences: not used here); recall mode runs only when it could change
the result; and results are memoized by sha256 of the page and the extractor settings (``extract_cache_info``),
so a page read again (a later research, a re-run, the corpus's HTML files) is not extracted again.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import re
import threading
from collections import Counter
from html import unescape
from urllib.parse import urljoin

import lxml.html
import trafilatura
from lxml import etree
from trafilatura.metadata import examine_meta, extract_meta_json, extract_title
from trafilatura.settings import use_config
from trafilatura.utils import line_processing, load_html

from ..memo import Memo

# EXTRACTION_TIMEOUT=0: trafilatura's timeout uses signal.alarm, which only works in the main thread;
# Dagster runs ops in worker threads.
_CONFIG = use_config()
_CONFIG.set("DEFAULT", "EXTRACTION_TIMEOUT", "0")

_TOKEN = re.compile(r"\w+")
_BLOCKS_IN_CELL = ".//p | .//div | .//table | .//h1 | .//h2 | .//h3 | .//article"
# A cell with this much text or this many block children is page layout, not tabular data.
_LAYOUT_CELL_CHARS = 2000
_LAYOUT_CELL_BLOCKS = 4
# A sibling container counts as a chunk of the article when it holds this many paragraphs of prose
# (paragraphs of at least _CHUNK_PARAGRAPH_CHARS characters) totalling at least _CHUNK_CHARS characters.
_CHUNK_PARAGRAPHS = 2
_CHUNK_PARAGRAPH_CHARS = 60
_CHUNK_CHARS = 300
# html_to_text: markup that is never content, and the tags that start a new block of text.
_NOT_CONTENT = " | ".join(
    f".//{tag}" for tag in ("script", "style", "nav", "footer", "header", "aside", "noscript", "form", "template")
)
_BLOCK_TAGS = (
    *("p", "div", "section", "article", "main", "li", "ul", "ol", "br", "tr", "table", "blockquote", "pre"),
    *("h1", "h2", "h3", "h4", "h5", "h6", "dt", "dd", "figcaption"),
)
# Precision-mode text shorter than this share of recall-mode text is taken as a misread page.
_PRECISION_FLOOR = 0.5
# Everything extract_html's output depends on besides (html, url): bump EXTRACT_VERSION whenever the code
# above or below changes what it returns, so memoized results of the old code are never served.
EXTRACT_VERSION = 2
_SETTINGS_KEY = f"extract_html/{EXTRACT_VERSION}/trafilatura {trafilatura.__version__}/floor {_PRECISION_FLOOR}"
# Memoized results (title, text) by sha256(settings, url, page): ~100 pages of main text at most.
_memo: Memo[tuple[str | None, str]] = Memo(128)
# Text of these elements never reaches trafilatura's output, except JSON-LD (its baseline reads articleBody).
_CODE_TAGS = ("script", "style")
_JSON_ATTRIBUTE = "data-preloaded"  # Discourse forums: posts as JSON in an attribute
# trafilatura parses with one module-level lxml HTMLParser, and an lxml parser must not be used by
# two threads at once (lxml FAQ, threading): pages fetched concurrently (retrieval.run_concurrently)
# corrupted each other's trees — a worker spinning in XPath, "double free or corruption" — in
# benchmark 5's eight concurrent researches. Extraction is CPU-bound under the GIL anyway.
_one_parse_at_a_time = threading.Lock()


def extract_cache_key(html: str, url: str | None = None) -> str:
    """sha256 of the extractor settings, the URL and the page: equal keys give equal results."""
    h = hashlib.sha256(_SETTINGS_KEY.encode())
    h.update(b"\0" + repr(url).encode("utf-8", "surrogatepass") + b"\0")  # None and "" stay apart
    h.update(html.encode("utf-8", "surrogatepass"))
    return h.hexdigest()


def extract_cache_info() -> dict[str, int]:
    """Hits and misses of the extract_html memo since the process started (or the last clear)."""
    return _memo.info()


def clear_extract_cache() -> None:
    _memo.clear()


def extract_html(html: str, url: str | None = None) -> tuple[str | None, str]:
    """Return (title, main text) of an HTML page; paragraphs are separated by blank lines.

    A pure function of (html, url) and the extractor settings, memoized on their sha256."""
    key = extract_cache_key(html, url)
    found = _memo.get(key)
    if found is None:
        with _one_parse_at_a_time:
            found = _extract_html(html, url)
        _memo.put(key, found)
    return found


def _extract_html(html: str, url: str | None) -> tuple[str | None, str]:
    tree = _load(html)
    if tree is None:
        return None, ""
    title = _title(tree, url)
    _unwrap_layout_tables(tree)
    _join_article_chunks(tree)
    # Precision mode: on the DEV pages it drops more related-story lists and share/subscribe lines than it
    # loses body text (F1 0.968 vs 0.961 default and 0.964 favor_recall, before the chunk join).
    text = _trafilatura(tree, url, favor_precision=True)
    # Safety net: precision mode can over-prune a page it misreads. On DEV its text was never below 0.79 of
    # recall mode's, so a precision text under half of it is taken as a misread and recall mode's text is used.
    # Recall mode cannot have more words than the page holds (_word_bound), so when the precision text already
    # has half of those the recall pass could not change the result and is skipped.
    words = _words(text)
    if words < _PRECISION_FLOOR * _word_bound(tree):
        recall = _trafilatura(tree, url, favor_recall=True)
        if words < _PRECISION_FLOOR * _words(recall):
            text = recall
    if not text:
        # Tiny or unusual pages make trafilatura give up; the visible text is better than nothing.
        body = tree.find(".//body")
        text = _visible_text(body if body is not None else tree)
    return title, _paragraphs(text)


def _trafilatura(tree: lxml.html.HtmlElement, url: str | None, **focus: bool) -> str:
    # trafilatura works on a copy of the tree it is given, so one parse serves both passes.
    return (
        trafilatura.extract(
            tree,
            url=url,
            output_format="txt",
            include_comments=False,
            include_tables=True,
            include_images=False,
            include_links=False,
            config=_CONFIG,
            **focus,
        )
        or ""
    )


def _words(text: str) -> int:
    return len(_TOKEN.findall(text))


def _word_bound(tree: lxml.html.HtmlElement) -> int:
    """At least as many words as any trafilatura output for the tree: the words of every text node counted
    separately (a word split by markup counts twice), plus JSON in scripts and Discourse's preload attribute
    (trafilatura's baseline reads article bodies embedded there); only script code and styles are left out.
    Checked on 196 pages (benchmarks/extraction_f1.py's data): the result never differs from always running
    the recall pass (tests/core/web/test_extract_cache.py keeps a few of them)."""
    total = 0
    for node in tree.iter():
        total += _words(node.tail or "")
        if not isinstance(node.tag, str):
            continue
        tag = node.tag.lower()
        if tag not in _CODE_TAGS or (tag == "script" and "json" in (node.get("type") or "").lower()):
            total += _words(node.text or "")
        total += _words(node.get(_JSON_ATTRIBUTE) or "")
    return total


def extract_pdf(data: bytes) -> tuple[str | None, str]:
    """Return (title, text) of a PDF; pages are separated by blank lines."""
    from pypdf import PdfReader  # imported lazily: only PDF fetches pay for it

    reader = PdfReader(io.BytesIO(data))
    title: str | None = None
    try:
        meta = reader.metadata
        if meta is not None and meta.title:
            title = str(meta.title).strip() or None
    except Exception:  # broken metadata must not cost us the text
        title = None
    pages = []
    for page in reader.pages:
        try:
            pages.append((page.extract_text() or "").strip())
        except Exception:  # one undecodable page should not fail the document
            continue
    return title, "\n\n".join(p for p in pages if p)


def token_f1(predicted: str, expected: str) -> float:
    """Bag-of-words F1 over lowercase ``\\w+`` tokens (the usual content-extraction score)."""
    pred = Counter(_TOKEN.findall(predicted.lower()))
    gold = Counter(_TOKEN.findall(expected.lower()))
    if not pred and not gold:
        return 1.0
    common = sum((pred & gold).values())
    if common == 0:
        return 0.0
    precision = common / sum(pred.values())
    recall = common / sum(gold.values())
    return 2 * precision * recall / (precision + recall)


def html_visible_text(html: str) -> str:
    """All visible text of an HTML fragment (scripts and styles dropped)."""
    tree = _parse(html)
    return "" if tree is None else _visible_text(tree)


MAX_LINKS = 1000  # a page's links kept for provenance (roles/provenance.py); the rest are not followable


def html_links(html: str, base_url: str) -> list[str]:
    """The absolute http(s) targets of a page's ``<a href>`` links, in document order, once each."""
    tree = _parse(html)
    if tree is None:
        return []
    found: dict[str, None] = {}
    for href in tree.xpath("//a/@href"):
        try:
            url = urljoin(base_url, str(href).strip())
        except ValueError:  # a malformed address (unbalanced IPv6 bracket): not a link
            continue
        if url.lower().startswith(("http://", "https://")):
            found.setdefault(url, None)
            if len(found) >= MAX_LINKS:
                break
    return list(found)


def html_to_text(html: str) -> tuple[str, str]:
    """Return ``(title, text)`` of a simple HTML document: every visible block, paragraphs separated by blank lines.

    Unlike ``extract_html`` nothing is judged boilerplate except what is boilerplate by markup (navigation,
    header, footer, aside, forms, scripts): corpus documents and HTML that a tool returned keep all their text.
    The title is ``""`` when the document has none.
    """
    tree = _parse(html)
    if tree is None:
        return "", ""
    title = " ".join((tree.findtext(".//title") or "").split())
    body = tree.find(".//body")
    if body is None:
        return title, ""
    for node in body.xpath(_NOT_CONTENT):
        node.drop_tree()  # keeps the node's tail text
    for node in body.iter(*_BLOCK_TAGS):
        node.text = "\n" + (node.text or "")
        node.tail = "\n" + (node.tail or "")
    paragraphs = (" ".join(line.split()) for line in body.text_content().split("\n"))
    return title, "\n\n".join(p for p in paragraphs if p)


def _load(html: str) -> lxml.html.HtmlElement | None:
    """trafilatura's own parse (comments and processing instructions dropped, faulty markup repaired).

    Parsing with plain ``lxml.html`` instead cost 0.009 F1 on the DEV pages: HTML comments left in the tree
    cut paragraphs short. Fragments that trafilatura rejects as "not HTML" go through lxml as before.
    """
    if not html or not html.strip():
        return None
    try:
        tree = load_html(html)
    except Exception:  # trafilatura's loader is a convenience; lxml below is the fallback
        tree = None
    return tree if tree is not None and len(tree) else _parse(html)


def _parse(html: str) -> lxml.html.HtmlElement | None:
    if not html or not html.strip():
        return None
    try:
        return lxml.html.document_fromstring(html)
    except (etree.ParserError, ValueError):
        # ValueError: str input with an XML encoding declaration; bytes let lxml honour it.
        try:
            return lxml.html.document_fromstring(html.encode("utf-8", errors="replace"))
        except etree.ParserError:
            return None


def _title(tree: lxml.html.HtmlElement, url: str | None) -> str | None:
    meta = _metadata_title(tree)
    if meta:
        return meta.strip()
    node = tree.find(".//title")
    text = node.text_content().strip() if node is not None else ""
    return text or None


def _metadata_title(tree: lxml.html.HtmlElement) -> str | None:
    """The title ``trafilatura.extract_metadata`` gives, by the same steps in the same order (meta tags, then
    JSON-LD, then the page's own title rules, then its final clean-up), without its date, author, site-name,
    category and licence passes (a third of the extraction time on the benchmark pages)."""
    metadata = examine_meta(tree)
    if metadata.author and " " not in metadata.author:
        metadata.author = None
    # extract_metadata ignores bugs in trafilatura's JSON metadata code the same way.
    with contextlib.suppress(Exception):
        metadata = extract_meta_json(tree, metadata)
    title = metadata.title or extract_title(tree)
    if not isinstance(title, str):
        return None
    if len(title) > 10000:
        title = title[:9999] + "…"
    return line_processing(unescape(title)) or None


def _unwrap_layout_tables(tree: lxml.html.HtmlElement) -> None:
    """Turn layout tables (whole articles inside a cell) into divs.

    Otherwise trafilatura renders the article as one giant table row and paragraph breaks are lost.
    """
    for cell in tree.xpath("//td | //th"):
        blocks = cell.xpath(_BLOCKS_IN_CELL)
        if len(blocks) < _LAYOUT_CELL_BLOCKS and len(cell.text_content()) < _LAYOUT_CELL_CHARS:
            continue
        table = next((a for a in cell.iterancestors("table")), None)
        if table is None:
            continue
        # Only this table's own structure: data tables nested inside the layout stay tables.
        own = [
            node
            for node in table.iter("table", "thead", "tbody", "tfoot", "tr", "td", "th", "caption")
            if node is table or next(node.iterancestors("table")) is table
        ]
        for node in own:
            node.tag = "div"
            for attr in ("colspan", "rowspan"):
                node.attrib.pop(attr, None)


def _prose_paragraphs(node: lxml.html.HtmlElement) -> list[int]:
    lengths = (len(p.text_content().strip()) for p in node.iter("p"))
    return [n for n in lengths if n >= _CHUNK_PARAGRAPH_CHARS]


def _join_article_chunks(tree: lxml.html.HtmlElement) -> None:
    """Join an article split into sibling containers of one class (``<div class="body">`` × 3) into the first.

    trafilatura keeps the first container that matches its body XPaths, so the rest of such an article was
    lost (on two DEV pages recall was 0.35 and 0.45). Only siblings that each hold several prose paragraphs
    are joined: a list of teaser cards (one short blurb each) stays as it is.
    """
    for parent in list(tree.iter()):
        if not isinstance(parent.tag, str) or len(parent) < 2:
            continue
        groups: dict[tuple[str, str], list[lxml.html.HtmlElement]] = {}
        for child in parent:
            cls = child.get("class", "").strip() if isinstance(child.tag, str) else ""
            if cls:
                groups.setdefault((child.tag, cls), []).append(child)
        for members in groups.values():
            chunks = []
            for member in members:
                prose = _prose_paragraphs(member) if len(members) > 1 else []
                if len(prose) >= _CHUNK_PARAGRAPHS and sum(prose) >= _CHUNK_CHARS:
                    chunks.append(member)
            if len(chunks) < 2:
                continue
            first = chunks[0]
            for chunk in chunks[1:]:
                if chunk.text and chunk.text.strip():
                    first.append(lxml.html.Element("p"))
                    first[-1].text = chunk.text
                first.extend(list(chunk))
                chunk.drop_tree()  # keeps its tail text in place


def _visible_text(node: lxml.html.HtmlElement) -> str:
    for bad in node.xpath(".//script | .//style | .//noscript | .//template"):
        bad.drop_tree()
    return re.sub(r"[ \t]+", " ", node.text_content()).strip()


def _paragraphs(text: str) -> str:
    """One blank line between blocks; list items and table rows stay on consecutive lines."""
    lines = [line.strip() for line in text.splitlines()]
    lines = [line for line in lines if line]
    parts: list[str] = []
    for prev, line in zip([None, *lines], lines, strict=False):
        if prev is not None:
            parts.append("\n" if _is_run_line(prev) and _is_run_line(line) else "\n\n")
        parts.append(line)
    return "".join(parts)


def _is_run_line(line: str) -> bool:
    return line.startswith(("- ", "* ", "|"))
