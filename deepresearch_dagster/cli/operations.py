"""Operating commands of ``deepresearch``: audit, metrics, submit, recompress, rewrite-report.

Kept apart from cli.py (run/ls/compress/extract); ``build_parser`` adds them. Same exit codes:
0 success, 1 failed run, 2 bad usage or bad input (one line on stderr).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from .common import (
    CORPUS_FORMATS,
    EXIT_OK,
    UsageError,
    add_page_options,
    known_research,
    live_progress,
    open_lineage,
    page_note,
    read_result,
    report_failure,
    resolve_partition,
    say,
    settings_from_args,
)


def cmd_audit(args: argparse.Namespace) -> int:
    settings = settings_from_args(args)
    with open_lineage(settings, must_exist=True) as lineage:
        args.partition = resolve_partition(lineage, args.partition)
        from ..core.store.audit import audit_research

        audit = audit_research(lineage, settings.artifacts_path, args.partition, settings.prices)
    if args.json:
        print(audit.model_dump_json(indent=2))
        return EXIT_OK
    from .render import render_audit

    render_audit(audit)
    return EXIT_OK


def cmd_metrics(args: argparse.Namespace) -> int:
    settings = settings_from_args(args)
    with open_lineage(settings) as lineage:
        from ..core.store.audit import metrics

        result = metrics(lineage, settings.prices, limit=args.limit or None, offset=args.offset)
    if args.json:
        print(result.model_dump_json(indent=2))
        return EXIT_OK
    from .render import render_metrics

    render_metrics(result)
    note = page_note(len(result.researches), args.offset, result.researches_total, "researches")
    if note:
        print(note)
    return EXIT_OK


def cmd_submit(args: argparse.Namespace) -> int:
    from ..core.naming import partition_key_for
    from ..core.requests import RequestError, RequestQueue, parse_requests

    settings = settings_from_args(args)
    options = {"engine": args.engine, "corpus_dir": settings.corpus_dir or None}
    try:
        (request,) = parse_requests({"question": args.question, **{k: v for k, v in options.items() if v}})
        path = RequestQueue.for_settings(settings).enqueue(request.question, request.options)
    except RequestError as exc:
        raise UsageError(str(exc)) from exc
    key = partition_key_for(request.question)
    if args.json:
        print(json.dumps({"partition_key": key, "request_file": str(path)}))
    else:
        print(f"queued {path}")
        print(f"partition {key}: the research_requests_sensor starts it while the Dagster daemon runs (make dev)")
    return EXIT_OK


def _replay(args: argparse.Namespace, job_name: str, needs: list[str], overrides: dict[str, Any]) -> int:
    from ..core.store.object_store import artifact_store

    settings = settings_from_args(args)
    lineage, args.partition = known_research(settings, args.partition)
    # Through the configured store: another host (a Celery worker) may have researched it.
    store = artifact_store(settings, args.partition)
    partition_dir = store.partition_dir
    missing = [name for name in needs if not store.exists(name)]
    if missing:
        raise UsageError(f"nothing to replay for {args.partition}: {', '.join(missing)} missing (research it first)")
    if not args.quiet:
        say(f"{job_name} for {args.partition}")
    with live_progress(args.quiet, False, "loading Dagster"):
        from ..launcher import run_job

        calls_before = lineage.tool_call_count(args.partition)
        resources = {"research": {"config": {k: v for k, v in overrides.items() if v}}}
        outcome = run_job(
            job_name, args.partition, resources_config=resources, tags={"deepresearch/source": "cli"}, lineage=lineage
        )
    if not outcome.success:
        return report_failure(job_name, outcome, partition_dir)
    calls_after = lineage.tool_call_count(args.partition)
    summary: dict[str, Any] = {"partition_key": args.partition, "run_id": outcome.run_id, "job": job_name}
    if job_name == "recompress_job":
        bundle = read_result(store, "compressed_summaries.json")
        from ..core.pipeline import bundle_version_file

        summary.update(
            compressor_model=bundle["compressor_model"],
            prompt_version=bundle["prompt_version"],
            summaries=len(bundle["summaries"]),
            useful=sum(s["result"]["is_useful"] for s in bundle["summaries"]),
            bundle_file=str(partition_dir / bundle_version_file(bundle["compressor_model"], bundle["prompt_version"])),
        )
    else:
        report = read_result(store, "report.json")
        store.exists("report.md")  # into this host's working copy, where report_md points
        summary.update(
            reporter_model=report["reporter_model"],
            citations=len(report["citations"]),
            report_md=str(partition_dir / "report.md"),
        )
    summary["tool_calls_unchanged"] = calls_before == calls_after
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        for key, value in summary.items():
            print(f"{key}: {value}")
    return EXIT_OK


def cmd_recompress(args: argparse.Namespace) -> int:
    prompt = str(Path(args.prompt_file).resolve()) if args.prompt_file else None
    if prompt and not Path(prompt).is_file():
        raise UsageError(f"no such prompt file: {args.prompt_file}")
    overrides = {"compressor_model": args.compressor_model, "compressor_prompt_file": prompt}
    return _replay(args, "recompress_job", ["plan.json", "tool_outputs.json"], overrides)


def cmd_rewrite_report(args: argparse.Namespace) -> int:
    needs = ["plan.json", "compressed_summaries.json"]
    return _replay(args, "rewrite_report_job", needs, {"reporter_model": args.reporter_model})


def add_operation_commands(sub: Any) -> None:
    audit = sub.add_parser("audit", help="trace a research: citations → summaries → raw artifacts → tool calls")
    audit.add_argument("partition", help="partition key (or an unambiguous prefix, see: deepresearch ls)")
    audit.add_argument("--json", action="store_true", help="print the audit as one JSON object")
    audit.set_defaults(func=cmd_audit)

    met = sub.add_parser("metrics", help="totals across researches: tokens, cost, tool latency and failures")
    met.add_argument("--json", action="store_true")
    add_page_options(met, "researches in the per-research table", 20)
    met.set_defaults(func=cmd_metrics)

    submit = sub.add_parser("submit", help="queue a question for the research_requests_sensor (Dagster daemon)")
    submit.add_argument("question")
    submit.add_argument("--corpus", help=f"folder of documents ({CORPUS_FORMATS})")
    submit.add_argument("--engine", choices=["auto", "offline", "openai"])
    submit.add_argument("--json", action="store_true")
    submit.set_defaults(func=cmd_submit)

    rec = sub.add_parser("recompress", help="replay: re-compress a research's stored raw outputs (no tool calls)")
    rec.add_argument("partition", help="partition key or an unambiguous prefix")
    rec.add_argument("--compressor-model", help="another compressor model (openai engine)")
    rec.add_argument("--prompt-file", help="another compressor prompt; its content hash is the prompt version")
    rec.add_argument("--json", action="store_true")
    rec.add_argument("--quiet", action="store_true")
    rec.set_defaults(func=cmd_recompress)

    rew = sub.add_parser("rewrite-report", help="replay: rewrite a research's report from its stored summaries")
    rew.add_argument("partition", help="partition key or an unambiguous prefix")
    rew.add_argument("--reporter-model", help="another reporter model (openai engine)")
    rew.add_argument("--json", action="store_true")
    rew.add_argument("--quiet", action="store_true")
    rew.set_defaults(func=cmd_rewrite_report)
