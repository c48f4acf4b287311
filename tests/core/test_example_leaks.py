"""No worked example leaks (issue 24): every prompt's example comes from ``prompts/examples.toml``
(one invented domain), and an answer that repeats a distinctive example string its input does not
hold is invalid: stored, repaired once, then the role's fallback."""

from __future__ import annotations

import json
import re
import string
from collections import defaultdict
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from deepresearch_dagster.core.config import ResearchSettings
from deepresearch_dagster.core.errors import StructuredOutputError
from deepresearch_dagster.core.evaluation.judge import judge_for
from deepresearch_dagster.core.llm import prompts
from deepresearch_dagster.core.llm.contracts import COMPRESSOR
from deepresearch_dagster.core.llm.example_leaks import (
    LeakDetector,
    detector,
    find_leaks,
    folded,
    instruction_text,
)
from deepresearch_dagster.core.llm.prompts import (
    EXAMPLE_PLACEHOLDER,
    PROMPT_DIR,
    load_examples,
    load_prompt,
    prompt_version,
    raw_prompt,
    render,
)
from deepresearch_dagster.core.llm.structured import call_structured
from deepresearch_dagster.core.pipeline import run_research
from deepresearch_dagster.core.store.lineage import LineageStore
from tests.conftest import FIXTURES
from tests.fakes.openai_server import FakeOpenAIServer

EXAMPLES = load_examples()
SHOWN = {value for table in EXAMPLES.values() for value in table.values()}
EXAMPLE_WORDS = {w.lower() for value in SHOWN for w in re.findall(r"[^\W_]+", value)}
RAW = (
    "Sodium-ion cells use hard carbon anodes. Sodium is abundant and cheap. "
    "Commercial cells reached about 160 Wh/kg in 2023. CATL announced a cell in 2021."
)
COPIED = EXAMPLES["compressor"]["example"]
GROUNDED = json.dumps(
    {
        "summary_title": "Sodium-ion cells reach about 160 Wh/kg",
        "summary": "Sodium-ion cells use hard carbon anodes. Sodium is abundant and cheap. Cells reached 160 Wh/kg.",
        "extraction": ["Commercial cells reached about 160 Wh/kg in 2023."],
        "is_useful": True,
    }
)


def compressor_messages(raw: str = RAW) -> list[dict[str, str]]:
    system = render(
        "compressor",
        today="2026-11-22",
        plan_title="P",
        step_title="S",
        step_description="D",
        tool_name="T",
        data_marker="DATA-0",
    )
    return [{"role": "system", "content": system}, {"role": "user", "content": raw}]


# -- one place, one domain --------------------------------------------------------------------


def test_every_json_example_comes_from_the_examples_file_and_every_example_is_shown():
    for path in sorted(PROMPT_DIR.glob("*.md")):
        name, text = path.stem, raw_prompt(path.stem)
        assert "{{" not in text, f"{name}.md writes its own example; put it in examples.toml"
        wanted = set(EXAMPLE_PLACEHOLDER.findall(text))
        assert wanted == set(EXAMPLES.get(name, {})), name
    assert set(EXAMPLES) <= {p.stem for p in PROMPT_DIR.glob("*.md")}
    for name, table in EXAMPLES.items():
        for value in table.values():
            assert value in load_prompt(name).format_map(defaultdict(str)), name


def test_the_version_hash_covers_the_example(tmp_path, monkeypatch):
    override = tmp_path / "compressor.md"
    override.write_text(raw_prompt("compressor"), "utf-8")
    before = prompt_version("compressor", str(override))
    assert before == prompt_version("compressor")  # the same template and example
    changed = {**EXAMPLES, "compressor": {**EXAMPLES["compressor"], "example": COPIED.replace("412", "413")}}
    monkeypatch.setattr(prompts, "load_examples", lambda: changed)
    assert prompt_version("compressor", str(override)) != before


def test_distinctive_strings_are_invented_names_figures_and_phrases():
    by_kind: dict[str, set[str]] = {}
    for d in detector().strings:
        by_kind.setdefault(d.kind, set()).add(d.text)
        assert d.in_answer(d.text), d.text
    assert by_kind["name"] == {"Ystrowen", "Quorrindale", "Ostmirren", "Brelvask"}
    assert {"412 passengers", "47 minutes"} <= by_kind["figure"]
    assert "Research the fare gap before reporting" in by_kind["phrase"]
    # Headings, sentence starts and years are no distinctive strings.
    texts = {d.text for d in detector().strings if d.kind != "phrase"}
    assert not texts & {"Executive", "Limitations", "Only", "The", "1987"}


def test_no_distinctive_string_occurs_in_the_bundled_corpus_or_the_test_fixtures():
    """A copied example must be told apart from the facts of any material the tests research."""
    roots = [PROMPT_DIR.parent / "corpus", FIXTURES]
    for root in roots:
        for path in root.rglob("*"):
            if path.suffix in (".md", ".txt", ".html", ".csv", ".json") and path.is_file():
                text = path.read_text("utf-8", errors="replace")
                assert detector().found_in(text) == [], path


# -- the detector ---------------------------------------------------------------------------


def test_a_copied_example_is_a_leak():
    leaks = find_leaks(json.loads(COPIED), compressor_messages())
    assert {"Ystrowen", "Quorrindale", "Brelvask", "412 passengers"} <= set(leaks)
    # A figure in another spelling, a name in a sentence of the model's own.
    assert find_leaks("A 412-passenger boat.", compressor_messages()) == ["412 passengers"]
    assert find_leaks(["Sodium cells, like the Ystrowen's, are cheap."], compressor_messages()) == ["Ystrowen"]


def test_the_same_string_in_the_input_is_no_leak():
    raw = RAW + " The island ferry YSTROWEN carries 412 passengers per crossing."
    assert find_leaks("The Ystrowen carries 412 passengers per crossing.", compressor_messages(raw)) == []
    # ... but in the model's own earlier turn it is (the input is what the request gave the model).
    messages = [*compressor_messages(), {"role": "assistant", "content": "The Ystrowen"}]
    assert find_leaks("The Ystrowen", messages) == ["Ystrowen"]


def test_the_example_shown_in_a_user_message_is_not_input():
    """The outline and section examples travel in user messages: they are cut out of the input."""
    ask = render("reporter_outline", sections="Executive summary, Limitations")
    messages = [{"role": "user", "content": "Working memory:\n[1] Sodium (step 1)\nSodium is cheap."}]
    outline = json.loads(EXAMPLES["reporter_outline"]["example"])
    assert "Ystrowen" in find_leaks(outline, [*messages, {"role": "user", "content": ask}])
    # The headings the request lists are the model's to repeat.
    own = {"sections": [{"heading": "Executive summary", "points": ["Sodium is cheap [1]"]}]}
    assert find_leaks(own, [*messages, {"role": "user", "content": ask}]) == []


def test_the_leaks_seen_from_a_real_model_would_have_been_caught_with_the_old_examples():
    """The rules are general: the sodium-ion examples of before give the strings that leaked."""
    old = {
        "compressor": {
            "example": '{"summary_title": "CATL sodium-ion cell reaches 160 Wh/kg energy density", "summary": '
            '"CATL announced its first sodium-ion cell in July 2021. The cell reaches 160 Wh/kg, below LFP '
            'lithium-ion cells.", "extraction": ["CATL sodium-ion cell: 160 Wh/kg (July 2021)"], "is_useful": true}'
        },
        "critic": {
            "example": '{"contradictions": ["One source gives 160 Wh/kg for CATL\'s first cell, another 175 Wh/kg."]}'
        },
        "reporter_outline": {
            "example": '{"sections": [{"heading": "Limitations", "points": '
            '["Only one source on low-temperature capacity [3]"]}]}'
        },
    }
    old_detector = LeakDetector(old, instruction_text())
    heat = [{"role": "user", "content": "Urban heat islands raise night temperatures by 2 to 5 degrees."}]
    assert {"CATL", "160 Wh/kg"} <= set(old_detector.leaks("CATL sodium-ion cell: 160 Wh/kg (July 2021)", heat))
    assert old_detector.leaks("Only one source on low-temperature capacity [3]", heat)
    assert old_detector.leaks("Only one source on the heat island effect [3]", heat) == []


_LETTER_WORDS = st.text(string.ascii_letters + "éüß", min_size=1, max_size=12)
_NUMBERS = st.integers(0, 10**6).map(str)
_FREE_WORDS = st.one_of(_LETTER_WORDS, _NUMBERS).filter(lambda w: w.lower() not in EXAMPLE_WORDS)
_SEPARATORS = st.sampled_from([" ", ", ", ". ", " - ", "\n", ": ", " ("])


@st.composite
def free_text(draw: st.DrawFn) -> str:
    words = draw(st.lists(_FREE_WORDS, max_size=40))
    return "".join(w + draw(_SEPARATORS) for w in words)


@given(free_text(), free_text())
def test_text_of_words_not_in_the_examples_is_never_a_leak(answer, given_input):
    assert find_leaks(answer, [{"role": "user", "content": given_input}]) == []
    assert detector().found_in(answer) == []


@given(st.sampled_from(detector().strings), free_text(), free_text())
def test_a_distinctive_string_the_input_holds_is_never_a_leak(distinctive, before, after):
    answer = f"{before} {distinctive.text} {after}"
    assert distinctive.text in find_leaks(answer, [{"role": "user", "content": before}])
    assert find_leaks(answer, [{"role": "user", "content": f"{after} {distinctive.text} {before}"}]) == []


# Characters re.IGNORECASE matches with an ASCII letter although str.lower() does not lower to it.
_ODD_CASES = {"s": "ſ", "i": "ıİ", "k": "\u212a"}


@given(st.sampled_from(detector().strings), free_text(), st.randoms())
def test_the_needle_shortcut_finds_what_the_patterns_find(distinctive, around, rng):
    """An answer's fold is searched for each string's needle first: whatever the case of the copy,
    the shortcut never hides a match its pattern makes."""
    copy = "".join(rng.choice([c.upper(), c.lower(), *_ODD_CASES.get(c.lower(), "")]) for c in distinctive.text)
    for text in (f"{around} {copy} {around}", f"{around} {distinctive.text}", around):
        fold = folded(text)
        for d in detector().strings:
            assert d.in_answer(text, fold) == d.in_answer(text), (d.text, text)


# -- call_structured and the judge ----------------------------------------------------------


def test_call_structured_stores_the_copy_repairs_with_the_reason_then_accepts(fake_openai, make_context):
    ctx = make_context(engine="openai")
    fake_openai.script("compressor", COPIED, GROUNDED)
    result = call_structured(ctx, "compressor", compressor_messages(), {}, COMPRESSOR, "a.txt")
    assert result.extraction == ["Commercial cells reached about 160 Wh/kg in 2023."]
    rows = ctx.lineage.query("SELECT status, error, artifact FROM llm_calls ORDER BY rowid")
    assert [r["status"] for r in rows] == ["invalid", "ok"]
    assert "worked example" in rows[0]["error"] and '"Ystrowen"' in rows[0]["error"]
    assert (ctx.store.partition_dir / rows[0]["artifact"]).read_text("utf-8") == COPIED
    repair = fake_openai.requests_for("compressor")[1]["messages"]
    assert repair[-2] == {"role": "assistant", "content": COPIED} and rows[0]["error"] in repair[-1]["content"]


def test_a_copy_in_the_repair_round_too_ends_in_the_fallback(fake_openai, make_context):
    """The repair turn quotes the leaked strings: they still count as leaks (not input)."""
    ctx = make_context(engine="openai")
    fake_openai.script("compressor", COPIED, COPIED)
    with pytest.raises(StructuredOutputError, match="worked example"):
        call_structured(ctx, "compressor", compressor_messages(), {}, COMPRESSOR, "a.txt")
    rows = ctx.lineage.query("SELECT status FROM llm_calls ORDER BY rowid")
    assert [r["status"] for r in rows] == ["invalid", "invalid"]


def test_the_judge_counts_a_copied_verdict_as_unknown(fake_openai, tmp_path):
    from tests.core.test_evaluation_judge import CHECKS, item_and_score, make_partition

    settings = ResearchSettings.from_env(llm_backoff_base_s=0.0, llm_timeout_s=10.0)
    lineage = LineageStore.at(tmp_path / "judge.duckdb")
    folder = make_partition(settings.artifacts_path, checks=CHECKS[:1])
    fake_openai.script("judge_answer", EXAMPLES["judge_answer"]["example"])
    fake_openai.script("judge_claim", EXAMPLES["judge_claim"]["example"])
    result = judge_for("judge-model", settings, lineage)(*item_and_score(folder), folder)
    assert result["correct"] is None and result["unknown"] == 2
    assert [a["status"] for a in result["answers"]] == ["invalid", "invalid"]
    rows = lineage.query("SELECT status, error FROM llm_calls ORDER BY id")
    assert all(r["status"] == "invalid" and "worked example" in r["error"] for r in rows)


# -- end to end: a model that copies every example --------------------------------------------


def test_research_with_a_model_that_copies_every_example(fake_openai: FakeOpenAIServer, corpus_dir: Path):
    fake_openai.mode = "copies_example"
    settings = ResearchSettings.from_env(engine="openai", corpus_dir=str(corpus_dir))
    ctx, report = run_research("How do sodium-ion batteries work and what do they cost?", settings)

    partition = ctx.store.partition_dir
    markdown = (partition / "report.md").read_text("utf-8")
    assert "## References" in markdown and "[1]" in markdown
    for name in ("report.md", "plan.json", "compressed_summaries.json"):
        assert detector().found_in((partition / name).read_text("utf-8")) == [], name

    # What the model sent back was the example itself, kept as an invalid answer per role.
    stored = {p.name.rsplit("_", 1)[0]: p.read_text("utf-8") for p in (partition / "invalid_answers").iterdir()}
    assert {"planner", "compressor", "critic", "reporter"} <= set(stored)
    assert all(text in SHOWN for text in stored.values())
    rows = ctx.lineage.query(
        "SELECT role, status, error FROM llm_calls WHERE partition_key = ? ORDER BY rowid", [ctx.partition_key]
    )
    invalid = {r["role"] for r in rows if r["status"] == "invalid" and "worked example" in r["error"]}
    fallback = {r["role"] for r in rows if r["status"] == "fallback"}
    assert {"planner", "compressor", "critic", "reporter"} <= invalid & fallback
    assert {"planner", "compressor", "critic", "reporter"} <= set(report.fallbacks)
    assert fake_openai.stats()["per_role"]["compressor"] >= 2
