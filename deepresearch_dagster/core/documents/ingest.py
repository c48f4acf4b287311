"""Folder ingestion: every supported file → an :class:`ExtractedDocument`, through a text cache.

The cache lives in ``<cache_dir>/texts/<sha[:2]>/<sha256>.json`` (content-addressed: a file copied
or renamed is not extracted again) and ``<cache_dir>/manifests/<corpus-hash>.json`` maps each
relative path to ``[size, mtime_ns, sha256]`` so an unchanged file is not even re-hashed. Files that
cannot be read (encrypted, corrupt, oversized, unsupported content) are skipped with a reason that
is cached too, so they are not retried until they change.

A plain-text file (``.txt``, ``.md``, ``.csv``) larger than ``MAX_BYTES`` is not skipped: it is
hashed and extracted a window at a time (``stream.py``), with a cap on how much of it is indexed
that its ``meta["ingest_note"]`` (and :attr:`IndexedFolder.notes`) records. Other formats above
``MAX_BYTES`` are skipped as "oversized" (their readers need the whole file in memory).
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ..naming import short_hash
from ..store.artifacts import atomic_write_bytes, sha256_bytes
from .html import extract_html_document
from .markdown import extract_markdown, extract_plain_text
from .model import ExtractedDocument, SkipFile
from .office import extract_docx_document, extract_pptx_document
from .pdf import extract_pdf_document
from .spreadsheet import extract_csv_document, extract_xlsx_document
from .stream import STREAMABLE, cache_key, sha256_file, stream_text_document, streamable
from .worker import SLOW_SUFFIXES, ExtractionTimeout, extract_with_deadline

EXTRACTOR_VERSION = 3  # 2: plain text and PDF bullets reflowed; 3: a sentence (or a lone line) is no title
MAX_BYTES = 50 * 1024 * 1024
EXTRACTORS: dict[str, Callable[[bytes, str], ExtractedDocument]] = {
    ".md": extract_markdown,
    ".markdown": extract_markdown,
    ".txt": extract_plain_text,
    ".html": extract_html_document,
    ".htm": extract_html_document,
    ".pdf": extract_pdf_document,
    ".docx": extract_docx_document,
    ".pptx": extract_pptx_document,
    ".xlsx": extract_xlsx_document,
    ".xlsm": extract_xlsx_document,
    ".csv": extract_csv_document,
}
SUPPORTED = tuple(EXTRACTORS)


def extract_bytes(data: bytes, rel: str, deadline_s: float | None = None) -> ExtractedDocument:
    """Extract one file's content; raises :class:`SkipFile` with the reason when it cannot.

    ``deadline_s``: the slow formats are read in a worker process that is killed past it
    (``worker.py``); ``None`` reads every format in this process."""
    suffix = Path(rel).suffix.lower()
    extractor = EXTRACTORS.get(suffix)
    if extractor is None:
        raise SkipFile(f"unsupported file type {suffix or '(none)'}")
    if not data.strip():
        raise SkipFile("empty file")
    try:
        if deadline_s is not None and suffix in SLOW_SUFFIXES:
            doc = extract_with_deadline(extractor, data, Path(rel).stem, deadline_s)
        else:
            doc = extractor(data, Path(rel).stem)
    except SkipFile:
        raise
    except Exception as exc:  # a library failing on a strange file must never stop the indexing
        raise SkipFile(f"extraction failed: {type(exc).__name__}: {str(exc)[:160]}") from exc
    if not doc.sections:
        raise SkipFile("no text")
    return doc


def oversized(rel: str, size: int, max_bytes: int) -> str:
    """The skip reason of a file too large to read whole that cannot be streamed either."""
    kind = Path(rel).suffix or "this"
    return f"oversized: {size} bytes > {max_bytes} ({kind} files are read whole; only {'/'.join(STREAMABLE)} stream)"


def extract_path(path: Path, max_bytes: int | None = None) -> ExtractedDocument:
    max_bytes = MAX_BYTES if max_bytes is None else max_bytes
    size = path.stat().st_size
    if size > max_bytes:
        if streamable(path.name):
            return stream_text_document(path, path.name)
        raise SkipFile(oversized(path.name, size, max_bytes))
    return extract_bytes(path.read_bytes(), path.name)


def _stale_key(key: str) -> bool:
    """A streamed file's cache key made under another index cap: extract it again."""
    return "-s" in key and key != cache_key(key.split("-s", 1)[0])


@dataclass
class IndexedFolder:
    documents: list[tuple[str, ExtractedDocument]] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (relative path, reason)
    notes: list[tuple[str, str]] = field(default_factory=list)  # (relative path, how it was streamed)
    files: dict[str, str] = field(default_factory=dict)  # relative path → sha256 (or "oversized")
    extracted: int = 0
    from_cache: int = 0
    hashed: int = 0
    seconds: float = 0.0


SPECIAL = "not-regular"  # the fingerprint's entry for a FIFO, socket or device in the folder


def not_regular(mode: int) -> str:
    """What a file that is not a regular file is ("named pipe", …); "" for a regular file."""
    if stat.S_ISREG(mode):
        return ""
    kinds = ((stat.S_ISFIFO, "named pipe"), (stat.S_ISSOCK, "socket"), (stat.S_ISCHR, "character device"))
    kinds += ((stat.S_ISBLK, "block device"), (stat.S_ISDIR, "folder"))
    return next((name for test, name in kinds if test(mode)), "special file")


def list_files(root: Path) -> list[Path]:
    out: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith((".", "__")))
        for name in sorted(filenames):
            if name.startswith((".", "~$")) or Path(name).suffix.lower() not in SUPPORTED:
                continue
            path = Path(dirpath) / name
            if path.is_symlink() and not path.resolve().is_relative_to(root.resolve()):
                continue  # a corpus symlink never leads outside the corpus (read_document reads only indexed files)
            out.append(path)
    return out


class TextCache:
    """Extracted text by file sha256 (``None`` root: no disk cache, everything in memory)."""

    def __init__(self, root: Path | None) -> None:
        self.root = root

    def _entry(self, sha: str) -> Path:
        assert self.root is not None
        return self.root / "texts" / sha[:2] / f"{sha}.json"

    def get(self, sha: str) -> ExtractedDocument | str | None:
        if self.root is None:
            return None
        try:
            data = json.loads(self._entry(sha).read_text("utf-8"))
        except (OSError, ValueError):
            return None
        if data.get("version") != EXTRACTOR_VERSION:
            return None
        if data.get("skipped"):
            return str(data["skipped"])
        return ExtractedDocument.from_json(data["document"])

    def put(self, sha: str, value: ExtractedDocument | str) -> None:
        if self.root is None:
            return
        payload: dict[str, object] = {"version": EXTRACTOR_VERSION}
        if isinstance(value, str):
            payload["skipped"] = value
        else:
            payload["document"] = value.to_json()
        atomic_write_bytes(self._entry(sha), json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode())

    def manifest_path(self, corpus_root: Path) -> Path | None:
        if self.root is None:
            return None
        key = short_hash(str(corpus_root), 16)
        return self.root / "manifests" / f"{key}.json"

    def load_manifest(self, corpus_root: Path) -> dict[str, list[object]]:
        path = self.manifest_path(corpus_root)
        if path is None:
            return {}
        try:
            data = json.loads(path.read_text("utf-8"))
        except (OSError, ValueError):
            return {}
        return data.get("files", {}) if data.get("version") == EXTRACTOR_VERSION else {}

    def save_manifest(self, corpus_root: Path, files: dict[str, list[object]], skipped: list[tuple[str, str]]) -> None:
        path = self.manifest_path(corpus_root)
        if path is None:
            return
        payload = {"version": EXTRACTOR_VERSION, "root": str(corpus_root), "files": files, "skipped": dict(skipped)}
        atomic_write_bytes(path, json.dumps(payload, ensure_ascii=False, sort_keys=True, indent=0).encode())


def index_folder(
    root: Path,
    cache: TextCache,
    max_bytes: int = MAX_BYTES,
    progress: bool | None = None,
    deadline_s: float | None = None,
) -> IndexedFolder:
    """Extract (or load from the cache) every supported file under ``root``.

    ``progress``: a rich progress bar on stderr; ``None`` shows it when stderr is a terminal and at
    least 50 files need extracting. ``deadline_s``: see :func:`extract_bytes`; a file skipped for
    its time is not cached as skipped (a busy machine is not the file's fault): it is tried again
    next time.
    """
    started = time.perf_counter()
    out = IndexedFolder()
    files = list_files(root)
    manifest = cache.load_manifest(root)
    new_manifest: dict[str, list[object]] = {}
    todo: list[tuple[str, Path, int, int]] = []
    for path in files:
        rel = path.relative_to(root).as_posix()
        try:
            st = path.stat()
        except OSError as exc:
            out.skipped.append((rel, f"unreadable: {exc.strerror or exc}"))
            continue
        special = not_regular(st.st_mode)
        if special:  # never opened: reading a named pipe blocks until a writer comes, a device never ends
            out.skipped.append((rel, f"not a regular file ({special})"))
            out.files[rel] = SPECIAL
            continue
        known = manifest.get(rel)
        if known and known[0] == st.st_size and known[1] == st.st_mtime_ns:
            sha = str(known[2])
            if sha.startswith("oversized") and st.st_size > max_bytes and not streamable(rel):
                new_manifest[rel] = known
                out.files[rel] = "oversized"
                out.skipped.append((rel, oversized(rel, st.st_size, max_bytes)))
                out.from_cache += 1
                continue
            cached = None if _stale_key(sha) else cache.get(sha)
            if cached is not None:
                new_manifest[rel] = [st.st_size, st.st_mtime_ns, sha]
                out.files[rel] = sha
                out.from_cache += 1
                _add(out, rel, cached)
                continue
        todo.append((rel, path, st.st_size, st.st_mtime_ns))

    show = progress if progress is not None else (len(todo) >= 50 and _stderr_is_terminal())
    bar = None
    if show:
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

        bar = Progress(
            TextColumn("indexing {task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeRemainingColumn(),
            console=Console(stderr=True),
            transient=False,
        )
        bar.start()
        task = bar.add_task(root.name, total=len(todo))
    try:
        for rel, path, size, mtime in todo:
            result: ExtractedDocument | str
            if size > max_bytes and not streamable(rel):
                result, sha = oversized(rel, size, max_bytes), ""
                new_manifest[rel] = [size, mtime, "oversized"]
            else:
                data: bytes | None = None
                try:
                    if size > max_bytes:  # hashed and extracted a window at a time, never whole (stream.py)
                        sha = cache_key(sha256_file(path))
                    else:
                        data = path.read_bytes()
                        sha = sha256_bytes(data)
                except OSError as exc:
                    out.skipped.append((rel, f"unreadable: {exc.strerror or exc}"))
                    continue
                out.hashed += 1
                cached = cache.get(sha)
                if cached is not None:
                    result = cached
                    out.from_cache += 1
                else:
                    try:
                        if data is None:
                            result = stream_text_document(path, rel)
                        else:
                            result = extract_bytes(data, rel, deadline_s)
                    except SkipFile as exc:
                        result = str(exc)
                        if isinstance(exc, ExtractionTimeout):
                            out.skipped.append((rel, result))
                            continue
                    except OSError as exc:
                        out.skipped.append((rel, f"unreadable: {exc.strerror or exc}"))
                        continue
                    cache.put(sha, result)
                    out.extracted += 1
            if sha:
                new_manifest[rel] = [size, mtime, sha]
            out.files[rel] = sha or "oversized"
            _add(out, rel, result)
            if bar is not None:
                bar.advance(task)
    finally:
        if bar is not None:
            bar.stop()
    out.documents.sort(key=lambda d: d[0])
    out.skipped.sort()
    out.notes.sort()
    if new_manifest != manifest:
        cache.save_manifest(root, new_manifest, out.skipped)
    out.seconds = round(time.perf_counter() - started, 3)
    return out


def _add(out: IndexedFolder, rel: str, result: ExtractedDocument | str) -> None:
    if isinstance(result, str):
        out.skipped.append((rel, result))
        return
    out.documents.append((rel, result))
    note = result.meta.get("ingest_note")
    if note:
        out.notes.append((rel, str(note)))


def _stderr_is_terminal() -> bool:
    import sys

    return sys.stderr.isatty()


def quick_fingerprint(root: Path, cache: TextCache, max_bytes: int = MAX_BYTES) -> str | None:
    """The folder's content fingerprint from stat + manifest alone, or None when any file is new
    or changed (or there is no disk cache): then the folder must be (re-)indexed."""
    manifest = cache.load_manifest(root)
    if not manifest:
        return None
    seen: list[tuple[str, str]] = []
    for path in list_files(root):
        rel = path.relative_to(root).as_posix()
        try:
            st = path.stat()
        except OSError:
            return None
        if not_regular(st.st_mode):
            seen.append((rel, SPECIAL))
            continue
        known = manifest.get(rel)
        if not known or known[0] != st.st_size or known[1] != st.st_mtime_ns:
            return None
        if str(known[2]).startswith("oversized") and (st.st_size <= max_bytes or streamable(rel)):
            return None
        if _stale_key(str(known[2])):
            return None
        seen.append((rel, str(known[2])))
    return fingerprint(seen, max_bytes)


def fingerprint(files: list[tuple[str, str]], max_bytes: int) -> str:
    h = hashlib.sha256(f"v{EXTRACTOR_VERSION}:{max_bytes}".encode())
    for rel, sha in sorted(files):
        h.update(f"\n{rel}\0{sha}".encode())
    return h.hexdigest()
