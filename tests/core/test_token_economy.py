"""Token economy: each role receives only what it needs (issue 14 item 2).

The reporter writes each section from its own share of the working memory after one stable
prefix (system prompt, question, plan); the researcher's conversation carries compressed
knowledge only; the provider's cached prompt tokens are recorded with every model call.
"""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from deepresearch_dagster.core.config import ResearchSettings
from deepresearch_dagster.core.heuristics.report import REPORT_SECTIONS
from deepresearch_dagster.core.llm.openai_engine import OpenAIEngine, cached_prompt_tokens
from deepresearch_dagster.core.llm.structured import record_completion
from deepresearch_dagster.core.models import InjectedSummary
from deepresearch_dagster.core.pipeline import run_research
from deepresearch_dagster.core.roles.reporter import CITED, INDEX_ONLY, cited_numbers, section_memory
from tests.fakes.openai_server import FakeOpenAIServer


def _entry(n: int, step: str = "1") -> dict[str, Any]:
    return {
        "n": n,
        "source": f"https://example.org/{n}",
        "source_title": f"Page {n}",
        "artifact_file": f"plan__step{step}_page_{n}.html",
        "step_id": step,
        "summary_title": f"Title of source {n}",
        "summary": f"Summary sentence of source {n}.",
        "extraction": [f"Bullet fact of source {n}."],
    }


def _blocks(memory: str) -> set[int]:
    """Numbers of the memory blocks (``[n] title`` at a line start) a prompt carries."""
    return {int(line[1 : line.index("]")]) for line in memory.splitlines() if line.startswith("[") and "]" in line}


# -- the reporter's share of the working memory, per section ---------------------------------


def test_a_cited_section_reads_only_the_sources_its_outline_points_cite():
    entries = [_entry(1), _entry(2), _entry(3, "2")]
    memory = section_memory("Analysis", entries, ["Sources agree on X [2]", "see also [3]"])
    assert _blocks(memory) == {2, 3}
    assert "Summary sentence of source 1." not in memory and "Bullet fact of source 1." not in memory
    assert "Bullet fact of source 2." in memory  # a cited source is read in full


def test_an_uncited_outline_gives_key_findings_everything_and_the_summary_no_bullets():
    entries = [_entry(1), _entry(2, "2")]
    findings = section_memory("Key findings", entries, [])
    summary = section_memory("Executive summary", entries, [])
    assert _blocks(findings) == _blocks(summary) == {1, 2}
    assert "Bullet fact of source 2." in findings
    assert "Bullet fact" not in summary and "Summary sentence of source 2." in summary


def test_limitations_and_next_steps_read_an_index_and_the_gaps_not_the_summaries():
    entries = [_entry(1), _entry(2)]
    gaps = [{"description": "No cost figure after 2023.", "severity": "high", "suggested_query": "cost 2024"}]
    for heading in INDEX_ONLY:
        memory = section_memory(heading, entries, ["[1]"], gaps=gaps)
        assert _blocks(memory) == set()  # index lines start with "- ", never as a memory block
        assert "Summary sentence" not in memory and "Bullet fact" not in memory
        assert "- [1] Title of source 1" in memory and "No cost figure after 2023. (search: cost 2024)" in memory


def test_raw_mode_sections_read_the_raw_outputs_of_their_share():
    entries = [_entry(1), _entry(2)]
    raw = {e["artifact_file"]: f"RAW OUTPUT {e['n']}" for e in entries}
    memory = section_memory("Analysis", entries, ["[2]"], raw=raw)
    assert "RAW OUTPUT 2" in memory and "RAW OUTPUT 1" not in memory


def test_cited_numbers_reads_the_usual_citation_forms():
    assert cited_numbers(["a [1]", "b [2, 3]", "c [4][5]", "d [6,7]", "no number [x]"]) == {1, 2, 3, 4, 5, 6, 7}


@settings(max_examples=60, deadline=None)
@given(
    numbers=st.lists(st.integers(1, 30), min_size=1, max_size=12, unique=True),
    cited=st.sets(st.integers(1, 40), max_size=8),
    heading=st.sampled_from(CITED),
)
def test_a_cited_section_carries_exactly_its_cited_sources(numbers, cited, heading):
    entries = [_entry(n, str(n % 3 + 1)) for n in numbers]
    points = [f"point [{', '.join(map(str, sorted(cited)))}]"] if cited else []
    memory = section_memory(heading, entries, points)
    wanted = cited & set(numbers)
    assert _blocks(memory) == (wanted or set(numbers))
    # Never a summary the section was not given.
    for n in set(numbers) - (wanted or set(numbers)):
        assert f"Summary sentence of source {n}." not in memory


# -- through the real pipeline, against the fake OpenAI-compatible server ---------------------


def _prompt(body: dict[str, Any]) -> str:
    return "\n".join(str(m.get("content") or "") for m in body["messages"])


def test_reporter_calls_share_a_stable_prefix_and_each_section_gets_its_share(fake_openai, corpus_dir):
    settings_ = ResearchSettings.from_env(engine="openai", corpus_dir=str(corpus_dir), depth=0)
    outline = {"sections": [{"heading": h, "points": []} for h in REPORT_SECTIONS]}
    outline["sections"][2]["points"] = ["Analysis compares [2] only"]
    fake_openai.script("reporter", {"content": "no lookups"}, json.dumps(outline))
    _, report = run_research("How do sodium-ion batteries work?", settings_, log=lambda m: None)
    requests = fake_openai.requests_for("reporter")
    # Lookups, outline, four sections (the next steps are the critic's gaps), and the revision of the
    # section the report's critique names (the fake repeats its sentences): it shares the prefix too.
    assert len(requests) == 7
    # The same leading messages (system prompt, then question and plan) in every reporter call:
    # a provider's prefix cache serves them; the variable part comes after.
    system = requests[0]["messages"][0]
    assert system["role"] == "system" and all(r["messages"][0] == system for r in requests)
    heads = [r["messages"][1]["content"].split("Working memory:")[0] for r in requests]
    assert len(set(heads)) == 1 and heads[0].startswith("Question: How do sodium-ion batteries work?")
    written = [h for h in REPORT_SECTIONS if h != "Suggested next steps"]
    sections = {h: next(r for r in requests if f"Write the section: {h}\n" in _prompt(r)) for h in written}
    memory = {
        h: _prompt(b).split("Working memory:", 1)[1].split("Write the section:", 1)[0] for h, b in sections.items()
    }
    analysis = _blocks(memory["Analysis"])
    assert analysis == {2}
    all_sources = _blocks(memory["Key findings"])
    assert len(all_sources) > 1 and analysis < all_sources
    assert _blocks(memory["Limitations"]) == set()
    # Quality is kept: the report still cites sources that verify against the stored outputs.
    assert report.verified_citations >= 1 and report.citations


def test_the_researcher_conversation_never_carries_raw_tool_output(fake_openai, corpus_dir):
    settings_ = ResearchSettings.from_env(engine="openai", corpus_dir=str(corpus_dir), depth=0)
    ctx, _ = run_research("How do sodium-ion batteries work?", settings_, log=lambda m: None)
    manifest = json.loads(ctx.store.read_text("tool_outputs.json"))
    raws = [ctx.store.resolve_relpath(c["artifact_path"]).read_text("utf-8") for c in manifest["calls"]]
    assert raws and manifest["conversations"]
    requests = fake_openai.requests_for("researcher")
    assert requests
    for messages in [*manifest["conversations"].values(), *(r["messages"] for r in requests)]:
        for m in messages:
            if m["role"] == "assistant" and m.get("content"):
                # Every assistant turn is one injected summary (compressed knowledge), nothing else.
                InjectedSummary.model_validate_json(m["content"])
            assert m["role"] != "tool"  # the model's own tool-call requests are transient
            content = str(m.get("content") or "")
            for raw in raws:
                # No raw output enters the conversation (long outputs: not even their first 300 characters).
                assert raw.strip()[:300] not in content or len(raw.strip()) < 80


# -- cached prompt tokens ---------------------------------------------------------------------


def test_cached_prompt_tokens_are_read_from_openai_and_llamacpp_usage():
    openai_style = SimpleNamespace(usage=SimpleNamespace(prompt_tokens_details=SimpleNamespace(cached_tokens=1024)))
    llamacpp_style = SimpleNamespace(
        usage=SimpleNamespace(prompt_tokens_details=None), model_extra={"timings": {"cache_n": 236, "prompt_n": 1}}
    )
    assert cached_prompt_tokens(openai_style) == 1024
    assert cached_prompt_tokens(llamacpp_style) == 236
    assert cached_prompt_tokens(SimpleNamespace(usage=None)) == 0
    assert (
        cached_prompt_tokens(SimpleNamespace(usage=SimpleNamespace(prompt_tokens_details={"cached_tokens": None}))) == 0
    )


class CachingServer(FakeOpenAIServer):
    """Reports cached prompt tokens the way OpenAI (details) or llama.cpp (timings) does."""

    style = "openai"

    def _answer(self, role: str, body: dict[str, Any], scripted: Any) -> dict[str, Any]:
        answer = super()._answer(role, body, scripted)
        cached = answer["usage"]["prompt_tokens"] // 2
        if self.style == "openai":
            answer["usage"]["prompt_tokens_details"] = {"cached_tokens": cached}
        else:
            answer["timings"] = {"cache_n": cached, "prompt_n": answer["usage"]["prompt_tokens"] - cached}
        return answer


def test_cached_prompt_tokens_reach_the_llm_calls_table(make_context):
    for style in ("openai", "llamacpp"):
        with CachingServer() as server:
            server.style = style
            engine = OpenAIEngine({"critic": "m"}, base_url=server.base_url, api_key="k")
            messages = [
                {"role": "system", "content": "ROLE: critic\n" + "stable " * 200},
                {"role": "user", "content": "q"},
            ]
            completion = engine.complete("critic", messages, {})
            assert 0 < completion.cached_tokens == completion.prompt_tokens // 2
            ctx = make_context(partition_key=f"cache-{style}")
            record_completion(ctx, "critic", completion, 1, "ok", "critic")
            rows = ctx.lineage.query(
                "SELECT prompt_tokens, cached_tokens FROM llm_calls WHERE partition_key = ?", [ctx.partition_key]
            )
            assert rows == [{"prompt_tokens": completion.prompt_tokens, "cached_tokens": completion.cached_tokens}]
