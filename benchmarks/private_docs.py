"""Benchmark — research over a folder of private documents (issue 11).

Usage: python benchmarks/private_docs.py [--corpus NAME ...] [--engine offline|openai] [--out FILE]
       [--scale N]   also index a synthetic folder of N files twice (cold, then re-run) and time it

Each corpus under tests/fixtures/private_docs/<NAME>/ is a fictional organisation's documents as
text sources (PDF, DOCX, PPTX and XLSX are generated from them by ``build.py``; one encrypted and
two corrupt files must be skipped), a multi-part request (``question.txt``) and ``gold.json``:
the facts the answer should state and the stale figures (archived, superseded, older versions)
it must not state as current. The research runs through ``core.pipeline.run_research`` with the
chosen engine (offline by default: no network) and prints, per corpus:

  gold facts   share of gold facts whose patterns all occur in report.md
  stale        stale figures stated in a report line that does not call them superseded/older
  citations    verified ÷ all citation checks (each [n] checked against its stored raw artifact)
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from common import figure, write_result  # noqa: E402

from tests.fixtures.private_docs.build import build_corpus  # noqa: E402

FIXTURES = REPO / "tests" / "fixtures" / "private_docs"
GOAL_SHARE = 0.8
# How each corpus relates to the heuristics (issue 11 asks for a corpus nobody looked at while
# writing them): a corpus written blind and run once is held out; after its first run it was
# looked at, and its figure is a development figure from then on. The first-run figure is kept.
PROVENANCE = {
    "tidewater": ("development", "written with the heuristics"),
    "ledgerline": ("seen", "written blind in an earlier session, 79 % at its first run; its misses were read since"),
    "fernhill": ("development", "written blind to the code, read and tuned on from its first run (66 %)"),
    "quarrystone": ("development", "written blind, 74 % at its first run, then read and tuned on"),
    "saltmarsh": ("development", "written blind, 65 % at its first run, then read and tuned on"),
    "kittiwake": ("development", "written blind, 58 % at its first run, then read and tuned on"),
    "puffin": ("held out", "written blind to the heuristics; its report and misses never read"),
}
DEFAULT_OUT = REPO / "benchmarks" / "results" / "private_docs.json"
STALE_NOTE = re.compile(r"supersed|outdated|archiv|previous|earlier|older|stale|no longer", re.I)


def corpora() -> list[str]:
    return sorted(p.name for p in FIXTURES.iterdir() if (p / "gold.json").is_file())


def score_report(markdown: str, gold: dict[str, Any]) -> dict[str, Any]:
    body = markdown.split("\n## References", 1)[0]
    found, missing = [], []
    for fact in gold["facts"]:
        ok = all(re.search(p, body, re.IGNORECASE) for p in fact["patterns"])
        (found if ok else missing).append(fact["id"])
    stale = []
    for item in gold.get("stale", []):
        for line in body.splitlines():
            if re.search(item["pattern"], line, re.IGNORECASE) and not STALE_NOTE.search(line):
                stale.append({"id": item["id"], "line": line.strip()[:200]})
                break
    return {
        "gold_facts": len(gold["facts"]),
        "found": len(found),
        "share": round(len(found) / len(gold["facts"]), 4),
        "missing": missing,
        "stale_reported": len(stale),
        "stale": stale,
    }


def run_corpus(name: str, engine: str, work: Path) -> dict[str, Any]:
    from deepresearch_dagster.core.config import ResearchSettings
    from deepresearch_dagster.core.pipeline import run_research
    from deepresearch_dagster.core.tools.local_search import LocalCorpus

    source = FIXTURES / name
    corpus = build_corpus(source, work / name / "corpus")
    question = (source / "question.txt").read_text("utf-8").strip()
    gold = json.loads((source / "gold.json").read_text("utf-8"))
    artifacts = work / name / "artifacts"
    started = time.perf_counter()
    settings = ResearchSettings.from_env(engine=engine, corpus_dir=str(corpus), artifacts_dir=str(artifacts))
    ctx, report = run_research(question, settings, log=lambda m: None)
    seconds = time.perf_counter() - started
    indexed = LocalCorpus(corpus, cache_dir=artifacts / "corpus_cache")
    # Retrieval recall: the gold facts present in what the research read (before compression).
    outputs = json.loads(ctx.store.read_text("tool_outputs.json"))
    read = "\n".join(
        (artifacts / c["artifact_path"]).read_text("utf-8")
        for c in outputs["calls"]
        if c["tool"] == "read_document" and c["status"] == "ok"
    )
    in_read = [f["id"] for f in gold["facts"] if all(re.search(p, read, re.IGNORECASE) for p in f["patterns"])]
    sources_read = sorted({c["source"] for c in outputs["calls"] if c["tool"] == "read_document" and c["source"]})
    checks = report.verified_citations + report.unverified_citations
    result = {
        "corpus": name,
        "engine": engine,
        "files": len(indexed.documents) + len(indexed.skipped),
        "documents": len(indexed.documents),
        "passages": len(indexed.passages),
        "skipped": [{"path": p, "reason": r} for p, r in indexed.skipped],
        "question": question,
        "plan": [s["title"] for s in json.loads(ctx.store.read_text("plan.json")).get("steps", [])],
        **score_report(report.markdown, gold),
        "gold_in_read_documents": len(in_read),
        "sources_read": sources_read,
        "citations_verified": report.verified_citations,
        "citations_unverified": report.unverified_citations,
        "citations_verified_share": round(report.verified_citations / checks, 4) if checks else None,
        "seconds": round(seconds, 2),
        "report": str(artifacts / ctx.partition_key / "report.md"),
    }
    return result


def synthetic_folder(root: Path, n: int) -> Path:
    """N small Markdown files, one of which states a fact in one table row."""
    root.mkdir(parents=True, exist_ok=True)
    words = "alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike november oscar".split()
    for i in range(n):
        sub = root / f"dept_{i % 40:02d}"
        sub.mkdir(exist_ok=True)
        body = " ".join(words[(i + j) % len(words)] for j in range(120))
        rows = "\n".join(
            f"| item {i}-{r} | {(i * 7 + r) % 1000} units | {words[(i + r) % len(words)]} |" for r in range(8)
        )
        extra = "\n| Zephyr widget recall rate | 0.37% | confirmed |" if i == n // 2 else ""
        (sub / f"memo_{i:05d}.md").write_text(
            f"# Memo {i}\n\nDate: 2025-{1 + i % 12:02d}-15\n\n## Notes\n\n{body}.\n\n## Inventory\n\n"
            f"| Item | Quantity | Code |\n| --- | --- | --- |\n{rows}{extra}\n",
            "utf-8",
        )
    return root


def scale_run(n: int, work: Path) -> dict[str, Any]:
    from deepresearch_dagster.core.tools.local_search import LocalCorpus

    folder = synthetic_folder(work / f"synthetic_{n}", n)
    cache = work / f"synthetic_{n}_cache"
    started = time.perf_counter()
    cold = LocalCorpus(folder, cache_dir=cache, progress=sys.stderr.isatty())
    cold_s = time.perf_counter() - started
    started = time.perf_counter()
    warm = LocalCorpus(folder, cache_dir=cache, progress=sys.stderr.isatty())
    warm_s = time.perf_counter() - started
    hit = warm.search("Zephyr widget recall rate", k=3, passages=True)
    return {
        "files": n,
        "passages": len(cold.passages),
        "cold_seconds": round(cold_s, 2),
        "cold_extracted": cold.indexed.extracted,
        "rerun_seconds": round(warm_s, 2),
        "rerun_extracted": warm.indexed.extracted,
        "rerun_hashed": warm.indexed.hashed,
        "table_row_found_first": bool(hit) and hit[0].document.path == f"dept_{(n // 2) % 40:02d}/memo_{n // 2:05d}.md",
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", action="append", help=f"corpus name (default: all of {corpora()})")
    parser.add_argument("--engine", default="offline", choices=["offline", "openai", "auto"])
    parser.add_argument("--scale", type=int, default=0, help="also time indexing N synthetic files (e.g. 10000)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--keep", type=Path, default=None, help="work folder to keep (corpus, artifacts, report)")
    parser.add_argument("--full", action="store_true", help="accepted for run_all.py: adds --scale 10000")
    args = parser.parse_args(argv)
    os.environ.setdefault("DAGSTER_HOME", tempfile.mkdtemp(prefix="dagster_home_"))
    results: dict[str, Any] = {"corpora": []}
    with tempfile.TemporaryDirectory(prefix="private_docs_") as tmp:
        work = args.keep.resolve() if args.keep else Path(tmp)
        for name in args.corpus or corpora():
            r = run_corpus(name, args.engine, work)
            results["corpora"].append(r)
            print(
                f"{name:12s} gold facts {r['found']}/{r['gold_facts']} ({r['share']:.0%})  "
                f"stale reported {r['stale_reported']}  citations verified "
                f"{r['citations_verified']}/{r['citations_verified'] + r['citations_unverified']}  "
                f"skipped {len(r['skipped'])}  {r['seconds']}s  "
                f"(gold facts in the documents read: {r['gold_in_read_documents']}/{r['gold_facts']})"
            )
            if r["missing"]:
                print(f"  missing: {', '.join(r['missing'])}")
            for s in r["stale"]:
                print(f"  stale {s['id']}: {s['line']}")
        scale = args.scale or (10_000 if args.full else 0)
        if scale:
            s = scale_run(scale, work)
            results["scale"] = s
            print(
                f"index {s['files']} files ({s['passages']} passages): cold {s['cold_seconds']}s, "
                f"re-run {s['rerun_seconds']}s with {s['rerun_extracted']} extracted / {s['rerun_hashed']} hashed; "
                f"table-row fact ranked first: {s['table_row_found_first']}"
            )
    results["summary"] = summary_figures(results)
    results["mode"] = "full" if args.full else "quick"
    write_result("private_docs", results, args.out)
    return 0


def summary_figures(results: dict[str, Any]) -> list[dict[str, Any]]:
    """The suite table's rows: per corpus, its share of gold facts (goal ≥ 80 %), with how the
    corpus relates to the heuristics; stale figures and unverified citations over all corpora."""
    rows = []
    for r in results["corpora"]:
        role, history = PROVENANCE.get(r["corpus"], ("held out", "not listed in PROVENANCE"))
        missing = ", ".join(r["missing"])
        rows.append(
            figure(
                f"gold facts in the report, {r['corpus']} ({role}: {history})",
                round(100 * r["share"], 1),
                goal="≥ 80 %",
                met=r["share"] >= GOAL_SHARE,
                unit="%",
                why=f"{r['found']} of {r['gold_facts']} found; missing: {missing}; "
                f"{r['gold_in_read_documents']} of {r['gold_facts']} were in the documents it read",
            )
        )
    stale = sum(r["stale_reported"] for r in results["corpora"])
    rows.append(figure("stale figures stated as current, all corpora", stale, goal="0", met=stale == 0))
    unverified = sum(r["citations_unverified"] for r in results["corpora"])
    checks = unverified + sum(r["citations_verified"] for r in results["corpora"])
    rows.append(
        figure(f"citations not verified against their raw artifact, of {checks}", unverified, "0", unverified == 0)
    )
    if "scale" in results:
        s = results["scale"]
        rows.append(figure(f"index {s['files']:,} files, cold", s["cold_seconds"], unit="s"))
        rows.append(
            figure("re-run: files extracted again", s["rerun_extracted"], goal="0", met=s["rerun_extracted"] == 0)
        )
    return rows


if __name__ == "__main__":
    raise SystemExit(main())
