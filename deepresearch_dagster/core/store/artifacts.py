"""Filesystem layout of a research and atomic writes. Swapping the root is configuration.

``<root>/<partition>/`` holds the research's own files (plan, manifest, summaries,
conversations, report); ``<root>/<partition>/<plan_folder>/`` holds only raw tool outputs
and is the whole world of the artifact tools.
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import json
import os
import re
import shutil
import stat
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from ..errors import ArtifactAccessError, ArtifactIntegrityError
from ..naming import plan_folder, short_hash, slugify

CORPUS_CACHE = "corpus_cache"  # under the artifact root, shared by researches: extracted texts, index snapshots
_SAFE_PARTITION = re.compile(r"[a-z0-9][a-z0-9_-]{0,120}")


def partition_folder(partition_key: str) -> str:
    if _SAFE_PARTITION.fullmatch(partition_key):
        return partition_key
    return f"{slugify(partition_key, 80, sep='-')}-{short_hash(partition_key)}"


def confined_path(root: str | Path, relpath: str | Path) -> Path:
    """``root/relpath`` fully resolved, or :class:`ArtifactAccessError` when it leaves ``root``:
    an absolute path, ``..``, or a symlink anywhere on the way that points outside. Symlinks that
    stay inside ``root`` are allowed. Use it for every path a model or a file tree can choose
    (artifact tools, corpus documents)."""
    base = Path(root).resolve()
    text = str(relpath)
    if not text or "\x00" in text or Path(text).is_absolute():
        raise ArtifactAccessError(f"invalid path: {text!r}")
    path = (base / text).resolve()
    if not path.is_relative_to(base):
        raise ArtifactAccessError(f"{text!r} leads outside {base.name or base}")
    return path


def read_regular_file(path: Path, max_bytes: int | None = None) -> bytes:
    """The bytes of ``path`` if it is a regular file and not a symlink (checked on the open file
    descriptor, so the check and the read see the same file); :class:`ArtifactAccessError` otherwise."""
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        raise ArtifactAccessError(f"cannot open {path.name}: not a regular file ({exc.strerror or exc})") from exc
    with os.fdopen(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
            raise ArtifactAccessError(f"{path.name} is not a regular file")
        return handle.read() if max_bytes is None else handle.read(max_bytes)


def atomic_write_bytes(path: Path, data: bytes, sync: bool = True) -> None:
    """Temp file in the same folder, fsync, rename: readers never see a partial file. The temp
    file is named ``.<name>.<pid>.<random>.tmp``: the writer's pid tells a later run whether the
    writer is gone (killed) and its temp file can go (:func:`remove_stale_temps`).

    ``sync=False`` (a cache whose loss costs a repeated call, never data): the file is complete
    and visible when this returns, so a killed process finds it as always, but its fsync, which
    only a power cut needs, is done by a background thread instead of before the caller goes on."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name[:40]}.{os.getpid()}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            if sync:
                os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    if not sync:
        _sync_later(path)


# One fsync thread per process (keyed by pid: a forked child never uses its parent's).
_SYNCERS: dict[int, ThreadPoolExecutor] = {}
_SYNCER_LOCK = threading.Lock()


def _sync_later(path: Path) -> None:
    with _SYNCER_LOCK:
        syncer = _SYNCERS.get(os.getpid())
        if syncer is None:
            syncer = _SYNCERS[os.getpid()] = ThreadPoolExecutor(max_workers=1, thread_name_prefix="fsync")
            atexit.register(syncer.shutdown)  # a normal exit waits for the pending fsyncs
    syncer.submit(_fsync_file, path)


def _fsync_file(path: Path) -> None:
    with contextlib.suppress(OSError):  # replaced or removed meanwhile: nothing left to sync
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


# ``.<name>.<pid>.<random>.tmp`` (atomic_write_bytes) or ``.<name>.<pid>.tmp`` (a folder built
# aside, such as a corpus index snapshot): the writer's pid.
_TEMP_WRITER = re.compile(r"\.(\d{1,10})(?:\.[A-Za-z0-9_]{1,16})?\.tmp$")


def _writer_gone(name: str) -> bool | None:
    """Whether the process that wrote temp file ``name`` has exited (None: the name has no pid)."""
    match = _TEMP_WRITER.search(name)
    if match is None:
        return None
    pid = int(match.group(1))
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except (PermissionError, OverflowError, OSError):
        return False  # exists (another user's), or cannot tell: keep it
    return False


def remove_stale_temps(folder: Path, older_than_s: float = 3600.0) -> list[str]:
    """Delete the temp files (and temp folders) a killed writer left under ``folder``: those
    whose writer's pid (in the name) is gone, at once, and any other ``.*.tmp`` older than
    ``older_than_s`` (a name without a pid, a writer on another host). A live writer's are kept.
    Symlinks are neither followed nor removed. Returns the removed paths, relative to ``folder``."""
    removed: list[str] = []
    if not folder.is_dir() or folder.is_symlink():
        return removed
    cutoff = time.time() - older_than_s
    for parent, dirs, files in os.walk(folder):  # os.walk does not follow symlinks
        for name in [*files, *dirs]:
            path = Path(parent) / name
            if not (name.startswith(".") and name.endswith(".tmp")) or path.is_symlink():
                continue
            gone = _writer_gone(name)
            with contextlib.suppress(FileNotFoundError):
                if gone or (gone is None and path.lstat().st_mtime < cutoff):
                    if path.is_dir():
                        shutil.rmtree(path, ignore_errors=True)
                        dirs.remove(name)
                    else:
                        path.unlink()
                    removed.append(path.relative_to(folder).as_posix())
    return sorted(removed)


PROBE_BYTES = 256 * 1024


def check_writable(folder: Path, probe_bytes: int = PROBE_BYTES) -> None:
    """Before anything is registered: ``folder`` takes a small write (``probe_bytes``, written,
    synced and removed), so a full or read-only disk is one line at once (the OSError, which
    ``errors.storage_failure`` names) instead of a failure in the middle of a run."""
    folder.mkdir(parents=True, exist_ok=True)
    probe = folder / f".write_probe.{os.getpid()}.tmp"
    try:
        with probe.open("wb", buffering=0) as handle:
            handle.write(b"\0" * probe_bytes)
            os.fsync(handle.fileno())
    except OSError as exc:
        raise OSError(exc.errno, exc.strerror, str(folder)) from exc
    finally:
        probe.unlink(missing_ok=True)


def dumps_json(obj: Any) -> str:
    """Canonical JSON for files on disk: sorted keys, stable indentation, trailing newline."""
    return json.dumps(obj, ensure_ascii=False, indent=2, sort_keys=True) + "\n"


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def read_verified_file(path: Path, sha256: str, name: str | None = None) -> bytes:
    """The one verified read of a raw artifact: its bytes, or :class:`ArtifactIntegrityError`
    when the file is missing or no longer matches the sha256 recorded when it was written."""
    label = name or str(path)
    try:
        data = path.read_bytes()
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError) as exc:
        raise ArtifactIntegrityError(f"raw artifact missing: {label}") from exc
    if sha256_bytes(data) != sha256:
        raise ArtifactIntegrityError(f"raw artifact changed since it was recorded: {label}")
    return data


@dataclass(frozen=True)
class StoredRaw:
    filename: str
    relpath: str
    bytes: int
    sha256: str
    text: str


class SharedRoot(Protocol):
    """Where every host's artifacts meet (``object_store.ObjectRoot``: an S3-API store); keys are
    artifact-root-relative POSIX paths."""

    def put_new(self, key: str, data: bytes) -> None: ...  # create-only: other bytes are refused
    def put(self, key: str, data: bytes) -> None: ...
    def get(self, key: str) -> bytes | None: ...
    def keys(self, prefix: str) -> list[str]: ...


class ArtifactStore:
    """One research's artifacts. With a ``shared`` root (a team deployment's object store,
    ``core/store/object_store.py``) the local folder is this host's working copy: every write goes
    to both (raw outputs create-only there), and a file another host wrote is fetched on first
    read, under the same relative name, and verified like a local one."""

    def __init__(self, root: str | Path, partition_key: str, shared: SharedRoot | None = None) -> None:
        self.root = Path(root).resolve()
        self.partition_key = partition_key
        self.partition_dir = self.root / partition_folder(partition_key)
        self.shared = shared

    def _relpath(self, path: Path) -> str:
        return path.relative_to(self.root).as_posix()

    def _fetch(self, path: Path, fresh: bool = False) -> bool:
        """Copy ``path`` from the shared root into the working copy when it is only there or,
        ``fresh``, whenever the shared copy differs: a stage file (plan, manifest, summaries,
        report) is replaced whole by whichever host runs the stage again, while a raw output never
        changes once written. Returns whether the file exists now."""
        if self.shared is None or (path.exists() and not fresh):
            return path.exists()
        data = self.shared.get(self._relpath(path))
        if data is None:
            return path.exists()
        if not path.is_file() or path.read_bytes() != data:
            atomic_write_bytes(path, data)
        return True

    def raw_reader(self, plan_title: str) -> ArtifactReader:
        """``grep_artifacts``/``read_artifact`` over the plan's raw folder, with every raw output
        the other hosts stored fetched first."""
        raw_dir = self.raw_dir(plan_title)
        if self.shared is not None:
            for key in self.shared.keys(self._relpath(raw_dir)):
                name = key.rsplit("/", 1)[-1]
                if "/" not in key.removeprefix(self._relpath(raw_dir) + "/") and not name.startswith("."):
                    self._fetch(self._confined(raw_dir, name))
        return ArtifactReader(raw_dir)

    def remove_stale_temps(self, older_than_s: float = 60.0) -> list[str]:
        """Delete the temp files a killed writer left in the partition (see the module-level
        :func:`remove_stale_temps`): a dead writer's at once, so an immediate rerun after a kill
        starts clean; one without a pid only when older than ``older_than_s`` (a live write
        finishes within seconds). Returns the removed paths, relative to the partition."""
        return remove_stale_temps(self.partition_dir, older_than_s)

    def raw_dir(self, plan_title: str) -> Path:
        return self.partition_dir / plan_folder(plan_title)

    def write_raw(self, plan_title: str, filename: str, content: str | Any) -> StoredRaw:
        """Write a tool's whole raw output; JSON-like content is stored canonically."""
        text = content if isinstance(content, str) else dumps_json(content)
        data = text.encode("utf-8")
        path = self._confined(self.raw_dir(plan_title), filename)
        self._check_unlinked(path, self.raw_dir(plan_title) / filename)
        atomic_write_bytes(path, data)
        if self.shared is not None:
            self.shared.put_new(self._relpath(path), data)
        return StoredRaw(
            filename=filename,
            relpath=self._relpath(path),
            bytes=len(data),
            sha256=sha256_bytes(data),
            text=text,
        )

    def write_text(self, name: str, text: str) -> Path:
        path = self._confined(self.partition_dir, name, allow_subdir=True)
        self._check_unlinked(path, self.partition_dir / name)
        data = text.encode("utf-8")
        atomic_write_bytes(path, data)
        if self.shared is not None:
            self.shared.put(self._relpath(path), data)
        return path

    def write_json(self, name: str, obj: Any) -> Path:
        return self.write_text(name, dumps_json(obj))

    def read_text(self, name: str) -> str:
        path = self._confined(self.partition_dir, name, allow_subdir=True)
        self._fetch(path, fresh=True)
        return path.read_text("utf-8")

    def exists(self, name: str) -> bool:
        return self._fetch(self._confined(self.partition_dir, name, allow_subdir=True), fresh=True)

    def resolve_relpath(self, relpath: str) -> Path:
        path = (self.root / relpath).resolve()
        if not path.is_relative_to(self.partition_dir):
            raise ArtifactAccessError(f"{relpath!r} is outside this research")
        return path

    def read_verified(self, relpath: str, sha256: str) -> bytes:
        """The bytes of a raw artifact of this research (path relative to the artifact root),
        checked against the sha256 recorded when it was written (:func:`read_verified_file`)."""
        path = self.resolve_relpath(relpath)
        self._fetch(path)
        return read_verified_file(path, sha256, relpath)

    def verify(self, relpath: str | None, sha256: str | None) -> bool | None:
        """True when the artifact is intact, False when its bytes changed, None when it is missing."""
        if not relpath or not sha256:
            return None
        try:
            self.read_verified(relpath, sha256)
        except ArtifactAccessError:
            return None
        except ArtifactIntegrityError:
            return False if self.resolve_relpath(relpath).is_file() else None
        return True

    def _check_unlinked(self, resolved: Path, named: Path) -> None:
        """Before a write: the target, resolved, is exactly where it was named under the artifact
        root, so a symlinked partition, raw or metadata folder (or file) cannot redirect the write."""
        if resolved != named or not resolved.is_relative_to(self.partition_dir):
            raise ArtifactAccessError(f"refusing to write {named.name}: a folder or file on its way is a symlink")

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
    """``grep_artifacts`` and ``read_artifact`` (seed 000 §8), confined to one raw folder.

    Only regular files directly in the raw folder are visible: symlinks (to anything) are not
    listed and cannot be read, and a raw folder (or partition folder) that is itself a symlink is
    refused as a whole. Patterns are chosen by a model, so they run on RE2 (linear time, no
    backtracking: no catastrophic pattern can pin a core) under a total time limit."""

    MAX_PATTERN = 200
    GREP_TIMEOUT_S = 5.0  # wall clock for the whole grep over every file

    def __init__(self, raw_dir: Path) -> None:
        given = Path(raw_dir).absolute()
        self.raw_dir = given.resolve()
        # A symlinked raw folder, or one below a symlinked partition folder, points somewhere else.
        self._refused = (
            f"the raw folder {given.name!r} is a symlink; refused"
            if given.is_symlink() or given.parent.is_symlink()
            else None
        )

    def _check(self) -> None:
        if self._refused:
            raise ArtifactAccessError(self._refused)

    def files(self) -> list[str]:
        if self._refused or not self.raw_dir.is_dir():
            return []
        with os.scandir(self.raw_dir) as entries:
            return sorted(e.name for e in entries if not e.name.startswith(".") and e.is_file(follow_symlinks=False))

    def _text(self, name: str) -> str:
        return read_regular_file(self.raw_dir / name).decode("utf-8", errors="replace")

    def grep(self, pattern: str, max_matches: int = 50) -> list[dict[str, Any]]:
        import re2  # google-re2: linear-time matching, no backtracking (a model-chosen (a+)+$ is harmless)

        self._check()
        if not pattern or len(pattern) > self.MAX_PATTERN:
            raise ArtifactAccessError(f"pattern must be 1-{self.MAX_PATTERN} characters")
        options = re2.Options()
        options.case_sensitive = False
        options.log_errors = False
        try:
            compiled = re2.compile(pattern, options)
        except re2.error:  # invalid, or syntax RE2 refuses (backreferences, lookaround): search it literally
            compiled = re2.compile(re2.escape(pattern), options)
        deadline = time.monotonic() + self.GREP_TIMEOUT_S
        matches: list[dict[str, Any]] = []
        for name in self.files():
            for lineno, line in enumerate(self._text(name).splitlines(), start=1):
                if time.monotonic() > deadline:
                    raise ArtifactAccessError(
                        f"grep for {pattern!r} took longer than {self.GREP_TIMEOUT_S:g} s; "
                        "use a simpler pattern or read_artifact"
                    )
                if compiled.search(line):
                    matches.append({"file": name, "line": lineno, "text": line.strip()[:500]})
                    if len(matches) >= max_matches:
                        return matches
        return matches

    def read(self, file: str, offset: int = 0, limit: int = 4000) -> dict[str, Any]:
        self._check()
        if file not in self.files():
            raise ArtifactAccessError(f"no artifact named {file!r} in this research")
        text = self._text(file)
        offset = max(0, int(offset))
        limit = max(1, min(int(limit), 20000))
        return {
            "file": file,
            "offset": offset,
            "total_chars": len(text),
            "content": text[offset : offset + limit],
            "next_offset": offset + limit if offset + limit < len(text) else None,
        }
