"""General mechanisms of the offline engine (issue 27): each a fact about any question, not a topic.

The texts are written for these tests (no dataset item): a first hop whose subject is a pronoun,
a page whose one sentence is long, a run of "He …" sentences, a number in words, and a "why" question."""

from __future__ import annotations

from deepresearch_dagster.core.heuristics.answer_types import supplies
from deepresearch_dagster.core.heuristics.compression import compress_extractively
from deepresearch_dagster.core.heuristics.critique import bridges
from deepresearch_dagster.core.heuristics.planning import plan_heuristically
from deepresearch_dagster.core.heuristics.report import findings, preceding_sentences


def test_evidence_with_a_pronoun_subject_bridges_to_its_pages_title():
    memory = [
        {
            "source": "Orla Brenn.txt",
            "summary": 'She is known for her lead role as Inspector Kade Morrow in the series "Harbour Lights".',
            "extraction": [],
            "step_id": "1",
        }
    ]
    question = 'Who did the actress who played Inspector Kade Morrow in "Harbour Lights" marry?'
    assert "Orla Brenn" in [name for name, _, _ in bridges(question, memory)]


def test_a_page_whose_one_sentence_is_long_is_quoted_all_the_same():
    sentence = (
        "Broadcasters often fall back on familiar fragments of orchestral music to suggest luxury or calm, and "
        "the pieces most often heard in this way include the Tarrow Nocturne, the Vell Serenade in D, the "
        "Morning Suite by Anselm Ruda, the Harbour Overture, the Long Field Variations and several short "
        "waltzes by the younger Kessel."
    )
    out = compress_extractively(
        {
            "raw": f"# Orchestral music\n\n{sentence}\n",
            "step_title": "Which piece by Anselm Ruda is used to suggest luxury",
            "plan_title": "Which piece by Anselm Ruda is used to suggest luxury",
            "tool_name": "read_document",
        }
    )
    assert out["is_useful"] and "Morning Suite" in out["summary"]


def test_a_run_of_sentences_opening_with_he_is_quoted_with_the_sentence_that_names_him():
    paragraph = (
        "Tomas Vell (born 1961) is a former rugby player who played for Carden for ten seasons. He studied law in "
        "Leeds. He was capped 14 times. He was a three-time league champion."
    )
    entry = {
        "n": 1,
        "source": "Tomas Vell.txt",
        "artifact_file": "a.txt",
        "step_id": "1",
        "summary": "Tomas Vell (born 1961) is a former rugby player who played for Carden for ten seasons. "
        "He was a three-time league champion.",
        "extraction": [],
    }
    payload = {
        "question": "How many times was Tomas Vell league champion?",
        "plan": {"steps": [{"step_id": "1", "title": "How many times was Tomas Vell league champion"}]},
        "sources": [entry],
        "preceding": preceding_sentences([entry], {"a.txt": paragraph}),
    }
    texts = [f.text for f in findings(payload)]
    assert any(t.startswith("Tomas Vell") and t.endswith("three-time league champion.") for t in texts), texts
    assert supplies("He was a three-time league champion.", {"count"})


def test_a_why_question_searches_for_causes_in_one_step_of_its_own():
    plan = plan_heuristically({"question": "Why do bridges ice before roads?", "max_steps": 5})
    queries = [q for s in plan["steps"] for q in s["queries"]]
    assert plan["steps"][0]["queries"] == ["bridges ice roads causes"]
    assert len(queries) == len(set(queries))  # no step left without a query of its own


def test_a_sentence_ending_in_an_abbreviation_keeps_its_full_stop_when_read_and_revised():
    from deepresearch_dagster.core.heuristics.report_critique import units

    text = "She was the mother of Hank Vell, Jr. [2] He sang. [3]"
    assert units(text) == ["She was the mother of Hank Vell, Jr. [2]", "He sang. [3]"]


def test_a_long_line_is_read_in_windows_and_accents_are_one_word():
    from deepresearch_dagster.core.text import content_terms

    assert content_terms("Akinoshū Hernández") == content_terms("Akinoshu Hernandez")
    filler = " ".join(f"Field{i} value{i}" for i in range(80))
    out = compress_extractively(
        {
            "raw": f"# Norland\n\n{filler} Population Total 2,913,123 {filler}\n",
            "step_title": "What is the population of Norland",
            "plan_title": "What is the population of Norland",
            "tool_name": "read_document",
            "source_title": "Norland",
        }
    )
    assert out["is_useful"] and "2,913,123" in " ".join([out["summary"], *out["extraction"]])


def test_a_listing_snippet_with_the_asked_kind_of_answer_is_kept():
    listing = {
        "query": "Brill Forest siege body water",
        "results": [
            {"path": "Siege of Brill.md", "title": "Siege of Brill", "snippet": "The siege of Brill lasted a month."},
            {
                "path": "Torvik.md",
                "title": "Torvik",
                "snippet": "Torvik (spelled Brill until 1928) is a city on the Ulda River in Norland.",
            },
        ],
    }
    import json

    out = compress_extractively(
        {
            "raw": json.dumps(listing),
            "kind": "json",
            "step_title": "What body of water is near the location of the Brill siege",
        }
    )
    assert any("Ulda River" in item for item in out["extraction"]), out


def test_a_question_word_is_searched_as_the_words_sources_state_its_answer_in():
    from deepresearch_dagster.core.heuristics.planning import content_query

    assert content_query("How tall is the Kell tower?") == "kell tower height"
    assert content_query("Why did the Kell tower close?") == "kell tower close causes"
    assert content_query("When did the Kell tower close?") == "kell tower close"  # a date is a value, no word


def test_a_finding_about_a_followed_bridge_is_on_topic():
    from deepresearch_dagster.core.heuristics.report_critique import critique_report

    question = "What year did the company Brisk Air is part of dissolve?"
    step = {"step_id": "1", "title": question, "description": "Answer it.", "queries": ["Brisk Air"]}
    bridge = {"step_id": "R1_1", "title": f"Tallow Group: {question}", "description": "", "queries": ["Tallow Group"]}
    markdown = "## Key findings\n\n- In 1995, the Tallow Group was wound up. [1]\n"
    source = {"n": 1, "source": "Tallow.md", "source_title": "Tallow", "summary_title": "Tallow"}
    plan = {"steps": [step], "followup_steps": [bridge]}
    issues = critique_report(markdown, {"question": question, "plan": plan, "sources": [source]}).issues
    assert not [i for i in issues if i.kind == "off_topic"], issues


def test_a_question_asking_a_kind_is_not_answered_by_any_name_nor_a_quantity_by_a_year():
    from deepresearch_dagster.core.heuristics.answer_types import answers, supplies

    part = "What time does the state stop selling ale"
    assert not answers("In the story, Norland takes over the nation one state at a time.", part)
    assert answers("In Norland, ale may be sold during the hours 7 a.m. to 3 a.m.", part)
    assert not supplies("Norland had a total of 1897 MW of wind power.", {"date"})
    assert supplies("Norland became a state in 1897.", {"date"})
