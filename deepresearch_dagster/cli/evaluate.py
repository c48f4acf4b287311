"""``deepresearch eval``: run a suite of questions, score the reports from their artifacts, compare
two evaluations, import other formats as suites.

    deepresearch eval SUITE [--corpus DIR] [--engine E] [--limit N] [--items ID,…] [--json]
    deepresearch eval compare A B [--json]           # A, B: eval.json, its folder or a key
    deepresearch eval import FORMAT SOURCE OUT.jsonl  # multihop | squad | gold-facts | drb
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path
from typing import Any

from .common import (
    ENGINE_HELP,
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    UsageError,
    live_progress,
    say,
    settings_from_args,
)

USAGE = "eval SUITE [options] | eval compare A B | eval import FORMAT SOURCE OUT"


def add_eval_command(sub: Any, knobs: bool) -> None:
    ev = sub.add_parser(
        "eval",
        help="evaluate research quality on a suite of questions (resumes; scores stored artifacts)",
        description=__doc__.split("\n\n")[1] if __doc__ else None,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ev.add_argument("target", nargs="+", metavar="SUITE", help="suite file (JSONL), or: compare A B, import …")
    ev.add_argument("--corpus", help="one folder of documents for every item (default: each item's own)")
    ev.add_argument("--engine", choices=["auto", "offline", "openai"], help=ENGINE_HELP)
    ev.add_argument("--limit", type=int, help="the first N items only")
    ev.add_argument("--items", help="comma-separated item ids")
    ev.add_argument("--json", action="store_true", help="print one JSON object (items and summary)")
    ev.add_argument("--rerun", action="store_true", help="research every item again instead of resuming")
    ev.add_argument("--judge-model", help="an OpenAI-compatible model that judges answers and claim support")
    ev.add_argument(
        "--recompress", metavar="MODEL[/PROMPT]", help="replay the compressor on the stored raw outputs (no tool call)"
    )
    ev.add_argument("--quiet", action="store_true", help="no progress lines")
    if knobs:
        from ..core.config import RequestOptions

        group = ev.add_argument_group("research size (as for run)")
        for option, (flag, kind, text) in RequestOptions.knobs().items():
            group.add_argument(flag, dest=option, type=kind, help=text)
    ev.set_defaults(func=cmd_eval)


def cmd_eval(args: argparse.Namespace) -> int:
    target = args.target
    if target[0] == "compare" and len(target) == 3:
        return _compare(args, target[1], target[2])
    if target[0] == "import" and len(target) == 4:
        return _import(target[1], target[2], target[3])
    if len(target) != 1:
        raise UsageError(f"usage: deepresearch {USAGE}")
    return _evaluate(args, target[0])


def _config(args: argparse.Namespace, suite: str) -> Any:
    from pydantic import ValidationError

    from ..core.config import RequestOptions
    from ..core.evaluation.run import EvalConfig

    if not Path(suite).is_file():
        raise UsageError(f"suite file not found: {suite}")
    if args.limit is not None and args.limit < 1:
        raise UsageError("--limit must be 1 or more")
    options = {key: getattr(args, key, None) for key in RequestOptions.knobs()}
    try:
        RequestOptions.model_validate(options)
    except ValidationError as exc:
        raise UsageError(f"invalid option: {exc.errors()[0]['msg']}") from exc
    return EvalConfig(
        suite=str(Path(suite).resolve()),
        corpus=str(Path(args.corpus).resolve()) if args.corpus else None,
        engine=args.engine,
        limit=args.limit,
        items=[i.strip() for i in args.items.split(",") if i.strip()] if args.items else None,
        options={k: v for k, v in options.items() if v is not None},
        judge_model=args.judge_model,
        recompress=args.recompress,
        rerun=args.rerun,
    )


def _evaluate(args: argparse.Namespace, suite: str) -> int:
    config = _config(args, suite)
    settings = settings_from_args(args)
    from ..core.evaluation.report import summary_lines, table_lines, write_evaluation
    from ..core.evaluation.run import evaluation_dir
    from ..core.evaluation.suite import load_suite

    loaded = load_suite(config.suite)  # a suite with no readable line fails here, before Dagster loads
    if not args.quiet:
        for failure in loaded.failures:
            say(f"skipped line {failure.line} ({failure.id or 'no id'}): {failure.reason}")
    from ..core.errors import ResearchInterrupted

    try:
        with live_progress(args.quiet, False, "loading Dagster"):
            evaluation = _run(args, config, settings)
    except ResearchInterrupted as exc:
        print(f"evaluation {exc} (items already researched are resumed)", file=sys.stderr)
        return EXIT_INTERRUPTED
    folder = evaluation_dir(settings, evaluation.key)
    write_evaluation(evaluation, folder)  # first: the asset reuses its judge verdicts
    _record_in_dagster(evaluation.key, config, args.quiet)
    json_path, md_path = write_evaluation(evaluation, folder)  # this run's own figures (wall, resumed)
    if args.json:
        print(json.dumps({**evaluation.model_dump(mode="json"), "eval_json": str(json_path), "eval_md": str(md_path)}))
    else:
        print("\n".join(table_lines(evaluation)))
        print()
        print("\n".join(summary_lines(evaluation)))
        print(f"evaluation {evaluation.key} (eval.json, eval.md):")
        print(f"  {json_path.parent}")
    scored = [s for s in evaluation.items if s.status == "scored"]
    if not scored:
        print("error: every item failed (see the reasons above)", file=sys.stderr)
        return EXIT_FAILED
    return EXIT_OK


def _run(args: argparse.Namespace, config: Any, settings: Any) -> Any:
    from ..core.evaluation.report import item_line
    from ..core.evaluation.run import evaluation_key, run_evaluation
    from ..core.store.lineage import LineageStore
    from ..launcher import ensure_instance, research_runner

    instance = ensure_instance()
    lineage = LineageStore.at(settings.lineage_database)
    engine = settings.with_options({"engine": config.engine} if config.engine else {}).resolved_engine()
    key = evaluation_key(config, engine)
    tags = {"deepresearch/source": "eval", "deepresearch/evaluation": key}

    # One line per item, not the researches' own progress lines (every tool call of every item):
    # the progress handler above the spinner shows warnings only; the item lines are written as such.
    log = logging.getLogger("deepresearch")
    log.setLevel(logging.WARNING)

    def progress(index: int, total: int, score: Any) -> None:
        if not args.quiet:
            log.warning(item_line(index, total, score))

    judge = None
    if config.judge_model:
        from ..core.evaluation.judge import judge_for

        judge = judge_for(config.judge_model, settings, lineage)
    evaluation = run_evaluation(config, settings, lineage, research_runner(instance, lineage, tags), progress, judge)
    if config.recompress:
        from ..core.evaluation.replay import recompress_evaluation
        from ..launcher import run_job

        def replay(partition_key: str, resources: dict[str, Any]) -> str | None:
            outcome = run_job("recompress_job", partition_key, instance, resources_config=resources, tags=tags,
                              lineage=lineage)  # fmt: skip
            return None if outcome.success else outcome.message

        evaluation = recompress_evaluation(evaluation, config.recompress, settings, lineage, replay)
    return evaluation


def _record_in_dagster(key: str, config: Any, quiet: bool) -> None:
    """Materialize ``evaluation_results`` for the evaluation's partition (the UI's table and the
    figures it plots across materializations). Every item is researched by now, so the asset
    only re-scores from the artifacts."""
    from ..defs.partitions import EVALUATION_PARTITIONS_NAME
    from ..launcher import run_job

    ops = {"evaluation_results": {"config": config.model_dump(mode="json", exclude_none=True)}}
    tags = {"deepresearch/source": "eval"}
    outcome = run_job("evaluation_job", key, tags=tags, partitions=EVALUATION_PARTITIONS_NAME, ops_config=ops)
    if not outcome.success and not quiet:
        say(f"warning: the evaluation_results materialization failed: {outcome.message}")


def _compare(args: argparse.Namespace, a: str, b: str) -> int:
    from ..core.evaluation.report import compare, compare_lines
    from ..core.evaluation.run import read_evaluation

    settings = settings_from_args(args)
    result = compare(read_evaluation(a, settings), read_evaluation(b, settings))
    if args.json:
        print(json.dumps(result, default=str))
    else:
        print("\n".join(compare_lines(result)))
    return EXIT_OK


def _import(fmt: str, source: str, out: str) -> int:
    from ..core.evaluation.suite import IMPORTERS, write_suite

    if fmt not in IMPORTERS:
        raise UsageError(f"unknown suite format {fmt!r} (one of: {', '.join(IMPORTERS)})")
    if not Path(source).exists():
        raise UsageError(f"not found: {source}")
    try:
        items = IMPORTERS[fmt](Path(source))
    except (ValueError, KeyError, OSError) as exc:
        raise UsageError(f"cannot import {source} as {fmt}: {exc}") from exc
    write_suite(items, out)
    print(f"{len(items)} items written to {out}")
    return EXIT_OK
