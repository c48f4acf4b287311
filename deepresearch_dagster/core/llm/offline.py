"""Deterministic engine for every role with no network: heuristics where a model would reason.

It reads the structured ``payload`` that accompanies each prompt, so it keeps to exactly the
same contracts (schemas, field limits, injection rules) as a real model.
"""

from __future__ import annotations

import json
from typing import Any

from ..heuristics import OFFLINE_MODEL
from ..heuristics.compression import compress_extractively
from ..heuristics.critique import critique_heuristically
from ..heuristics.planning import plan_heuristically
from ..heuristics.report import DIRECT_ANSWER, REPORT_SECTIONS, extractive_section, rewrite_from_source
from ..heuristics.report_critique import ReportIssue, critique_report, revise_deterministically
from ..heuristics.tool_choice import choose_tool_calls
from ..text import estimate_tokens
from .engine import Completion, ToolCallRequest

MODEL = OFFLINE_MODEL


class OfflineEngine:
    name = "offline"

    def model_for(self, role: str) -> str:
        return MODEL

    def complete(
        self,
        role: str,
        messages: list[dict[str, Any]],
        payload: dict[str, Any],
        json_schema: dict[str, Any] | None = None,
        tools: list[dict[str, Any]] | None = None,
    ) -> Completion:
        handler = {
            "planner": self._plan,
            "compressor": self._compress,
            "researcher": self._research,
            "critic": self._critic,
            "reporter": self._report,
        }[role]
        text, tool_calls = handler(payload)
        prompt_text = "\n".join(str(m.get("content") or "") for m in messages)
        return Completion(
            text=text,
            model=MODEL,
            prompt_tokens=estimate_tokens(prompt_text),
            completion_tokens=estimate_tokens(text),
            latency_ms=0.0,
            tool_calls=tool_calls,
        )

    # -- planner -----------------------------------------------------------------------
    def _plan(self, payload: dict[str, Any]) -> tuple[str, list[ToolCallRequest]]:
        return json.dumps(plan_heuristically(payload)), []

    # -- researcher ----------------------------------------------------------------------
    def _research(self, payload: dict[str, Any]) -> tuple[str, list[ToolCallRequest]]:
        # Search fan-out and top-K reads are orchestrated by the research team before the
        # researcher is asked; the heuristic researcher adds only the plugin and MCP tools whose
        # descriptions match the step.
        calls = [ToolCallRequest(name, args) for name, args in choose_tool_calls(payload)]
        return ("Calling matching tools." if calls else "Retrieval for this step is complete."), calls

    # -- critic --------------------------------------------------------------------------
    def _critic(self, payload: dict[str, Any]) -> tuple[str, list[ToolCallRequest]]:
        if payload.get("phase") == "report":  # the finished report's second reading
            return critique_report(payload["report"], payload).model_dump_json(), []
        return json.dumps(critique_heuristically(payload)), []

    # -- compressor ----------------------------------------------------------------------
    def _compress(self, payload: dict[str, Any]) -> tuple[str, list[ToolCallRequest]]:
        return json.dumps(compress_extractively(payload)), []

    # -- reporter ------------------------------------------------------------------------
    def _report(self, payload: dict[str, Any]) -> tuple[str, list[ToolCallRequest]]:
        phase = payload.get("phase")
        if phase == "lookup":
            return "no lookups", []  # the extractive reporter quotes summaries only
        if phase == "outline":
            return json.dumps({"sections": [{"heading": h, "points": []} for h in REPORT_SECTIONS]}), []
        if phase == "direct":
            return json.dumps({"markdown": DIRECT_ANSWER}), []
        if phase == "revise":
            issues = [ReportIssue.model_validate(i) for i in payload["issues"]]
            body = revise_deterministically(payload["body"], payload["section"], issues, payload)
            return json.dumps({"markdown": body}), []
        if phase == "rewrite":
            return json.dumps({"markdown": rewrite_from_source(payload["sentence"], payload["source"])}), []
        return json.dumps({"markdown": extractive_section(payload["section"], payload)}), []
