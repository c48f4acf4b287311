"""Prompt files under ``deepresearch_dagster/prompts``; their hash versions the compressor."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from ..naming import short_hash

PROMPT_DIR = Path(__file__).resolve().parents[2] / "prompts"


@lru_cache(maxsize=32)
def load_prompt(name: str) -> str:
    return (PROMPT_DIR / f"{name}.md").read_text("utf-8")


def render(name: str, **values: object) -> str:
    return load_prompt(name).format(**values)


def prompt_text(name: str, override: str | None = None) -> str:
    """The packaged prompt, or a replacement file (a replay trying another prompt version)."""
    return Path(override).read_text("utf-8") if override else load_prompt(name)


def prompt_version(name: str, override: str | None = None) -> str:
    """Content hash: editing a prompt changes the version and so the compression cache key."""
    return f"{name}-{short_hash(prompt_text(name, override), 10)}"
