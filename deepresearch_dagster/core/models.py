"""Pydantic schemas for everything that crosses a boundary (model output, disk, DuckDB)."""

from __future__ import annotations

import json
import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, field_validator, model_serializer, model_validator

from .text import count_sentences

MAX_STEPS = 7
FOLLOWUP_ID = re.compile(r"R\d+_\d+")


class PlanStep(BaseModel):
    model_config = ConfigDict(extra="ignore")

    step_id: str
    title: str = Field(min_length=3, max_length=200)
    description: str = Field(min_length=10, max_length=2000)
    # Concrete search queries for the step; the research team runs up to `breadth` of them.
    queries: list[str] = Field(default_factory=list, max_length=10)

    @field_validator("queries", mode="before")
    @classmethod
    def _clean_queries(cls, value: Any) -> Any:
        if isinstance(value, list):
            return [q.strip()[:300] for q in value if isinstance(q, str) and q.strip()]
        return value

    @field_validator("step_id", mode="before")
    @classmethod
    def _id_to_str(cls, value: Any) -> str:
        if isinstance(value, bool) or not isinstance(value, (int, str)):
            raise ValueError("step_id must be a string or an integer")
        return str(value).strip()

    @field_validator("title", "description", mode="before")
    @classmethod
    def _strip(cls, value: Any) -> Any:
        return value.strip() if isinstance(value, str) else value


class ResearchPlan(BaseModel):
    model_config = ConfigDict(extra="ignore")

    plan_title: str = Field(min_length=3, max_length=200)
    steps: list[PlanStep] = Field(min_length=1, max_length=MAX_STEPS)
    # The planner may judge the question answerable from model knowledge (used when depth is 0).
    direct_answer: bool = False

    @field_validator("plan_title", mode="before")
    @classmethod
    def _strip(cls, value: Any) -> Any:
        return value.strip() if isinstance(value, str) else value

    @model_validator(mode="after")
    def _sequential_ids(self) -> ResearchPlan:
        ids = [s.step_id for s in self.steps]
        expected = [str(i) for i in range(1, len(ids) + 1)]
        if ids != expected:
            raise ValueError(f"step ids must be sequential {expected}, got {ids}")
        return self

    def with_followups(self, followups: list[PlanStep]) -> dict[str, Any]:
        """The plan as roles read it during and after research: the planner's steps plus the
        critic's follow-up steps (which live in ``ToolOutputs``; the plan itself never changes)."""
        return {**self.model_dump(), "followup_steps": [s.model_dump() for s in followups]}

    def as_markdown(self, followups: list[PlanStep] | None = None) -> str:
        rows = ["| step | title | description | queries |", "|---|---|---|---|"]
        for s in [*self.steps, *(followups or [])]:
            desc = s.description.replace("|", "\\|").replace("\n", " ")
            queries = "; ".join(s.queries).replace("|", "/")
            rows.append(f"| {s.step_id} | {s.title.replace('|', '/')} | {desc} | {queries} |")
        note = "\n\n_Directly answerable from model knowledge._" if self.direct_answer else ""
        return f"**{self.plan_title}**{note}\n\n" + "\n".join(rows)


class Gap(BaseModel):
    description: str = Field(min_length=3, max_length=400)
    severity: Literal["low", "medium", "high"] = "medium"
    suggested_query: str = Field(min_length=2, max_length=300)


class CriticVerdict(BaseModel):
    """The critic's answer (role contract in ``core/llm/contracts.py``)."""

    sufficiency: int = Field(ge=1, le=10)
    gaps: list[Gap] = Field(default_factory=list, max_length=10)
    contradictions: list[str] = Field(default_factory=list, max_length=10)
    recommendation: str = Field(default="", max_length=1000)


class ReportBody(BaseModel):
    """A report section (or the direct answer) as the reporter writes it."""

    markdown: str = Field(min_length=20)


class Selection(BaseModel):
    """The findings a reporter model picks for a section, by their numbers, in reading order."""

    ids: list[int] = Field(min_length=1)


class OutlineSection(BaseModel):
    heading: str
    points: list[str] = Field(default_factory=list)


class Outline(BaseModel):
    sections: list[OutlineSection] = Field(min_length=1)


class CompressionResult(BaseModel):
    """Exactly the compressor's output schema (seed 000 §4.4)."""

    model_config = ConfigDict(extra="forbid")

    summary_title: str
    summary: str
    extraction: list[str]
    is_useful: StrictBool

    @field_validator("summary_title")
    @classmethod
    def _title_words(cls, value: str) -> str:
        n = len(value.split())
        if not 5 <= n <= 12:
            raise ValueError(f"summary_title must have 5-12 words, has {n}")
        return value.strip()

    @field_validator("summary")
    @classmethod
    def _summary_sentences(cls, value: str) -> str:
        n = count_sentences(value)
        if not 3 <= n <= 10:
            raise ValueError(f"summary must have 3-10 sentences, has {n}")
        return value.strip()

    @field_validator("extraction")
    @classmethod
    def _bullets(cls, value: list[str]) -> list[str]:
        cleaned = [v.strip() for v in value]
        if any(not v for v in cleaned):
            raise ValueError("extraction items must be non-empty strings")
        return cleaned


class Grounding(BaseModel):
    """Model-written statements (extraction bullets, summary sentences) checked against the raw
    output: kept (every figure and name found in it) and dropped (core/llm/grounding.py)."""

    grounded: int = 0
    dropped: int = 0


class InjectedSummary(BaseModel):
    """The only content a tool result may place in the conversation (seed 000 §6.1)."""

    model_config = ConfigDict(extra="forbid")

    summary_title: str
    summary: str
    extraction: list[str]
    artifact_file: str

    def to_message(self) -> dict[str, str]:
        return {"role": "assistant", "content": json.dumps(self.model_dump(), ensure_ascii=False)}


class ToolCallRecord(BaseModel):
    """One executed tool call and the raw artifact it left on disk."""

    call_id: str
    step_id: str
    step_title: str
    step_description: str
    seq: int
    tool: str
    arguments: dict[str, Any]
    artifact_file: str
    artifact_path: str  # relative to the artifacts root
    bytes: int
    sha256: str
    raw_tokens: int
    # Timing lives in DuckDB only: the manifest on disk must be byte-identical across runs.
    latency_ms: float = Field(default=0.0, exclude=True)
    source: str | None = None
    source_title: str | None = None
    status: Literal["ok", "error"] = "ok"
    error: str | None = None
    # Served from the tool-call cache (DuckDB only, like latency: the manifest stays stable).
    cached: bool = Field(default=False, exclude=True)
    # Proposed by a model after tool output (untrusted text) had entered its conversation.
    tainted: bool = False
    # Sources in this output whose text addresses the model (core/untrusted.py): kept out of
    # working memory and named in the report's Limitations.
    suspected_injection: list[str] = Field(default_factory=list)


class SummaryRecord(BaseModel):
    """A compression of one tool call, and whether it entered the conversation."""

    call_id: str
    step_id: str
    artifact_file: str
    source: str | None
    source_title: str | None
    result: CompressionResult
    injected_tokens: int
    cache_key: str
    compressor_model: str
    prompt_version: str
    fallback: bool = False
    raw_context: bool = False  # context_mode=raw: the raw output itself was injected
    grounding: Grounding = Field(default_factory=Grounding)
    # Sources this output shows text addressed to the model from (its own, or a listing's results).
    suspects: list[str] = Field(default_factory=list)
    # Its source is one of a research's suspects (core/untrusted.py: set_aside): never working memory.
    suspected_injection: bool = False

    @property
    def injected(self) -> InjectedSummary | None:
        if not self.result.is_useful or self.suspected_injection:
            return None
        return InjectedSummary(
            summary_title=self.result.summary_title,
            summary=self.result.summary,
            extraction=self.result.extraction,
            artifact_file=self.artifact_file,
        )


class ToolOutputs(BaseModel):
    """Manifest of a partition's tool calls; the raw bytes live in the artifact folder."""

    partition_key: str
    plan_folder: str
    calls: list[ToolCallRecord]
    summaries: list[SummaryRecord]
    conversations: dict[str, list[dict[str, str]]]
    # Added by the critic's reflection rounds, ids R<round>_<n>; never written by the planner.
    followup_steps: list[PlanStep] = Field(default_factory=list)
    critic_rounds: list[dict[str, Any]] = Field(default_factory=list)
    stop_reason: str = "complete"
    complete: bool = True  # False: "Research may be incomplete" (max iterations, budget, no new sources)
    direct_answer: bool = False
    # Files of the document folder that could not be indexed: [relative path, reason].
    skipped_documents: list[list[str]] = Field(default_factory=list)
    # The plugin and MCP tools this research was offered: [name, origin, description]; and one line
    # per server or plugin that could not be used (docs/tools.md).
    outside_tools: list[list[str]] = Field(default_factory=list)
    tool_problems: list[str] = Field(default_factory=list)

    @field_validator("followup_steps")
    @classmethod
    def _followup_ids(cls, steps: list[PlanStep]) -> list[PlanStep]:
        bad = [s.step_id for s in steps if not FOLLOWUP_ID.fullmatch(s.step_id)]
        if bad:
            raise ValueError(f"follow-up step ids must look like R1_1, got {bad}")
        return steps


class SummaryBundle(BaseModel):
    partition_key: str
    compressor_model: str
    prompt_version: str
    summaries: list[SummaryRecord]

    @property
    def working_memory(self) -> list[SummaryRecord]:
        return [s for s in self.summaries if s.injected is not None]


class Citation(BaseModel):
    n: int
    source: str
    source_title: str | None
    artifact_file: str
    summary_title: str
    quote: str | None = None  # the supporting text found in the stored raw artifact
    verified: bool = False
    # For a local document: the section (and page) the quote stands in, e.g. "Funding, page 3".
    location: str | None = None


class SourceRef(BaseModel):
    source: str
    source_title: str | None = None


class WhatChanged(BaseModel):
    """A recurring research compared with its previous dated partition (core/changes.py)."""

    previous_partition: str
    previous_date: str
    new_sources: list[SourceRef]
    dropped_sources: list[SourceRef]
    findings_added: list[str]
    findings_no_longer_supported: list[str]
    unchanged_sources: int
    unchanged_findings: int


class Report(BaseModel):
    partition_key: str
    question: str
    plan_title: str
    markdown: str
    citations: list[Citation]
    reporter_model: str
    what_changed: WhatChanged | None = None
    # Every [n] occurrence checked against the raw artifacts (unverified ones were removed).
    citation_checks: list[dict[str, Any]] = Field(default_factory=list)
    verified_citations: int = 0
    unverified_citations: int = 0
    sufficiency_scores: list[int] = Field(default_factory=list)
    complete: bool = True
    stop_reason: str = "complete"
    warnings: list[str] = Field(default_factory=list)
    source_scores: list[dict[str, Any]] = Field(default_factory=list)
    # Role → how often its deterministic fallback stood in for the model (empty: none did).
    fallbacks: dict[str, int] = Field(default_factory=dict)
    # Sentences of the executive summary and key findings that had no verified citation
    # (core/roles/cited_sentences.py): cited from the source that states them or rewritten from
    # their source (``by``: citation | model), and those dropped (with the reason).
    rewritten: list[dict[str, Any]] = Field(default_factory=list)
    uncited_dropped: list[dict[str, Any]] = Field(default_factory=list)
    # The compressor's statements checked against the raw outputs, summed over the summaries.
    grounding: Grounding = Field(default_factory=Grounding)
    # The critique before and after revision, with each round (core/roles/revision.py).
    critique: dict[str, Any] = Field(default_factory=dict)
    # With --drafts N > 1: the judge's choice, its reasons and every draft's scores.
    drafts: dict[str, Any] = Field(default_factory=dict)
    # Files of the document folder that could not be indexed: [relative path, reason].
    skipped_documents: list[list[str]] = Field(default_factory=list)

    @model_serializer(mode="wrap")
    def _omit_absent_changes(self, handler: Any) -> Any:
        # One-off researches keep the report.json they always had: no "what_changed": null, and
        # no empty list of skipped documents.
        data = handler(self)
        if isinstance(data, dict) and data.get("what_changed") is None:
            data.pop("what_changed", None)
        if isinstance(data, dict) and not data.get("skipped_documents", True):
            data.pop("skipped_documents", None)
        return data
