"""Only regular files of a document folder are read: a named pipe would block its reader until a
writer comes (forever), a socket or a device cannot be read as a document. They are skipped with
a reason, unopened, on the first index and when the folder's snapshot is loaded again."""

from __future__ import annotations

import os
import socket
import threading
import time

from deepresearch_dagster.core.tools.local_search import LocalCorpus


def _open_within(seconds: float, *args, **kwargs) -> LocalCorpus:
    result: list[LocalCorpus] = []
    worker = threading.Thread(target=lambda: result.append(LocalCorpus(*args, **kwargs)), daemon=True)
    worker.start()
    worker.join(seconds)
    assert result, f"indexing did not finish within {seconds} s (a special file was opened?)"
    return result[0]


def test_fifo_and_socket_are_skipped_unopened_in_under_5_s(tmp_path):
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "report.md").write_text("# Board minutes\n\nThe board approved the Leeds office in March.\n")
    os.mkfifo(folder / "pipe.txt")
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(folder / "socket.md"))
    try:
        started = time.monotonic()
        corpus = _open_within(5.0, folder, cache_dir=tmp_path / "cache")
        assert time.monotonic() - started < 5.0
        assert corpus.skipped == [
            ("pipe.txt", "not a regular file (named pipe)"),
            ("socket.md", "not a regular file (socket)"),
        ]
        assert [d.path for d in corpus.documents] == ["report.md"]
        # The unchanged folder loads its snapshot: the same skipped files, still unopened.
        again = _open_within(5.0, folder, cache_dir=tmp_path / "cache")
        assert [tuple(s) for s in again.skipped] == corpus.skipped
    finally:
        server.close()
