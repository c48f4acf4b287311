"""``deepresearch``: run researches, list them, debug compression.

Exit codes: 0 success, 1 failed research (with where to look), 2 bad usage or bad input.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from contextlib import nullcontext
from pathlib import Path
from typing import Any

from ..core.roles.coordinator import InvalidQuestion, validate_question

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
PACKAGE_DIR = Path(__file__).resolve().parents[1]


# Request options settable from `deepresearch run` (settings.REQUEST_OPTIONS); None = default.
KNOB_FLAGS: dict[str, tuple[str, type, str]] = {
    "depth": ("--depth", int, "reflection rounds after the first pass (default 1; 0 = none)"),
    "breadth": ("--breadth", int, "query variants searched per step (default 3)"),
    "max_steps": ("--max-steps", int, "plan steps (default 5, at most 7)"),
    "max_sources_per_step": ("--max-sources", int, "top-ranked sources read per step (default 2)"),
    "max_tool_calls_per_step": ("--tool-calls", int, "tool calls per step (default 8)"),
    "budget_tokens": ("--budget-tokens", int, "token cap for the research (default 400000)"),
    "budget_dollars": ("--budget-dollars", float, "dollar cap (default 2.0)"),
    "budget_llm_calls": ("--budget-llm-calls", int, "LLM call cap (default 300)"),
    "budget_tool_calls": ("--budget-tool-calls", int, "tool call cap (default 150)"),
    "budget_wall_s": ("--budget-seconds", float, "wall-time cap in seconds (default 3600)"),
}


class UsageError(Exception):
    """Bad input from the user: one line on stderr, exit code 2."""


def ensure_dagster_home() -> Path:
    """Persistent instance under the working directory unless DAGSTER_HOME says otherwise."""
    home = Path(os.environ.get("DAGSTER_HOME") or Path.cwd() / ".dagster_home").resolve()
    home.mkdir(parents=True, exist_ok=True)
    if not (home / "dagster.yaml").exists():
        from ..core.store.artifacts import atomic_write_bytes

        # Atomic, and the storage is created under a lock: concurrent first runs must not race.
        atomic_write_bytes(home / "dagster.yaml", (PACKAGE_DIR / "dagster_home" / "dagster.yaml").read_bytes())
    os.environ["DAGSTER_HOME"] = str(home)
    from ..launcher import init_instance_storage

    init_instance_storage(home)
    return home


def _progress_to_stderr(quiet: bool) -> None:
    log = logging.getLogger("deepresearch")
    log.setLevel(logging.INFO)
    log.propagate = False
    if not quiet and not log.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("  %(message)s"))
        log.addHandler(handler)


def _settings(args: argparse.Namespace) -> Any:
    from ..core.config import ResearchSettings

    corpus = getattr(args, "corpus", None)
    if corpus and not Path(corpus).is_dir():
        raise UsageError(f"corpus folder not found: {corpus}")
    return ResearchSettings.from_env(
        engine=getattr(args, "engine", None), corpus_dir=str(Path(corpus).resolve()) if corpus else None
    )


def cmd_run(args: argparse.Namespace) -> int:
    try:
        question = validate_question(args.question)
    except InvalidQuestion as exc:
        raise UsageError(str(exc)) from exc
    settings = _settings(args)
    ensure_dagster_home()
    _progress_to_stderr(args.quiet)

    from dagster import DagsterInstance

    from ..core.pipeline import register
    from ..core.store.lineage import LineageStore
    from ..definitions import build_definitions
    from ..defs.partitions import RESEARCH_PARTITIONS_NAME

    lineage = LineageStore.at(settings.duckdb_file)
    options = {"engine": args.engine, "corpus_dir": settings.corpus_dir or None}
    options.update({key: getattr(args, key) for key in KNOB_FLAGS})
    key = register(lineage, question, {k: v for k, v in options.items() if v is not None})
    instance = DagsterInstance.get()
    if not instance.has_dynamic_partition(RESEARCH_PARTITIONS_NAME, key):
        instance.add_dynamic_partitions(RESEARCH_PARTITIONS_NAME, [key])
    print(f"research {key} (engine: {settings.with_options(options).resolved_engine()})", file=sys.stderr)

    result = (
        build_definitions()
        .resolve_job_def("research_job")
        .execute_in_process(
            partition_key=key,
            instance=instance,
            raise_on_error=False,
            run_config={"loggers": {"console": {"config": {"log_level": "ERROR"}}}},
            tags={"deepresearch/source": "cli"},
        )
    )
    partition_dir = settings.artifacts_path / key
    if not result.success:
        reasons = failure_reasons(result.all_events)
        print(f"error: research failed: {reasons[-1] if reasons else 'unknown error'}", file=sys.stderr)
        print(f"  run {result.run_id} in the Dagster UI (make dev); files under {partition_dir}", file=sys.stderr)
        return EXIT_FAILED

    summary = _summary(lineage, key, settings, partition_dir)
    if args.json:
        print(json.dumps(summary, indent=2))
        return EXIT_OK
    if args.show_report:
        print((partition_dir / "report.md").read_text("utf-8"))
    _print_figures(summary)
    return EXIT_OK


def failure_reasons(events: list[Any]) -> list[str]:
    """The user-facing description of each failed step (a Failure's text, else the error)."""
    reasons = []
    for event in events:
        if not event.is_step_failure:
            continue
        data = event.step_failure_data
        if data.user_failure_data and data.user_failure_data.description:
            reasons.append(data.user_failure_data.description)
        elif data.error:
            reasons.append(data.error.message.strip())
    return reasons


def _summary(lineage: Any, key: str, settings: Any, partition_dir: Path) -> dict[str, Any]:
    plan = json.loads((partition_dir / "plan.json").read_text("utf-8"))
    report = json.loads((partition_dir / "report.json").read_text("utf-8"))
    figures = lineage.reduction(key)
    budget = lineage.query(
        "SELECT dimension, spent, cap FROM budget_ledger WHERE partition_key = ? AND stage = 'research_report' "
        "ORDER BY created_at DESC LIMIT 5",
        [key],
    )
    from ..core.naming import plan_folder

    return {
        "partition_key": key,
        "plan_title": plan["plan_title"],
        "report_md": str(partition_dir / "report.md"),
        "report_json": str(partition_dir / "report.json"),
        "artifacts_dir": str(partition_dir / plan_folder(plan["plan_title"])),
        "duckdb": str(settings.duckdb_file),
        **figures,
        "sufficiency_scores": report.get("sufficiency_scores", []),
        "verified_citations": report.get("verified_citations", 0),
        "unverified_citations": report.get("unverified_citations", 0),
        "complete": report.get("complete", True),
        "budget": {r["dimension"]: {"spent": r["spent"], "cap": r["cap"]} for r in budget},
    }


def _print_figures(summary: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title="Context reduction", show_header=False)
    for label, key in [
        ("tool calls", "tool_calls"),
        ("useful", "useful"),
        ("LLM calls", "llm_calls"),
        ("raw tokens", "raw_tokens"),
        ("injected tokens", "injected_tokens"),
    ]:
        table.add_row(label, str(summary[key]))
    table.add_row("context reduction", f"{summary['context_reduction']}%")
    table.add_row("sufficiency by round", ", ".join(map(str, summary["sufficiency_scores"])) or "-")
    table.add_row(
        "citations verified / removed", f"{summary['verified_citations']} / {summary['unverified_citations']}"
    )
    for dim, figures in summary["budget"].items():
        table.add_row(f"budget {dim}", f"{figures['spent']:.4g} of {figures['cap']:.4g}")
    console = Console(soft_wrap=True)
    console.print(table)
    console.print(f"report: {summary['report_md']}")
    console.print(f"raw artifacts: {summary['artifacts_dir']}")
    console.print(f"lineage: {summary['duckdb']}")


def cmd_ls(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from ..core.store.lineage import LineageStore

    settings = _settings(args)
    rows = LineageStore.at(settings.duckdb_file).query(
        """
        SELECT r.partition_key, r.question, r.created_at,
               coalesce((SELECT status FROM runs WHERE runs.partition_key = r.partition_key
                         ORDER BY started_at DESC LIMIT 1), 'registered') AS status,
               c.tool_calls, c.reduction_pct
        FROM research_requests r LEFT JOIN context_reduction_by_research c USING (partition_key)
        ORDER BY r.created_at
        """
    )
    if args.json:
        print(json.dumps(rows, default=str, indent=2))
        return EXIT_OK
    table = Table(title=f"Researches in {settings.duckdb_file}")
    for col in ("partition", "question", "status", "tool calls", "reduction %"):
        table.add_column(col)
    for r in rows:
        reduction = "" if r["reduction_pct"] is None else str(r["reduction_pct"])
        table.add_row(r["partition_key"], r["question"][:60], r["status"], str(r["tool_calls"] or 0), reduction)
    Console().print(table)
    return EXIT_OK


def cmd_compress(args: argparse.Namespace) -> int:
    import duckdb

    from ..core.context import ResearchContext
    from ..core.models import ToolCallRecord
    from ..core.roles.compressor import StepContext, compress
    from ..core.store.artifacts import sha256_bytes
    from ..core.store.lineage import LineageStore
    from ..core.text import estimate_tokens

    path = Path(args.file)
    if not path.is_file():
        raise UsageError(f"no such file: {path}")
    data = path.read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UsageError(f"{path} is not UTF-8 text") from exc
    kind = "json" if path.suffix == ".json" else "text"
    settings = _settings(args)
    conn = duckdb.connect(":memory:")  # a debugging aid records nothing persistent
    ctx = ResearchContext(
        partition_key="compress-cli",
        question="(compress)",
        run_id="compress-cli",
        settings=settings,
        engine=settings.make_engine(),
        lineage=LineageStore(lambda: nullcontext(conn)),
        log=lambda m: print(m, file=sys.stderr),
    )
    record = ToolCallRecord(
        call_id="1.1",
        step_id="1",
        step_title=args.step_title,
        step_description=args.step_description,
        seq=1,
        tool=args.tool_name,
        arguments={},
        artifact_file=path.name,
        artifact_path=path.name,
        bytes=len(data),
        sha256=sha256_bytes(data),
        raw_tokens=estimate_tokens(text),
        latency_ms=0.0,
    )
    step = StepContext(args.plan_title, args.step_title, args.step_description, args.tool_name)
    summary = compress(ctx, step, record, text, kind)
    print(json.dumps(summary.result.model_dump(), indent=2, ensure_ascii=False))
    return EXIT_OK


def cmd_extract(args: argparse.Namespace) -> int:
    from ..core.web.extract import extract_html
    from ..core.web.fetch import FetchError, fetch_url

    policy = _settings(args).fetch_policy()
    status = EXIT_OK
    for source in args.inputs:
        if source.startswith(("http://", "https://")):
            try:
                page = fetch_url(source, policy)
            except FetchError as exc:
                print(f"error: {source}: {exc}", file=sys.stderr)
                status = max(status, EXIT_FAILED)
                continue
            title, text = page.title, page.text
        else:
            path = Path(source)
            if not path.is_file():
                print(f"error: no such file: {source}", file=sys.stderr)
                status = EXIT_USAGE
                continue
            raw = path.read_text("utf-8", errors="replace")
            is_html = path.suffix.lower() in (".html", ".htm") or raw.lstrip()[:1] == "<"
            title, text = extract_html(raw) if is_html else (None, raw)
        if args.json:
            print(json.dumps({"source": source, "title": title, "text": text}, ensure_ascii=False))
        else:
            print(f"== {source}\n{title or ''}\n\n{text}\n")
    return status


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="deepresearch", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    engine_help = "offline (no network) or openai (OPENAI_API_KEY / OPENAI_BASE_URL); default: auto"

    run = sub.add_parser("run", help="research a question end to end as a Dagster partition")
    run.add_argument("question")
    run.add_argument("--corpus", help="folder of .md/.txt/.html documents (default: bundled sample corpus)")
    run.add_argument("--engine", choices=["auto", "offline", "openai"], help=engine_help)
    run.add_argument("--json", action="store_true", help="print one JSON object with the figures")
    run.add_argument("--show-report", action="store_true", help="print the report before the figures")
    run.add_argument("--quiet", action="store_true", help="no progress lines")
    knobs = run.add_argument_group("research size and budget (defaults in README)")
    for option, (flag, kind, text) in KNOB_FLAGS.items():
        knobs.add_argument(flag, dest=option, type=kind, help=text)
    run.set_defaults(func=cmd_run)

    ls = sub.add_parser("ls", help="list researches with status and figures")
    ls.add_argument("--json", action="store_true")
    ls.set_defaults(func=cmd_ls)

    comp = sub.add_parser("compress", help="run the compressor on one file and print its JSON")
    comp.add_argument("file")
    comp.add_argument("--plan-title", required=True)
    comp.add_argument("--step-title", required=True)
    comp.add_argument("--step-description", required=True)
    comp.add_argument("--tool-name", required=True)
    comp.add_argument("--engine", choices=["auto", "offline", "openai"], help=engine_help)
    comp.set_defaults(func=cmd_compress)
    ext = sub.add_parser("extract", help="main-text extraction of local HTML files or URLs (debugging aid)")
    ext.add_argument("inputs", nargs="+", metavar="PATH_OR_URL")
    ext.add_argument("--json", action="store_true", help="one JSON line per input: source, title, text")
    ext.set_defaults(func=cmd_extract)

    from .operations import add_operation_commands  # audit, metrics, submit, recompress, rewrite-report

    add_operation_commands(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return EXIT_FAILED
