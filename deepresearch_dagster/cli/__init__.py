"""``deepresearch``: run researches, list them, audit and replay them, debug compression.

Exit codes: 0 success; 1 failed research (with where to look), a storage failure (full disk,
read-only or corrupt database or instance storage) or a research of the same question already
running; 2 bad usage, bad input or bad configuration (flags, environment, config file,
``dagster.yaml``, a missing corpus folder); 3 the research finished but a check that means it
is broken failed (an ERROR-severity asset check; WARN ones print a ``warning:`` line and exit 0);
130 interrupted. Each failure is one ``error:`` line on stderr.
"""

from __future__ import annotations

import argparse
import gc
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, NoReturn

from ..core.errors import ResearchError, StorageError, storage_failure
from .common import CORPUS_FORMATS, ENGINE_HELP, EXIT_FAILED, EXIT_INTERRUPTED, EXIT_USAGE, UsageError, add_page_options
from .evaluate import add_eval_command
from .operations import add_operation_commands
from .research import cmd_compress, cmd_extract, cmd_ls, cmd_run
from .tools import add_tools_command

__all__ = ["build_parser", "main"]

# Start-up cost: the command modules import only the standard library and core.errors at module
# level; pydantic, DuckDB, rich, httpx and Dagster are imported inside the command that needs
# them, so `--help`, `ls`, `audit` and `metrics` never load Dagster or the web stack
# (tests/test_cli_startup.py checks it).


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (argparse prints the whole usage block first)."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"error: {self.prog}: {message} (see {self.prog} --help)\n")


def build_parser(knobs: bool = True) -> argparse.ArgumentParser:
    """The whole parser; ``knobs=False`` leaves out the research-size flags of ``run`` and
    ``eval`` (built from ``RequestOptions``, i.e. pydantic), which only those two parse."""
    parser = _Parser(prog="deepresearch", description=__doc__.splitlines()[0].replace("``", ""))
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="research a question end to end as a Dagster partition")
    run.add_argument("question", help="the question, as you would ask it (quote it in the shell)")
    run.add_argument("--corpus", help=f"folder of documents ({CORPUS_FORMATS}; default: bundled sample corpus)")
    run.add_argument("--engine", choices=["auto", "offline", "openai"], help=ENGINE_HELP)
    run.add_argument("--json", action="store_true", help="print one JSON object with the figures")
    run.add_argument("--show-report", action="store_true", help="print the report before the figures")
    run.add_argument("--quiet", action="store_true", help="no progress lines")
    run.add_argument("--verbose", action="store_true", help="progress lines with full artifact paths")
    run.add_argument(
        "--wait",
        action="store_true",
        help="if the same question is being researched already, wait for that run to finish and then resume "
        "from it (default: refuse at once, exit code 1)",
    )
    if knobs:
        from ..core.config import RequestOptions

        group = run.add_argument_group("research size and budget (defaults: docs/reference/configuration.md)")
        for option, (flag, kind, text) in RequestOptions.knobs().items():
            group.add_argument(flag, dest=option, type=kind, help=text)
    run.set_defaults(func=cmd_run)

    ls = sub.add_parser("ls", help="list researches with status and figures, newest first")
    ls.add_argument("--json", action="store_true")
    add_page_options(ls, "researches", 50)
    ls.set_defaults(func=cmd_ls)

    comp = sub.add_parser("compress", help="run the compressor on one file and print its JSON")
    comp.add_argument("file")
    comp.add_argument("--plan-title", required=True)
    comp.add_argument("--step-title", required=True)
    comp.add_argument("--step-description", required=True)
    comp.add_argument("--tool-name", required=True)
    comp.add_argument("--engine", choices=["auto", "offline", "openai"], help=ENGINE_HELP)
    comp.set_defaults(func=cmd_compress)
    ext = sub.add_parser("extract", help="main-text extraction of local HTML files or URLs (debugging aid)")
    ext.add_argument("inputs", nargs="+", metavar="PATH_OR_URL")
    ext.add_argument("--json", action="store_true", help="one JSON line per input: source, title, text")
    ext.set_defaults(func=cmd_extract)

    add_operation_commands(sub)
    add_eval_command(sub, knobs)
    add_tools_command(sub)
    return parser


class _StderrFilter:
    """``sys.stderr`` without the lines Dagster writes to it directly when its event log cannot be
    written ("Exception while writing logger call to event log: <SQLAlchemy error>"): the failure
    itself still reaches the command, which prints it as one line."""

    NOISE = ("Exception while writing logger call to event log",)

    def __init__(self, stream: Any) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        if text.startswith(self.NOISE):
            return len(text)
        return self._stream.write(text)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


@contextmanager
def _without_dagster_noise() -> Iterator[None]:
    stream = sys.stderr
    sys.stderr = _StderrFilter(stream)
    try:
        yield
    finally:
        sys.stderr = stream


def _command(argv: list[str]) -> str | None:
    """The subcommand named in ``argv`` (the top-level parser has no options but ``-h``)."""
    return next((a for a in argv if not a.startswith("-")), None)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = build_parser(knobs=_command(argv) in ("run", "eval")).parse_args(argv)
    try:
        with _without_dagster_noise():
            return args.func(args)
    except StorageError as exc:
        # Raised as such by the checks made before a run (lineage file, instance storage).
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_FAILED
    except (UsageError, ResearchError) as exc:
        # Bad input or configuration: one line, no traceback.
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Exception as exc:
        # A full disk or a corrupt lineage database is not a bug: one line, exit 1.
        storage = storage_failure(exc)
        if storage is None:
            raise
        from ..core.config import dagster_home
        from ..core.errors import INSTANCE_STORAGE

        text = str(storage).replace(INSTANCE_STORAGE, f"the Dagster instance storage in {dagster_home()}")
        print(f"error: {text}", file=sys.stderr)
        return EXIT_FAILED
    finally:
        # DuckDB's bindings (nanobind) list every object still alive at interpreter exit on
        # stderr as "leaked" (about 40 lines after some runs); collecting the reference cycles
        # that hold them before exit keeps the terminal to what the command printed.
        gc.collect()
