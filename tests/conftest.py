from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from deepresearch_dagster.core.config import ResearchSettings
from deepresearch_dagster.core.context import ResearchContext, make_engine
from deepresearch_dagster.core.store.lineage import LineageStore
from tests.fakes.openai_server import FakeOpenAIServer

FIXTURES = Path(__file__).parent / "fixtures"
PACKAGE_DIR = Path(__file__).resolve().parents[1] / "deepresearch_dagster"
SECRET_KEY = "sk-test-secret-do-not-leak-1234"


@pytest.fixture(autouse=True)
def isolated_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test gets its own artifact root and DAGSTER_HOME and no model configured."""
    for var in (
        "OPENAI_API_KEY",
        "OPENAI_BASE_URL",
        "DEEPRESEARCH_ENGINE",
        "DEEPRESEARCH_DUCKDB",
        "DEEPRESEARCH_CORPUS",
    ):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("DEEPRESEARCH_ARTIFACTS_DIR", str(tmp_path / "artifacts"))
    # A developer's own ~/.config/deepresearch/config.toml must not leak into tests.
    monkeypatch.setenv("DEEPRESEARCH_CONFIG", str(tmp_path / "no-config.toml"))
    monkeypatch.setenv("DAGSTER_HOME", str(make_dagster_home(tmp_path / "dagster_home")))
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
def _no_leaked_dagster_instance() -> Iterator[None]:
    """A sensor/schedule context built with an ``instance_ref`` (as the daemon builds them) enters
    an instance it only exits when used as a context manager, leaving Dagster's current
    defs-state storage pointing at an instance that is later garbage-collected; the next test
    that loads definitions then fails. Reset that context variable around every test."""
    from dagster._core.storage.defs_state.base import _current_storage

    token = _current_storage.set(None)
    yield
    _current_storage.reset(token)
