"""Benchmark — research quality on third-party multi-hop questions, development and held-out halves.

Runs ``deepresearch eval`` on ``../shared/data/multihop_dev/questions.jsonl`` (182 HotpotQA and
MuSiQue questions) with its 2,626 paragraphs as ONE corpus folder, and prints the figures of the
two halves apart:

- **development** (``split_of(id) == "dev"``): the half a developer may read, item by item;
- **held out** (the other half): only its aggregate figures are read, never its reports.

The halves are fixed by a hash of each item's id (``core/evaluation/suite.py: split_of``), decided
before any item was looked at. The headline figure is ``answer_in_report`` over plain-answer
items (yes/no, reworded and answer-in-question items are reported apart).

    PYTHONPATH=. .venv/bin/python benchmarks/eval_multihop.py [--engine offline|openai] [--limit N]
        [--split dev|heldout|both] [--work DIR]

``--engine openai`` uses ``OPENAI_BASE_URL`` (and the configured models) — e.g. the llama.cpp
server of ``benchmarks/local_model.py``. ``--work`` keeps the artifacts, so a second run resumes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import REPO, RESULTS, machine, parse_args, print_table

DATA = REPO.parent / "shared" / "data" / "multihop_dev"
FIGURES = ("answer_in_report", "answer_in_summary", "answer_in_findings", "answer_in_memory", "answer_in_raw")


def _suite(split: str, limit: int | None, folder: Path) -> Path:
    """The items of one half (or both), in file order, at most ``limit`` of each half."""
    from deepresearch_dagster.core.evaluation.suite import split_of

    lines = [line for line in (DATA / "questions.jsonl").read_text("utf-8").splitlines() if line.strip()]
    chosen: list[str] = []
    for half in ("dev", "heldout") if split == "both" else (split,):
        rows = [line for line in lines if split_of(json.loads(line)["id"]) == half]
        chosen += rows[:limit] if limit else rows
    path = folder / f"multihop_{split}{'_' + str(limit) if limit else ''}.jsonl"
    path.write_text("\n".join(chosen) + "\n", "utf-8")
    return path


def main(argv: list[str] | None = None) -> int:
    args = parse_args(
        __doc__,
        argv,
        engine={"default": "offline", "choices": ["offline", "openai"]},
        limit={"type": int, "default": None, "help": "at most N items of each half"},
        split={"default": "both", "choices": ["dev", "heldout", "both"]},
        work={"default": None, "help": "artifact folder to keep (and resume from)"},
        research_args={"default": "", "help": "research size flags for every item, e.g. '--max-steps 2 --depth 0'"},
    )
    if not DATA.is_dir():
        print(f"skipped: {DATA} not found (the shared third-party data)")
        return 0
    work = Path(args.work or tempfile.mkdtemp(prefix="eval-multihop-"))
    work.mkdir(parents=True, exist_ok=True)
    env = {
        **os.environ,
        "DEEPRESEARCH_ARTIFACTS_DIR": str(work / "artifacts"),
        "DEEPRESEARCH_DUCKDB": str(work / "lineage.duckdb"),
        "DAGSTER_HOME": str(work / "dagster_home"),
    }
    suite = _suite(args.split, args.limit, work)
    started = time.monotonic()
    command = [str(REPO / ".venv" / "bin" / "deepresearch"), "eval", str(suite), "--corpus", str(DATA / "corpus")]
    command += ["--engine", args.engine, "--json", "--quiet", *args.research_args.split()]
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0 and not done.stdout.strip():
        print(done.stderr, file=sys.stderr)
        return 1
    evaluation = json.loads(done.stdout)
    summary = evaluation["summary"]
    rows = []
    for half, label in (("dev", "development (looked at)"), ("heldout", "held out (figures only)")):
        group = summary["by_split"].get(half)
        if not group:
            continue
        n = group["answerable"]
        rows.append([label, str(n), *(f"{group[f]}/{n} ({group[f + '_pct'] or 0:.0f} %)" for f in FIGURES)])
    print_table(["half", "items", "report", "summary", "findings", "memory", "raw"], rows)
    from deepresearch_dagster.core.evaluation.report import report_intervals

    print(report_intervals(summary))
    apart = {c: g for c, g in summary["by_category"].items() if c != "answer"}
    for category, group in apart.items():
        print(f"apart: {category}: {group['answer_in_report']}/{group['answerable']} in report")
    print(
        f"engine {evaluation['engine']} · uncited sentences {summary['uncited_sentences']} · removed citations "
        f"{summary['removed_citations']} · ungrounded figures {summary['ungrounded_figures']} · "
        f"tokens {summary['tokens']:,} · {time.monotonic() - started:,.0f} s"
    )
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / f"eval_multihop_{args.engine}.json"
    out.write_text(json.dumps({"machine": machine(), "split": args.split, "limit": args.limit,
                               "engine": evaluation["engine"], "models": evaluation["models"],
                               "summary": summary}, indent=2) + "\n")  # fmt: skip
    print(f"written {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
