"""Storage failures (full disk, corrupt database) become one actionable line, never a retry."""

from __future__ import annotations

import os
from pathlib import Path

import duckdb
import pytest

from deepresearch_dagster.core.errors import StorageError, storage_failure


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs Linux /dev/full")
def test_a_full_disk_is_named_and_not_retryable():
    with pytest.raises(OSError) as info, open("/dev/full", "wb") as f:
        f.write(b"x" * 10_000)
        f.flush()
    failure = storage_failure(info.value)
    assert isinstance(failure, StorageError) and not failure.retryable
    assert str(failure).startswith("disk full") and "run the same command again" in str(failure)
    assert "\n" not in str(failure)


def test_the_cause_chain_is_searched():
    try:
        try:
            raise OSError(28, "No space left on device", "/data/x.json")
        except OSError as inner:
            raise RuntimeError("wrapped") from inner
    except RuntimeError as outer:
        failure = storage_failure(outer)
    assert failure is not None and "/data/x.json" in str(failure)
    assert storage_failure(ValueError("something else")) is None


@pytest.mark.parametrize("content", [b"", b"DUCK", os.urandom(4096)], ids=["empty", "four-bytes", "random"])
def test_a_corrupt_database_file_is_named(tmp_path: Path, content: bytes):
    path = tmp_path / "lineage.duckdb"
    path.write_bytes(content)
    with pytest.raises(duckdb.Error) as info:
        duckdb.connect(str(path))
    failure = storage_failure(info.value)
    assert failure is not None and str(path) in str(failure) and "move it aside" in str(failure)


def test_a_missing_file_is_not_a_storage_failure(tmp_path: Path):
    with pytest.raises(OSError) as info:
        (tmp_path / "missing" / "x.txt").read_bytes()
    assert storage_failure(info.value) is None


def test_a_write_ahead_log_duckdb_cannot_replay_is_one_line_saying_what_to_do(tmp_path):
    """DuckDB 1.5 (the team extra's pin) fails to replay a log a full disk cut short."""
    from deepresearch_dagster.core.errors import storage_failure

    wal = tmp_path / "lineage.duckdb.wal"
    exc = type("InternalException", (Exception,), {"__module__": "_duckdb"})(
        f'INTERNAL Error: Failure while replaying WAL file "{wal}": Calling DatabaseManager::GetDefaultDatabase'
    )
    found = storage_failure(exc)
    assert found is not None and "\n" not in str(found)
    # Space is free here: the log itself is the problem, named with what to do.
    assert str(found).startswith(f"the lineage database's write-ahead log {wal} cannot be replayed")
    assert "move it aside" in str(found)
