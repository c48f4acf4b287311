"""What every ``deepresearch`` command shares: exit codes, settings from flags, progress output.

Exit codes: 0 success, 1 failed research/run (with where to look), 2 bad usage or bad input, 3 the
research finished but an ERROR-severity check failed (core/checks.py), 130 interrupted.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any

from ..core.errors import StorageError, UsageError

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as shells report it
# The research finished, but a check that means it is broken failed (core/checks.py: ERROR).
EXIT_CHECK_FAILED = 3
ENGINE_HELP = "offline (no network) or openai (OPENAI_API_KEY / OPENAI_BASE_URL); default: auto"
# The formats core.documents.ingest.EXTRACTORS reads, named here so that --help does not import the
# document parsers (test_cli checks that the two lists agree).
CORPUS_FORMATS = ".md .markdown .txt .html .htm .pdf .docx .pptx .xlsx .xlsm .csv"

__all__ = [
    "CORPUS_FORMATS",
    "EXIT_CHECK_FAILED",
    "EXIT_FAILED",
    "EXIT_OK",
    "EXIT_USAGE",
    "UsageError",
    "add_page_options",
    "figure",
    "live_progress",
    "open_lineage",
    "page_note",
    "progress_to_stderr",
    "say",
    "settings_from_args",
]


class _Waiting:
    """The spinner's text: the latest progress line and the seconds since the command started
    (computed at each refresh, so the clock moves during long model and tool waits)."""

    def __init__(self, text: str) -> None:
        self.started = time.monotonic()
        self.text = text

    def __rich__(self) -> Any:
        from rich.text import Text

        elapsed = int(time.monotonic() - self.started)
        clock = f"{elapsed // 60}:{elapsed % 60:02d}"
        return Text.assemble((self.text, "dim"), (f"  {clock}", "bold"), no_wrap=True, overflow="ellipsis")


class _ProgressHandler(logging.Handler):
    """Progress lines on stderr: one terminal line each (cut, never wrapped) above the spinner;
    plain lines when stderr is not a terminal."""

    def __init__(self, waiting: _Waiting | None) -> None:
        super().__init__()
        self.waiting = waiting

    def emit(self, record: logging.LogRecord) -> None:
        line = "  " + record.getMessage()
        console = _stderr_console()
        if console.is_terminal:
            from rich.text import Text

            console.print(Text(line), no_wrap=True, overflow="ellipsis", crop=True)
        else:
            print(line, file=sys.stderr, flush=True)
        if self.waiting is not None and record.levelno >= logging.INFO:
            self.waiting.text = record.getMessage().strip()


_CONSOLE: Any = None


def _stderr_console() -> Any:
    global _CONSOLE
    if _CONSOLE is None:
        from rich.console import Console

        # Whether stderr is a terminal is decided once, here, before any run: while a Dagster step
        # runs, its compute-log capture points fd 2 at a pipe (a tee to the terminal), and a console
        # that asked then would print progress lines as plain text after the spinner's line
        # instead of clearing it first (the spinner, the clock and the line on one garbled row).
        tty = sys.stderr.isatty() or None
        _CONSOLE = Console(stderr=True, highlight=False, force_terminal=tty, force_interactive=tty)
    return _CONSOLE


def progress_to_stderr(quiet: bool, verbose: bool = False, waiting: _Waiting | None = None) -> None:
    """Route the engine's progress lines (logger ``deepresearch``) to stderr; ``verbose`` adds
    the debug lines (full artifact names)."""
    log = logging.getLogger("deepresearch")
    log.setLevel(logging.DEBUG if verbose else logging.INFO)
    log.propagate = False
    for old in [h for h in log.handlers if isinstance(h, _ProgressHandler)]:
        log.removeHandler(old)
    if not quiet:
        log.addHandler(_ProgressHandler(waiting))


@contextmanager
def live_progress(quiet: bool, verbose: bool, text: str) -> Iterator[None]:
    """Progress lines plus, on a terminal, a spinner with the elapsed time until the block ends."""
    console = _stderr_console()
    if quiet or not console.is_terminal:
        progress_to_stderr(quiet, verbose)
        yield
        return
    from rich.live import Live
    from rich.spinner import Spinner

    waiting = _Waiting(text)
    progress_to_stderr(quiet, verbose, waiting)
    with Live(Spinner("dots", text=waiting), console=console, refresh_per_second=8, transient=True):
        yield


def say(message: str) -> None:
    """One status line on stderr, at once (before any slow import)."""
    print(message, file=sys.stderr, flush=True)


def figure(value: float | int | None, unit: str = "", digits: int = 0) -> str:
    """``63,190 tokens``, ``$0.0123``, ``12.5 s``: thousands separators and a unit, never 6.3e+04."""
    if value is None:
        return "—"
    if unit == "$":
        return f"${value:,.4f}"
    text = f"{value:,.{digits}f}"
    return f"{text} {unit}".strip()


def settings_from_args(args: argparse.Namespace, researches: bool = False) -> Any:
    """Configuration with the command's flags on top (flag > environment > config file > default).
    ``researches``: the command researches with the configured corpus, which must exist then."""
    from ..core.config import load_settings

    corpus = getattr(args, "corpus", None)
    if corpus and not Path(corpus).is_dir():
        raise UsageError(f"corpus folder not found: {corpus}")
    settings = load_settings(
        {"engine": getattr(args, "engine", None), "corpus_dir": str(Path(corpus).resolve()) if corpus else None}
    )
    # A command that researches refuses a configured corpus folder that does not exist at once, as
    # it refuses the flag, instead of failing after planning.
    if researches and not corpus and settings.corpus_dir and not settings.corpus_path.is_dir():
        from ..core.config import ENV_VARS, config_file_path, environment

        variable = ENV_VARS["corpus_dir"]
        where = variable if environment().get(variable) else f"corpus_dir in {config_file_path()}"
        raise UsageError(f"corpus folder not found: {settings.corpus_dir} (from {where})")
    return settings


def _non_negative(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, not {value}")
    return value


def add_page_options(parser: argparse.ArgumentParser, what: str, default: int) -> None:
    """``--limit N --offset K``: one page of ``what``, newest first (DuckDB fetches only that page)."""
    parser.add_argument(
        "--limit", type=_non_negative, default=default, help=f"show at most N {what} (default {default}; 0: all)"
    )
    parser.add_argument("--offset", type=_non_negative, default=0, help=f"skip the K newest {what} first")


def page_note(shown: int, offset: int, total: int, what: str) -> str | None:
    """``showing 1–50 of 1,234 researches (newest first); --offset 50 for the next page``."""
    if shown == total and offset == 0:
        return None
    if not shown:
        return f"no {what} at offset {offset:,} (of {total:,})"
    more = f"; --offset {offset + shown} for the next page" if offset + shown < total else ""
    return f"showing {offset + 1:,}–{offset + shown:,} of {total:,} {what} (newest first){more}"


@contextmanager
def open_lineage(settings: Any, must_exist: bool = False) -> Iterator[Any]:
    """The lineage store over ONE connection for the whole command (schema check, price sync
    and every query), instead of a connect per query; ``None`` when ``must_exist`` and the file
    is missing. For read commands only: the file lock is held until the block ends."""
    from ..core.store.lineage import LineageStore, check_database_file, path_connect

    if settings.lineage_postgres:  # one connection per process already
        yield LineageStore.at(settings.lineage_postgres)
        return
    path = settings.duckdb_file
    if must_exist and not path.exists():
        yield None
        return

    if path.is_dir():
        check_database_file(path)  # one line naming the setting (a corrupt file fails the connect below)

    with path_connect(path)() as conn:
        yield LineageStore(lambda: nullcontext(conn), str(path.resolve()))


def resolve_partition(lineage: Any, partition: str) -> str:
    """The full partition key; an unambiguous prefix of a key is accepted (``deepresearch audit
    sodium-ion``). Unknown or ambiguous: a usage error (exit code 2)."""
    if lineage is not None and lineage.get_request(partition) is not None:
        return partition
    matches = lineage.partitions_with_prefix(partition) if lineage is not None and partition else []
    if len(matches) == 1:
        return matches[0]
    if matches:
        shown = ", ".join(matches[:5]) + (", …" if len(matches) > 5 else "")
        raise UsageError(f"research partition prefix {partition!r} is ambiguous: {shown}")
    raise UsageError(f"unknown research partition {partition!r} (see `deepresearch ls`)")


def known_research(settings: Any, partition: str) -> tuple[Any, str]:
    """The lineage store and the full partition key (see :func:`resolve_partition`)."""
    from ..core.store.lineage import LineageStore

    exists = settings.lineage_postgres or settings.duckdb_file.exists()
    lineage = LineageStore.at(settings.lineage_database) if exists else None
    return lineage, resolve_partition(lineage, partition)


class MissingResult(StorageError):
    """A research that succeeded, and a file of its results that cannot be read (one line)."""


def read_result(store: Any, name: str) -> dict[str, Any]:
    """A JSON result of the research through its artifact store: the working copy, refreshed
    from the shared object store when one is configured (the workers wrote there)."""
    import json

    try:
        data = json.loads(store.read_text(name))
    except (OSError, ValueError) as exc:
        shared = f" nor in {store.shared.url}" if store.shared is not None else ""
        raise MissingResult(
            f"research {store.partition_key} finished, but its {name} is not readable in this host's working "
            f"copy {store.partition_dir}{shared} ({type(exc).__name__})"
        ) from None
    if not isinstance(data, dict):
        raise MissingResult(f"research {store.partition_key} finished, but its {name} is not a JSON object")
    return data


def report_checks(partition_dir: Path) -> int:
    """One stderr line per failed check of the research (``warning:`` for WARN, ``error:`` for
    ERROR, as the Dagster UI shows them); EXIT_CHECK_FAILED when an ERROR check failed."""
    from ..core.checks import ERROR, WARN, failed_checks, read_checks

    checks = read_checks(partition_dir)
    for name, summary in failed_checks(checks, WARN):
        print(f"warning: check {name}: {summary}", file=sys.stderr)
    errors = failed_checks(checks, ERROR)
    for name, summary in errors:
        print(
            f"error: the research finished, but check {name} failed: {summary} (files under {partition_dir})",
            file=sys.stderr,
        )
    return EXIT_CHECK_FAILED if errors else EXIT_OK


def report_failure(what: str, outcome: Any, partition_dir: Path) -> int:
    from ..core.errors import ResearchInterrupted, redact

    if ResearchInterrupted.MESSAGE in outcome.message:
        print(f"{what} {ResearchInterrupted.MESSAGE}", file=sys.stderr)
        print(f"  run {outcome.run_id}; files under {partition_dir}", file=sys.stderr)
        return EXIT_INTERRUPTED
    print(f"error: {what} failed: {redact(outcome.message)}", file=sys.stderr)
    if not outcome.storage_failure:  # a full or read-only disk: the line above says what to do
        print(f"  run {outcome.run_id} in the Dagster UI (make dev); files under {partition_dir}", file=sys.stderr)
    return EXIT_FAILED
