from __future__ import annotations

import importlib.util
import os
import shutil
from collections.abc import Iterator
from dataclasses import astuple
from pathlib import Path

import pytest

from deepresearch_dagster.core.config import ResearchSettings
from deepresearch_dagster.core.context import ResearchContext, make_engine
from deepresearch_dagster.core.store.lineage import LineageStore
from tests.fakes.openai_server import FakeOpenAIServer

FIXTURES = Path(__file__).parent / "fixtures"
# `deepresearch compress` on a corpus document, offline: the arguments the CLI tests share.
COMPRESS_ARGV = (
    "compress",
    str(FIXTURES / "corpus" / "sodium_ion_chemistry.md"),
    "--plan-title",
    "Sodium",
    "--step-title",
    "Sodium-ion energy density",
    "--step-description",
    "Find energy density in Wh/kg.",
    "--tool-name",
    "read_document",
    "--engine",
    "offline",
)
PACKAGE_DIR = Path(__file__).resolve().parents[1] / "deepresearch_dagster"
SECRET_KEY = "sk-test-secret-do-not-leak-1234"

# SQLite without fsync (tests/sqlite_no_fsync/sitecustomize.py says why) in this process and in
# every Python process a test starts (they inherit PYTHONPATH).
SQLITE_NO_FSYNC = Path(__file__).parent / "sqlite_no_fsync"
if str(SQLITE_NO_FSYNC) not in os.environ.get("PYTHONPATH", "").split(os.pathsep):
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(SQLITE_NO_FSYNC), os.environ.get("PYTHONPATH")]))
_spec = importlib.util.spec_from_file_location("tests_sqlite_no_fsync", SQLITE_NO_FSYNC / "sitecustomize.py")
_spec.loader.exec_module(importlib.util.module_from_spec(_spec))


@pytest.fixture(scope="session")
def ready_dagster_home_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An instance folder whose SQLite storage is already created and migrated (about a second of
    CPU per new instance, once per test process instead of once per test)."""
    from deepresearch_dagster.launcher import init_instance_storage

    home = make_dagster_home(tmp_path_factory.mktemp("dagster_home_template"))
    init_instance_storage(home)
    return home


@pytest.fixture(autouse=True)
def isolated_env(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test gets its own artifact root and DAGSTER_HOME and no model configured.

    The DAGSTER_HOME is a copy of a ready instance (storage created, as after a first run);
    ``@pytest.mark.fresh_dagster_home`` gives a test one whose storage does not exist yet."""
    for var in (
        "OPENAI_API_KEY",
        "OPENAI_BASE_URL",
        "DEEPRESEARCH_ENGINE",
        "DEEPRESEARCH_DUCKDB",
        "DEEPRESEARCH_CORPUS",
        # A developer's team deployment (docs/deployment.md) must not receive the tests' runs.
        "DEEPRESEARCH_POSTGRES_URL",
        "DEEPRESEARCH_ARTIFACTS_URL",
        "DEEPRESEARCH_CELERY_BROKER_URL",
        "AWS_ENDPOINT_URL",
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_REGION",
    ):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("DEEPRESEARCH_ARTIFACTS_DIR", str(tmp_path / "artifacts"))
    # Tests pin what the words list; meaning has its own tests (tests/core/test_semantic_search.py), and the
    # team rehearsal (tests/test_team_deployment.py) runs its researches on the defaults, meaning included.
    monkeypatch.setenv("DEEPRESEARCH_SEMANTIC_SEARCH", "0")
    # A developer's own ~/.config/deepresearch/config.toml must not leak into tests.
    monkeypatch.setenv("DEEPRESEARCH_CONFIG", str(tmp_path / "no-config.toml"))
    home = tmp_path / "dagster_home"
    if request.node.get_closest_marker("fresh_dagster_home"):
        make_dagster_home(home)
    else:
        shutil.copytree(request.getfixturevalue("ready_dagster_home_template"), home)
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    return tmp_path


def make_dagster_home(path: Path) -> Path:
    """A real instance folder with the project's dagster.yaml (telemetry off)."""
    path.mkdir(parents=True, exist_ok=True)
    shutil.copy(PACKAGE_DIR / "dagster_home" / "dagster.yaml", path / "dagster.yaml")
    return path


@pytest.fixture
def corpus_dir(tmp_path: Path) -> Path:
    target = tmp_path / "corpus"
    shutil.copytree(FIXTURES / "corpus", target)
    return target


@pytest.fixture
def fake_openai(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer() as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", SECRET_KEY)
        yield server


@pytest.fixture
def make_context(tmp_path: Path, corpus_dir: Path):
    def make(engine: str = "offline", partition_key: str = "test-partition", **overrides: object) -> ResearchContext:
        settings = ResearchSettings.from_env(engine=engine, corpus_dir=str(corpus_dir), **overrides)
        lineage = LineageStore.at(settings.duckdb_file)
        lineage.register_request(partition_key, "How do sodium-ion batteries work?", {})
        return ResearchContext(
            partition_key=partition_key,
            question="How do sodium-ion batteries work?",
            run_id="run-1",
            settings=settings,
            engine=make_engine(settings),
            lineage=lineage,
            log=lambda m: None,
            today="2026-11-22",
        )

    return make


@pytest.fixture(autouse=True)
def _fresh_server_knowledge() -> None:
    """What the OpenAI engine learned about servers is process-wide (one research process); a
    test is one such process, so it starts knowing nothing (several tests use the same refused
    port, which an earlier test would otherwise have marked unresponsive)."""
    from deepresearch_dagster.core.llm import openai_engine

    with openai_engine._REGISTRY_LOCK:
        openai_engine._REGISTRY.clear()
        openai_engine._PROGRESS.clear()


@pytest.fixture(autouse=True)
def _no_leaked_dagster_instance() -> Iterator[None]:
    """A sensor/schedule context built with an ``instance_ref`` (as the daemon builds them) enters
    an instance it only exits when used as a context manager, leaving Dagster's current
    defs-state storage pointing at an instance that is later garbage-collected; the next test
    that loads definitions then fails. Reset that context variable around every test."""
    from dagster._core.storage.defs_state.base import _current_storage

    token = _current_storage.set(None)
    yield
    _current_storage.reset(token)


# ``make test`` runs the suite on pytest-xdist workers (``--dist worksteal``: each worker takes
# half the queue in collection order, an idle one takes tests from the other's end), so the long
# tests go first: the wall time is then about the longest of them plus everything else split in
# two, not one long test started last. Plain ``-n N`` (``--dist load``) hands out one test at a time.
SLOW_FIRST = (
    "test_real_servers_e2e.py",
    "test_team_deployment.py",
    "test_celery_worker_loss.py",
    "test_concurrency.py",
    "test_ui_browser.py",
    "test_ui_smoke.py",
    "test_replay.py",
    "test_web_e2e.py",
    "test_dagster_e2e.py",
    "test_openai_e2e.py",
    "test_kill_resume.py",
    "test_same_partition.py",
    "test_paths_agree.py",
    "test_sensors_schedules.py",
    "test_cli.py",
    "test_interrupts.py",
    "test_cli_pty.py",
)
# Modules whose tests share a module- or class-scoped fixture: each goes to one worker whole,
# so the fixture is set up once (checked in pytest_collection_modifyitems).
KEEP_TOGETHER = (
    "tests/test_real_servers_e2e.py",
    "tests/test_cli_startup.py",
    "tests/core/web/test_search.py",
    "tests/core/web/test_fetch.py",
    "tests/core/test_passage_search.py",
    "tests/core/test_semantic_search.py",
    "tests/test_event_log.py",
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    rank = {name: i for i, name in enumerate(SLOW_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: modules stay whole
    shared = {
        item.nodeid.split("::")[0]
        for item in items
        if (info := getattr(item, "_fixtureinfo", None))
        for defs in info.name2fixturedefs.values()
        if defs and defs[-1].scope in ("package", "module", "class") and defs[-1].baseid != ""
    }
    if missing := sorted(shared - set(KEEP_TOGETHER)):
        config.issue_config_time_warning(
            pytest.PytestWarning(f"add {missing} to KEEP_TOGETHER in tests/conftest.py (module fixtures)"), 2
        )


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
    """Plain ``-n N`` (``--dist load``): one test per work unit, handed out in collection order,
    except the KEEP_TOGETHER modules, one unit each."""
    if config.getvalue("dist") != "load":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class OneTestOrOneModule(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.split("::")[0]
            return module if module in KEEP_TOGETHER else nodeid

    config.option.loadscopereorder = False  # keep the slow-first order
    return OneTestOrOneModule(config, log)


def pytest_sessionfinish(session: pytest.Session) -> None:
    """An xdist worker hands its red-team rows (tests/redteam/conftest.py) to the controller."""
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:
        from tests.redteam.conftest import ROWS

        workeroutput["redteam_rows"] = [astuple(r) for r in ROWS]


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: object, error: object) -> None:
    from tests.redteam.conftest import ROWS, Row

    ROWS.extend(Row(*row) for row in getattr(node, "workeroutput", {}).get("redteam_rows", []))


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """The red-team table (``make redteam``), also when the rows come from xdist workers."""
    if hasattr(terminalreporter.config, "workeroutput"):
        return
    from tests.redteam.conftest import ROWS

    if not ROWS:
        return
    headers = ("case", "expected", "observed", "pass", "s")
    cells = [(r.case, r.expected, r.observed, "PASS" if r.passed else "FAIL", f"{r.seconds:.2f}") for r in ROWS]
    widths = [min(70, max(len(h), *(len(c[i]) for c in cells))) for i, h in enumerate(headers)]

    def line(values: tuple[str, ...]) -> str:
        return "| " + " | ".join(v[:w].ljust(w) for v, w in zip(values, widths, strict=True)) + " |"

    terminalreporter.write_sep("=", "red-team table")
    terminalreporter.write_line(line(headers))
    terminalreporter.write_line("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for c in cells:
        terminalreporter.write_line(line(c))
    failed = sum(not r.passed for r in ROWS)
    terminalreporter.write_line(f"{len(ROWS)} cases, {len(ROWS) - failed} pass, {failed} fail")
