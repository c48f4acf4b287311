"""The package layout's dependency rules (README, Development), checked on the import graph.

Every ``import`` / ``from … import`` inside the package is resolved to a module, at module level
and inside functions alike (a lazy import is still a dependency).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "deepresearch_dagster"


def _module(path: Path) -> str:
    parts = ["deepresearch_dagster", *path.relative_to(PACKAGE).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text("utf-8"))
    module = _module(path)
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join([*base, node.module] if node.module else base)
            else:
                target = node.module or ""
            found.add(target)
            found |= {f"{target}.{a.name}" for a in node.names}
    return found


MODULES = {_module(p): p for p in PACKAGE.rglob("*.py")}
GRAPH = {m: {i for i in _imports(p) if i in MODULES and i != m} for m, p in MODULES.items()}


def _deps(prefix: str) -> set[str]:
    return {d for m, deps in GRAPH.items() if m.startswith(prefix) for d in deps}


def _external(prefix: str) -> set[str]:
    return {i.split(".")[0] for m, p in MODULES.items() if m.startswith(prefix) for i in _imports(p)}


def test_no_import_cycles_between_modules() -> None:
    # Package __init__ files re-export their children: edges into a package's own children and
    # from a child to its package's __init__ are not cycles of logic.
    def edges(m: str) -> set[str]:
        return {d for d in GRAPH[m] if not d.startswith(m + ".") and not m.startswith(d + ".")}

    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m: str) -> None:
        state[m] = 1
        stack.append(m)
        for d in sorted(edges(m)):
            if state.get(d) == 1:
                cycle = [*stack[stack.index(d) :], d]
                pytest.fail("import cycle: " + " -> ".join(cycle))
            if d not in state:
                visit(d)
        stack.pop()
        state[m] = 2

    for m in sorted(GRAPH):
        if m not in state:
            visit(m)


@pytest.mark.parametrize(
    ("layer", "forbidden"),
    [
        # The core is plain Python: no Dagster, no CLI.
        (
            "deepresearch_dagster.core",
            (
                "deepresearch_dagster.defs",
                "deepresearch_dagster.cli",
                "deepresearch_dagster.launcher",
                "deepresearch_dagster.definitions",
            ),
        ),
        # Storage and the LLM layer know nothing of roles or the pipeline.
        ("deepresearch_dagster.core.store", ("deepresearch_dagster.core.roles", "deepresearch_dagster.core.pipeline")),
        (
            "deepresearch_dagster.core.llm",
            (
                "deepresearch_dagster.core.roles",
                "deepresearch_dagster.core.pipeline",
                "deepresearch_dagster.core.store",
            ),
        ),
        # The offline heuristics are pure functions over payloads.
        (
            "deepresearch_dagster.core.heuristics",
            (
                "deepresearch_dagster.core.roles",
                "deepresearch_dagster.core.llm",
                "deepresearch_dagster.core.store",
                "deepresearch_dagster.core.pipeline",
            ),
        ),
        # Roles use the heuristics as fallbacks, never the offline engine.
        (
            "deepresearch_dagster.core.roles",
            ("deepresearch_dagster.core.llm.offline", "deepresearch_dagster.core.pipeline"),
        ),
        (
            "deepresearch_dagster.core.web",
            ("deepresearch_dagster.core.roles", "deepresearch_dagster.core.store", "deepresearch_dagster.core.llm"),
        ),
        ("deepresearch_dagster.core.tools", ("deepresearch_dagster.core.roles", "deepresearch_dagster.core.pipeline")),
        (
            "deepresearch_dagster.core.config",
            (
                "deepresearch_dagster.core.roles",
                "deepresearch_dagster.core.store",
                "deepresearch_dagster.core.web",
                "deepresearch_dagster.core.tools",
            ),
        ),
    ],
)
def test_dependencies_point_one_way(layer: str, forbidden: tuple[str, ...]) -> None:
    bad = sorted(d for d in _deps(layer) if d.startswith(forbidden))
    assert not bad, f"{layer} must not import {bad}"


def test_core_does_not_import_dagster() -> None:
    assert not {"dagster", "dagster_duckdb"} & _external("deepresearch_dagster.core")


def test_only_the_configuration_module_reads_the_environment() -> None:
    readers = sorted(
        m for m, p in MODULES.items() if "os.environ" in p.read_text("utf-8") or "getenv(" in p.read_text("utf-8")
    )
    assert readers == ["deepresearch_dagster.core.config"]
