"""Prompt files under ``deepresearch_dagster/prompts``; their hash versions the compressor.

Every worked example lives in one file, ``prompts/examples.toml`` (one table per prompt, all in
one invented domain): a template holds a placeholder (``{example}``, ``{example_question}``, ...)
that :func:`prompt_text` fills when the prompt is loaded, so the text a role formats, and the
version hashed from it, already carry the example (``core/llm/example_leaks.py`` rejects answers
that copy it).
"""

from __future__ import annotations

import re
import sys
from functools import lru_cache
from pathlib import Path

from ..naming import short_hash

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

PROMPT_DIR = Path(__file__).resolve().parents[2] / "prompts"
EXAMPLES_FILE = PROMPT_DIR / "examples.toml"
# ``{example}`` or ``{example_<key>}``, not a literal ``{{example}}``.
EXAMPLE_PLACEHOLDER = re.compile(r"(?<!\{)\{(example(?:_\w+)?)\}(?!\})")


@lru_cache(maxsize=1)
def load_examples() -> dict[str, dict[str, str]]:
    """Every prompt's worked examples: ``{prompt name: {placeholder: literal text}}``."""
    data = tomllib.loads(EXAMPLES_FILE.read_text("utf-8"))
    return {name: {key: str(value) for key, value in table.items()} for name, table in data.items()}


def with_examples(name: str, template: str) -> str:
    """The template with its example placeholders filled (braces escaped: the result is still a
    ``str.format`` template); a placeholder without an example is an error."""
    examples = load_examples().get(name, {})

    def fill(match: re.Match[str]) -> str:
        key = match.group(1)
        if key not in examples:
            raise KeyError(f"prompt {name!r}: {{{key}}} has no value in {EXAMPLES_FILE.name} [{name}]")
        return examples[key].replace("{", "{{").replace("}", "}}")

    return EXAMPLE_PLACEHOLDER.sub(fill, template)


@lru_cache(maxsize=32)
def load_prompt(name: str) -> str:
    """The packaged template, worked examples filled in."""
    return with_examples(name, raw_prompt(name))


def raw_prompt(name: str) -> str:
    """The template file as written (placeholders, no examples)."""
    return (PROMPT_DIR / f"{name}.md").read_text("utf-8")


def render(name: str, **values: object) -> str:
    return load_prompt(name).format(**values)


def prompt_text(name: str, override: str | None = None) -> str:
    """The packaged prompt, or a replacement file (a replay trying another prompt version); both
    with the worked examples filled in."""
    return with_examples(name, Path(override).read_text("utf-8")) if override else load_prompt(name)


def prompt_version(name: str, override: str | None = None) -> str:
    """Content hash of the prompt as sent, example included: editing a prompt or its example
    changes the version and so the compression cache key."""
    return f"{name}-{short_hash(prompt_text(name, override), 10)}"
