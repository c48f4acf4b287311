"""Operating commands of ``deepresearch``: audit, metrics, submit, recompress, rewrite-report.

Kept apart from cli.py (run/ls/compress/extract); ``build_parser`` adds them. Same exit codes:
0 success, 1 failed run, 2 bad usage or bad input (one line on stderr).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from ..core.store.artifacts import ArtifactStore
from . import EXIT_FAILED, EXIT_OK, UsageError, _progress_to_stderr, _settings, ensure_dagster_home, failure_reasons


def _lineage(settings: Any, must_exist: bool = False) -> Any:
    from ..core.store.lineage import LineageStore

    if must_exist and not settings.duckdb_file.exists():
        return None
    return LineageStore.at(settings.duckdb_file)


def _known_partition(settings: Any, partition: str) -> Any:
    """The lineage store, or a usage error naming the unknown partition (exit code 2)."""
    lineage = _lineage(settings, must_exist=True)
    if lineage is None or lineage.get_request(partition) is None:
        raise UsageError(f"unknown research partition {partition!r} (see `deepresearch ls`)")
    return lineage


def cmd_audit(args: argparse.Namespace) -> int:
    from ..core.store.audit import PriceConfigError, audit_research

    settings = _settings(args)
    lineage = _known_partition(settings, args.partition)
    try:
        audit = audit_research(lineage, settings.artifacts_path, args.partition)
    except PriceConfigError as exc:
        raise UsageError(str(exc)) from exc
    if args.json:
        print(audit.model_dump_json(indent=2))
        return EXIT_OK
    from .render import render_audit

    render_audit(audit)
    return EXIT_OK


def cmd_metrics(args: argparse.Namespace) -> int:
    from ..core.store.audit import PriceConfigError, metrics

    settings = _settings(args)
    try:
        result = metrics(_lineage(settings))
    except PriceConfigError as exc:
        raise UsageError(str(exc)) from exc
    if args.json:
        print(result.model_dump_json(indent=2))
        return EXIT_OK
    from .render import render_metrics

    render_metrics(result)
    return EXIT_OK


def cmd_submit(args: argparse.Namespace) -> int:
    from ..core.naming import partition_key_for
    from ..core.requests import RequestError, RequestQueue, parse_requests

    settings = _settings(args)
    options = {"engine": args.engine, "corpus_dir": settings.corpus_dir or None}
    try:
        (request,) = parse_requests({"question": args.question, **{k: v for k, v in options.items() if v}})
        path = RequestQueue.from_env(settings).enqueue(request.question, request.options)
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
    settings = _settings(args)
    lineage = _known_partition(settings, args.partition)
    partition_dir = ArtifactStore(settings.artifacts_path, args.partition).partition_dir
    missing = [name for name in needs if not (partition_dir / name).is_file()]
    if missing:
        raise UsageError(f"nothing to replay for {args.partition}: {', '.join(missing)} missing (research it first)")
    ensure_dagster_home()
    _progress_to_stderr(args.quiet)

    from dagster import DagsterInstance

    from ..definitions import build_definitions
    from ..defs.partitions import RESEARCH_PARTITIONS_NAME

    instance = DagsterInstance.get()
    if not instance.has_dynamic_partition(RESEARCH_PARTITIONS_NAME, args.partition):
        instance.add_dynamic_partitions(RESEARCH_PARTITIONS_NAME, [args.partition])
    calls_before = lineage.query("SELECT count(*) AS n FROM tool_calls WHERE partition_key = ?", [args.partition])
    result = (
        build_definitions()
        .resolve_job_def(job_name)
        .execute_in_process(
            partition_key=args.partition,
            instance=instance,
            raise_on_error=False,
            run_config={
                "resources": {"research": {"config": {k: v for k, v in overrides.items() if v}}},
                "loggers": {"console": {"config": {"log_level": "ERROR"}}},
            },
            tags={"deepresearch/source": "cli"},
        )
    )
    if not result.success:
        reasons = failure_reasons(result.all_events)
        print(f"error: {job_name} failed: {reasons[-1] if reasons else 'unknown error'}", file=sys.stderr)
        print(f"  run {result.run_id} in the Dagster UI (make dev); files under {partition_dir}", file=sys.stderr)
        return EXIT_FAILED
    calls_after = lineage.query("SELECT count(*) AS n FROM tool_calls WHERE partition_key = ?", [args.partition])
    summary: dict[str, Any] = {"partition_key": args.partition, "run_id": result.run_id, "job": job_name}
    if job_name == "recompress_job":
        bundle = json.loads((partition_dir / "compressed_summaries.json").read_text("utf-8"))
        from ..core.pipeline import bundle_version_file

        summary.update(
            compressor_model=bundle["compressor_model"],
            prompt_version=bundle["prompt_version"],
            summaries=len(bundle["summaries"]),
            useful=sum(s["result"]["is_useful"] for s in bundle["summaries"]),
            bundle_file=str(partition_dir / bundle_version_file(bundle["compressor_model"], bundle["prompt_version"])),
        )
    else:
        report = json.loads((partition_dir / "report.json").read_text("utf-8"))
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
    audit.add_argument("partition")
    audit.add_argument("--json", action="store_true", help="print the audit as one JSON object")
    audit.set_defaults(func=cmd_audit)

    met = sub.add_parser("metrics", help="totals across researches: tokens, cost, tool latency and failures")
    met.add_argument("--json", action="store_true")
    met.set_defaults(func=cmd_metrics)

    submit = sub.add_parser("submit", help="queue a question for the research_requests_sensor (Dagster daemon)")
    submit.add_argument("question")
    submit.add_argument("--corpus", help="folder of .md/.txt/.html documents")
    submit.add_argument("--engine", choices=["auto", "offline", "openai"])
    submit.add_argument("--json", action="store_true")
    submit.set_defaults(func=cmd_submit)

    rec = sub.add_parser("recompress", help="replay: re-compress a research's stored raw outputs (no tool calls)")
    rec.add_argument("partition")
    rec.add_argument("--compressor-model", help="another compressor model (openai engine)")
    rec.add_argument("--prompt-file", help="another compressor prompt; its content hash is the prompt version")
    rec.add_argument("--json", action="store_true")
    rec.add_argument("--quiet", action="store_true")
    rec.set_defaults(func=cmd_recompress)

    rew = sub.add_parser("rewrite-report", help="replay: rewrite a research's report from its stored summaries")
    rew.add_argument("partition")
    rew.add_argument("--reporter-model", help="another reporter model (openai engine)")
    rew.add_argument("--json", action="store_true")
    rew.add_argument("--quiet", action="store_true")
    rew.set_defaults(func=cmd_rewrite_report)
