"""Question-grounded retrieval in the offline engine (issue 27, items 1–4): queries from the question's
content, reading close-ranked results, relevance by names and scores, and following a bridge."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from deepresearch_dagster.core.documents import Passage
from deepresearch_dagster.core.heuristics.answer_types import answers, specific
from deepresearch_dagster.core.heuristics.compression import compress_extractively
from deepresearch_dagster.core.heuristics.critique import bridges, critique_heuristically
from deepresearch_dagster.core.heuristics.planning import plan_heuristically
from deepresearch_dagster.core.heuristics.sentences import looks_english
from deepresearch_dagster.core.heuristics.terms import names
from deepresearch_dagster.core.models import PlanStep, ResearchPlan, SummaryBundle
from deepresearch_dagster.core.roles.citations import verify_citations
from deepresearch_dagster.core.roles.reporter import number_sources
from deepresearch_dagster.core.roles.researcher import ranking_terms
from deepresearch_dagster.core.roles.retrieval import RankedSource, close_ranked, rank_results
from deepresearch_dagster.core.text import content_terms
from deepresearch_dagster.core.tools.local_search import LocalCorpus, snippet
from tests.core.test_changes import _bundle, _summary

LELAND = (
    'Leland is a town in Brunswick County, North Carolina. A number of movies, such as "Maximum Overdrive" '
    '(1986), "Domestic Disturbance" (2001), and "We\'re the Millers" (2013) have been shot in or around Leland.'
)
LELAND_QUESTION = "Who directed the film that was shot in or around Leland, North Carolina in 1986?"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (LELAND_QUESTION, ["Leland, North Carolina"]),
        ("It is in Ford County, Kansas, near Dodge City", ["Ford County, Kansas", "Dodge City"]),
        ("Tom met Ann, Bob, Carl and Dan", ["Ann", "Bob", "Carl", "Dan"]),  # a list is not one name
        ("Who is the spouse of Big Eye's main director?", ["Big Eye"]),
        ("Heinkel HD 23 was a type of plane", ["Heinkel HD 23"]),
        ("Zhongzheng District is a district in Taipei, Republic of China", ["Zhongzheng District",
                                                                             "Taipei, Republic of China"]),
        ("In what city did Nicholas I, lord of Mecklenburg, die?", ["Nicholas I", "Mecklenburg"]),
        (LELAND, ["Maximum Overdrive", "Domestic Disturbance", "We're the Millers", "Brunswick County, North Carolina",
                  "Leland"]),
        ("Name the mother of Edward Stafford", ["Edward Stafford"]),  # a lone opening capital is grammar
    ],
)  # fmt: skip
def test_names_are_quoted_titles_and_capitalized_runs(text, expected):
    assert sorted(names(text)) == sorted(expected)


@given(st.text(max_size=300))
def test_names_never_fail_and_are_in_the_text(text):
    for name in names(text):
        assert name and all(word.rstrip(".") in text for word in name.replace("'s", "").split()[:1])


TEMPLATE = {"overview", "examples", "timeline", "works", "limitations", "outlook"}


@pytest.mark.parametrize(
    "question",
    [
        "In what country is Normandy located?",
        LELAND_QUESTION,
        "What is the population of the state where Dodge City Regional Airport is located?",
        'Who was Audrey Williams pregnant with during the recording of "Dear Brother"?',
    ],
)
def test_a_factoid_question_is_searched_by_its_content_and_names(question):
    plan = plan_heuristically({"question": question, "max_steps": 5})
    assert plan["direct_answer"] is False
    queries = [q for s in plan["steps"] for q in s["queries"]]
    for query in queries:
        stems = content_terms(query)
        assert len(stems) == len(set(stems)), query  # no word twice
        assert not {w.lower() for w in query.split()} & TEMPLATE, query  # no template words
    # The question's content, and each name alone.
    assert set(content_terms(queries[0])) >= {t for n in names(question) for t in content_terms(n)}
    assert all(n in queries for n in names(question) if len(n) > 3)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.sampled_from(["Who", "directed", "the", "film", "Leland", "North", "Carolina", "in", "1986",
                              "what", "city", "was", "born", "Acme", "Robotics", "and", "how", "why"]),
             min_size=1, max_size=14)
)  # fmt: skip
def test_no_query_repeats_a_word_or_adds_a_template_word_the_question_lacks(tokens):
    question = " ".join(["Who", *tokens]) + "?"
    plan = plan_heuristically({"question": question, "max_steps": 5})
    asked = {w.lower() for w in tokens}
    for step in plan["steps"]:
        for query in step["queries"]:
            stems = content_terms(query)
            added = {w.lower() for w in query.split()} - asked
            assert not added & {"overview", "examples", "timeline"}
            if not step["title"].startswith("Limitations"):
                assert len(stems) == len(set(stems)), query


def test_every_question_is_researched_even_a_definitional_one():
    assert plan_heuristically({"question": "Who is Ada Lovelace?"})["direct_answer"] is False


def test_specific_parts_and_accounts():
    assert specific("Who directed the film") and specific("In what country is Normandy located")
    assert specific("Thumb Wrestling Federation is on a network founded by who")
    assert not specific("What are the main challenges in commercializing solid-state batteries")
    assert not specific("Why are cities hotter at night")


def _ranked(*scores: float) -> list[RankedSource]:
    return [RankedSource(f"d{i}", f"d{i}", s, s, s, 1) for i, s in enumerate(scores)]


def test_results_ranking_close_to_the_kth_are_read_too():
    assert close_ranked(_ranked(0.9, 0.8, 0.78, 0.75, 0.3), 2) == 4
    assert close_ranked(_ranked(0.9, 0.8, 0.5), 2) == 2
    assert close_ranked(_ranked(0.9), 2) == 1
    assert close_ranked(_ranked(0.9, 0.8, 0.8), 2, exclude={"d2"}) == 2  # already read: not again


def test_a_rare_term_outweighs_common_ones_in_the_corpus_and_in_the_ranking(tmp_path):
    for i in range(4):
        (tmp_path / f"state{i}.md").write_text(f"# State {i}\n\nThe state of place {i} has a population.\n")
    (tmp_path / "kansas.md").write_text("# Kansas\n\nKansas is a state of the Midwest.\n")
    corpus = LocalCorpus(tmp_path, progress=False)
    n = len(corpus.passages)
    assert corpus.idf("kansa") > corpus.idf("state") > 0
    assert corpus.idf("state") == pytest.approx(math.log(1 + n / 5))
    assert corpus.idf("unseen") == 0  # a term no passage holds ranks no result above another
    listing = json.dumps(
        {
            "results": [
                {"path": "state0.md", "title": "State 0", "snippet": "state population", "score": 1.0},
                {"path": "kansas.md", "title": "Kansas", "snippet": "Kansas", "score": 1.0},
            ]
        }
    )
    # Two common words of three outrank the rare one counted alike; weighted by idf, the rare one wins.
    assert rank_results([listing], "Kansas state population")[0].source == "state0.md"
    assert rank_results([listing], "Kansas state population", weight=corpus.idf)[0].source == "kansas.md"


def _memory(*items: tuple[str, str]) -> list[dict]:
    return [{"source": src, "summary": text, "extraction": [], "step_id": "1"} for src, text in items]


def test_the_bridge_is_the_new_name_nearest_the_questions_words():
    memory = _memory(
        ("Leland, North Carolina.txt", LELAND),
        ("Chloë Leland.txt", "Chloë Leland is a writer and director. She is the daughter of director David Leland."),
    )
    found = bridges(LELAND_QUESTION, memory)
    assert found[0][0] == "Maximum Overdrive"
    _, source, query = found[0]
    assert source == "Leland, North Carolina.txt"
    # The name, and the question's words the first hop did not match ("directed", "film").
    assert query == "Maximum Overdrive directed film"
    # The other new names in one query, each word once: the corpus's term weights pick among them.
    others, _, pooled = found[1]
    assert others.startswith("Domestic Disturbance, We're the Millers")
    assert pooled.startswith("Domestic Disturbance We're the Millers") and pooled.endswith("directed film")
    assert len(pooled.split()) == len(set(pooled.split()))


def test_a_bridge_is_searched_with_the_question_words_the_evidence_states_least():
    question = (
        "When did the provisional government ruling during the reign of terror in the country premiering "
        "Kestrel Run start?"
    )
    memory = _memory(
        ("Kestrel Run.md", "Kestrel Run is a drama series. It premiered on television in Vantaria in 2005."),
        ("Provisional government.md", "A provisional government is a government ruling until elections."),
    )
    # "provisional government ruling" is what every source says; "reign terror" is what none does yet:
    # the page of the body that ruled Vantaria during the reign of terror is found by those words.
    name, source, query = bridges(question, memory)[0]
    assert (name, source) == ("Vantaria", "Kestrel Run.md") and query.startswith("Vantaria ")
    assert {"reign", "terror"} <= set(query.split()) and not {"government", "ruling"} & set(query.split())


def test_a_bridge_is_searched_with_the_question_s_names_its_source_does_not_state():
    # "the Olympics" belongs to the second hop: the gin's page never names them, the bridge's does.
    question = "What year did the Olympics take place in the country where Brannoch Gin is made?"
    memory = _memory(("Brannoch Gin.txt", "Brannoch Gin is a dry gin made in Scotland from juniper and heather."))
    name, source, query = bridges(question, memory)[0]
    assert (name, source) == ("Scotland", "Brannoch Gin.txt")
    assert "olympics" in query.split() and not {"brannoch", "gin"} & set(query.lower().split())


def test_a_bridge_named_farther_from_the_questions_words_is_searched_with_the_others():
    # The question's own words sit beside the wrong names ("historical figures"); the bridge's
    # sentence words its relation otherwise ("draws on the life of").
    found = bridges(QUILLMOOR_QUESTION, _memory(("Quillmoor.txt", QUILLMOOR)))
    assert found[0][0] == "Lise Varga"
    assert "Odo Perrick" in found[1][2]


def test_a_followed_bridge_leads_to_the_next_hop():
    memory = _memory(
        ("Big Eyes.md", "Big Eyes is a 2014 American drama film directed by Tim Burton."),
        ("Tim Burton.md", "Tim Burton was married to the artist Lena Gieseke, and later lived with Helena Carter."),
    )
    hops = bridges("Who is the spouse of Big Eyes's main director?", memory)
    assert hops and hops[0][1] == "Tim Burton.md"  # the next hop starts from the followed page
    assert all(name not in {"Tim Burton", "Big Eyes"} for name, _, _ in hops)


QUILLMOOR = (
    "Quillmoor is a novel by the writer Tamsin Yarrow. It draws on the life of a ferryman, Odo Perrick. "
    "The historical figures Lise Varga and Henrik Sollet appear in the novel as characters."
)
QUILLMOOR_QUESTION = "To which country was the historical figure used as the basis of the novel Quillmoor transported?"


def test_a_searched_bridge_gives_way_to_the_page_a_pooled_search_read():
    memory = _memory(
        ("Quillmoor.txt", QUILLMOOR),
        # A page whose title holds a name and more is not that name's page.
        ("Lise Varga Memorial Prize Winners.md", "The Lise Varga Memorial Prize was won by Anna Brook in 1990."),
        ("Odo Perrick.md", "Odo Perrick was a ferryman who was transported to Van Diemen's Land in 1821."),
    )
    nearest = bridges(QUILLMOOR_QUESTION, memory)[0]
    assert nearest[0] == "Lise Varga" and nearest[1] == "Quillmoor.txt"  # her own page was not read
    # Once her name was searched, the chain goes on from the page the pooled search read.
    hops = bridges(QUILLMOOR_QUESTION, memory, searched={nearest[2].lower()})
    assert hops and hops[0][1] == "Odo Perrick.md"


def test_an_unfollowed_bridge_makes_the_critic_ask_for_it():
    payload = {
        "question": LELAND_QUESTION,
        "plan": {"steps": [{"step_id": "1", "title": "Who directed the film", "queries": ["film leland"]}]},
        "memory": _memory(("Leland, North Carolina.txt", LELAND)),
    }
    verdict = critique_heuristically(payload)
    assert verdict["sufficiency"] < 7
    assert verdict["gaps"][0]["suggested_query"] == "Maximum Overdrive directed film"
    assert "Maximum Overdrive" in verdict["gaps"][0]["description"]


def test_a_brief_with_listed_parts_follows_no_bridge():
    payload = {
        "question": "Write a memo on Acme covering:\n- who runs it\n- who chairs the board",
        "plan": {"steps": [{"step_id": "1", "title": "Who runs it", "queries": ["Acme CEO"]}]},
        "memory": _memory(("people.md", "Acme is run by Jane Doe, and Tom Roe chairs the board.")),
    }
    assert not any("may lead to the answer" in g["description"] for g in critique_heuristically(payload)["gaps"])


def _compress(raw: str, kind: str = "text", step: str = "Who was Audrey Williams pregnant with") -> dict:
    payload = {
        "plan_title": "Who was Audrey Williams pregnant with during the recording of Dear Brother",
        "step_title": step,
        "step_description": f"Answer the sub-question '{step}?'.",
        "tool_name": "read_document" if kind == "text" else "local_search",
        "raw": raw,
        "kind": kind,
        "source_title": "Audrey Williams",
    }
    return compress_extractively(payload)


def test_a_passage_naming_what_the_question_names_is_useful():
    raw = (
        "# Audrey Williams\n\nAudrey Mae Sheppard Williams (February 28, 1923 – November 4, 1975), was an American "
        "musician known for being the first wife of country music icon Hank Williams, Sr. and the mother of Hank "
        "Williams, Jr. She divorced in 1952.\n"
    )
    out = _compress(raw)
    assert out["is_useful"] and "Hank Williams, Jr." in out["summary"]


def test_a_listing_whose_snippet_answers_the_step_keeps_the_snippet():
    results = [
        {"path": "Normans.md", "title": "Normans", "score": 9.1, "snippet": "Normandy, a region in France, was "
         "named after the Normans who settled there."},
        {"path": "Poverty.md", "title": "Poverty in the United States", "score": 8.7, "snippet": "The poverty "
         "rate ranks states by income."},
    ]  # fmt: skip
    raw = json.dumps({"query": "country normandy located", "results": results * 3})
    out = _compress(raw, "json", step="In what country is Normandy located")
    assert out["is_useful"]
    assert out["extraction"] == [results[0]["snippet"]]


def _listing_memory(extraction: list[str]) -> SummaryBundle:
    """A research whose only memory is a search listing's summary (``listing_results`` tells a
    listing by its JSON artifact) keeping ``extraction``."""
    listing = _summary("1.1", None, extraction).model_copy(update={"artifact_file": "search.json"})
    return _bundle("k", listing)


def test_a_snippet_kept_from_a_listing_is_quoted_as_its_documents_words():
    cut = "Poverty in the United States is measured by income, by region, by household size and by …"
    results = [
        {"path": "Normans.md", "title": "Normans", "snippet": 'Normandy, a "region" in France, was named after them.'},
        {"path": "Poverty.md", "title": "Poverty", "snippet": cut},
    ]  # fmt: skip
    raws = {"search.json": json.dumps({"query": "country normandy located", "results": results}, indent=2)}
    entries = number_sources(_listing_memory([results[0]["snippet"], cut]), raws)
    quoted = [e for e in entries if e["source"]]
    assert [(e["source"], e["source_title"], e["extraction"]) for e in quoted] == [
        ("Normans.md", "Normans", [results[0]["snippet"]])
    ]
    assert quoted[0]["artifact_file"] == "search.json"  # verified against the listing that quotes it
    listing = [e for e in entries if not e["source"]]
    assert listing[0]["extraction"] == [cut]  # a snippet cut short is no quote of the document
    by_n = {e["n"]: [e] for e in entries}
    _, checks = verify_citations(f"{results[0]['snippet']} [{quoted[0]['n']}]", by_n, raws)
    assert [c.verified for c in checks] == [True]


@settings(max_examples=80, deadline=None)
@given(st.lists(st.from_regex(r"[A-Za-z]{1,60}", fullmatch=True), min_size=1, max_size=120), st.integers(20, 400))
def test_a_snippet_is_whole_words_and_says_when_it_is_cut(tokens, limit):
    text = " ".join(tokens)
    out = snippet(Passage(0, 1, "", None, text), tokens[0], max_chars=limit)
    assert len(out) <= limit
    if len(text) <= limit:
        assert out == text
    else:
        head = out.removesuffix(" …")
        assert out.endswith(" …") and text.startswith(head)
        if " " in text[: limit - 2]:  # cut after a whole word, unless the window is one word
            assert text[len(head)] == " "


@pytest.mark.parametrize(
    ("sentence", "part", "expected"),
    [
        ("Maximum Overdrive is a 1986 film written and directed by Stephen King.", "Who directed Maximum Overdrive",
         True),
        ("Maximum Overdrive is a horror film.", "Who directed Maximum Overdrive", False),  # no name it lacks
        ("Normandy is a region of France.", "In what country is Normandy located", True),
        ("The club was formed in 1993.", "The Adelaide team was formed in what year", True),
        ("The club plays in Adelaide.", "When was the club formed", False),
    ],
)  # fmt: skip
def test_a_sentence_answers_a_part_with_the_kind_it_asks_for(sentence, part, expected):
    assert answers(sentence, part) is expected


def test_a_document_the_query_names_by_its_title_ranks_first(tmp_path, monkeypatch):
    from deepresearch_dagster.core.tools import local_search

    (tmp_path / "Kansas.md").write_text(
        "# Kansas\n\nKansas is a U.S. state in the Midwest of the country. Its population was 2,913,123 in 2019.\n"
    )
    (tmp_path / "Dodge City, Kansas.md").write_text(
        "# Dodge City, Kansas\n\nDodge City is the Kansas city of the state population count. The state of Kansas "
        "counts its population.\n"
    )
    for name in ("Ohio", "Texas", "Utah"):
        (tmp_path / f"{name}.md").write_text(f"# {name}\n\n{name} is a U.S. state with its own population.\n")
    corpus = local_search.LocalCorpus(tmp_path)
    assert corpus.search_passages("Kansas population state", 1)[0].document.path == "Kansas.md"
    # Without the title match the city's page, which repeats the query's words, comes first.
    monkeypatch.setattr(local_search, "TITLE_MATCH", 1.0)
    assert corpus.search_passages("Kansas population state", 1)[0].document.path == "Dodge City, Kansas.md"


def test_a_name_typed_without_its_accents_finds_its_page(tmp_path):
    from deepresearch_dagster.core.tools.local_search import LocalCorpus

    (tmp_path / "Akinoshū Kenji.md").write_text("# Akinoshū Kenji\n\nAkinoshū Kenji was born in Hiroshima.\n")
    (tmp_path / "Other.md").write_text("# Other\n\nA page about sumo wrestlers born in Tokyo.\n")
    hits = LocalCorpus(tmp_path).search_passages("Akinoshu Kenji birthplace", 1)
    assert hits[0].document.path == "Akinoshū Kenji.md"


def test_a_name_the_question_gives_that_no_step_searched_is_a_gap():
    question = "Zhongzheng District is in Taipei; the late President Chiang Kai-shek died on which date?"
    queries = ["zhongzheng district taipei", "Zhongzheng District"]
    plan = {"steps": [{"step_id": "1", "title": "t", "queries": queries}]}
    verdict = critique_heuristically({"question": question, "plan": plan, "memory": []})
    assert verdict["gaps"][0]["suggested_query"].endswith("Chiang Kai-shek")
    assert verdict["sufficiency"] < 7


@pytest.mark.parametrize(
    "sentence",
    [
        "Vic Darchinyan (Armenian: Վախթանգ Դարչինյան ; born 7 January 1976) is an Armenian professional boxer.",
        "Rich Man, Poor Man is a 1969 novel by Irwin Shaw about two brothers and their family.",
    ],
)
def test_a_gloss_in_another_script_or_a_foreign_title_is_english_prose(sentence):
    assert looks_english(sentence)


def test_a_followup_is_ranked_by_its_query_alone_each_term_by_its_rarity():
    first = PlanStep(step_id="1", title="Population of the state", description="Find the state.", queries=["a b"])
    plan = ResearchPlan(plan_title="State population", steps=[first])
    gap = "Ford County, Kansas: what is the population of the state where the airport is?"
    followup = PlanStep(step_id="R1_1", title=gap, description=f"{gap} Search for 'x'.", queries=["Ford County"])
    assert ranking_terms(plan, followup, len) == ("Ford County", len)
    assert ranking_terms(plan, first, len) == ("Population of the state Find the state. a b", None)
