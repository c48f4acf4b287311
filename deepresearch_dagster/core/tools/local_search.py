"""``local_search`` and ``read_document`` over a folder of documents, at passage level (BM25).

Files of every supported format (Markdown, text, HTML, PDF, DOCX, PPTX, XLSX, CSV — see
``core.documents``) are extracted once through a sha256-keyed text cache, cut into passages (a
section or part of one, with its heading path and page) and indexed with ``bm25s``. A search
returns the best passages; ``read_document`` reads a whole document or a passage range.
The whole index is kept on disk for an unchanged folder (a snapshot under the cache folder) and in
memory per process (:func:`open_corpus`, re-checked against the folder's file stats on every open).

Currency: a document that says it is superseded, lives in an archive folder, or is an older
version of another document (same title apart from dates) is *superseded*; a passage stating a
quantity (a table row or ``Label: value`` line) that a newer document about the same entity
states differently is *outdated*. Both are demoted in the ranking and flagged in the results.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import shutil
import threading
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from pathlib import Path

import bm25s
import numpy as np
import Stemmer
from pydantic import BaseModel, Field

from ..documents import (
    MAX_BYTES,
    ExtractedDocument,
    IndexedFolder,
    Passage,
    TextCache,
    currency,
    embeddings,
    index_folder,
    read_text_window,
    render_sections,
    split_passages,
)
from ..documents.currency import find_date
from ..documents.ingest import fingerprint, list_files, quick_fingerprint
from ..documents.stream import streamable
from ..memo import Memo
from ..naming import short_hash
from ..text import STOPWORDS, content_terms, fold, separator_row, split_sentences, table_cells
from .base import Tool, ToolError, ToolResult

SUFFIXES = (".md", ".txt", ".html", ".htm", ".pdf", ".docx", ".pptx", ".xlsx", ".xlsm", ".csv")
DEFAULT_CORPUS = Path(__file__).resolve().parents[2] / "corpus"
SUPERSEDED_FACTOR = 0.35  # a superseded document's passages score about a third
OUTDATED_FACTOR = 0.6  # a passage whose quantity a newer document restates
MAX_READ_PASSAGES = 30
# One read returns at most this much text (~25k tokens): a 20 MB one-line file is read a window at
# a time (the researcher pages on with start/end) instead of being copied whole into every step's
# raw output and through the compressor.
MAX_READ_CHARS = 100_000
PER_DOCUMENT = 2  # passages per document in one result list
# A document whose title the query names whole ("Kansas" in "Kansas population state") is that
# thing's own page: its passages score this much more.
TITLE_MATCH = 1.5
# 2: drafts count as superseded; 3: "do not use this list for …" does not; 4: accents folded; 5: a notice
# of supersession speaks of the document ("X is replaced by Y" mid-sentence is not one)
SNAPSHOT_VERSION = 5


@dataclass
class Document:
    path: str  # relative to the corpus root, POSIX separators: stable across machines
    title: str
    text: str
    format: str = "markdown"
    date: str | None = None
    superseded: bool = False
    superseded_reason: str | None = None
    superseded_by: str | None = None  # path of the current document, or the name the document gives
    # normalized quantity label → path of the newer document stating it differently
    outdated: dict[str, str] = field(default_factory=dict)
    passages: list[Passage] = field(default_factory=list)

    @property
    def status(self) -> str:
        return "superseded" if self.superseded else ("partly outdated" if self.outdated else "current")


@dataclass(frozen=True)
class PassageHit:
    document: Document
    passage: Passage
    score: float
    outdated_by: str | None = None
    by_meaning: bool = False  # listed for its meaning, without the query's words ranking it


# --- currency across documents ---------------------------------------------------------------

_VERSION_WORDS = re.compile(
    r"\b(?:v\d+(?:\.\d+)*|version\s*\d+|rev\s*\d+|q[1-4]|h[12]|fy\s?\d{2,4}|(?:19|20)\d\d(?:-\d\d){0,2}|"
    r"draft|final|current|latest|updated?|archived?|old|superseded|copy)\b",
    re.I,
)
_MONTHS = re.compile(
    r"\b(?:jan|feb|mar|apr|may|jun|jul|aug|sep|sept|oct|nov|dec)[a-z]*\b",
    re.I,
)
_CAPITALIZED = re.compile(r"\b[A-Z][a-zA-Z0-9&'-]{2,}\b")
_LABEL_LINE = re.compile(r"^\s*(?:[-*+]\s+)?\**([A-Za-z][^:|#]{2,60}?)\**\s*[:=]\s+(.*\d.*)$")
# Labels of document metadata, not of quantities ("Date: 2026-01-20", "Owner: …").
_META_LABELS = set(
    content_terms(
        "date dated updated last revised effective published issued version prepared owner status author as of"
    )
)
_NUMBER = re.compile(r"\d[\d,.]*\s*%?")


def _title_key(title: str) -> str:
    text = _MONTHS.sub(" ", _VERSION_WORDS.sub(" ", title))
    return " ".join(content_terms(text))


def _entities(doc: Document) -> set[str]:
    """The document's most frequent capitalized words: what it is about (company, product…)."""
    counts = Counter(w for w in _CAPITALIZED.findall(f"{doc.title}\n{doc.text[:20000]}") if w.lower() not in STOPWORDS)
    for w in _CAPITALIZED.findall(doc.title):
        counts[w] += 3
    return {w for w, _ in counts.most_common(3)}


def _quantity(value: str) -> bool:
    """A figure (amount, count, share), not a date or a year."""
    return bool(re.search(r"\d", value)) and not find_date(value) and not re.fullmatch(r"\s*(?:19|20)\d\d\s*", value)


def quantities(text: str) -> dict[str, str]:
    """Labelled quantities: ``label → value`` from table rows and ``Label: value`` lines."""
    out: dict[str, str] = {}
    header: list[str] = []
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("|"):
            cells = table_cells(stripped)
            if all(re.fullmatch(r":?-{2,}:?", c) for c in cells if c):
                continue
            if not header:
                header = cells
                continue
            label, rest = cells[0], cells[1:]
            if label and not re.search(r"\d", label) and any(_quantity(c) for c in rest):
                values = [f"{h}={c}" for h, c in zip(header[1:], rest, strict=False) if re.search(r"\d", c)]
                key = " ".join(content_terms(f"{header[0] if header else ''} {label}"))
                if key:
                    out[key] = "; ".join(values)
            continue
        header = []
        match = _LABEL_LINE.match(stripped)
        if match and len(match.group(1).split()) <= 6 and _quantity(match.group(2)):
            key = " ".join(content_terms(match.group(1)))
            if key and not set(key.split()) <= _META_LABELS:
                out[key] = " ".join(_NUMBER.findall(match.group(2)))
    return out


def _date_key(value: str | None) -> str:
    return value or ""


def apply_supersession(documents: list[Document]) -> None:
    """Older versions and outdated quantities, decided across the whole corpus."""
    families: dict[str, list[Document]] = defaultdict(list)
    for doc in documents:
        key = _title_key(doc.title)
        if len(key.split()) >= 2:
            families[key].append(doc)
    for members in families.values():
        dated = [d for d in members if d.date]
        if len(dated) < 2:
            continue
        newest = max(dated, key=lambda d: (not d.superseded, _date_key(d.date)))
        for doc in dated:
            if doc is newest or _date_key(doc.date) >= _date_key(newest.date):
                continue
            if not doc.superseded:
                doc.superseded = True
                doc.superseded_reason = f"a newer version exists: {newest.path} ({newest.date})"
            if not doc.superseded_by:
                doc.superseded_by = newest.path
    by_title = {d.title.lower(): d.path for d in documents if not d.superseded}
    for doc in documents:
        if doc.superseded_by and doc.superseded_by not in {d.path for d in documents}:
            wanted = doc.superseded_by.lower()
            match = next((p for t, p in by_title.items() if p != doc.path and (wanted in t or t in wanted)), None)
            if match:
                doc.superseded_by = match
    # Same labelled quantity, same entity, different value: the older statement is outdated.
    stated: dict[str, list[tuple[Document, str, set[str]]]] = defaultdict(list)
    entities = {id(d): _entities(d) for d in documents if d.date}
    for doc in documents:
        if not doc.date:
            continue
        for label, value in quantities(doc.text).items():
            stated[label].append((doc, value, entities[id(doc)]))
    for label, items in stated.items():
        if len(items) < 2:
            continue
        for doc, value, ents in items:
            newer = [
                (other, v)
                for other, v, other_ents in items
                if other is not doc
                and not other.superseded
                and _date_key(other.date) > _date_key(doc.date)
                and v != value
                and ents & other_ents
            ]
            if newer:
                doc.outdated[label] = max(newer, key=lambda o: _date_key(o[0].date))[0].path


# --- the corpus ----------------------------------------------------------------------------------


def _document(rel: str, extracted: ExtractedDocument, index: int) -> Document:
    text = render_sections(extracted.sections)
    info = currency(text, rel)
    doc = Document(
        path=rel,
        title=" ".join(extracted.title.split()) or Path(rel).stem,
        text=text,
        format=extracted.format,
        date=info["date"],
        superseded=info["superseded"],
        superseded_reason=info["superseded_reason"],
        superseded_by=info["superseded_by"],
    )
    doc.passages = split_passages(index, extracted.sections)
    return doc


def load_document(path: Path, rel: str) -> Document:
    """One file, no cache (kept for callers that read a single document)."""
    from ..documents import extract_path

    return _document(rel, extract_path(path), 0)


def _currency_factor(doc: Document, outdated_by: str | None) -> float:
    return SUPERSEDED_FACTOR if doc.superseded else (OUTDATED_FACTOR if outdated_by else 1.0)


def _per_document(hits: Iterable[PassageHit], k: int, listed: list[PassageHit] = ()) -> list[PassageHit]:
    """The first ``k`` of ``hits``, at most ``PER_DOCUMENT`` passages of a document (counting ``listed``)."""
    per_doc = Counter(h.document.path for h in listed)
    out = []
    for h in hits:
        if len(out) >= k:
            break
        if per_doc[h.document.path] < PER_DOCUMENT:
            per_doc[h.document.path] += 1
            out.append(h)
    return out


class LocalCorpus:
    def __init__(
        self,
        root: str | Path,
        cache_dir: str | Path | None = None,
        max_bytes: int = MAX_BYTES,
        progress: bool | None = None,
        deadline_s: float | None = None,  # per slow file (core/documents/worker.py); None: no deadline
        semantic: bool = False,  # rank by passage embeddings too (core/documents/embeddings.py)
    ) -> None:
        self.root = Path(root).resolve()
        self.semantic = semantic
        if not self.root.is_dir():
            raise FileNotFoundError(f"corpus folder not found: {self.root}")
        self.cache = TextCache(Path(cache_dir).resolve() if cache_dir else None)
        self._stemmer = Stemmer.Stemmer("english")
        self.max_bytes = max_bytes
        # Unchanged folder (stat + manifest): load the last index as it was; nothing is re-indexed.
        known = quick_fingerprint(self.root, self.cache, max_bytes) if self.cache.root else None
        if known and self._load_snapshot(known):
            self.fingerprint = known
            self._vectors = self._passage_vectors()
            return
        self.indexed: IndexedFolder = index_folder(
            self.root, self.cache, max_bytes=max_bytes, progress=progress, deadline_s=deadline_s
        )
        self.skipped = self.indexed.skipped  # (path, reason) of files that could not be read
        self.documents = [_document(rel, ex, i) for i, (rel, ex) in enumerate(self.indexed.documents)]
        if not self.documents:
            raise FileNotFoundError(f"no readable documents ({', '.join(SUFFIXES)}) under {self.root}")
        apply_supersession(self.documents)
        self._by_path = {d.path: d for d in self.documents}
        self._titles = [(d.path, frozenset(content_terms(fold(d.title)))) for d in self.documents]
        self.passages = [p for d in self.documents for p in d.passages]
        self._index = bm25s.BM25()
        corpus_tokens = bm25s.tokenize(
            [self._passage_text(p) for p in self.passages],
            stopwords="en",
            stemmer=self._stemmer,
            show_progress=False,
        )
        self._index.index(corpus_tokens, show_progress=False)
        # The content hash of what is indexed (every file's sha256, the extractor version).
        self.fingerprint = fingerprint(list(self.indexed.files.items()), max_bytes)
        if self.cache.root:
            self._save_snapshot(self.fingerprint)
        self._vectors = self._passage_vectors()

    # --- the whole index on disk, for a folder that has not changed -----------------------------

    def _snapshot_dir(self) -> Path:
        assert self.cache.root is not None
        return self.cache.root / "snapshots" / short_hash(str(self.root), 16)

    def _save_snapshot(self, fp: str) -> None:
        target = self._snapshot_dir()
        tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        try:
            tmp.mkdir(parents=True)
            self._index.save(str(tmp / "bm25"), show_progress=False)
            docs = [
                {
                    **{k: v for k, v in asdict(d).items() if k != "passages"},
                    "passages": [[p.n, p.heading, p.page, p.text] for p in d.passages],
                }
                for d in self.documents
            ]
            payload = {
                "version": SNAPSHOT_VERSION,
                "fingerprint": fp,
                "documents": docs,
                "skipped": self.skipped,
                "notes": self.indexed.notes,
            }
            (tmp / "corpus.json").write_text(json.dumps(payload, ensure_ascii=False), "utf-8")
            shutil.rmtree(target, ignore_errors=True)
            os.replace(tmp, target)
        except OSError:
            shutil.rmtree(tmp, ignore_errors=True)  # a cache that cannot be written is only slower

    def _load_snapshot(self, fp: str) -> bool:
        folder = self._snapshot_dir()
        try:
            data = json.loads((folder / "corpus.json").read_text("utf-8"))
            if data.get("version") != SNAPSHOT_VERSION or data.get("fingerprint") != fp:
                return False
            index = bm25s.BM25.load(str(folder / "bm25"), show_progress=False)
        except (OSError, ValueError, KeyError):
            return False
        documents = []
        for i, d in enumerate(data["documents"]):
            passages = [Passage(i, n, h, page, text) for n, h, page, text in d.pop("passages")]
            documents.append(Document(**d, passages=passages))
        self.documents = documents
        self.skipped = [(p, r) for p, r in data["skipped"]]
        self.indexed = IndexedFolder(
            skipped=self.skipped,
            notes=[(p, n) for p, n in data.get("notes", [])],
            from_cache=len(documents) + len(self.skipped),
        )
        self._by_path = {d.path: d for d in documents}
        self._titles = [(d.path, frozenset(content_terms(fold(d.title)))) for d in documents]
        self.passages = [p for d in documents for p in d.passages]
        self._index = index
        return True

    @property
    def semantic_ready(self) -> bool:
        """Whether searches list passages by meaning too (semantic, and the encoder loaded)."""
        return self._vectors is not None

    def _passage_vectors(self) -> np.ndarray | None:
        """Every passage's embedding (None when not semantic or no encoder); a passage whose text is unchanged
        is not embedded again (a cache file per folder under the cache folder), nor one the folder's own
        ``.vectors.npz`` holds (the bundled corpus ships its own)."""
        model = embeddings.encoder() if self.semantic else None
        if model is None:
            return None
        saved = self.cache.root / "vectors" / f"{short_hash(str(self.root), 16)}.npz" if self.cache.root else None
        texts = [self._passage_text(p) for p in self.passages]
        return embeddings.embed(texts, model, saved, seed=self.root / embeddings.FOLDER_VECTORS)

    def _passage_text(self, p: Passage) -> str:
        # Title and heading path travel with every passage: a table row is found by its entity too.
        return fold(f"{self.documents[p.doc].title}\n{p.heading}\n{p.text}")

    def _outdated_by(self, doc: Document, passage: Passage) -> str | None:
        if not doc.outdated:
            return None
        for label in quantities(passage.text):
            if label in doc.outdated:
                return doc.outdated[label]
        return None

    def search_passages(self, query: str, k: int = 5) -> list[PassageHit]:
        """The best ``k`` passages by BM25; with semantic search, the last ``k // 5`` places go to the
        passages nearest the query in meaning that the words do not list (still only when some passage
        has the query's words): they add what other words say, and leave the words' best where they were."""
        tokens = bm25s.tokenize([fold(query)], stopwords="en", stemmer=self._stemmer, show_progress=False)
        if not tokens.vocab:
            return []
        pool = max(1, min(len(self.passages), max(50, k * 10)))
        ids, scores = self._index.retrieve(tokens, k=pool, show_progress=False)
        hits: list[PassageHit] = []
        asked = set(content_terms(fold(query)))
        named = {path for path, terms in self._titles if terms and terms <= asked}
        for i, s in zip(ids[0], scores[0], strict=True):
            if float(s) <= 0:
                continue
            passage = self.passages[int(i)]
            doc = self.documents[passage.doc]
            outdated_by = self._outdated_by(doc, passage)
            factor = _currency_factor(doc, outdated_by) * (TITLE_MATCH if doc.path in named else 1.0)
            hits.append(PassageHit(doc, passage, round(float(s) * factor, 4), outdated_by))
        # Ties broken by path and position so the ranking is identical on every machine.
        hits.sort(key=lambda h: (-h.score, h.document.path, h.passage.n))
        model = embeddings.encoder() if self._vectors is not None and hits else None
        meaning = k // 5 if model is not None else 0
        out = _per_document(hits, k - meaning)
        if meaning and model is not None:
            listed = {(h.document.path, h.passage.n) for h in out}
            closeness = self._vectors @ model.encode([query])[0]
            floor = out[-1].score if out else 0.0

            def by_meaning() -> Iterator[PassageHit]:
                """The nearest passages not listed, scored only as far as the places need them: below every
                passage the words list, so what meaning adds comes after what they find."""
                for i in np.argsort(-closeness, kind="stable")[: pool + len(out)]:
                    passage = self.passages[int(i)]
                    doc = self.documents[passage.doc]
                    if (doc.path, passage.n) not in listed:
                        outdated_by = self._outdated_by(doc, passage)
                        near = max(0.0, float(closeness[i])) * _currency_factor(doc, outdated_by)
                        yield PassageHit(doc, passage, round(floor * near, 4), outdated_by, by_meaning=True)

            out += _per_document(by_meaning(), meaning, out)
            taken = {(h.document.path, h.passage.n) for h in out}
            out += _per_document([h for h in hits if (h.document.path, h.passage.n) not in taken], k - len(out), out)
            out.sort(key=lambda h: (-h.score, h.document.path, h.passage.n))
        return out

    def idf(self, term: str) -> float:
        """The rarity of a stemmed term over the indexed passages, ``log(1 + N / df)`` from the BM25
        index's own postings; 0 for a term no passage holds (it can rank no result above another)."""
        column, scores = self._index.vocab_dict.get(term), self._index.scores
        df = int(scores["indptr"][column + 1] - scores["indptr"][column]) if column is not None else 0
        return math.log(1 + scores["num_docs"] / df) if df else 0.0

    def search(self, query: str, k: int = 5, passages: bool = False) -> list:
        """Best documents as ``(Document, score)`` (their best passage's score); with
        ``passages=True`` the best passages as :class:`PassageHit`."""
        if passages:
            return self.search_passages(query, k)
        best: dict[str, tuple[Document, float]] = {}
        for h in self.search_passages(query, max(k * PER_DOCUMENT, k)):
            best.setdefault(h.document.path, (h.document, h.score))
        return list(best.values())[:k]

    def get(self, path: str) -> Document:
        doc = self._by_path.get(path.strip().split("#", 1)[0].lstrip("./"))
        if doc is None:
            raise ToolError(f"no document {path!r} in the corpus")
        return doc


# Open corpora of this process by folder, each with the folder state it was built from.
_corpora: Memo[tuple[tuple[tuple[object, ...], ...], LocalCorpus]] = Memo(8)
_build_lock = threading.Lock()  # one build at a time: two threads opening one folder build it once


def folder_state(root: Path) -> tuple[tuple[object, ...], ...]:
    """(path, size, mtime, ctime, inode) of every file the corpus indexes: any added, removed,
    renamed, rewritten or touched file changes it. Only stat calls, no reads."""
    state: list[tuple[object, ...]] = []
    for path in list_files(root):
        rel = path.relative_to(root).as_posix()
        try:
            st = path.stat()
        except OSError as exc:
            state.append((rel, "unreadable", str(exc)))
            continue
        state.append((rel, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino))
    return tuple(state)


def open_corpus(
    root: str, cache_dir: str | None = None, deadline_s: float | None = None, semantic: bool = False
) -> LocalCorpus:
    """The folder's corpus, built once per process while the folder does not change.

    A second research in the same process (a Dagster code server or ``run_research`` in a loop)
    re-indexes nothing: the folder's state (:func:`folder_state`) is compared with the one the
    open corpus was built from, and any difference builds it again (itself from the disk caches
    under ``cache_dir`` for unchanged files). The corpus is the same whatever ``cache_dir`` is:
    that folder only saves work, so it is not part of the key."""
    resolved = Path(root).resolve()
    key = f"{resolved}{' semantic' if semantic else ''}"
    state = folder_state(resolved)
    with _build_lock:
        entry = _corpora.get(key, lambda e: e[0] == state)
        if entry is None:
            entry = (state, LocalCorpus(resolved, cache_dir=cache_dir, deadline_s=deadline_s, semantic=semantic))
            _corpora.put(key, entry)
    return entry[1]


def write_folder_vectors(root: str | Path) -> Path:
    """Write ``root``'s passage vectors into the folder itself (``.vectors.npz``), for those it is shared with:
    a search of the folder then embeds none of its unchanged passages."""
    model = embeddings.encoder()
    if model is None:
        raise ToolError(f"no encoder: {embeddings.encoder_problem()}")
    corpus = LocalCorpus(root)
    target = corpus.root / embeddings.FOLDER_VECTORS
    embeddings.embed([corpus._passage_text(p) for p in corpus.passages], model, target)
    return target


def corpus_cache_info() -> dict[str, int]:
    info = _corpora.info()
    return {"hits": info["hits"], "builds": info["misses"], "size": info["size"]}


def clear_corpus_cache() -> None:
    """Forget the open corpora (the next open re-checks the disk snapshot)."""
    _corpora.clear()


# --- tool output ---------------------------------------------------------------------------------


def _lines(text: str) -> list[tuple[str, str]]:
    """(unit, table header) pairs: table rows carry their header, prose is cut into sentences."""
    out: list[tuple[str, str]] = []
    header = ""
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped:
            header = ""
            continue
        if stripped.startswith("|"):
            if separator_row(stripped):
                continue
            if not header:
                header = stripped
                continue
            out.append((stripped, header))
        elif stripped.startswith(("- ", "* ", "+ ")):
            out.append((stripped, ""))
        else:
            out.extend((s, "") for s in split_sentences(stripped) or [stripped])
    return out


def row_as_text(row: str, header: str) -> str:
    """``| Series B | $42M |`` under ``| Round | Amount |`` → ``Round: Series B; Amount: $42M``."""
    names, cells = table_cells(header), table_cells(row)
    pairs = [f"{n}: {c}" if n else c for n, c in zip(names, cells, strict=False) if c]
    return "; ".join(pairs) or row


TRUNCATED = ("…", "...")  # how a snippet cut short ends (this one's, or a web search provider's)


def snippet(doc: Document | Passage, query: str, max_chars: int = 400) -> str:
    """The passage's line (table row with its column names, bullet or sentence) that best matches;
    one longer than ``max_chars`` is cut after a whole word (inside one only when it is all one word)
    and ends in " …" (never quoted as the document's sentence)."""
    text = doc.text
    terms = set(content_terms(query))
    units = _lines(text) or [(text, "")]

    def overlap(unit: tuple[str, str]) -> tuple[int, int]:
        unit_terms = set(content_terms(unit[0]))
        return len(terms & unit_terms), bool(re.search(r"\d", unit[0]))

    line, header = max(units, key=overlap)
    best = row_as_text(line, header) if header else line.lstrip("-*+ ").strip()
    if len(best) <= max_chars:
        return best
    head = best[: max_chars - 2]
    return (head.rsplit(None, 1)[0] if " " in head else head) + " " + TRUNCATED[0]


def _where(heading: str, page: int | None) -> str:
    parts = [heading] if heading else []
    if page:
        parts.append(f"page {page}")
    return ", ".join(parts)


def result_entry(hit: PassageHit, query: str) -> dict[str, object]:
    doc, p = hit.document, hit.passage
    entry: dict[str, object] = {
        "path": doc.path,
        "title": doc.title,
        "score": hit.score,
        "snippet": snippet(p, query),
        "heading": p.heading,
        "page": p.page,
        "passage": p.n,
        "passages": len(doc.passages),
        "format": doc.format,
        "date": doc.date,
        "status": "superseded" if doc.superseded else ("outdated" if hit.outdated_by else "current"),
    }
    if hit.by_meaning:
        entry["found_by"] = "meaning"
    if doc.superseded:
        entry["superseded_reason"] = doc.superseded_reason
        entry["superseded_by"] = doc.superseded_by
    elif hit.outdated_by:
        entry["superseded_by"] = hit.outdated_by
    return entry


def _banner(doc: Document) -> list[str]:
    meta = [f"Source: {doc.path}", doc.format.upper()]
    if doc.date:
        meta.append(f"dated {doc.date}")
    meta.append(f"status: {doc.status}")
    # Metadata goes on heading lines: readable by a model, never lifted as a finding by the
    # extractive compressor (which reads headings as context only).
    lines = [f"# {doc.title}", "## " + " · ".join(meta)]
    if doc.superseded:
        by = f" Current version: {doc.superseded_by}." if doc.superseded_by else ""
        lines.append(f"## SUPERSEDED ({doc.superseded_reason}): its figures are out of date.{by}")
    elif doc.outdated:
        newer = ", ".join(sorted(set(doc.outdated.values())))
        lines.append(f"## Some figures here are restated by newer documents ({newer}).")
    return lines


def render_document(doc: Document) -> str:
    return "\n\n".join([*_banner(doc), doc.text]).strip() + "\n"


def render_passages(doc: Document, start: int, end: int, max_chars: int = MAX_READ_CHARS) -> str:
    chosen = [p for p in doc.passages if start <= p.n <= end]
    if not chosen:
        raise ToolError(f"{doc.path} has passages 1–{len(doc.passages)}; {start}–{end} is out of range")
    blocks = _banner(doc)
    used = 0
    for p in chosen:
        if used and used + len(p.text) > max_chars:
            blocks.append(
                f"[read stopped at {max_chars:,} characters: the document continues at passage {p.n} of "
                f"{len(doc.passages)}; call read_document with start={p.n}]"
            )
            break
        where = _where(p.heading, p.page)
        blocks.append(f"## {doc.title}{' › ' + where if where else ''} [passage {p.n}/{len(doc.passages)}]")
        blocks.append(p.text[:max_chars])
        used += len(p.text)
    return "\n\n".join(blocks).strip() + "\n"


class LocalSearchArgs(BaseModel):
    query: str = Field(min_length=1, max_length=500, description="keywords to search for")
    k: int = Field(default=5, ge=1, le=20, description="number of passages to return")


class ReadDocumentArgs(BaseModel):
    path: str = Field(min_length=1, max_length=500, description="document path from local_search")
    start: int | None = Field(
        default=None, ge=1, description="first passage to read (from local_search 'passage'); omit for the whole"
    )
    end: int | None = Field(default=None, ge=1, description="last passage to read (default: start)")
    offset: int | None = Field(
        default=None, ge=0, description="byte offset in a large text file: reads the window there from disk"
    )


@lru_cache(maxsize=1)
def _answering_code() -> str:
    """A hash of the code that turns a corpus into search results and reads (this module, the
    text helpers, the document readers): a changed ranking or reader is a cache miss too."""
    here = Path(__file__).resolve().parent
    sources = [Path(__file__).resolve(), here.parent / "text.py", *sorted((here.parent / "documents").glob("*.py"))]
    return hashlib.sha256(b"".join(path.read_bytes() for path in sources)).hexdigest()[:16]


def cache_scope(corpus: LocalCorpus) -> str:
    """What a corpus tool's answer depends on besides its arguments: the corpus's content hash and
    the answering code. Part of the tool-call cache key (core/store/tool_cache.py), so a research
    re-executed on another worker re-uses a search instead of running it again, while a changed
    corpus can never be served a stale answer."""
    return f"corpus:{corpus.fingerprint}:{_answering_code()}"


def corpus_tools(corpus: LocalCorpus) -> list[Tool]:
    scope = cache_scope(corpus)

    def search(args: LocalSearchArgs) -> ToolResult:
        hits = corpus.search(args.query, args.k, passages=True)
        results = [result_entry(h, args.query) for h in hits]
        return ToolResult(content={"query": args.query, "results": results}, kind="json")

    def read(args: ReadDocumentArgs) -> ToolResult:
        doc = corpus.get(args.path)
        title = f"{doc.title} (superseded)" if doc.superseded else doc.title
        if args.offset is not None:
            # Any part of a huge text file, also past what was indexed: one window from disk.
            if not streamable(doc.path):
                raise ToolError(f"{doc.path}: offset reads only .txt/.md/.csv files; read passages with start/end")
            w = read_text_window(corpus.root / doc.path, args.offset, MAX_READ_CHARS)
            where = f"bytes {w.start:,}–{w.end:,}"
            more = [] if w.eof else [f"[{where} of {w.size:,}; call read_document with offset={w.end}]"]
            content = "\n\n".join([*_banner(doc), w.text.strip(), *more]) + "\n"
            return ToolResult(content=content, kind="text", source=doc.path, source_title=f"{title} — {where}")
        if args.start is None and args.end is None:
            # A long document: its first window of passages, ending with where to go on.
            whole = len(doc.text) <= MAX_READ_CHARS
            content = render_document(doc) if whole else render_passages(doc, 1, len(doc.passages))
            return ToolResult(content=content, kind="text", source=doc.path, source_title=title)
        start = args.start or 1
        end = max(start, args.end or start)
        end = min(end, start + MAX_READ_PASSAGES - 1)
        chosen = [p for p in doc.passages if start <= p.n <= end]
        where = _where(chosen[0].heading, chosen[0].page) if chosen else ""
        return ToolResult(
            content=render_passages(doc, start, end),
            kind="text",
            source=doc.path,
            source_title=f"{title} — {where}" if where else title,
        )

    return [
        Tool(
            "local_search",
            "Search the local documents (BM25 over passages); each result names the file, heading, page "
            "and passage number, its date and whether it is current or superseded.",
            LocalSearchArgs,
            search,
            cacheable=True,
            cache_scope=scope,
        ),
        Tool(
            "read_document",
            "Read one corpus document (a long one a window at a time), or passages start..end of it.",
            ReadDocumentArgs,
            read,
            cacheable=True,
            cache_scope=scope,
        ),
    ]


__all__ = [
    "DEFAULT_CORPUS",
    "SUFFIXES",
    "Document",
    "LocalCorpus",
    "PassageHit",
    "clear_corpus_cache",
    "corpus_cache_info",
    "corpus_tools",
    "find_date",
    "folder_state",
    "load_document",
    "open_corpus",
    "snippet",
]
