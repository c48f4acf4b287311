"""URL normalization, so the same page found twice (or by two providers) is read and cited once."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, TypeVar
from urllib.parse import unquote_plus, urlsplit, urlunsplit

T = TypeVar("T")

# Parameters that only say how a visitor arrived; they never change the page's content.
TRACKING_PARAMS = frozenset(
    {"gclid", "fbclid", "mc_cid", "mc_eid", "msclkid", "ref", "ref_src", "igshid", "_ga", "yclid", "spm"}
)
_DEFAULT_PORTS = {"http": 80, "https": 443}


def is_tracking_param(name: str) -> bool:
    name = name.lower()
    return name.startswith("utm_") or name in TRACKING_PARAMS


def _idna_host(host: str) -> str:
    if host.isascii():
        return host.lower()
    try:
        # The stdlib codec is IDNA 2003 (it also case-folds); enough for a stable dedupe key.
        return host.encode("idna").decode("ascii").lower()
    except UnicodeError:
        return host.lower()


def _netloc(parts: Any, scheme: str) -> str:
    host = parts.hostname or ""
    host = f"[{host}]" if ":" in host else _idna_host(host)
    userinfo = parts.netloc.rpartition("@")[0] if "@" in parts.netloc else ""
    try:
        port = parts.port
    except ValueError:  # a non-numeric port: keep it verbatim rather than fail
        port_text = parts.netloc.rpartition("]")[2].rpartition(":")[2]
        port = None
        host = f"{host}:{port_text}" if port_text else host
    if port is not None and port != _DEFAULT_PORTS.get(scheme):
        host = f"{host}:{port}"
    return f"{userinfo}@{host}" if userinfo else host


def _query(query: str) -> str:
    # Work on the raw "k=v" pieces so values keep their original percent-encoding.
    kept = [p for p in query.split("&") if p and not is_tracking_param(unquote_plus(p.partition("=")[0]))]
    kept.sort(key=lambda p: (unquote_plus(p.partition("=")[0]), p))
    return "&".join(kept)


def normalize_url(url: str) -> str:
    """Canonical form of ``url`` for deduplication and citation.

    Lowercases scheme and host, IDNA-encodes non-ASCII hosts, drops default ports, the fragment and
    tracking parameters (``utm_*``, ``gclid``, ...), sorts the remaining query parameters and turns an
    empty path into ``/``. The path itself is kept as is.
    """
    url = url.strip()
    try:
        parts = urlsplit(url)
    except ValueError:  # e.g. an unbalanced IPv6 bracket; nothing sensible to normalize
        return url
    scheme = parts.scheme.lower()
    netloc = _netloc(parts, scheme) if parts.netloc else ""
    path = parts.path or ("/" if netloc else "")
    return urlunsplit((scheme, netloc, path, _query(parts.query), ""))


def dedupe_by_url(items: Iterable[T], key: Callable[[T], str] = lambda r: r.url) -> list[T]:  # type: ignore[attr-defined]
    """The items in order, keeping only the first one per normalized URL."""
    seen: set[str] = set()
    unique: list[T] = []
    for item in items:
        normalized = normalize_url(key(item))
        if normalized not in seen:
            seen.add(normalized)
            unique.append(item)
    return unique
