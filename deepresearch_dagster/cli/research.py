"""``deepresearch run | ls | compress | extract``: research a question and inspect the pieces."""

from __future__ import annotations

import argparse
import json
import math
import sys
import uuid
from contextlib import nullcontext
from pathlib import Path
from typing import Any

from .common import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_USAGE,
    MissingResult,
    UsageError,
    figure,
    live_progress,
    open_lineage,
    page_note,
    read_result,
    report_checks,
    report_failure,
    say,
    settings_from_args,
)


def cmd_run(args: argparse.Namespace) -> int:
    from pydantic import ValidationError

    from ..core.config import RequestOptions, describe_validation_error, option_names
    from ..core.errors import InvalidQuestion
    from ..core.roles.coordinator import validate_question

    try:
        question = validate_question(args.question)
    except InvalidQuestion as exc:
        raise UsageError(str(exc)) from exc
    settings = settings_from_args(args, researches=True)
    options = RequestOptions.model_validate(
        {"engine": args.engine, "corpus_dir": settings.corpus_dir or None}
        | {key: getattr(args, key) for key in RequestOptions.knobs()}
    )
    try:
        effective = settings.with_options(options)
    except ValidationError as exc:
        raise UsageError(f"invalid option: {describe_validation_error(exc, option_names())}") from exc
    # A broken environment is one line now, before anything is registered: a dagster.yaml that
    # is not YAML here, a lineage database that is a folder or a corrupt or truncated file once
    # the partition is ours (_run_locked).
    from ..core.config import check_dagster_yaml, dagster_home

    check_dagster_yaml(dagster_home())
    from ..core.roles.coordinator import route
    from ..core.store.object_store import artifact_store
    from ..core.store.partition_lock import PartitionBusy, partition_lock

    key = route(question)[1]  # the key register() gives it
    # The configured store: with an object store, the steps may have run on Celery workers that
    # wrote there and not to this host's working copy; reads below fetch from it.
    store = artifact_store(settings, key)
    partition_dir = store.partition_dir
    run_id = str(uuid.uuid4())  # the Dagster run's id, known before the run so the lock can name it

    def waiting(holder: str) -> None:
        if not args.quiet:
            say(f"research {key} is already running ({holder or 'holder unknown'}); waiting for it to finish")

    try:
        # One run per question: a second one is refused at once, before Dagster is loaded (or,
        # with --wait, waits for the first one and then resumes from what it stored).
        wait_s = math.inf if args.wait else 0.0
        with partition_lock(partition_dir, key, run_id, wait_s, waiting, postgres_url=settings.postgres):
            outcome, lineage = _run_locked(args, settings, question, options, effective, key, run_id)
    except PartitionBusy as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_FAILED
    if not outcome.success:
        return report_failure("research", outcome, partition_dir)

    try:
        summary = _summary(lineage, key, settings, store)
    except MissingResult as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_FAILED
    if args.json:
        print(json.dumps(summary, indent=2))
        return report_checks(partition_dir)
    if args.show_report:
        print((partition_dir / "report.md").read_text("utf-8"))
    _print_figures(summary)
    return report_checks(partition_dir)


def _run_locked(
    args: argparse.Namespace, settings: Any, question: str, options: Any, effective: Any, key: str, run_id: str
) -> tuple[Any, Any]:
    """Register the question and run ``research_job`` for it (the partition's lock is held)."""
    from ..core.store.artifacts import check_writable
    from ..core.store.lineage import check_database_file

    check_writable(settings.artifacts_path)  # a full disk: one line before anything is registered
    check_database_file(settings.lineage_database)
    if not args.quiet:
        say(f"researching with the {effective.resolved_engine()} engine: {question[:200]}")
    # The spinner and its clock run from here on: loading Dagster, then every model and tool wait.
    with live_progress(args.quiet, args.verbose, "loading Dagster"):
        from ..core.pipeline import register
        from ..core.store.lineage import LineageStore
        from ..launcher import ensure_instance, run_job

        instance = ensure_instance()
        lineage = LineageStore.at(settings.lineage_database)
        register(lineage, question, options.set_values(), partition_key=key)
        if not args.quiet:
            say(f"partition {key}")
        tags = {"deepresearch/source": "cli"}
        outcome = run_job("research_job", key, instance, tags=tags, lineage=lineage, run_id=run_id)
    return outcome, lineage


def _summary(lineage: Any, key: str, settings: Any, store: Any) -> dict[str, Any]:
    from ..core.checks import CHECKS_FILE, read_checks
    from ..core.heuristics import OFFLINE_MODEL
    from ..core.naming import plan_folder

    plan = read_result(store, "plan.json")
    report = read_result(store, "report.json")
    # Into the working copy for what reads them there: --show-report, the checks' lines.
    if not store.exists("report.md"):
        raise MissingResult(f"research {key} finished, but its report.md is in none of its artifact stores")
    store.exists(CHECKS_FILE)
    partition_dir = store.partition_dir
    figures = lineage.reduction(key)
    budget = lineage.latest_budget(key, "research_report")

    return {
        "partition_key": key,
        "plan_title": plan["plan_title"],
        "report_md": str(partition_dir / "report.md"),
        "report_json": str(partition_dir / "report.json"),
        "artifacts_dir": str(partition_dir / plan_folder(plan["plan_title"])),
        "duckdb": settings.lineage_label,
        **figures,
        "sufficiency_scores": report.get("sufficiency_scores", []),
        "verified_citations": report.get("verified_citations", 0),
        "unverified_citations": report.get("unverified_citations", 0),
        "critique": report.get("critique") or {},
        "drafts": report.get("drafts") or {},
        "complete": report.get("complete", True),
        # Role -> how many calls used the role's fallback (heuristic/extractive) instead of the model.
        "fallbacks": report.get("fallbacks", {}),
        "reporter_model": report.get("reporter_model"),
        # Model requests made and answers accepted; accepted 0 of many: the fallbacks wrote it all.
        "model_answers": lineage.model_answers(key, OFFLINE_MODEL),
        # Median tokens/s of the model's answers (prompt read, answer written); None: not measured.
        "model_speed": lineage.model_speed(key, OFFLINE_MODEL),
        "budget": budget,
        # Files of the document folder that could not be indexed: [path, reason].
        "skipped_documents": report.get("skipped_documents", []),
        # Every check's outcome, as the Dagster UI shows it (core/checks.py).
        "checks": read_checks(partition_dir),
    }


def critique_line(critique: dict[str, Any], drafts: dict[str, Any]) -> str:
    """``7 issues → 0 after 1 revision round · draft 2 of 3`` (core/roles/revision.py)."""
    before, after = (sum(critique[k]["counts"].values()) for k in ("before", "after"))
    rounds = sum(1 for r in critique.get("rounds", []) if r["stage"] == "revision" and r["accepted"])
    line = f"{before} issue(s) → {after} after {rounds} revision round(s)"
    if drafts:
        line += f" · draft {drafts['chosen']} of {len(drafts['drafts'])}"
    return line


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
        table.add_row(label, figure(summary[key]))
    table.add_row("context reduction", figure(summary["context_reduction"], "%", 1))
    table.add_row("sufficiency by round", ", ".join(map(str, summary["sufficiency_scores"])) or "-")
    table.add_row(
        "citations verified / removed", f"{summary['verified_citations']} / {summary['unverified_citations']}"
    )
    if summary["critique"]:
        table.add_row("report critique", critique_line(summary["critique"], summary["drafts"]))
    fallbacks = ", ".join(f"{role} {n}" for role, n in sorted(summary["fallbacks"].items()) if n)
    table.add_row("fallbacks used", fallbacks or "none")
    answers = summary["model_answers"]
    if answers["asked"]:
        table.add_row("model answers accepted", f"{answers['accepted']} of {answers['asked']}")
    speed = summary["model_speed"]
    if speed["answers"]:
        table.add_row(
            "model speed (median)",
            f"prompt {figure(speed['prompt_tps'], 'tokens/s', 1)}, answer {figure(speed['gen_tps'], 'tokens/s', 1)}",
        )
    if speed["overall_tps"]:
        table.add_row("answer tokens per model second", figure(speed["overall_tps"], "tokens/s", 2))
    if summary["skipped_documents"]:
        table.add_row("documents skipped", f"{len(summary['skipped_documents'])} (names and reasons in report.json)")
    units = {"tokens": ("tokens", 0), "dollars": ("$", 4), "llm_calls": ("calls", 0), "tool_calls": ("calls", 0)}
    for dim, figures in summary["budget"].items():
        unit, digits = units.get(dim, ("s", 1) if dim.endswith("_s") else ("", 0))
        spent, cap = figures["spent"], figures["cap"]
        share = f" ({100 * spent / cap:.0f} %)" if cap else ""
        label = dim.removesuffix("_s").replace("_", " ")
        table.add_row(f"budget: {label}", f"{figure(spent, unit, digits)} of {figure(cap, unit, digits)}{share}")
    console = Console(soft_wrap=True)
    console.print(table)
    if summary["model_answers"]["asked"] and not summary["model_answers"]["accepted"]:
        console.print(
            "warning: the model server accepted requests but none of its answers was usable; the report "
            "was written by the offline fallbacks (see `deepresearch audit` for the model's answers)"
        )
    console.print(f"report: {summary['report_md']}")
    console.print(f"raw artifacts: {summary['artifacts_dir']}")
    console.print(f"lineage: {summary['duckdb']}")


def cmd_ls(args: argparse.Namespace) -> int:
    settings = settings_from_args(args)
    with open_lineage(settings) as lineage:
        from ..core.store.audit import research_page

        rows, total = research_page(lineage, limit=args.limit or None, offset=args.offset)
    _with_checks(rows, settings)
    if args.json:
        print(json.dumps(rows, default=str, indent=2))
        return EXIT_OK
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    from ..core.naming import printable_name

    note = page_note(len(rows), args.offset, total, "researches")
    console = Console()
    # Partition keys are printed whole (audit, replays and the UI take them; a unique prefix works too).
    if console.width < 110:
        console.print(f"Researches in {settings.lineage_label}", style="italic")
        for r in rows:
            reduction = "" if r["reduction_pct"] is None else f", {figure(r['reduction_pct'], '%', 1)} reduction"
            console.print(r["partition_key"], style="bold", no_wrap=True, crop=False, soft_wrap=True)
            console.print(
                # A question is data: printed as it is (no Rich markup), on one line.
                Text(f"  {r['status']}, {figure(r['tool_calls'] or 0)} tool calls{reduction}: ")
                + Text(printable_name(r["question"])),
                no_wrap=True,
                overflow="ellipsis",
            )
        if note:
            console.print(note, style="italic")
        return EXIT_OK
    table = Table(title=f"Researches in {settings.lineage_label}")
    table.add_column("partition", no_wrap=True)
    table.add_column("question", overflow="ellipsis", no_wrap=True, ratio=1)
    for col in ("status", "tool calls", "reduction"):
        table.add_column(col, no_wrap=True, justify="left" if col == "status" else "right")
    for r in rows:
        reduction = "" if r["reduction_pct"] is None else figure(r["reduction_pct"], "%", 1)
        question = Text(printable_name(r["question"]))
        table.add_row(r["partition_key"], question, r["status"], figure(r["tool_calls"] or 0), reduction)
    console.print(table)
    if note:
        console.print(note, style="italic")
    return EXIT_OK


def _with_checks(rows: list[dict[str, Any]], settings: Any) -> None:
    """A succeeded research whose checks failed says so in its status ("check failed" for an
    ERROR check, "succeeded, warning" for a WARN one); ``failed_checks`` names them."""
    from ..core.checks import ERROR, WARN, failed_checks, read_checks
    from ..core.store.artifacts import ArtifactStore

    for r in rows:
        if r["status"] != "succeeded":
            continue
        checks = read_checks(ArtifactStore(settings.artifacts_path, r["partition_key"]).partition_dir)
        errors, warnings = failed_checks(checks, ERROR), failed_checks(checks, WARN)
        r["failed_checks"] = [name for name, _ in errors + warnings]
        r["status"] = "check failed" if errors else "succeeded, warning" if warnings else r["status"]


def cmd_compress(args: argparse.Namespace) -> int:
    import duckdb

    from ..core.context import ResearchContext, make_engine
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
    settings = settings_from_args(args)
    conn = duckdb.connect(":memory:")  # a debugging aid records nothing persistent
    ctx = ResearchContext(
        partition_key="compress-cli",
        question="(compress)",
        run_id="compress-cli",
        settings=settings,
        engine=make_engine(settings),
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
    settings = settings_from_args(args)
    status = EXIT_OK
    for source in args.inputs:
        if source.startswith(("http://", "https://")):
            # The web stack (httpx, the fetch policy) only when a URL is given.
            from ..core.context import fetch_policy
            from ..core.web.fetch import FetchError, fetch_url

            policy = fetch_policy(settings)
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
            if is_html:
                from ..core.web.extract import extract_html

                title, text = extract_html(raw)
            else:
                title, text = None, raw
        if args.json:
            print(json.dumps({"source": source, "title": title, "text": text}, ensure_ascii=False))
        else:
            print(f"== {source}\n{title or ''}\n\n{text}\n")
    return status
