import pytest

from deepresearch_dagster.core.tools import Toolbox, ToolError
from deepresearch_dagster.core.tools.html_text import html_to_text
from deepresearch_dagster.core.tools.local_search import DEFAULT_CORPUS, LocalCorpus, corpus_tools


def test_bm25_ranks_the_relevant_document_first(corpus_dir):
    corpus = LocalCorpus(corpus_dir)
    hits = corpus.search("sodium ion cost lithium price", k=3)
    assert hits[0][0].path == "sodium_ion_costs.txt"
    assert all(d.path != "garden_roses.html" for d, _ in hits)


def test_html_documents_lose_navigation_and_footer(corpus_dir):
    doc = LocalCorpus(corpus_dir).get("garden_roses.html")
    assert doc.title == "Pruning Garden Roses"
    assert "Copyright" not in doc.text and "Home | Garden" not in doc.text
    assert "late winter" in doc.text


def test_tools_validate_arguments_and_report_missing_documents(corpus_dir):
    box = Toolbox(corpus_tools(LocalCorpus(corpus_dir)))
    result = box.call("local_search", {"query": "roses pruning"})
    assert result.kind == "json" and result.content["results"][0]["path"] == "garden_roses.html"
    with pytest.raises(ToolError):
        box.call("read_document", {"path": "nope.md"})
    with pytest.raises(ToolError):
        box.call("local_search", {"query": ""})
    with pytest.raises(ToolError):
        box.call("no_such_tool", {})


def test_stopword_only_query_returns_nothing(corpus_dir):
    assert LocalCorpus(corpus_dir).search("the and of", k=3) == []


def test_bundled_corpus_has_twenty_plus_substantial_documents():
    corpus = LocalCorpus(DEFAULT_CORPUS)
    assert len(corpus.documents) >= 20
    assert min(len(d.text.split()) for d in corpus.documents) > 500


def test_html_to_text_keeps_paragraphs():
    title, text = html_to_text("<title>T</title><p>One.</p><script>x()</script><p>Two.</p>")
    assert title == "T" and text == "One.\n\nTwo."


def test_function_definitions_are_fresh_copies(corpus_dir):
    box = Toolbox(corpus_tools(LocalCorpus(corpus_dir)))
    first = box.definitions()
    first[0]["function"]["parameters"]["properties"].clear()
    second = box.definitions()
    assert second[0]["function"]["parameters"]["properties"]
    assert "title" not in second[0]["function"]["parameters"]
