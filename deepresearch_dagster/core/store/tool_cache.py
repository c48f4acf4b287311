"""Tool-call cache: an identical cacheable tool call within the TTL is served from its artifact.

Key = tool name + normalized arguments (URLs normalized, whitespace collapsed) + the tool's
``cache_scope`` (a corpus tool's: the corpus's content hash and the code that answers, so a
changed corpus or search is a miss). A hit re-reads the stored raw file (checked against its
sha256) instead of calling the network or searching again, so a partition re-materialized after
a failure — on this host or another — re-uses every call that already succeeded.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..errors import ArtifactIntegrityError
from ..models import ToolCallRecord
from ..naming import short_hash
from ..tools import ToolResult
from ..web.urls import normalize_url
from .artifacts import SharedRoot, atomic_write_bytes, read_verified_file
from .lineage import LineageStore


def normalized_arguments(arguments: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key in sorted(arguments):
        value = arguments[key]
        if isinstance(value, str):
            value = normalize_url(value) if key == "url" else " ".join(value.split())
        out[key] = value
    return out


def tool_cache_key(tool: str, arguments: dict[str, Any], scope: str = "") -> str:
    key = [tool, normalized_arguments(arguments), *([scope] if scope else [])]  # unscoped keys as before
    return short_hash(json.dumps(key, sort_keys=True), 32)


class ToolCache:
    def __init__(
        self, lineage: LineageStore, artifacts_root: Path, ttl_s: float, shared: SharedRoot | None = None
    ) -> None:
        """``shared``: a team deployment's object store, where the file of a call that another
        host made is fetched from (into this host's working copy) before it is verified."""
        self.lineage = lineage
        self.root = artifacts_root
        self.ttl_s = ttl_s
        self.shared = shared

    def get(self, tool: str, arguments: dict[str, Any], scope: str = "") -> ToolResult | None:
        return self.get_many([(tool, arguments, scope)])[0]

    def get_many(self, calls: list[tuple[str, dict[str, Any], str] | None]) -> list[ToolResult | None]:
        """:meth:`get` for each ``(tool, arguments, scope)`` (None: not looked up), in one query."""
        if self.ttl_s <= 0:
            return [None] * len(calls)
        keys = [None if c is None else tool_cache_key(*c) for c in calls]
        rows = self.lineage.tool_cache_lookups([k for k in keys if k is not None], self.ttl_s)
        return [None if k is None or k not in rows else self._result(rows[k]) for k in keys]

    def _result(self, row: dict[str, Any]) -> ToolResult | None:
        """The cached result of a row, if its file is still the one recorded."""
        # Entries are shared across researches, so the file is looked up under the artifact root.
        path = (self.root / row["artifact_path"]).resolve()
        if not path.is_relative_to(self.root.resolve()):
            return None
        if self.shared is not None and not path.exists():
            data = self.shared.get(row["artifact_path"])
            if data is not None:
                atomic_write_bytes(path, data)
        try:
            data = read_verified_file(path, row["sha256"], row["artifact_path"])
        except ArtifactIntegrityError:
            return None  # a file overwritten or removed since it was cached is a miss, never stale data
        text = data.decode("utf-8")
        content = json.loads(text) if row["kind"] == "json" else text
        return ToolResult(
            content=content,
            kind=row["kind"],
            source=row["source"],
            source_title=row["source_title"],
            links=json.loads(row["links"]) if row["links"] else [],  # a page's links: provenance on a hit too
        )

    def put(self, record: ToolCallRecord, result: ToolResult, scope: str = "") -> None:
        self.lineage.put_tool_cache(
            tool_cache_key(record.tool, record.arguments, scope),
            record,
            result.kind,
            normalized_arguments(record.arguments),
            result.links,
        )
