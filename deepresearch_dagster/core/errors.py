"""One error hierarchy. A :class:`ResearchError` carries a message meant for the user (shown as
one line, never with a traceback) and whether retrying the same thing may succeed.

``ModelFailure`` is the one definition of "the model failed, use the role's fallback":
unreachable or refusing engines, answers that stay invalid after repair, and budget exhaustion.
"""

from __future__ import annotations

import contextlib
import errno
import re
import threading
from collections.abc import Iterable

# -- secrets redaction -------------------------------------------------------------------------
# Every error text is redacted before it is stored or printed, whatever a server echoes back
# (request headers, the URL with its query string, a JSON body holding the key).
REDACTED = "***"
_MIN_REGISTERED = 6  # shorter values would redact ordinary words
_registered: set[str] = set()
_registered_lock = threading.Lock()

# `Authorization: Bearer sk-…`, `X-Api-Key: …`, `X-Subscription-Token: …` (header name kept).
_HEADER = re.compile(
    r"(?i)\b((?:proxy-)?authorization|x-api-key|api-key|x-subscription-token|x-goog-api-key|x-auth-token|cookie)"
    r"(\s*[\"']?\s*[:=]\s*[\"']?)(?:(?:bearer|basic|token|digest)\s+)?[^\s\"',;}]+"
)
_BEARER = re.compile(r"(?i)\b(bearer|basic)\s+[A-Za-z0-9._~+/=\-]{4,}")
# `api_key=…`, `"api_key": "…"`, `OPENAI_API_KEY=…`, `client_secret: …`, `password=…`.
_KEY_VALUE = re.compile(
    r"(?i)(?<![A-Za-z0-9])((?:[A-Za-z0-9]+_)*(?:api[_-]?key|apikey|access[_-]?token|auth[_-]?token|refresh[_-]?token"
    r"|secret[_-]?key|client[_-]?secret|secret|password|passwd|subscription[_-]?token))"
    r"(\\?[\"']?\s*[:=]\s*\\?[\"']?)(?!\*\*\*)[^\s\"'&,;}\\]{3,}"
)
# Short query parameters that carry credentials: `?key=…`, `&token=…`, `&sig=…`.
_QUERY_PARAM = re.compile(
    r"(?i)([?&;](?:key|token|sig|signature|auth|code|access_token|x-amz-signature)=)[^&\s#\"'<>]+"
)
# Credentials in a URL: `https://user:pass@host` → `https://***@host`.
_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/\s@:]+:[^/\s@]*@")
# Well-known key shapes, wherever they appear.
_KEY_SHAPES = re.compile(
    r"\b(?:sk-(?:proj-|ant-|or-|svcacct-)?[A-Za-z0-9_\-]{16,}|tvly-[A-Za-z0-9_\-]{10,}|gsk_[A-Za-z0-9]{20,}"
    r"|xai-[A-Za-z0-9]{20,}|AIza[0-9A-Za-z_\-]{30,}|gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{30,}"
    r"|hf_[A-Za-z0-9]{30,}|AKIA[0-9A-Z]{16}|xox[abpors]-[A-Za-z0-9-]{10,}"
    r"|eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,})"
)


def register_secret(value: object) -> None:
    """Remember a secret's exact value (an API key from the settings) so :func:`redact` removes it
    even when it has no recognizable shape. Values shorter than 6 characters are ignored."""
    if hasattr(value, "get_secret_value"):
        value = value.get_secret_value()
    text = str(value or "").strip()
    if len(text) >= _MIN_REGISTERED:
        with _registered_lock:
            _registered.add(text)


def redact(text: object, secrets: Iterable[object] = ()) -> str:
    """``text`` with API keys, ``Bearer``/``Basic`` credentials, credential headers, ``api_key=``-style
    parameters, URL user:password parts and registered secret values replaced by ``***``."""
    out = "" if text is None else str(text)
    if not out:
        return out
    with _registered_lock:
        known = set(_registered)
    for secret in secrets:
        value = secret.get_secret_value() if hasattr(secret, "get_secret_value") else secret
        value = str(value or "").strip()
        if len(value) >= _MIN_REGISTERED:
            known.add(value)
    for value in sorted(known, key=len, reverse=True):  # longest first: a key that contains another
        out = out.replace(value, REDACTED)
    out = _USERINFO.sub(lambda m: m.group(1) + REDACTED + "@", out)
    out = _HEADER.sub(lambda m: m.group(1) + m.group(2) + REDACTED, out)
    out = _BEARER.sub(lambda m: m.group(1) + " " + REDACTED, out)
    out = _KEY_VALUE.sub(lambda m: m.group(1) + m.group(2) + REDACTED, out)
    out = _QUERY_PARAM.sub(lambda m: m.group(1) + REDACTED, out)
    return _KEY_SHAPES.sub(REDACTED, out)


def redact_exception_chain(exc: BaseException | None) -> None:
    """Redact, in place, the message of ``exc`` and of every exception it was raised from or
    during (``__cause__`` / ``__context__``): Dagster's event log and tracebacks print them all,
    and a client library's error (the cause of an ``EngineError``) may quote the request headers."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        with contextlib.suppress(AttributeError, TypeError):  # an exception type with read-only args
            exc.args = tuple(redact(a) if isinstance(a, str) else a for a in exc.args)
        exc = exc.__cause__ or exc.__context__


class ResearchError(Exception):
    """Base of every expected failure; ``str(exc)`` is the user-facing message."""

    retryable: bool = False

    def __init__(self, user_message: str, *, retryable: bool | None = None) -> None:
        super().__init__(redact(user_message))  # whatever a server echoed, no key reaches a log
        if retryable is not None:
            self.retryable = retryable

    @property
    def user_message(self) -> str:
        return str(self)


class ConfigError(ResearchError, ValueError):
    """Configuration (environment, config file, prices) that cannot be used."""


class UsageError(ResearchError):
    """Bad command-line input."""


class InvalidQuestion(ResearchError, ValueError):
    """A question the coordinator refuses."""


class RequestError(ResearchError, ValueError):
    """A research request (file) that cannot be accepted."""


class SuiteError(ResearchError, ValueError):
    """An evaluation suite (file or line) that cannot be read."""


class UnknownResearch(ResearchError, LookupError):
    """No research is registered under a partition key."""


class ArtifactAccessError(ResearchError, ValueError):
    """A path outside the research's own artifact folder, or a file that does not exist."""


class ArtifactIntegrityError(ResearchError):
    """A raw artifact is missing or no longer matches the sha256 recorded when it was written."""


class ToolError(ResearchError):
    """A tool could not do what was asked; the message is recorded as the raw output."""


class SearchError(ToolError):
    """A web search failed; the message is safe to show to a user (and to a model)."""


class RateLimitedError(SearchError):
    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message, retryable=True)
        self.retry_after = retry_after


class FetchError(ToolError):
    """A URL could not be fetched."""


class UnsafeURLError(FetchError):
    """A URL the fetch policy refuses (private addresses, bad schemes)."""


class ModelError(ResearchError):
    """A model call failed in a way its role's fallback can absorb."""


class EngineError(ModelError):
    """The model could not be reached or refused; recorded, then surfaced without a traceback."""

    def __init__(self, message: str, attempts: list | None = None, retryable: bool = False) -> None:
        super().__init__(message, retryable=retryable)
        self.attempts = attempts or []


class CredentialsError(EngineError):
    """The model server rejected the credentials (HTTP 401/403): configuration for the user to
    fix. No role's fallback absorbs it (``core/llm/structured.record_fallback`` re-raises it): the
    research fails with this message instead of writing a report from fallbacks alone."""


class StructuredOutputError(ModelError):
    """A structured answer stayed invalid after the repair round."""

    def __init__(self, role: str, error: str) -> None:
        super().__init__(f"{role} returned invalid output twice: {error}")
        self.role = role
        self.error = redact(error)


class ResearchInterrupted(ResearchError):
    """Ctrl-C or SIGTERM: stop at the next tool call; everything stored so far is kept."""

    MESSAGE = "interrupted (Ctrl-C or SIGTERM): stopped; what was stored is kept and a new run resumes from it"

    def __init__(self) -> None:
        super().__init__(self.MESSAGE)


class BudgetExceeded(ResearchError):
    """A call would break a hard cap; the research stops and reports what it has."""


class StorageError(ResearchError):
    """The disk or the lineage database cannot be used (full, read-only, not a DuckDB file).
    Retrying the same write cannot help, so it is never retried; everything already stored is
    kept and the same command resumes once the cause is fixed."""


_FULL = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)
_READ_ONLY = (errno.EROFS, errno.EACCES, errno.EPERM)


# DuckDB's words for a file that is not (or no longer) a whole database: garbage, or truncated.
_CORRUPT_DUCKDB = ("not a valid DuckDB database file", "Corrupt database file", "Could not read enough bytes")
INSTANCE_STORAGE = "the Dagster instance storage (DAGSTER_HOME)"


def _instance_storage_failure(text: str) -> StorageError | None:
    """SQLite's errors from Dagster's instance storage (run, event and schedule databases)."""
    lowered = text.lower()
    if "database or disk is full" in lowered or "no space left" in lowered:
        return StorageError(
            f"disk full writing {INSTANCE_STORAGE}: free some space, then run the same command again to resume"
        )
    if "disk i/o error" in lowered:
        return StorageError(
            f"{INSTANCE_STORAGE} could not be written (disk I/O error; most often a full disk): free some space or "
            "fix the disk, then run the same command again to resume"
        )
    if "readonly database" in lowered or "unable to open database file" in lowered:
        return StorageError(
            f"{INSTANCE_STORAGE} cannot be written (read-only disk or no permission): make DAGSTER_HOME writable by "
            "this user, then run the same command again"
        )
    if "file is not a database" in lowered or "database disk image is malformed" in lowered:
        return StorageError(
            f"{INSTANCE_STORAGE} is corrupt (a SQLite file under DAGSTER_HOME is not a database): move DAGSTER_HOME "
            "aside and run again (a new instance is created; the research artifacts are kept)"
        )
    return None


def _wal_failure(wal: str) -> StorageError:
    """DuckDB (1.5) cannot replay a write-ahead log that a full disk cut short: on a full disk
    that is the disk-full line; with space free again, the log itself is the problem."""
    import os
    import shutil

    with contextlib.suppress(OSError):
        if shutil.disk_usage(os.path.dirname(wal) or ".").free < 1024 * 1024:
            return StorageError(
                f"disk full writing the lineage database (its log {wal} is incomplete): free some space, then run "
                "the same command again"
            )
    return StorageError(
        f"the lineage database's write-ahead log {wal} cannot be replayed (cut short by a full disk or a crash): "
        "move it aside and run again (the statements it held since the last checkpoint are lost; the artifacts on "
        "disk are kept)"
    )


def storage_failure(exc: BaseException) -> StorageError | None:
    """The storage problem behind ``exc`` (or any exception in its chain) as one actionable line;
    ``None`` when it is something else. DuckDB's errors are recognised by class name and message
    so this module stays free of the DuckDB import."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, StorageError):
            return current
        if isinstance(current, OSError) and current.errno in _FULL + _READ_ONLY:
            if current.errno in _FULL:
                where = f" writing {current.filename}" if current.filename else ""
                return StorageError(f"disk full{where}: free some space, then run the same command again to resume")
            where = f" {current.filename}" if current.filename else ""
            return StorageError(
                f"cannot write{where}: {current.strerror} (read-only disk or no permission): make it writable "
                "by this user, then run the same command again to resume"
            )
        module = type(current).__module__ or ""
        if "sqlite" in module or "sqlalchemy" in module:
            # Dagster's instance storage (SQLite files under DAGSTER_HOME).
            found = _instance_storage_failure(str(current))
            if found is not None:
                return found
        if "duckdb" in module:
            text = str(current)
            if "Is a directory" in text:
                name = re.search(r'file "([^"]+)"', text)
                where = f" {name.group(1)}" if name else ""
                return StorageError(
                    f"the lineage database path{where} is a folder, not a DuckDB file: set DEEPRESEARCH_DUCKDB to a "
                    "file path (for example <folder>/lineage.duckdb)"
                )
            if "No space left on device" in text or "disk is full" in text.lower():
                return StorageError(
                    "disk full writing the lineage database: free some space, then run the same command again"
                )
            wal = re.search(r'Failure while replaying WAL file "([^"]+)"', text)
            if wal:
                return _wal_failure(wal.group(1))
            if any(marker in text for marker in _CORRUPT_DUCKDB):
                name = re.search(r'file "([^"]+)"', text)
                where = f" {name.group(1)}" if name else ""
                return StorageError(
                    f"the lineage database{where} is not a readable DuckDB file (corrupt or truncated): move it "
                    "aside and run again (a new one is created; the artifacts on disk are kept)"
                )
            if "Read-only file system" in text or "Permission denied" in text:
                name = re.search(r'file "([^"]+)"', text)
                where = f" {name.group(1)}" if name else ""
                cause = "Read-only file system" if "Read-only file system" in text else "Permission denied"
                return StorageError(
                    f"the lineage database{where} is read-only ({cause}): make the file and its folder writable "
                    "by this user, or set DEEPRESEARCH_DUCKDB to a writable path, then run the same command again"
                )
        current = current.__cause__ or current.__context__
    return None


# The one definition of a fallback-worthy model failure.
MODEL_FAILURES: tuple[type[Exception], ...] = (ModelError, BudgetExceeded)
