"""``local_search`` and ``read_document`` over a folder of .md/.txt/.html documents (BM25)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import bm25s
import Stemmer
from pydantic import BaseModel, Field

from ..text import content_terms, split_sentences
from .base import Tool, ToolError, ToolResult
from .html_text import html_to_text

SUFFIXES = (".md", ".txt", ".html", ".htm")
DEFAULT_CORPUS = Path(__file__).resolve().parents[2] / "corpus"


@dataclass(frozen=True)
class Document:
    path: str  # relative to the corpus root, POSIX separators: stable across machines
    title: str
    text: str


def load_document(path: Path, rel: str) -> Document:
    raw = path.read_text("utf-8", errors="replace")
    if path.suffix in (".html", ".htm"):
        title, text = html_to_text(raw)
        return Document(rel, title or path.stem, text)
    first = next((line for line in raw.splitlines() if line.strip()), path.stem)
    return Document(rel, first.lstrip("#").strip(), raw.strip())


class LocalCorpus:
    def __init__(self, root: str | Path) -> None:
        self.root = Path(root).resolve()
        if not self.root.is_dir():
            raise FileNotFoundError(f"corpus folder not found: {self.root}")
        files = sorted(p for p in self.root.rglob("*") if p.is_file() and p.suffix.lower() in SUFFIXES)
        self.documents = [load_document(p, p.relative_to(self.root).as_posix()) for p in files]
        if not self.documents:
            raise FileNotFoundError(f"no .md/.txt/.html documents under {self.root}")
        self._by_path = {d.path: d for d in self.documents}
        self._stemmer = Stemmer.Stemmer("english")
        self._index = bm25s.BM25()
        corpus_tokens = bm25s.tokenize(
            [f"{d.title}\n{d.text}" for d in self.documents],
            stopwords="en",
            stemmer=self._stemmer,
            show_progress=False,
        )
        self._index.index(corpus_tokens, show_progress=False)

    def search(self, query: str, k: int = 5) -> list[tuple[Document, float]]:
        k = max(1, min(k, len(self.documents)))
        tokens = bm25s.tokenize([query], stopwords="en", stemmer=self._stemmer, show_progress=False)
        if not tokens.vocab:
            return []
        docs, scores = self._index.retrieve(tokens, k=k, show_progress=False)
        hits = [(self.documents[int(i)], round(float(s), 4)) for i, s in zip(docs[0], scores[0], strict=True)]
        # Ties broken by path so the ranking is identical on every machine.
        hits.sort(key=lambda h: (-h[1], h[0].path))
        return [h for h in hits if h[1] > 0]

    def get(self, path: str) -> Document:
        doc = self._by_path.get(path.strip().lstrip("./"))
        if doc is None:
            raise ToolError(f"no document {path!r} in the corpus")
        return doc


@lru_cache(maxsize=8)
def open_corpus(root: str) -> LocalCorpus:
    return LocalCorpus(root)


def snippet(doc: Document, query: str, max_chars: int = 300) -> str:
    terms = set(content_terms(query))
    best = max(
        split_sentences(doc.text) or [doc.text],
        key=lambda s: len(terms & set(content_terms(s))),
    )
    return best[:max_chars]


class LocalSearchArgs(BaseModel):
    query: str = Field(min_length=1, max_length=500, description="keywords to search for")
    k: int = Field(default=5, ge=1, le=20, description="number of results")


class ReadDocumentArgs(BaseModel):
    path: str = Field(min_length=1, max_length=500, description="document path from local_search")


def corpus_tools(corpus: LocalCorpus) -> list[Tool]:
    def search(args: LocalSearchArgs) -> ToolResult:
        hits = corpus.search(args.query, args.k)
        results = [
            {"path": d.path, "title": d.title, "score": score, "snippet": snippet(d, args.query)} for d, score in hits
        ]
        return ToolResult(content={"query": args.query, "results": results}, kind="json")

    def read(args: ReadDocumentArgs) -> ToolResult:
        doc = corpus.get(args.path)
        return ToolResult(content=doc.text + "\n", kind="text", source=doc.path, source_title=doc.title)

    return [
        Tool("local_search", "Search the local document corpus (BM25).", LocalSearchArgs, search),
        Tool("read_document", "Read one corpus document in full.", ReadDocumentArgs, read),
    ]
