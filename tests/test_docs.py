"""The README and docs/*.md say only what works: generated references match the code, every shell
command in a fenced ``bash`` block is checked, and every repository path and page link exists.

Commands are checked without running them (the suite stays fast): a ``deepresearch …`` line must
parse with the real argparse parser, ``make X`` must name a Makefile target, ``python FILE`` must
name a file that exists (``python -c CODE`` must compile), and a variable set before a command must
be one the configuration reads (or a known third-party one). Any other command belongs in a block
marked ``<!-- not run here: reason -->`` on the line before its fence.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from deepresearch_dagster.cli import build_parser, reference
from deepresearch_dagster.core import config

REPO = Path(__file__).resolve().parents[1]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
NOT_RUN = re.compile(r"<!--\s*not run here:\s*\S.*-->")
FENCE = re.compile(r"^```(\w*)\s*$")
SHELL = {"bash", "sh", "shell", "console"}
BUILTINS = {"export", "printf", "echo", "cd", "source", "mkdir", "chmod", "cat", "cp", "ls"}
OTHER_VARIABLES = {  # read by other programs than ours
    "OLLAMA_CONTEXT_LENGTH", "CMAKE_ARGS", "CMAKE_BUILD_PARALLEL_LEVEL", "DAGSTER_HOME", "PYTHONPATH",
    "COLUMNS", "HYPOTHESIS_PROFILE", "DEEPRESEARCH_PROPERTY_EXAMPLES", "DEEPRESEARCH_UI_SCREENSHOTS",
}  # fmt: skip


def _known_variables() -> set[str]:
    names = {*config.ENV_VARS.values(), *config.SEARCH_ENV_VARS.values(), config.PROVIDERS_ENV, config.PRICES_ENV}
    names.add(config.CONFIG_ENV)
    for role in config.ROLES:
        names |= {pattern.format(role.upper()) for pattern in config.ROLE_TABLES.values()}
        names.add(config.TEMPERATURE_ENV.format(role.upper()))
    return names | OTHER_VARIABLES


def shell_blocks(path: Path) -> list[tuple[int, bool, list[str]]]:
    """(line number, marked not-run, commands) per fenced shell block; continuations joined."""
    blocks, lines = [], path.read_text("utf-8").splitlines()
    i = 0
    while i < len(lines):
        match = FENCE.match(lines[i])
        if not match or not match.group(1):
            i += 1
            continue
        start, body = i, []
        i += 1
        while i < len(lines) and not lines[i].startswith("```"):
            body.append(lines[i])
            i += 1
        i += 1
        if match.group(1) not in SHELL:
            continue
        marked = start > 0 and bool(NOT_RUN.search(lines[start - 1]))
        text = "\n".join(body).replace("\\\n", " ")
        commands = [c for c in (shlex.split(line, comments=True) for line in text.splitlines()) if c]
        blocks.append((start + 1, marked, commands))
    return blocks


def _make_targets() -> set[str]:
    text = (REPO / "Makefile").read_text("utf-8")
    return set(re.findall(r"^([A-Za-z][\w-]*):", text, re.M))


def check_command(words: list[str], targets: set[str], variables: set[str]) -> str | None:
    """Why this command line is wrong, or None when it checks out; "other" for commands of other
    programs (allowed in marked blocks only)."""
    while words and re.match(r"^[A-Za-z_]\w*=", words[0]):
        name = words.pop(0).split("=", 1)[0]
        if name not in variables:
            return f"unknown variable {name}"
    if not words:
        return None
    head, args = words[0], words[1:]
    if head == "export":
        for word in args:
            name = word.split("=", 1)[0]
            if name not in variables:
                return f"unknown variable {name}"
        return None
    if Path(head).name == "deepresearch":
        try:
            build_parser(knobs=True).parse_args(args)
        except SystemExit:
            return "does not parse with deepresearch's parser"
        return None
    if head == "make":
        missing = [a for a in args if "=" not in a and a not in targets]
        return f"no make target {missing}" if missing else None
    if Path(head).name.startswith("python"):
        if args[:1] == ["-c"]:
            compile(args[1], "<doc>", "exec")
            return None
        if args[:1] == ["-m"]:
            return None
        script = next((a for a in args if a.endswith(".py")), None)
        if script is None or not (REPO / script).is_file():
            return "other" if script is None or script.startswith("/") else f"no such file {script}"
        return None
    return None if head in BUILTINS else "other"


@pytest.mark.parametrize("path", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_shell_command_is_checked_or_marked(path: Path) -> None:
    targets, variables = _make_targets(), _known_variables()
    problems = []
    for line, marked, commands in shell_blocks(path):
        for words in commands:
            why = check_command(list(words), targets, variables)
            if why == "other" and marked:
                continue
            if why is not None:
                extra = " (or mark the block <!-- not run here: reason -->)" if why == "other" else ""
                problems.append(f"{path.name}:{line}: {' '.join(words)}: {why}{extra}")
    assert not problems, "\n".join(problems)


PATH_TOKEN = re.compile(r"`([\w.-]+(?:/[\w.-]+)+/?)(?::[^`]*)?`")
ROOTS = ("deepresearch_dagster", "tests", "benchmarks", "docs", "suites", "core", "cli", "defs", "prompts")
WRITTEN_BY_COMMANDS = ("benchmarks/results/",)  # outputs of `make bench`, not in a clone
LINK = re.compile(r"\]\(([^)#\s]+\.md)(?:#[^)]*)?\)")


@pytest.mark.parametrize("path", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_path_and_link_exists(path: Path) -> None:
    text = path.read_text("utf-8")
    missing = []
    for token in PATH_TOKEN.findall(text):
        if not token.startswith(ROOTS) or token.startswith(WRITTEN_BY_COMMANDS):
            continue
        if not any((base / token).exists() for base in (REPO, REPO / "deepresearch_dagster")):
            missing.append(token)
    missing += [link for link in LINK.findall(text) if not (path.parent / link).is_file()]
    assert not missing, f"{path.relative_to(REPO)} names what does not exist: {missing}"


def test_generated_references_match_the_code() -> None:
    for page, build in reference.PAGES.items():
        assert page.is_file(), f"{page} is missing: run python -m deepresearch_dagster.cli.reference"
        assert page.read_text("utf-8") == build(), (
            f"{page.relative_to(REPO)} differs from the code: run python -m deepresearch_dagster.cli.reference"
        )


def test_every_setting_has_a_meaning() -> None:
    options = {n for n, i in config.RequestOptions.model_fields.items() if i.description}
    fields = [*config.ResearchSettings.model_fields, *config.SearchSettings.model_fields]
    assert [f for f in fields if f not in options and f not in reference.MEANINGS] == []


def test_the_checker_catches_drift() -> None:
    targets, variables = _make_targets(), _known_variables()
    assert check_command(["deepresearch", "run", "q", "--no-such-flag"], targets, variables)
    assert check_command(["deepresearch", "run", "q", "--depth", "2"], targets, variables) is None
    assert check_command(["make", "no-such-target"], targets, variables)
    assert check_command(["DEEPRESEARCH_NO_SUCH=1", "deepresearch", "ls"], targets, variables)
    assert check_command(["python", "benchmarks/no_such.py"], targets, variables)
    assert check_command(["vllm", "serve", "m"], targets, variables) == "other"


def test_readme_is_short_and_keeps_the_two_commands() -> None:
    text = (REPO / "README.md").read_text("utf-8")
    assert len(text.splitlines()) <= 200
    assert "make demo" in text and "make test" in text
