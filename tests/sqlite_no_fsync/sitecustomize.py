"""Test processes only (tests/conftest.py puts this folder first on PYTHONPATH, so every Python
process a test starts imports it, and loads it into the test process itself): every SQLite
connection gets ``PRAGMA synchronous=OFF``.

Dagster's SQLite instance storage opens a connection per statement and commits each event: about
a thousand fsyncs per research, which made waiting for the disk the largest part of the suite's
time on a shared machine. Without them SQLite is exactly as safe against a killed process (the
written pages are in the operating system's cache); only a power cut could lose them. The
project's own fsyncs (raw artifacts, DuckDB) are untouched.
"""

import contextlib
import sqlite3

if not getattr(sqlite3.connect, "without_fsync", False):
    _connect = sqlite3.connect

    def _connect_without_fsync(*args, **kwargs):
        connection = _connect(*args, **kwargs)
        with contextlib.suppress(sqlite3.Error):  # a full disk: the connection fails later, as without this
            connection.execute("PRAGMA synchronous=OFF")
        return connection

    _connect_without_fsync.without_fsync = True
    sqlite3.connect = sqlite3.dbapi2.connect = _connect_without_fsync
