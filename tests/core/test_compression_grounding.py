"""Grounding at compression time (issue 24, item 1): a model's summary sentences and extraction
bullets whose figures or names the raw output does not give never enter working memory."""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from deepresearch_dagster.core.config import ResearchSettings
from deepresearch_dagster.core.llm.grounding import Evidence, names
from deepresearch_dagster.core.models import CompressionResult, SummaryBundle
from deepresearch_dagster.core.pipeline import run_research
from deepresearch_dagster.core.roles.compressor import compress
from deepresearch_dagster.core.text import split_sentences
from tests.core.test_compressor import RAW, STEP, VALID, _record

INVENTED = "Revenue: 999 million."
PAGE = (
    "The Environment Agency approved the scheme on 21 November 2022. Harrowgate Civils Ltd won the £18.6m "
    "contract, the largest of 1,400 bids. Cells reached 160 Wh/kg in 2023, and prices fell 12 per cent. "
    "Chief engineer Margaret Oduya led the work. The pumping station cost $1.2 billion. "
    "Jürgen Müller's team tested 3\u2009500 cells. Three sites were chosen."
)


def missing(statement: str, raw: str = PAGE) -> list[str]:
    return Evidence([raw]).missing(statement)


# -- figures ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "statement",
    [
        "Cells reached 160Wh/kg.",  # no space before the unit
        "Cells reached 160 Wh/kg in 2023.",
        "There were 1400 bids.",  # thousands separator left out
        "Prices fell 12%.",  # another spelling of the unit
        "The contract was worth £18.6 million.",  # the scale spelled out
        "The station cost $1.2bn.",
        "The station cost 1.20 billion.",  # trailing zero, no currency
        "The team tested 3,500 cells.",  # a thin-space thousands separator in the output
        "The scheme was approved on November 21, 2022.",  # the date in another order
        "The scheme was approved on 2022-11-21.",
        "3 sites were chosen.",  # spelled out in the output
    ],
)
def test_figures_in_the_output_are_supported(statement):
    assert missing(statement) == []


@pytest.mark.parametrize(
    ("statement", "absent"),
    [
        (INVENTED, "999 million"),
        ("Cells reached 170 Wh/kg.", "170 Wh/kg"),
        ("Cells reached 160 km.", "160 km"),  # a value the output gives only in another unit
        ("The contract was worth $18.6m.", "$18.6m"),  # another currency
        ("Prices fell 12 per cent in 2024.", "2024"),  # a year the output does not give
        ("There were 1,401 bids.", "1,401"),
        ("The scheme was approved on 21 October 2022.", "21 oct 2022"),  # a month the output does not give
    ],
)
def test_figures_not_in_the_output_are_named(statement, absent):
    assert absent in missing(statement)


def test_a_bare_value_in_the_output_supports_any_unit():
    # A table column states its unit once, in the header: "Energy density (Wh/kg) | 160".
    assert missing("Cells reached 160 Wh/kg.", "| Energy density (Wh/kg) | 160 |") == []


# -- names -----------------------------------------------------------------------------------


def test_names_are_capitalized_runs_that_do_not_open_a_sentence():
    assert names("The Environment Agency approved it. Revenue grew at Harrowgate Civils Ltd, says Oduya.") == [
        "Environment Agency",
        "Harrowgate Civils Ltd",
        "Oduya",
    ]
    # A sentence-initial capitalized common word is no name; nor a capitalized stopword.
    assert names("Revenue grew. Prices fell. In The end it rose.") == []
    assert names("- Contractor chosen in 2022") == []  # a list marker opens the statement


@pytest.mark.parametrize(
    "statement",
    [
        "The scheme was approved by the Environment Agency.",
        "The work was led by Margaret Oduya.",
        "The team of Jurgen Muller tested cells.",  # accents folded
        "Muller's team tested cells.",
        "The contract went to harrowgate civils.",  # case
        "Work was led by the engineer Oduya of Harrowgate Civils Ltd.",  # neighbouring sentences
    ],
)
def test_names_in_the_output_are_supported(statement):
    assert missing(statement) == []


@pytest.mark.parametrize(
    ("statement", "absent"),
    [
        ("The scheme was approved by Natural England.", "Natural England"),
        ("The work was led by Margaret Thatcher.", "Margaret Thatcher"),
        # Two names of the output, joined into one it never states (sentences far apart).
        ("The work was led by Margaret Müller.", "Margaret Muller"),
    ],
)
def test_names_not_in_the_output_are_named(statement, absent):
    assert missing(statement) == [absent]


def test_step_and_source_titles_supply_names_never_figures():
    evidence = Evidence(["Costs fell sharply."], ["Thames Tideway Tunnel costs in 2024"])
    assert evidence.missing("Costs of the Thames Tideway Tunnel fell sharply.") == []
    assert evidence.missing("Costs fell sharply in 2024.") == ["2024"]


def test_listing_text_grounds_the_models_own_words():
    listing = json.dumps(
        {
            "query": "sodium-ion cost",
            "results": [
                {"title": "CATL sodium-ion cell reaches 160 Wh/kg", "snippet": "Costs near $77/kWh.", "url": "u1"},
                {"title": "Sodium-ion batteries explained", "snippet": "Hard carbon anodes.", "url": "u2"},
            ],
        }
    )
    evidence = Evidence.of_output(listing, "json")
    assert evidence.missing("The search returned 2 results; the first says CATL reached 160Wh/kg.") == []
    assert evidence.missing("A listed cell from BYD costs $77 per kWh.") == ["BYD"]
    assert evidence.missing("The search returned 5 results.") == ["5"]


# -- properties --------------------------------------------------------------------------------

_LOWER = "abcdefghijklmnopqrstuvwxyz"
_UPPER = _LOWER.upper()


def _figure(value: int, grouped: bool, decimals: str, currency: str, unit: str) -> str:
    return f"{currency}{value:,}{decimals}{unit}" if grouped else f"{currency}{value}{decimals}{unit}"


_WORD = st.one_of(
    st.text(_LOWER, min_size=1, max_size=9),
    st.builds(
        lambda a, b, s: a + b + s,
        st.sampled_from(_UPPER),
        st.text(_LOWER + "éüçø", max_size=8),
        st.sampled_from(["", "'s"]),
    ),
    st.text(_UPPER, min_size=2, max_size=5),
    st.builds(
        _figure,
        st.integers(0, 10**7),
        st.booleans(),
        st.sampled_from(["", ".5", ".25", ".0"]),
        st.sampled_from(["", "£", "$", "€"]),
        st.sampled_from(["", "%", " m", "bn", " million", " Wh/kg", "Wh/kg", " km", " per cent", " in"]),
    ),
    st.builds(lambda y, m, d: f"{y}-{m:02d}-{d:02d}", st.integers(1500, 2099), st.integers(1, 12), st.integers(1, 28)),
    st.builds(
        lambda d, m, y: f"{d} {m} {y}",
        st.integers(1, 31),
        st.sampled_from(["January", "Feb", "March", "Sept"]),
        st.integers(1500, 2099),
    ),
    st.sampled_from(["the", "The", "of", "In", "Dr.", "U.S.", "e.g.", "(", ")", "—", "“Quote”", "1\u2009400", "3'500"]),
)
_SENTENCE = st.builds(
    lambda words, sep, end: sep.join(words) + end,
    st.lists(_WORD, min_size=1, max_size=14),
    st.sampled_from([" ", " ", ", ", ","]),  # prose, and rows of a CSV file
    st.sampled_from(".!?;: "),
)
_TEXT = st.builds(
    lambda parts, sep: sep.join(parts),
    st.lists(_SENTENCE, min_size=1, max_size=8),
    st.sampled_from([" ", "\n", "\n\n"]),
)


@settings(max_examples=200, deadline=None)
@given(raw=_TEXT, data=st.data())
def test_a_sentence_taken_verbatim_from_the_output_is_supported(raw, data):
    sentence = data.draw(st.sampled_from(split_sentences(raw)))
    assert Evidence([raw]).missing(sentence) == []


@settings(max_examples=200, deadline=None)
@given(raw=st.text(min_size=1, max_size=400), data=st.data())
def test_a_verbatim_sentence_of_any_text_is_supported(raw, data):
    sentences = split_sentences(raw)
    assume(sentences)
    assert Evidence([raw]).missing(data.draw(st.sampled_from(sentences))) == []


@settings(max_examples=200, deadline=None)
@given(raw=_TEXT, data=st.data(), number=st.integers(10_000, 10**9), grouped=st.booleans())
def test_a_sentence_with_a_number_the_output_lacks_is_not_supported(raw, data, number, grouped):
    assume(str(number) not in re.sub(r"\D", "", raw))  # in no writing of the output
    sentence = data.draw(st.sampled_from(split_sentences(raw)))
    written = f"{number:,}" if grouped else str(number)
    assert written in Evidence([raw]).missing(f"{sentence} It counted {written} in all.")


# -- the compressor ------------------------------------------------------------------------------


def test_an_unsupported_bullet_is_dropped_and_the_answer_kept(fake_openai, make_context):
    ctx = make_context(engine="openai")
    answer = json.loads(VALID) | {"extraction": ["CATL announced a cell in 2021.", INVENTED]}
    fake_openai.script("compressor", json.dumps(answer))
    summary = compress(ctx, STEP, _record(ctx), RAW, "text")
    assert not summary.fallback
    assert summary.result.extraction == ["CATL announced a cell in 2021."]
    assert summary.result.summary == json.loads(VALID)["summary"]
    assert (summary.grounding.grounded, summary.grounding.dropped) == (4, 1)  # 3 sentences, 1 bullet kept
    assert INVENTED in ctx.store.read_text("invalid_answers/compressor_1.txt")
    row = ctx.lineage.query("SELECT grounded, dropped FROM compressions")[0]
    assert (row["grounded"], row["dropped"]) == (4, 1)
    # A cache hit carries the counts of the compression it reuses.
    again = compress(ctx, STEP, _record(ctx), RAW, "text")
    assert again.grounding == summary.grounding and len(fake_openai.requests_for("compressor")) == 1


def test_too_few_supported_sentences_ask_the_model_once_more(fake_openai, make_context):
    ctx = make_context(engine="openai")
    invented = json.loads(VALID) | {
        "summary": "Sodium-ion cells use hard carbon anodes. Cells reached 999 Wh/kg. Cells were sold by BYD in 2019."
    }
    fake_openai.script("compressor", json.dumps(invented), VALID)
    summary = compress(ctx, STEP, _record(ctx), RAW, "text")
    assert not summary.fallback and summary.result == CompressionResult.model_validate_json(VALID)
    assert (summary.grounding.grounded, summary.grounding.dropped) == (4, 2)
    repair = fake_openai.requests_for("compressor")[1]["messages"][-1]["content"]
    assert "'Cells reached 999 Wh/kg.' (not in the output: 999 Wh/kg)" in repair
    assert "'Cells were sold by BYD in 2019.' (not in the output: 2019, BYD)" in repair


def test_an_answer_still_unsupported_after_the_repair_falls_back_to_quoting(fake_openai, make_context):
    ctx = make_context(engine="openai")
    invented = json.loads(VALID) | {
        "summary": "Cells reached 999 Wh/kg. Cells were sold by BYD in 2019. Sodium is abundant."
    }
    fake_openai.script("compressor", json.dumps(invented), json.dumps(invented))
    summary = compress(ctx, STEP, _record(ctx), RAW, "text")
    assert summary.fallback
    assert (summary.grounding.grounded, summary.grounding.dropped) == (0, 4)
    assert sorted(p.name for p in (ctx.store.partition_dir / "invalid_answers").iterdir()) == [
        "compressor_1.txt",
        "compressor_2.txt",
    ]
    rows = ctx.lineage.query("SELECT status, error FROM llm_calls ORDER BY id")
    assert [r["status"] for r in rows] == ["ok", "ok", "fallback"]
    assert rows[-1]["error"].startswith("invalid: ") and "supported by the raw output" in rows[-1]["error"]


def test_the_offline_engine_is_not_checked(make_context):
    ctx = make_context()
    summary = compress(ctx, STEP, _record(ctx), RAW, "text")
    assert summary.grounding.grounded == summary.grounding.dropped == 0


def test_an_invented_figure_never_reaches_working_memory_or_the_report(fake_openai, corpus_dir):
    fake_openai.mode = "invents_figure"  # every compressor answer: the default one plus INVENTED
    options = ResearchSettings.from_env(engine="openai", corpus_dir=str(corpus_dir), depth=0)
    ctx, report = run_research("What do sodium-ion cells cost?", options, log=lambda m: None)
    answers = fake_openai.requests_for("compressor")
    assert answers and all(
        "999 million" not in m["content"] for r in fake_openai.requests_for("researcher") for m in r["messages"]
    )
    bundle = SummaryBundle.model_validate_json(ctx.store.read_text("compressed_summaries.json"))
    assert bundle.working_memory and not any(INVENTED in s.result.extraction for s in bundle.summaries)
    assert "999 million" not in ctx.store.read_text("report.md")
    # Each model answer that had it is kept whole under invalid_answers/.
    kept = sorted((ctx.store.partition_dir / "invalid_answers").glob("compressor_*.txt"))
    assert len(kept) == len(answers) and all(INVENTED in p.read_text() for p in kept)
    # Counted per summary, in DuckDB, and per research in report.json.
    assert all(s.grounding.dropped == 1 and s.grounding.grounded > 0 for s in bundle.summaries)
    stored = json.loads(ctx.store.read_text("report.json"))
    assert stored["grounding"] == report.grounding.model_dump()
    assert stored["grounding"] == {"grounded": sum(s.grounding.grounded for s in bundle.summaries), "dropped": 6}
    rows = ctx.lineage.query("SELECT sum(dropped) AS d FROM summaries WHERE partition_key = ?", [ctx.partition_key])
    assert rows[0]["d"] == len(answers) == 6


def test_default_model_answers_lose_nothing(fake_openai, corpus_dir):
    # The fake model quotes the output: its statements are all supported, none is dropped.
    options = ResearchSettings.from_env(engine="openai", corpus_dir=str(corpus_dir), depth=0)
    _, report = run_research("What do sodium-ion cells cost?", options, log=lambda m: None)
    assert report.grounding.grounded > 0 and report.grounding.dropped == 0
