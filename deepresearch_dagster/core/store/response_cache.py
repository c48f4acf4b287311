"""Model answers kept per research, so a resumed or re-materialized research asks the model
nothing it has asked before (issue 15: resume with zero repeated model calls).

The key is the sha256 of everything that decides the answer: the model, the role, the exact
messages, the response schema, the tools and the sampling settings. The answer is stored as
``<partition>/llm_cache/<key>.json`` (atomically, before the caller uses it, so a killed research
finds it), like a tool call's raw output; a later request with the same key replays it. Its fsync,
which only a power cut needs, is done by a background thread (``atomic_write_bytes(sync=False)``)
rather than between two model calls: an answer a power cut lost is asked again. A different model, prompt, date or
tool output is a different key, so nothing stale is replayed. ``core/llm/structured.py`` decides
what is cached (answers from model servers; the offline engine is local and deterministic).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from .artifacts import ArtifactStore, atomic_write_bytes, dumps_json

CACHE_FOLDER = "llm_cache"  # one of naming.METADATA_FOLDERS: never a raw folder
FORMAT = 1


def request_key(request: dict[str, Any]) -> str:
    text = json.dumps({"format": FORMAT, **request}, sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


class ResponseCache:
    def __init__(self, store: ArtifactStore) -> None:
        self.folder = store.partition_dir / CACHE_FOLDER

    key = staticmethod(request_key)

    def path(self, key: str) -> Path:
        return self.folder / f"{key}.json"

    def name(self, key: str) -> str:
        """The answer's file relative to the partition, for the audit."""
        return f"{CACHE_FOLDER}/{key}.json"

    def get(self, key: str) -> dict[str, Any] | None:
        """The stored answer, or None (absent, unreadable or another format: ask again)."""
        path = self.path(key)
        if path.is_symlink() or not path.is_file():
            return None
        try:
            data = json.loads(path.read_text("utf-8"))
        except (OSError, ValueError):
            return None
        return data if isinstance(data, dict) and data.get("format") == FORMAT else None

    def put(self, key: str, answer: dict[str, Any]) -> None:
        record = {"format": FORMAT, **answer}
        atomic_write_bytes(self.path(key), dumps_json(record).encode("utf-8", "surrogatepass"), sync=False)
