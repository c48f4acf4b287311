"""The outcome of each of a research's checks, kept beside its report so the CLI says what the UI
shows: ``<partition>/checks.json`` maps a check's name to ``{passed, severity, summary}``.

Severity is a decision about meaning. ERROR: the research is broken (its plan, raw files or
summaries do not match the lineage, or a citation does not resolve): ``deepresearch run`` exits
``EXIT_CHECK_FAILED`` and ``ls`` says "check failed". WARN: a figure missed its target (context
reduction on outputs too small to shrink, a report that found no source to cite): one warning line,
exit 0, and ``ls`` says so. The Dagster assets write this file as they yield each check, so the
file holds the latest evaluation of every check (a replay updates the ones it re-runs).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

from .store.artifacts import ArtifactStore

CHECKS_FILE = "checks.json"
ERROR: Literal["ERROR"] = "ERROR"
WARN: Literal["WARN"] = "WARN"


def record_check(store: ArtifactStore, name: str, passed: bool, severity: str, summary: str) -> None:
    """Store one check's outcome (read, update, atomic rewrite; the stages of a research run one
    after another, so there is no concurrent writer of one partition's file)."""
    checks = read_checks(store.partition_dir)
    checks[name] = {"passed": bool(passed), "severity": severity, "summary": summary}
    store.write_json(CHECKS_FILE, dict(sorted(checks.items())))


def read_checks(partition_dir: Path) -> dict[str, dict[str, Any]]:
    """Every recorded check of the partition ({} when none is recorded or the file is unreadable)."""
    try:
        data = json.loads((partition_dir / CHECKS_FILE).read_text("utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def failed_checks(checks: dict[str, dict[str, Any]], severity: str) -> list[tuple[str, str]]:
    """(name, summary) of each failed check of ``severity``, by name."""
    return [
        (name, str(c.get("summary", "")))
        for name, c in sorted(checks.items())
        if not c.get("passed", True) and c.get("severity") == severity
    ]
