"""Lineage shared by every host of a team deployment: the lineage tables in a Postgres database,
read and written through DuckDB's ``postgres`` extension (``ATTACH … (TYPE postgres)``), so the
store's queries, the views and ``audit``/``metrics`` stay DuckDB SQL on both backends.

Why the postgres extension (not DuckLake): the team runs Postgres already (Dagster's instance),
the rows commit in Postgres at the research's pauses as they do in a file (a tool call's row
survives a kill of the writer), and Postgres serialises concurrent writers itself; DuckLake has no primary keys nor
``INSERT OR REPLACE``, which the schema relies on.

The extension is loaded from the ``duckdb-extension-postgres-scanner`` package (the ``team``
extra, built for the DuckDB version pinned beside it), never downloaded: automatic installing and
loading of extensions are off on these connections.

Each process holds one DuckDB connection per lineage URL (the temporary views and macro that
:mod:`.schema` creates belong to a connection), shared by its threads under a lock. Inside a
lineage session the rows are grouped as for a DuckDB file (``lineage._PostgresLease``): queued,
written by the session's thread and committed together at the research's pauses (a tool call's
row is committed while its compression waits for the model); outside one every statement commits.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import ClassVar
from urllib.parse import urlsplit

import duckdb

from ..errors import ConfigError, redact, redact_exception_chain
from .schema import ALIAS, PG_MIGRATION_LOCK, SCHEMA, migrate, migrate_postgres, postgres_execute

FIX = "start it, or fix DEEPRESEARCH_LINEAGE_URL (or lineage_url in the config file)"


def is_postgres_url(target: str | Path) -> bool:
    return isinstance(target, str) and target.startswith(("postgresql://", "postgres://"))


def label(url: str) -> str:
    """``host:port/database``: where the lineage is, without the credentials."""
    parts = urlsplit(url)
    return f"{parts.hostname}:{parts.port or 5432}{parts.path}"


def extension_path() -> Path:
    """The extension binary shipped by ``duckdb-extension-postgres-scanner`` for this DuckDB."""
    try:
        import duckdb_extension_postgres_scanner as package
    except ImportError:
        raise ConfigError(
            "lineage on Postgres needs DuckDB's postgres extension: pip install -e '.[team]' "
            "(duckdb-extension-postgres-scanner, for the DuckDB version pinned there)"
        ) from None
    folder = Path(package.__file__).parent / "extensions"
    wanted = folder / f"v{duckdb.__version__}" / "postgres_scanner.duckdb_extension"
    if not wanted.is_file():
        found = sorted(p.parent.name for p in folder.glob("v*/*.duckdb_extension"))
        raise ConfigError(
            f"DuckDB's postgres extension installed is built for DuckDB {', '.join(found) or 'no version'}, not "
            f"v{duckdb.__version__}: pip install -e '.[team]' installs the pair that loads together"
        )
    return wanted


def open_connection(url: str) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB with the Postgres database attached as ``lineage`` and its lineage
    schema in use; :class:`ConfigError` (one line, no password) when it cannot be reached."""
    conn = duckdb.connect(
        ":memory:", config={"autoinstall_known_extensions": False, "autoload_known_extensions": False}
    )
    try:
        conn.execute(f"LOAD '{extension_path()}'")
        # ATTACH takes no parameters: the URL is a literal here, in this process only.
        quoted = url.replace("'", "''")
        conn.execute(f"ATTACH '{quoted}' AS {ALIAS} (TYPE postgres)")
        # Under the migration lock: two hosts creating the schema at once would otherwise collide
        # (CREATE SCHEMA IF NOT EXISTS is not atomic in Postgres: a unique violation on pg_namespace).
        postgres_execute(
            conn,
            f"SELECT pg_advisory_xact_lock({PG_MIGRATION_LOCK}); CREATE SCHEMA IF NOT EXISTS {SCHEMA}",
            in_schema=False,
        )
        conn.execute("CALL pg_clear_cache()")
        conn.execute(f"USE {ALIAS}.{SCHEMA}")
    except duckdb.Error as exc:
        conn.close()
        detail = redact(" ".join(str(exc).replace(url, "<url>").split()))[:240]
        raise ConfigError(
            f"the lineage database at {label(url)} cannot be used ({type(exc).__name__}: {detail}): {FIX}"
        ) from None
    except BaseException:
        conn.close()
        raise
    return conn


class PostgresLineage:
    """This process's connection to one lineage URL, shared by its threads (see the module docstring)."""

    _all: ClassVar[dict[tuple[int, str], PostgresLineage]] = {}
    _all_lock: ClassVar[threading.Lock] = threading.Lock()
    shared = True  # LineageStore: nothing to hold between statements

    def __init__(self, url: str) -> None:
        self.url = url
        self.lock = threading.RLock()
        self.conn: duckdb.DuckDBPyConnection | None = None

    @classmethod
    def get(cls, url: str) -> PostgresLineage:
        key = (os.getpid(), url)  # a forked child opens its own
        with cls._all_lock:
            found = cls._all.get(key)
            if found is None:
                found = cls._all[key] = cls(url)
            return found

    @contextmanager
    def __call__(self) -> Iterator[duckdb.DuckDBPyConnection]:
        with self.lock:
            try:
                yield self.connection()
            except duckdb.Error as exc:
                # The extension's "Unable to connect to Postgres at <url>" quotes the password.
                redact_exception_chain(exc)
                if isinstance(exc, duckdb.ConnectionException):
                    self.close()  # a restarted server: the next statement connects again
                raise

    def connection(self) -> duckdb.DuckDBPyConnection:
        """The open connection (opened and migrated on first use); the caller holds ``lock``."""
        with self.lock:
            if self.conn is None:
                conn = open_connection(self.url)
                try:
                    migrate_postgres(conn)  # the tables, then this connection's views
                except BaseException:
                    conn.close()
                    raise
                self.conn = conn
            return self.conn

    def close(self) -> None:
        with self.lock:
            if self.conn is not None:
                conn, self.conn = self.conn, None
                conn.close()


# Tables of one research each (copied per research) and the tables shared by researches.
_SHARED_TABLES = ("compressions", "tool_cache")
_NOT_COPIED = ("schema_version", "model_prices", "audit_cache")  # each database's own


def copy_file(conn: duckdb.DuckDBPyConnection, path: Path) -> tuple[int, int]:
    """Copy the researches of a lineage DuckDB file (the upgrade from one machine) into the
    attached Postgres lineage, in one transaction: a research already there is left alone (run
    it again: nothing is copied twice); the shared caches are merged. Returns (copied, there)."""
    conn.execute(f"ATTACH '{str(path).replace(chr(39), chr(39) * 2)}' AS old (READ_ONLY)")
    try:
        old_keys = {k for (k,) in conn.execute("SELECT partition_key FROM old.main.research_requests").fetchall()}
        there = {k for (k,) in conn.execute("SELECT partition_key FROM research_requests").fetchall()}
        new = sorted(old_keys - there)
        columns: dict[str, list[tuple[str, str]]] = {}
        for table, column, kind in conn.execute(
            "SELECT table_name, column_name, data_type FROM duckdb_columns() WHERE database_name = 'old' "
            "ORDER BY table_name, column_index"
        ).fetchall():
            columns.setdefault(table, []).append((column, kind))
        mine = {
            (t, c)
            for t, c in conn.execute(
                f"SELECT table_name, column_name FROM duckdb_columns() WHERE database_name = '{ALIAS}' "
                f"AND schema_name = '{SCHEMA}'"
            ).fetchall()
        }
        conn.execute("BEGIN TRANSACTION")
        for table, cols in sorted(columns.items()):
            # llm_calls.id: Postgres numbers the copied calls itself.
            cols = [(c, k) for c, k in cols if (table, c) in mine and not (table == "llm_calls" and c == "id")]
            if table in _NOT_COPIED or not cols:
                continue
            names = ", ".join(f'"{c}"' for c, _ in cols)
            values = ", ".join(f'"{c}"::VARCHAR' if k == "JSON" else f'"{c}"' for c, k in cols)
            if table in _SHARED_TABLES:
                conn.execute(f"INSERT OR IGNORE INTO {table} ({names}) SELECT {values} FROM old.main.{table}")
            elif any(c == "partition_key" for c, _ in cols) and new:
                conn.execute(
                    f"INSERT INTO {table} ({names}) SELECT {values} FROM old.main.{table} "
                    f"WHERE partition_key IN ({', '.join('?' * len(new))})",
                    new,
                )
        conn.execute("COMMIT")
    except BaseException:
        with contextlib.suppress(duckdb.Error):
            conn.execute("ROLLBACK")
        raise
    finally:
        conn.execute("DETACH old")
    return len(new), len(old_keys) - len(new)


def main(argv: list[str] | None = None) -> int:
    """``python -m deepresearch_dagster.core.store.lineage_postgres push``: the configured lineage
    DuckDB file (``DEEPRESEARCH_DUCKDB``, default ``<artifacts>/lineage.duckdb``) into the
    configured Postgres lineage (``DEEPRESEARCH_LINEAGE_URL``)."""
    import sys

    from ..config import load_settings
    from ..errors import ResearchError

    args = sys.argv[1:] if argv is None else argv
    if args != ["push"]:
        print("usage: python -m deepresearch_dagster.core.store.lineage_postgres push", file=sys.stderr)
        return 2
    try:
        settings = load_settings()
        if not settings.lineage_postgres:
            raise ConfigError("DEEPRESEARCH_LINEAGE_URL is not set: nothing to push to")
        if not settings.duckdb_file.is_file():
            raise ConfigError(f"no lineage file at {settings.duckdb_file} (DEEPRESEARCH_DUCKDB)")
        with duckdb.connect(str(settings.duckdb_file)) as old:
            migrate(old)  # brought up to the latest schema first
        with PostgresLineage.get(settings.lineage_postgres)() as conn:
            copied, there = copy_file(conn, settings.duckdb_file)
    except ResearchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"{copied} researches copied to {label(settings.lineage_postgres)}, {there} already there")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
