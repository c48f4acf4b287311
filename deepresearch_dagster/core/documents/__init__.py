"""Document ingestion for ``local_search``: one module per format family, a sha256-keyed text
cache, passages for retrieval and currency (date, supersession) per document."""

from .currency import currency, in_archive
from .ingest import (
    EXTRACTORS,
    MAX_BYTES,
    SUPPORTED,
    IndexedFolder,
    TextCache,
    extract_bytes,
    extract_path,
    index_folder,
)
from .model import ExtractedDocument, Section, SkipFile, markdown_table, render_sections
from .passages import Passage, split_passages
from .stream import TextWindow, read_text_window, stream_text_document

__all__ = [
    "EXTRACTORS",
    "MAX_BYTES",
    "SUPPORTED",
    "ExtractedDocument",
    "IndexedFolder",
    "Passage",
    "Section",
    "SkipFile",
    "TextCache",
    "TextWindow",
    "currency",
    "extract_bytes",
    "extract_path",
    "in_archive",
    "index_folder",
    "markdown_table",
    "read_text_window",
    "render_sections",
    "split_passages",
    "stream_text_document",
]
