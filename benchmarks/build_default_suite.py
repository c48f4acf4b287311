"""Rebuild ``suites/default.jsonl`` and its corpora.

The default suite of ``make eval``: the first 10 HotpotQA and the first 10 MuSiQue items of the
development half of ``../shared/data/multihop_dev`` (``core.evaluation.suite.split_of``) over one
folder of their paragraphs (the union of the 20 items' ``context_files``, so every item also meets
the other items' distractors), copied with their attribution (``source``, ``license`` on each line;
suites/README.md); and one private-document corpus (``tests/fixtures/private_docs/kittiwake``, its
gold facts and stale figures, imported with the ``gold-facts`` importer).

    .venv/bin/python benchmarks/build_default_suite.py [--data ../shared/data/multihop_dev]
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

from deepresearch_dagster.core.evaluation.suite import IMPORTERS, SuiteItem, split_of, write_suite

REPO = Path(__file__).resolve().parents[1]
PER_DATASET = 10
PRIVATE = "kittiwake"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=str(REPO.parent / "shared" / "data" / "multihop_dev"))
    data = Path(parser.parse_args().data)
    rows = [json.loads(line) for line in (data / "questions.jsonl").read_text("utf-8").splitlines() if line]
    chosen = []
    for dataset in ("hotpotqa", "musique"):
        chosen += [r for r in rows if r["dataset"] == dataset and split_of(r["id"]) == "dev"][:PER_DATASET]
    corpus = REPO / "suites" / "multihop20"
    shutil.rmtree(corpus, ignore_errors=True)
    corpus.mkdir(parents=True)
    for name in sorted({f for r in chosen for f in r["context_files"]}):
        shutil.copyfile(data / "corpus" / name, corpus / name)
    items = [SuiteItem.model_validate({**r, "corpus": "multihop20"}) for r in chosen]
    private = REPO / "suites" / PRIVATE
    shutil.rmtree(private, ignore_errors=True)
    # The documents only: the question and its gold list are the suite's, not the corpus's.
    source = REPO / "tests" / "fixtures" / "private_docs" / PRIVATE
    shutil.copytree(source, private, ignore=shutil.ignore_patterns("gold.json", "question.txt"))
    (gold,) = IMPORTERS["gold-facts"](source)
    items.append(gold.model_copy(update={"corpus": PRIVATE}))
    write_suite(items, REPO / "suites" / "default.jsonl")
    print(f"{len(items)} items, {len(list(corpus.iterdir()))} paragraphs")


if __name__ == "__main__":
    main()
