"""Filesystem layout of a research and atomic writes. Swapping the root is configuration.

``<root>/<partition>/`` holds the research's own files (plan, manifest, summaries,
conversations, report); ``<root>/<partition>/<plan_folder>/`` holds only raw tool outputs
and is the whole world of the artifact tools.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..naming import plan_folder, short_hash, slugify

_SAFE_PARTITION = re.compile(r"[a-z0-9][a-z0-9_-]{0,120}")


class ArtifactAccessError(ValueError):
    """A file request outside the research's artifact folder, or of a missing file."""


def partition_folder(partition_key: str) -> str:
    if _SAFE_PARTITION.fullmatch(partition_key):
        return partition_key
    return f"{slugify(partition_key, 80, sep='-')}-{short_hash(partition_key)}"


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Temp file in the same folder, fsync, rename: readers never see a partial file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name[:40]}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def dumps_json(obj: Any) -> str:
    """Canonical JSON for files on disk: sorted keys, stable indentation, trailing newline."""
    return json.dumps(obj, ensure_ascii=False, indent=2, sort_keys=True) + "\n"


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@dataclass(frozen=True)
class StoredRaw:
    filename: str
    relpath: str
    bytes: int
    sha256: str
    text: str


class ArtifactStore:
    def __init__(self, root: str | Path, partition_key: str) -> None:
        self.root = Path(root).resolve()
        self.partition_key = partition_key
        self.partition_dir = self.root / partition_folder(partition_key)

    def raw_dir(self, plan_title: str) -> Path:
        return self.partition_dir / plan_folder(plan_title)

    def write_raw(self, plan_title: str, filename: str, content: str | Any) -> StoredRaw:
        """Write a tool's whole raw output; JSON-like content is stored canonically."""
        text = content if isinstance(content, str) else dumps_json(content)
        data = text.encode("utf-8")
        path = self._confined(self.raw_dir(plan_title), filename)
        atomic_write_bytes(path, data)
        return StoredRaw(
            filename=filename,
            relpath=path.relative_to(self.root).as_posix(),
            bytes=len(data),
            sha256=sha256_bytes(data),
            text=text,
        )

    def write_text(self, name: str, text: str) -> Path:
        path = self._confined(self.partition_dir, name, allow_subdir=True)
        atomic_write_bytes(path, text.encode("utf-8"))
        return path

    def write_json(self, name: str, obj: Any) -> Path:
        return self.write_text(name, dumps_json(obj))

    def read_text(self, name: str) -> str:
        return self._confined(self.partition_dir, name, allow_subdir=True).read_text("utf-8")

    def exists(self, name: str) -> bool:
        return self._confined(self.partition_dir, name, allow_subdir=True).exists()

    def resolve_relpath(self, relpath: str) -> Path:
        path = (self.root / relpath).resolve()
        if not path.is_relative_to(self.partition_dir):
            raise ArtifactAccessError(f"{relpath!r} is outside this research")
        return path

    def _confined(self, base: Path, name: str, allow_subdir: bool = False) -> Path:
        parts = name.split("/")
        if (
            not name
            or "\\" in name
            or "\x00" in name
            or any(p in ("", ".", "..") for p in parts)
            or (len(parts) > 1 and not allow_subdir)
            or len(parts) > 2
        ):
            raise ArtifactAccessError(f"invalid artifact name: {name!r}")
        path = (base / name).resolve()
        if not path.is_relative_to(base.resolve()):
            raise ArtifactAccessError(f"{name!r} escapes the artifact folder")
        return path


class ArtifactReader:
    """``grep_artifacts`` and ``read_artifact`` (seed 000 §8), confined to one raw folder."""

    MAX_PATTERN = 200

    def __init__(self, raw_dir: Path) -> None:
        self.raw_dir = raw_dir.resolve()

    def files(self) -> list[str]:
        if not self.raw_dir.is_dir():
            return []
        return sorted(p.name for p in self.raw_dir.iterdir() if p.is_file() and not p.name.startswith("."))

    def grep(self, pattern: str, max_matches: int = 50) -> list[dict[str, Any]]:
        if not pattern or len(pattern) > self.MAX_PATTERN:
            raise ArtifactAccessError(f"pattern must be 1-{self.MAX_PATTERN} characters")
        try:
            regex = re.compile(pattern, re.IGNORECASE)
        except re.error:
            regex = re.compile(re.escape(pattern), re.IGNORECASE)
        matches: list[dict[str, Any]] = []
        for name in self.files():
            text = (self.raw_dir / name).read_text("utf-8", errors="replace")
            for lineno, line in enumerate(text.splitlines(), start=1):
                if regex.search(line):
                    matches.append({"file": name, "line": lineno, "text": line.strip()[:500]})
                    if len(matches) >= max_matches:
                        return matches
        return matches

    def read(self, file: str, offset: int = 0, limit: int = 4000) -> dict[str, Any]:
        if file not in self.files():
            raise ArtifactAccessError(f"no artifact named {file!r} in this research")
        text = (self.raw_dir / file).read_text("utf-8", errors="replace")
        offset = max(0, int(offset))
        limit = max(1, min(int(limit), 20000))
        return {
            "file": file,
            "offset": offset,
            "total_chars": len(text),
            "content": text[offset : offset + limit],
            "next_offset": offset + limit if offset + limit < len(text) else None,
        }
