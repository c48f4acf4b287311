"""Every sentence of the executive summary and key findings is cited and verified, whoever writes
it (issue 24 item 3): the offline reporter cites each sentence of a quoted passage, and after
verification a sentence left uncited is cited from the source that states it, rewritten once
from its source, or dropped (core/roles/cited_sentences.py)."""

from __future__ import annotations

import pytest

from deepresearch_dagster.core.evaluation.score import read_report, uncited
from deepresearch_dagster.core.heuristics.report import extractive_section, rewrite_from_source
from deepresearch_dagster.core.roles.citations import verify_citations
from deepresearch_dagster.core.roles.cited_sentences import cite_every_sentence, sentence_units

NOLAN = (
    "Christopher Edward Nolan (born 30 July 1970) is an English-American film director. "
    "He is one of the highest-grossing directors in history."
)
RAW = {
    "nolan.txt": f"# Christopher Nolan\n\n{NOLAN} His films have grossed more than 6 billion dollars.\n",
    "inception.txt": "# Inception\n\nInception is a 2010 science fiction film written and directed by Nolan. "
    "It grossed over 830 million dollars worldwide.\n",
}


def _entry(n: int, artifact: str, summary: str, extraction: list[str] | None = None, step: str = "1") -> dict:
    return {
        "n": n,
        "source": artifact.replace(".txt", ".md"),
        "source_title": artifact,
        "artifact_file": artifact,
        "step_id": step,
        "summary_title": artifact,
        "summary": summary,
        "extraction": extraction or [],
    }


ENTRIES = {
    1: [_entry(1, "nolan.txt", NOLAN, ["His films have grossed more than 6 billion dollars."])],
    2: [
        _entry(
            2,
            "inception.txt",
            "Inception is a 2010 science fiction film written and directed by Nolan. "
            "It grossed over 830 million dollars worldwide.",
        )
    ],
}
QUESTION = "Who is Christopher Nolan and how successful are his films?"


def _uncited(markdown: str) -> list[str]:
    return uncited(read_report(markdown, QUESTION))


# ------------------------------------------------------------------------------------------ reading


@pytest.mark.parametrize(
    "text",
    [
        "A first claim. [1] He said more. [1]",
        "A first claim [1]. A second one [2][3]. An uncited one.",
        "Dr. Smith left at 5 p.m. on Jan. 5. [2] Then he slept.",
        "No citation at all. Nor here.",
        'Morton felt that "it is overshadowed." [1] It starred in “Stella.” [6] A note (in 1990.) [2]',
        'It served the Berlin newspaper "B.Z.". [3] The sole example was built for "B.Z." in 1928. [3]',
    ],
)
def test_sentences_are_read_as_the_scorer_reads_them(text):
    units = sentence_units(text)
    assert " ".join(units) == " ".join(text.split())  # in their own words, citations where written
    scored = read_report(f"## Key findings\n\n- {text}\n", QUESTION)
    assert len(units) == len(scored.sections["key findings"])
    assert len([u for u in units if "[" not in u]) == len(uncited(scored))


# ------------------------------------------------------------------------------------------ offline reporter


def _payload(sources: list[dict]) -> dict:
    plan = {"plan_title": "Nolan", "steps": [{"step_id": "1", "title": "Christopher Nolan", "description": "Nolan."}]}
    return {"question": QUESTION, "plan": plan, "sources": sources, "critic_rounds": [], "open_gaps": []}


def test_a_passage_of_several_sentences_cites_each_sentence():
    # Before: "… film director. He is one of the highest-grossing directors in history. [1]" — the
    # first sentence of the passage carried no citation.
    payload = _payload([_entry(1, "nolan.txt", "Nolan directs films.", [NOLAN])])
    for heading in ("Key findings", "Executive summary"):
        body = extractive_section(heading, payload)
        assert "film director. [1] He is one of the highest-grossing directors in history. [1]" in body
        markdown = f"## {heading}\n\n{body}\n"
        assert _uncited(markdown) == []
        verified, checks = verify_citations(markdown, {1: payload["sources"]}, RAW)
        assert verified == markdown and checks and all(c.verified for c in checks)


def test_a_merged_citation_goes_after_the_sentence_its_source_states():
    bridge = "The Tamsin bridge opened to traffic in 1968. Its towers are 112 metres tall, the tallest in the region."
    sources = [
        _entry(1, "bridge.txt", "The Tamsin bridge is a road bridge.", [bridge]),
        _entry(2, "opening.txt", "The Tamsin bridge opened to traffic in 1968."),
    ]
    plan = {"plan_title": "Bridge", "steps": [{"step_id": "1", "title": "The Tamsin bridge", "description": "Facts."}]}
    payload = {"question": "When did the Tamsin bridge open?", "plan": plan, "sources": sources}
    body = extractive_section("Key findings", {**payload, "critic_rounds": [], "open_gaps": []})
    # Before: "… in 1968. Its towers are … region. [1][2]": [2] checked against the towers and removed.
    assert "opened to traffic in 1968. [1][2] Its towers are 112 metres tall, the tallest in the region. [1]" in body
    raws = {"bridge.txt": f"The Tamsin bridge is a road bridge. {bridge}", "opening.txt": sources[1]["summary"]}
    _, checks = verify_citations(body, {1: [sources[0]], 2: [sources[1]]}, raws)
    assert len(checks) == 4 and all(c.verified for c in checks)


def test_a_step_without_findings_is_left_out_of_key_findings():
    payload = _payload([_entry(1, "nolan.txt", NOLAN)])
    payload["plan"]["steps"].append({"step_id": "2", "title": "Box office of Tenet", "description": "Tenet."})
    body = extractive_section("Key findings", payload)
    assert "### 1. Christopher Nolan" in body and "### 2." not in body and "No useful source" not in body
    assert _uncited(f"## Key findings\n\n{body}\n") == []


def test_the_extractive_rewrite_quotes_its_source_or_says_none():
    assert rewrite_from_source("Inception was a 2010 film Nolan directed.", ENTRIES[2]) == (
        "Inception is a 2010 science fiction film written and directed by Nolan. [2]"
    )
    # A sentence that needs the one before it ("His films …") is never quoted alone.
    assert rewrite_from_source("Nolan's films grossed more than 6 billion dollars.", ENTRIES[1]) == "NONE"
    assert rewrite_from_source("The weather in Lisbon is mild.", ENTRIES[1]) == "NONE"


# ------------------------------------------------------------------------------------------ model reporter


REPORT = """## Executive summary

**Who is he?** Christopher Edward Nolan (born 30 July 1970) is an English-American film director. [1] \
He is the best director who ever lived [2]. Critics everywhere adore him.

## Key findings

### 1. Nolan

- He is one of the highest-grossing directors in history.
- His films have grossed more than 6 billion dollars. [1]

### 2. Weather

- Lisbon enjoys mild winters and hot summers.

## Analysis

An uncited sentence here is no concern of this pass.
"""


def test_uncited_sentences_are_cited_rewritten_or_dropped():
    verified, checks = verify_citations(REPORT, ENTRIES, RAW)
    assert "He is the best director who ever lived." in verified  # its [2] was removed
    asked = []

    def rewrite(section: str, sentence: str, n: int) -> str:
        asked.append((section, sentence, n))
        return "- It grossed over 830 million dollars worldwide. [2]"

    result = cite_every_sentence(verified, checks, ENTRIES, RAW, rewrite)
    md = result.markdown
    # Stated by source 1 as written: cited without a model call.
    assert "- He is one of the highest-grossing directors in history. [1]" in md
    # Its citation named source 2, which does not say it: one rewrite from source 2 only.
    assert asked == [("Executive summary", "He is the best director who ever lived.", 2)]
    assert "It grossed over 830 million dollars worldwide. [2]" in md and "best director" not in md
    # No source states them nor shares their subject: dropped, and the sub-heading left empty too.
    assert "Critics everywhere" not in md and "Lisbon" not in md and "### 2. Weather" not in md
    assert "**Who is he?**" in md and "### 1. Nolan" in md
    assert "An uncited sentence here" in md  # other sections are left as written
    assert _uncited(md) == []
    again, rechecked = verify_citations(md, ENTRIES, RAW)
    assert again == md and all(c.verified for c in rechecked)
    kinds = sorted((f.by, f.source) for f in result.fixes)
    assert kinds == [("citation", 1), ("dropped", None), ("dropped", None), ("model", 2)]
    assert all(c.verified for c in result.checks)


def test_a_rewrite_that_does_not_verify_or_repeats_the_section_is_dropped():
    markdown = (
        "## Key findings\n\n- Nolan was born in 1971 in Paris [1].\n"
        "- His films have grossed more than 6 billion dollars. [1]\n"
    )
    verified, checks = verify_citations(markdown, ENTRIES, RAW)
    for answer, reason in [
        ("Nolan was born in 1971 in Paris. [1]", "did not verify"),
        ("NONE", "did not verify"),
        ("His films have grossed more than 6 billion dollars. [1]", "repeats"),
        (None, "failed"),
    ]:
        result = cite_every_sentence(verified, checks, ENTRIES, RAW, lambda *a, answer=answer: answer)
        assert "Paris" not in result.markdown and _uncited(result.markdown) == []
        assert [f.by for f in result.fixes] == ["dropped"] and reason in (result.fixes[0].reason or "")


def test_a_fully_cited_report_is_left_byte_for_byte_and_rewrites_are_capped():
    clean = "## Executive summary\n\nIt grossed over 830 million dollars worldwide [2].\n"
    verified, checks = verify_citations(clean, ENTRIES, RAW)
    assert cite_every_sentence(verified, checks, ENTRIES, RAW, lambda *a: "x").markdown == clean
    wrong = "## Key findings\n\n" + "".join(f"- Nolan directed film number {i} in 19{i}0 [1].\n" for i in range(3, 6))
    verified, checks = verify_citations(wrong, ENTRIES, RAW)
    result = cite_every_sentence(verified, checks, ENTRIES, RAW, lambda *a: None, max_rewrites=2)
    assert result.rewrites_asked == 2 and len(result.dropped) == 3
    assert "more than 2 sentences" in (result.dropped[-1].reason or "")


# ------------------------------------------------------------------------------------------ whole research

DEMO = (
    "What are the main challenges in commercializing solid-state batteries, and how are manufacturers addressing them?"
)


def test_the_offline_demo_report_cites_every_sentence_of_its_summary_and_findings():
    from deepresearch_dagster.core.config import ResearchSettings
    from deepresearch_dagster.core.pipeline import run_research

    _, report = run_research(DEMO, ResearchSettings.from_env(engine="offline"), log=lambda m: None)
    parts = read_report(report.markdown, DEMO)
    assert len(parts.sentences(("executive summary", "key findings"))) >= 10
    assert uncited(parts) == []  # was 1: a two-sentence passage cited once, after its second sentence
    assert report.unverified_citations == 0 and report.verified_citations >= 10
    assert report.rewritten == [] and report.uncited_dropped == []  # quoted verbatim: nothing to repair


def test_a_section_left_without_a_sentence_says_so_instead_of_standing_empty():
    from deepresearch_dagster.core.heuristics.report import NO_FINDINGS
    from deepresearch_dagster.core.roles.cited_sentences import EMPTY_NOTICE

    markdown = (
        "## Executive summary\n\nCritics adore him.\n\n## Key findings\n\n- Lisbon is mild.\n\n## Analysis\n\nA.\n"
    )
    result = cite_every_sentence(markdown, [], ENTRIES, RAW, lambda *a: None)
    assert result.markdown == (
        f"## Executive summary\n\n{EMPTY_NOTICE}\n\n## Key findings\n\n{EMPTY_NOTICE}\n\n## Analysis\n\nA.\n"
    )
    assert _uncited(result.markdown) == [] and len(result.dropped) == 2
    # The offline reporter with nothing to quote writes the notice itself: nothing is dropped.
    nothing = _payload([_entry(1, "nolan.txt", "Contents. See also. Index.")])
    for heading in ("Executive summary", "Key findings"):
        assert extractive_section(heading, nothing) == NO_FINDINGS
