"""Huge files (issue 15): a plain-text file over the size cap is streamed in bounded windows and
indexed, not skipped; text past the old cap is found and read; a huge PDF stays skipped with a
reason. The caps are lowered so a ~0.6 MB file stands for a multi-gigabyte one."""

from __future__ import annotations

import pathlib
import re
from pathlib import Path

import pytest

from deepresearch_dagster.core.documents import stream
from deepresearch_dagster.core.tools.base import Toolbox
from deepresearch_dagster.core.tools.local_search import LocalCorpus, corpus_tools

OLD_CAP = 64 * 1024  # stands for MAX_BYTES (50 MB): the size above which files used to be skipped
WINDOW = 16 * 1024  # stands for stream.WINDOW_BYTES (4 MB)
WORDS = "harbor crane berth tide ledger pallet quay manifest freight dock gantry vessel".split()


def _paragraph(i: int) -> str:
    words = [WORDS[(i * 7 + j * 3) % len(WORDS)] for j in range(60)]
    return f"Entry {i} café: " + " ".join(words) + "."


def _huge_text(path: Path, paragraphs: int) -> None:
    body = "\n\n".join(_paragraph(i) for i in range(paragraphs))
    path.write_text(
        "# Port operations log\n\nThe opening note mentions alphaneedle.\n\n"
        + body
        + "\n\nThe closing entry records the zuluneedle incident at berth nine.\n",
        "utf-8",
    )


class _Watched:
    """A file object that records the size of every ``read`` asked of it."""

    def __init__(self, f, sizes: list[int]) -> None:
        self._f, self._sizes = f, sizes

    def read(self, n: int = -1) -> bytes:
        self._sizes.append(n)
        return self._f.read(n)

    def __getattr__(self, name: str):
        return getattr(self._f, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc: object) -> None:
        self._f.close()


@pytest.fixture
def watched_reads(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    sizes: list[int] = []
    monkeypatch.setattr(stream, "WINDOW_BYTES", WINDOW)
    monkeypatch.setattr(stream, "_open", lambda path: _Watched(path.open("rb"), sizes))
    real_read_bytes = pathlib.Path.read_bytes

    def read_bytes(self: Path) -> bytes:
        assert self.name != "huge.txt", "a huge file was read whole"
        return real_read_bytes(self)

    monkeypatch.setattr(pathlib.Path, "read_bytes", read_bytes)
    return sizes


def test_a_huge_text_file_is_streamed_searched_and_read_in_windows(tmp_path, watched_reads, record):
    root = tmp_path / "docs"
    root.mkdir()
    huge = root / "huge.txt"
    _huge_text(huge, 1800)  # ~0.7 MB: over ten times the (lowered) old cap, 40+ windows
    (root / "small.md").write_text("# Berth schedule\n\nBerth nine opens at six.\n")
    size = huge.stat().st_size
    assert size > 10 * OLD_CAP

    corpus = LocalCorpus(root, cache_dir=tmp_path / "cache", max_bytes=OLD_CAP, progress=False)
    assert [d.path for d in corpus.documents] == ["huge.txt", "small.md"] and corpus.skipped == []
    note = dict(corpus.indexed.notes)["huge.txt"]
    assert note == f"streamed: all {size:,} bytes indexed, read {WINDOW:,} bytes at a time"
    # Memory-bounded: every read asked for at most one window, never "the rest of the file".
    assert watched_reads and max(watched_reads) <= WINDOW and min(watched_reads) >= 0
    assert sum(1 for n in watched_reads if n) > size // WINDOW  # hashed and extracted window by window

    box = Toolbox(corpus_tools(corpus))
    hits = box.call("local_search", {"query": "zuluneedle incident", "k": 3}).content["results"]
    assert hits and hits[0]["path"] == "huge.txt" and "zuluneedle" in hits[0]["snippet"]
    last = hits[0]["passage"]
    assert last == hits[0]["passages"] > 100  # the very end of the file, far past the old cap

    # read_document: a first window that says where to go on, then start=N continues from there.
    first = box.call("read_document", {"path": "huge.txt"}).content
    go_on = re.search(r"call read_document with start=(\d+)\]", first)
    assert go_on and "alphaneedle" in first and "zuluneedle" not in first
    n = int(go_on.group(1))
    assert f"[passage {n - 1}/{last}]" in first and f"[passage {n}/{last}]" not in first
    second = box.call("read_document", {"path": "huge.txt", "start": n, "end": n + 2}).content
    assert f"[passage {n}/{last}]" in second and f"[passage {n + 2}/{last}]" in second
    assert f"[passage {n - 1}/{last}]" not in second
    end = box.call("read_document", {"path": "huge.txt", "start": last}).content
    assert "zuluneedle incident at berth nine" in end

    record(
        f"{size // 1024} KB .txt, {OLD_CAP // 1024} KB cap, {WINDOW // 1024} KB windows",
        "streamed; text at the end found and read",
        f"passage {last}/{last} found; largest read {max(watched_reads)} B",
        True,
    )


def test_past_the_index_cap_the_head_and_tail_are_indexed_and_the_gap_is_recorded(
    tmp_path, watched_reads, monkeypatch, record
):
    monkeypatch.setattr(stream, "MAX_INDEXED_BYTES", 128 * 1024)
    root = tmp_path / "docs"
    root.mkdir()
    huge = root / "huge.txt"
    body = [_paragraph(i) for i in range(1500)]
    body[750] = "The middle entry mentions bravoneedle."
    huge.write_text("Port log\n\nalphaneedle opens it.\n\n" + "\n\n".join(body) + "\n\nzuluneedle closes it.\n")
    corpus = LocalCorpus(root, cache_dir=tmp_path / "cache", max_bytes=OLD_CAP, progress=False)
    note = dict(corpus.indexed.notes)["huge.txt"]
    assert note.startswith(
        f"streamed: {huge.stat().st_size:,} bytes, over the 131,072-byte index cap; indexed bytes 0–"
    )
    assert note.endswith("the rest is not searchable")
    spans = [int(x.replace(",", "")) for x in re.findall(r"\d[\d,]*", note.split("indexed bytes")[1])[:4]]
    assert spans[0] == 0 and spans[1] < spans[2] and spans[3] == huge.stat().st_size
    found = {q: bool(corpus.search(q, 1)) for q in ("alphaneedle", "bravoneedle", "zuluneedle")}
    assert found == {"alphaneedle": True, "bravoneedle": False, "zuluneedle": True}
    assert max(watched_reads) <= WINDOW
    # The part not indexed is still read from disk by offset, and the note survives a reopen.
    with huge.open("rb") as f:
        middle = f.read().index(b"bravoneedle")
    window = Toolbox(corpus_tools(corpus)).call("read_document", {"path": "huge.txt", "offset": middle - 100})
    assert "bravoneedle" in window.content and f"bytes {middle - 100:,}–" in window.source_title
    reopened = LocalCorpus(root, cache_dir=tmp_path / "cache", max_bytes=OLD_CAP, progress=False)
    assert reopened.indexed.from_cache and dict(reopened.indexed.notes)["huge.txt"] == note
    record(
        "text file 5x over the index cap",
        "head + tail indexed, gap recorded",
        f"start/middle/end found: {found['alphaneedle']}/{found['bravoneedle']}/{found['zuluneedle']}",
        True,
    )


def test_a_huge_pdf_stays_skipped_with_a_reason(tmp_path, record):
    root = tmp_path / "docs"
    root.mkdir()
    (root / "scan.pdf").write_bytes(b"%PDF-1.7\n" + b"0" * (OLD_CAP + 1))
    (root / "a.md").write_text("# A\n\nText.\n")
    corpus = LocalCorpus(root, max_bytes=OLD_CAP, progress=False)
    reason = dict(corpus.skipped)["scan.pdf"]
    ok = reason.startswith("oversized") and ".pdf files are read whole" in reason
    record("huge PDF over the cap", "skipped with a reason", reason[:70], ok)
    assert ok, reason


def test_read_text_window_pages_through_a_file_by_offset(tmp_path, watched_reads):
    path = tmp_path / "huge.txt"
    _huge_text(path, 400)
    with path.open("rb") as f:
        data = f.read()
    windows, offset = [], 0
    while True:
        w = stream.read_text_window(path, offset)
        windows.append(w)
        assert w.start == offset and w.end > w.start
        if w.eof:
            break
        assert w.text[-1].isspace()  # cut at a boundary, never inside a word
        offset = w.end
    assert "".join(w.text for w in windows) == data.decode("utf-8")  # nothing lost, nothing repeated
    assert len(windows) > 5 and max(watched_reads) <= WINDOW
    # An offset inside a multi-byte character starts at the next whole character.
    inside = data.index("café".encode()) + 4  # the second byte of "é"
    assert stream.read_text_window(path, inside).text.startswith(":")
