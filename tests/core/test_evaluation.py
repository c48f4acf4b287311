"""The evaluation scorer on hand-built research folders with known outcomes, the suite reader's
bad-input handling, and the matching rules as properties."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from deepresearch_dagster.core.errors import SuiteError
from deepresearch_dagster.core.evaluation.matching import Haystack, any_in, contains, normalize
from deepresearch_dagster.core.evaluation.report import (
    compare,
    compare_lines,
    sign_test,
    summary_lines,
    table_lines,
    wilson,
)
from deepresearch_dagster.core.evaluation.run import EvalConfig, Evaluation, summarize
from deepresearch_dagster.core.evaluation.score import ItemScore, read_report, score_item, uncited
from deepresearch_dagster.core.evaluation.suite import IMPORTERS, SuiteItem, load_suite, split_of

PLAN = "Lilu question"
RAW = "lilu_question"


def research_folder(
    tmp_path: Path,
    report_lines: list[str],
    memory: list[tuple[str, bool]],
    raw: dict[str, str],
    verified: int = 1,
    removed: int = 0,
) -> Path:
    """A research partition as the pipeline leaves it: plan, raw outputs, summaries, report."""
    folder = tmp_path / "lilu-question-0000"
    (folder / RAW).mkdir(parents=True)
    (folder / "plan.json").write_text(json.dumps({"plan_title": PLAN, "steps": []}))
    for name, text in raw.items():
        (folder / RAW / name).write_text(text)
    summaries = [
        {
            "injected_tokens": 10,
            "result": {"summary_title": "Summary", "summary": text, "extraction": [], "is_useful": useful},
        }
        for text, useful in memory
    ]
    bundle = {"compressor_model": "offline", "prompt_version": "compressor-x", "summaries": summaries}
    (folder / "compressed_summaries.json").write_text(json.dumps(bundle))
    markdown = "\n".join(["# Lilu question", "", "**Question:** If Gallu is a demon Lilu is what?", "", *report_lines])
    (folder / "report.md").write_text(markdown)
    report = {"partition_key": folder.name, "verified_citations": verified, "unverified_citations": removed}
    (folder / "report.json").write_text(json.dumps(report))
    return folder


ITEM = SuiteItem(id="q1", question="If Gallu is a demon Lilu is what?", answers=["a spirit"])


def test_answer_only_in_raw(tmp_path: Path) -> None:
    folder = research_folder(
        tmp_path,
        ["## Executive summary", "", "Lilu is associated with Gallu. [1]"],
        memory=[("Lilu is a demon.", True), ("A lilu is a spirit.", False)],  # not useful: never injected
        raw={"x__read_document.txt": "A lilu is a masculine Akkadian word for A  Spirit."},
    )
    score = score_item(ITEM, "dev", folder)
    assert (score.answer_in_raw, score.answer_in_memory, score.answer_in_report) == (True, False, False)
    assert score.answer_in_findings is False


def test_answer_in_memory_lost_before_the_report(tmp_path: Path) -> None:
    folder = research_folder(
        tmp_path,
        ["## Executive summary", "", "Lilu is associated with Gallu. [1]"],
        memory=[("A lilu is a spirit.", True)],
        raw={"x__local_search.json": json.dumps({"results": [{"snippet": "a lilu is a spirit"}]})},
    )
    score = score_item(ITEM, "dev", folder)
    assert (score.answer_in_raw, score.answer_in_memory, score.answer_in_report) == (True, True, False)
    assert score.injected_tokens == 10


def test_answer_in_references_only_is_in_the_report_but_not_a_finding(tmp_path: Path) -> None:
    folder = research_folder(
        tmp_path,
        ["## Key findings", "", "- Lilu is a demon. [1]", "", "## References", "", "- [1] A spirit — `a.txt`"],
        memory=[],
        raw={},
    )
    score = score_item(ITEM, "dev", folder)
    assert score.answer_in_report is True
    assert score.answer_in_findings is False


@pytest.mark.parametrize(
    ("summary", "findings", "expected"),
    [
        ("**If Gallu is a demon Lilu is what.** Lilu is a spirit. [1]", "- Gallu is a demon. [2]", True),
        ("**If Gallu is a demon Lilu is what a spirit.** Gallu is a demon. [2]", "- Lilu is a spirit. [1]", False),
    ],
)  # the bold lead restates the question: an answer there is not what the summary states
def test_an_answer_the_summary_leads_with_is_told_from_one_in_the_findings(tmp_path, summary, findings, expected):
    lines = ["## Executive summary", "", summary, "", "## Key findings", "", findings]
    score = score_item(ITEM, "dev", research_folder(tmp_path, lines, memory=[], raw={}))
    assert (score.answer_in_summary, score.answer_in_findings) == (expected, True)


def test_stale_figure_stated_as_current_and_marked_as_older(tmp_path: Path) -> None:
    item = SuiteItem(id="s", question="How many members?", facts=["20,700 members"], stale=["19,850"])
    current = ["## Key findings", "", "- Membership reached 20700 members. [1]", "- It had 19 850. [2]"]
    marked = ["## Key findings", "", "- 20,700 members. [1]", "- Superseded: 19,850 in October. [2]"]
    current, marked = research_folder(tmp_path / "a", current, [], {}), research_folder(tmp_path / "b", marked, [], {})
    first, second = score_item(item, "dev", current), score_item(item, "dev", marked)
    assert (first.facts_found, first.stale, first.stale_stated) == (1, 1, ["19,850"])
    assert (second.facts_found, second.stale) == (1, 0)


def test_removed_citations_and_uncited_sentences(tmp_path: Path) -> None:
    folder = research_folder(
        tmp_path,
        [
            "## Executive summary",
            "",
            "**If Gallu is a demon Lilu is what.** Lilu is a spirit. Gallu is a demon. [1]",
            "",
            "## Key findings",
            "",
            "### 1. Background",
            "",
            "- No useful source was found.",
            "- Lilu is male. [2]",
            "",
            "## Analysis",
            "",
            "Nothing here is checked for citations.",
        ],
        memory=[],
        raw={},
        verified=2,
        removed=3,
    )
    score = score_item(ITEM, "dev", folder)
    assert (score.verified_citations, score.removed_citations) == (2, 3)
    parts = read_report((folder / "report.md").read_text(), ITEM.question)
    # The bold lead restates the question; "[1]" after a full stop belongs to the sentence before.
    assert uncited(parts) == ["Lilu is a spirit.", "No useful source was found."]
    assert score.uncited_sentences == 2
    assert score.answer_in_findings is True


def test_a_figure_no_cited_raw_output_states_is_counted(tmp_path: Path) -> None:
    folder = research_folder(
        tmp_path,
        [
            "## Key findings",
            "",
            "- Lilu spirits numbered 1,200 in the old texts. [1]",
            "- The Gallu cult ended on 3 March 1702. [1, 2]",
            "- Lilu were first named in 880 texts. [2]",
        ],
        memory=[],
        raw={"a.txt": "Lilu spirits numbered 1,200 in the old texts.", "b.txt": "It ended on March 3, 1702."},
    )
    report = json.loads((folder / "report.json").read_text())
    report["citations"] = [{"n": 1, "artifact_file": "a.txt"}, {"n": 2, "artifact_file": "b.txt"}]
    (folder / "report.json").write_text(json.dumps(report))
    score = score_item(ITEM, "dev", folder)
    # 1,200 is in [1]; the date is in [2] however written; 880 is in neither source.
    assert score.ungrounded == ["880: Lilu were first named in 880 texts. [2]"]
    assert score.ungrounded_figures == 1
    # [2] read again whole: the check that verified the claim names the second read's artifact.
    (folder / "c.txt").write_text("Lilu were first named in 880 texts.")
    report["citation_checks"] = [{"n": 2, "artifact_file": "c.txt", "verified": True}]
    (folder / "report.json").write_text(json.dumps(report))
    assert score_item(ITEM, "dev", folder).ungrounded_figures == 0
    report["citation_checks"][0]["verified"] = False  # a failed check is no raw output of the claim's
    (folder / "report.json").write_text(json.dumps(report))
    assert score_item(ITEM, "dev", folder).ungrounded_figures == 1


def test_facts_as_patterns(tmp_path: Path) -> None:
    item = SuiteItem.model_validate(
        {"id": "p", "question": "q?", "facts": [{"fact": "£9.5m", "patterns": [r"9\.5\s*(m|million)"]}, "Northlight"]}
    )
    folder = research_folder(tmp_path, ["## Key findings", "", "- A £9.5 million round. [1]"], [], {})
    score = score_item(item, "dev", folder)
    assert (score.facts_found, score.facts_total, score.facts_missing) == (1, 2, ["Northlight"])


@pytest.mark.parametrize(
    ("item", "category"),
    [
        (SuiteItem(id="a", question="Are both directors?", answers=["yes"], yes_no=True), "yes_no"),
        (SuiteItem(id="b", question="Is it?", answers=["no"]), "yes_no"),
        (SuiteItem(id="c", question="Who?", answers=["Ibsen"], answer_verbatim_in_support=False), "non_verbatim"),
        (SuiteItem(id="d", question="Which is older, Oslo or Bergen?", answers=["Bergen"]), "in_question"),
        (SuiteItem(id="e", question="Who wrote Brand?", answers=["Henrik Ibsen"]), "answer"),
        (SuiteItem(id="f", question="Funding?", facts=["£9.5m"]), "facts"),
        (SuiteItem(id="g", question="Write a survey of X."), "judge_only"),
    ],
)
def test_categories(item: SuiteItem, category: str) -> None:
    assert item.category == category


def test_summary_counts_plain_answers_and_reports_the_rest_apart(tmp_path: Path) -> None:
    folder = research_folder(tmp_path, ["## Key findings", "", "- Lilu is a spirit. [1]"], [], {})
    yes_no = SuiteItem(id="yn", question="Is Lilu a spirit?", answers=["yes"], yes_no=True)
    scores = [score_item(ITEM, "dev", folder), score_item(yes_no, "heldout", folder)]
    summary = summarize(scores)
    assert (summary["answerable"], summary["answer_in_report"]) == (1, 1)
    assert summary["by_category"]["yes_no"]["answer_in_report"] == 0
    assert set(summary["by_split"]) == {"dev"}
    evaluation = Evaluation(key="k", suite="s.jsonl", config=EvalConfig(suite="s.jsonl"), engine="offline",
                            items=scores, summary=summary)  # fmt: skip
    assert all(len(line) <= 100 for line in [*table_lines(evaluation), *summary_lines(evaluation)])
    changed = compare(evaluation, evaluation.model_copy(update={"items": scores[:1]}))
    assert changed["items"] == [{"id": "yn", "change": "only in A"}]


def test_suite_bad_lines_are_reported_and_the_rest_kept(tmp_path: Path) -> None:
    suite = tmp_path / "suite.jsonl"
    lines = [
        json.dumps({"id": "ok", "question": "Who wrote Brand?", "answers": ["Ibsen"], "corpus": "docs"}),
        "{not json",
        json.dumps({"id": "typo", "question": "q?", "answer": ["x"]}),
        json.dumps(["a list"]),
        json.dumps({"id": "ok", "question": "again?", "answers": ["x"]}),
        json.dumps({"id": "bad-re", "question": "q?", "facts": [{"fact": "f", "patterns": ["("]}]}),
    ]
    suite.write_text("\n".join(lines) + "\n\n")
    loaded = load_suite(suite)
    assert [i.id for i in loaded.items] == ["ok"]
    reasons = {f.line: f.reason for f in loaded.failures}
    assert reasons[2].startswith("not JSON")
    assert reasons[3] == "answer: unknown field"
    assert reasons[4] == "not a JSON object"
    assert reasons[5] == "duplicate id"
    assert "does not compile" in reasons[6]
    assert loaded.corpus_of(loaded.items[0]) == str((tmp_path / "docs").resolve())


def test_unreadable_suites_are_one_error(tmp_path: Path) -> None:
    with pytest.raises(SuiteError, match="not found"):
        load_suite(tmp_path / "missing.jsonl")
    (tmp_path / "empty.jsonl").write_text("{broken\n")
    with pytest.raises(SuiteError, match="no readable item"):
        load_suite(tmp_path / "empty.jsonl")


def test_importers(tmp_path: Path) -> None:
    squad = {"data": [{"paragraphs": [{"qas": [
        {"id": "1", "question": "Where is Normandy?", "answers": [{"text": "France"}, {"text": "France"}]},
        {"id": "2", "question": "Unanswerable?", "answers": [], "is_impossible": True},
    ]}]}]}  # fmt: skip
    (tmp_path / "squad.json").write_text(json.dumps(squad))
    (item,) = IMPORTERS["squad"](tmp_path / "squad.json")
    assert (item.id, item.answers) == ("1", ["France"])
    (tmp_path / "query.jsonl").write_text(json.dumps({"id": 7, "prompt": "Survey X.", "topic": "t"}) + "\n")
    (drb,) = IMPORTERS["drb"](tmp_path / "query.jsonl")
    assert (drb.id, drb.category) == ("7", "judge_only")
    fixtures = Path(__file__).resolve().parents[1] / "fixtures" / "private_docs" / "puffin"
    (gold,) = IMPORTERS["gold-facts"](fixtures)
    assert gold.category == "facts" and gold.facts and gold.stale


def test_split_is_fixed_by_the_id() -> None:
    ids = [f"item-{n}" for n in range(400)]
    halves = [split_of(i) for i in ids]
    assert halves == [split_of(i) for i in ids]
    assert 150 < halves.count("dev") < 250


# -- matching ---------------------------------------------------------------------------------


def test_matching_rules() -> None:
    assert contains(Haystack("It carried 1,320 passengers"), "1320")
    assert contains(Haystack("It carried 1 320 passengers"), "1,320")
    assert not contains(Haystack("born in 1990"), "1")
    assert not contains(Haystack("the city of Uruk"), "Ur")
    assert contains(Haystack("“Quoted” – text"), '"quoted" - text')
    # "no" the word is not Norway's code; the code matches in capitals only.
    assert not any_in("No useful source was found.", ["Norway", "NO", "no"])
    assert any_in("The flag of NO is red.", ["Norway", "NO", "no"])
    assert any_in("It is no.", ["no"])  # the only answer is kept, whatever it is


_words = st.lists(st.text(alphabet="abcdefghijklmnopqrstuvwxyzéß", min_size=1, max_size=8), min_size=1, max_size=5)


@given(_words, _words, _words)
def test_a_phrase_is_found_whatever_its_case_and_spacing(before: list[str], gold: list[str], after: list[str]) -> None:
    phrase = " ".join(gold)
    text = " ".join(before) + "  \n " + "\t".join(w.upper() for w in gold) + ". " + " ".join(after)
    assert contains(Haystack(text), phrase)


@given(st.integers(min_value=1000, max_value=10**12), st.sampled_from([",", " ", "\u202f", "\u00a0", "'"]))
def test_thousands_separators_do_not_matter(number: int, separator: str) -> None:
    grouped = f"{number:,}".replace(",", separator)
    assert contains(Haystack(f"about {grouped} people"), str(number))
    assert contains(Haystack(f"about {number} people"), f"{number:,}")
    assert not contains(Haystack(f"about {number}7 people"), str(number))


@given(st.text(max_size=60))
def test_normalize_is_idempotent(text: str) -> None:
    assert normalize(normalize(text)) == normalize(text)


@given(st.integers(0, 60), st.integers(0, 60))
def test_the_sign_test_is_a_two_sided_probability(gained: int, lost: int) -> None:
    p = sign_test(gained, lost)
    assert 0 < p <= 1 and p == sign_test(lost, gained)
    if min(gained, lost) == 0:  # all changes one way: twice the chance of n heads in a row
        assert p == min(1.0, 2 / 2 ** (gained + lost))
    if gained == lost:
        assert p == 1.0


def test_compare_pairs_the_answer_figures_item_by_item() -> None:
    """Six plain-answer items lost from the report and none gained is unlikely to be chance (p 0.03);
    one gained and two lost is (p 1); a yes/no item's flip is reported apart, not counted."""

    def evaluation(report: list[bool], yes_no: bool) -> Evaluation:
        items = [ItemScore(id=f"i{k}", question="q?", category="answer", split="dev", answer_in_report=r,
                           answer_in_raw=True) for k, r in enumerate(report)]  # fmt: skip
        items.append(ItemScore(id="yn", question="Is it?", category="yes_no", split="dev", answer_in_report=yes_no))
        return Evaluation(key="k", suite="s.jsonl", config=EvalConfig(suite="s.jsonl"), engine="offline",
                          items=items, summary={})  # fmt: skip

    before = evaluation([True] * 8, yes_no=False)
    paired = compare(before, evaluation([False] * 6 + [True] * 2, yes_no=True))["paired"]
    assert paired["answer_in_report"] == {"gained": 0, "lost": 6, "p": 0.031}
    assert paired["answer_in_raw"] == {"gained": 0, "lost": 0, "p": 1.0}
    result = compare(
        evaluation([False, True, True] + [True] * 5, yes_no=False),
        evaluation([True, False, False] + [True] * 5, yes_no=False),
    )
    assert result["paired"]["answer_in_report"] == {"gained": 1, "lost": 2, "p": 1.0}
    assert all(len(line) <= 100 for line in compare_lines(result))
    fact = ItemScore(id="f", question="Funding?", category="facts", split="dev", facts_found=1, facts_total=2)
    facts_only = Evaluation(
        key="f", suite="s.jsonl", config=EvalConfig(suite="s.jsonl"), engine="offline", items=[fact]
    )
    assert compare(facts_only, facts_only)["paired"] == {}


@given(st.integers(1, 500).flatmap(lambda n: st.tuples(st.integers(0, n), st.just(n))))
def test_the_wilson_interval_holds_the_observed_rate(kn: tuple[int, int]) -> None:
    k, n = kn
    low, high = (int(x) for x in wilson(k, n).removesuffix(" %").split("–"))
    assert 0 <= low <= 100 * k / n + 0.5 and 100 * k / n - 0.5 <= high <= 100
    assert wilson(67, 73) == "83–96 %" and wilson(0, 10) == "0–28 %"  # textbook values
