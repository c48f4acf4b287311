"""The shared artifact root of a team deployment: an S3-API object store (AWS S3, MinIO, R2) under
``s3://bucket/prefix``, holding the same deterministic layout as the local artifact folder
(``<partition>/<plan_folder>/<raw file>``, ``<partition>/report.md``, ...).

Why obstore (Rust's ``object_store``): create-only puts (``mode="create"``: S3's
``If-None-Match: *``), so a second writer of a raw output is refused by the server instead of
silently replacing it, and it was 2-3x faster than s3fs on many small objects. Every S3 PUT is
atomic: a reader sees a whole object or none, never a partial one.
"""

from __future__ import annotations

import functools
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import ArtifactIntegrityError, ConfigError, redact
from .artifacts import CORPUS_CACHE, ArtifactStore

if TYPE_CHECKING:
    from ..config import ResearchSettings


class ObjectRoot:
    """Keys are artifact-root-relative POSIX paths (``ArtifactStore``'s ``relpath``)."""

    def __init__(self, url: str, store: Any) -> None:
        self.url = url.rstrip("/")
        self._store = store

    @classmethod
    def from_settings(cls, settings: ResearchSettings) -> ObjectRoot:
        from obstore.store import S3Store

        bucket, _, prefix = settings.artifacts_url.removeprefix("s3://").partition("/")
        options: dict[str, Any] = {"region": settings.s3_region}
        if settings.s3_endpoint:
            options["endpoint"] = settings.s3_endpoint
        for name in ("s3_access_key_id", "s3_secret_access_key"):
            secret = getattr(settings, name)
            if secret is not None:
                options[name.removeprefix("s3_")] = secret.get_secret_value()
        allow_http = bool(settings.s3_endpoint and settings.s3_endpoint.startswith("http://"))
        store = S3Store(
            bucket,
            prefix=prefix.strip("/") or None,
            client_options={"allow_http": allow_http, "timeout": "30s", "connect_timeout": "5s"},
            retry_config={"max_retries": 3, "retry_timeout": timedelta(seconds=20)},
            **options,
        )
        return cls(settings.artifacts_url, store)

    def check(self) -> None:
        """One listing call: an unreachable server, a missing bucket or refused credentials is one
        :class:`ConfigError` line naming the store, before anything is written."""
        import obstore

        try:
            next(iter(obstore.list(self._store, "", chunk_size=1)), None)
        except Exception as exc:
            detail = redact(" ".join(str(exc).split()))[:240]
            raise ConfigError(
                f"the artifact store {self.url} cannot be used ({type(exc).__name__}: {detail}): start it, or fix "
                "DEEPRESEARCH_ARTIFACTS_URL, AWS_ENDPOINT_URL and the AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY pair"
            ) from None

    def put_new(self, key: str, data: bytes) -> None:
        """Create-only: a key that exists already is left alone. The same bytes again (a resumed
        run rewriting what it wrote) is fine; other bytes are refused, never overwritten."""
        import obstore
        from obstore.exceptions import AlreadyExistsError, PreconditionError

        try:
            obstore.put(self._store, key, data, mode="create")
        except (AlreadyExistsError, PreconditionError):
            if self.get(key) != data:
                raise ArtifactIntegrityError(
                    f"refusing to overwrite {key} in {self.url}: another writer stored different bytes under "
                    "this name"
                ) from None

    def put(self, key: str, data: bytes) -> None:
        import obstore

        obstore.put(self._store, key, data)

    def get(self, key: str) -> bytes | None:
        import obstore
        from obstore.exceptions import NotFoundError

        try:
            return bytes(obstore.get(self._store, key).bytes())
        except (NotFoundError, FileNotFoundError):
            return None

    def keys(self, prefix: str) -> list[str]:
        """The keys under ``prefix/`` (one level and below), sorted."""
        import obstore

        found = []
        for batch in obstore.list(self._store, prefix.rstrip("/") + "/"):
            found.extend(str(item["path"]) for item in batch)
        return sorted(found)


@functools.lru_cache(maxsize=8)
def _root(url: str, endpoint: str | None, region: str, key_id: str, secret: str) -> ObjectRoot:
    from ..config import ResearchSettings

    settings = ResearchSettings(
        artifacts_url=url,
        s3_endpoint=endpoint,
        s3_region=region,
        s3_access_key_id=key_id or None,
        s3_secret_access_key=secret or None,
    )
    root = ObjectRoot.from_settings(settings)
    root.check()
    return root


def object_root(settings: ResearchSettings) -> ObjectRoot | None:
    """The configured shared root (checked once per process), or None: artifacts stay local."""
    if not settings.artifacts_url:
        return None

    def plain(secret: Any) -> str:
        return secret.get_secret_value() if secret is not None else ""

    return _root(
        settings.artifacts_url,
        settings.s3_endpoint,
        settings.s3_region,
        plain(settings.s3_access_key_id),
        plain(settings.s3_secret_access_key),
    )


def artifact_store(settings: ResearchSettings, partition_key: str) -> ArtifactStore:
    """The store of ``settings``: the working copy, and the shared object store when configured."""
    return ArtifactStore(settings.artifacts_path, partition_key, object_root(settings))


# Not research files: the lineage database (its own store) and the corpus cache (each host's).
NOT_PUSHED = ("lineage.duckdb", CORPUS_CACHE)


def push_folder(shared: ObjectRoot, folder: Path) -> tuple[int, int]:
    """Upload a local artifact folder written before the object store was configured (the
    upgrade from one machine, docs/deployment.md): every research file under the same name,
    create-only. Returns (uploaded, already there with the same bytes)."""
    uploaded = same = 0
    for path in sorted(folder.rglob("*")):
        relpath = path.relative_to(folder).as_posix()
        if not path.is_file() or path.is_symlink() or relpath.startswith(NOT_PUSHED):
            continue
        if any(part.startswith(".") for part in relpath.split("/")):
            continue  # locks, temp files
        data = path.read_bytes()
        existing = shared.get(relpath)
        if existing is None:
            shared.put_new(relpath, data)
            uploaded += 1
        elif existing == data:
            same += 1
        else:
            raise ArtifactIntegrityError(f"{relpath} differs from the object in {shared.url}; left as it is")
    return uploaded, same


def main(argv: list[str] | None = None) -> int:
    """``python -m deepresearch_dagster.core.store.object_store push``: the configured artifact
    folder into the configured object store."""
    import sys

    from ..config import load_settings
    from ..errors import ResearchError

    args = sys.argv[1:] if argv is None else argv
    if args != ["push"]:
        print("usage: python -m deepresearch_dagster.core.store.object_store push", file=sys.stderr)
        return 2
    try:
        settings = load_settings()
        shared = object_root(settings)
        if shared is None:
            raise ConfigError("DEEPRESEARCH_ARTIFACTS_URL is not set: nothing to push to")
        uploaded, same = push_folder(shared, settings.artifacts_path)
    except ResearchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"{uploaded} files uploaded to {shared.url}, {same} already there")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
