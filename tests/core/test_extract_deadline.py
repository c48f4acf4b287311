"""A corpus file whose reader blocks is skipped after the extraction deadline (issue 26, item 4):
the slow formats are read in a worker process that is killed past it, and the next file gets a new
worker. The fake PDF reader below runs in that process (it travels by reference)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from deepresearch_dagster.core.config import load_settings
from deepresearch_dagster.core.documents import ingest, worker
from deepresearch_dagster.core.documents.markdown import extract_plain_text
from deepresearch_dagster.core.documents.model import ExtractedDocument
from deepresearch_dagster.core.roles.researcher import document_folder
from deepresearch_dagster.core.tools import local_search
from tests.fixtures.private_docs.build import docx_bytes


def fake_pdf(data: bytes, stem: str) -> ExtractedDocument:
    """A PDF reader stuck on a strange file (b"stuck…"); else reads the bytes as text."""
    if data.startswith(b"stuck"):
        time.sleep(60)  # killed with its process after the deadline
    return extract_plain_text(data, stem)


@pytest.fixture
def folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setitem(ingest.EXTRACTORS, ".pdf", fake_pdf)
    local_search.clear_corpus_cache()
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a_stuck.pdf").write_bytes(b"stuck forever")
    (docs / "b_minutes.md").write_text("# Board minutes\n\nThe board approved the Leeds office in March.\n")
    (docs / "c_budget.pdf").write_bytes(b"The 2026 budget is 4.2 million euros for the Leeds office.\n")
    # Real readers in the worker: a document comes back whole, a corrupt file's reason too.
    (docs / "d_update.docx").write_bytes(docx_bytes("# Update\n\nHeadcount reached 48 people.\n", "Update"))
    (docs / "e_broken.docx").write_bytes(b"not a zip archive")
    yield docs
    worker.stop()
    local_search.clear_corpus_cache()


def test_a_stuck_file_is_skipped_after_the_deadline_and_the_next_pdf_is_read(folder: Path, tmp_path: Path):
    settings = load_settings(
        env={
            "DEEPRESEARCH_CORPUS": str(folder),
            "DEEPRESEARCH_EXTRACT_DEADLINE": "0.5",
            "DEEPRESEARCH_ARTIFACTS_DIR": str(tmp_path / "artifacts"),
        }
    )
    assert settings.extract_deadline_s == 0.5
    started = time.monotonic()
    corpus = document_folder(settings)
    assert time.monotonic() - started < 30  # the reader sleeps 60 s: it was not waited for
    reasons = dict(corpus.skipped)
    assert reasons.pop("a_stuck.pdf") == "extraction took longer than 0.5 s"
    assert list(reasons) == ["e_broken.docx"] and reasons["e_broken.docx"] == "corrupt DOCX: not a ZIP package"
    # The killed worker was replaced: the files after the stuck one are read, in a new process.
    assert [d.path for d in corpus.documents] == ["b_minutes.md", "c_budget.pdf", "d_update.docx"]
    assert "Headcount reached 48 people." in corpus.get("d_update.docx").text
    # Not cached as skipped: a busy machine is not the file's fault, it is tried again next time.
    cache = ingest.TextCache(tmp_path / "artifacts" / "corpus_cache")
    assert cache.get(ingest.sha256_bytes(b"stuck forever")) is None
    assert "a_stuck.pdf" not in cache.load_manifest(folder)
