"""The configuration module: precedence, the config file, secrets, prices, and the one list of
per-research knobs that the CLI, the Dagster resource and request files derive from."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from deepresearch_dagster.cli import build_parser, main
from deepresearch_dagster.core.config import REQUEST_OPTIONS, RequestOptions, load_settings
from deepresearch_dagster.core.errors import ConfigError
from deepresearch_dagster.core.llm.pricing import Price, parse_prices, price_for
from deepresearch_dagster.defs.resources import ResearchConfig


def _config(tmp_path: Path, text: str, mode: int = 0o600) -> Path:
    path = tmp_path / "config.toml"
    path.write_text(text)
    os.chmod(path, mode)
    return path


def test_precedence_flag_over_env_over_file_over_default(tmp_path: Path) -> None:
    path = _config(tmp_path, 'depth = 3\nbreadth = 2\nmax_steps = 4\n[models]\nplanner = "file-model"\n')
    env = {"DEEPRESEARCH_CONFIG": str(path), "DEEPRESEARCH_BREADTH": "5", "DEEPRESEARCH_MODEL_REPORTER": "env-model"}
    settings = load_settings({"max_steps": 2}, env=env)
    assert settings.depth == 3  # file
    assert settings.breadth == 5  # environment beats the file
    assert settings.max_steps == 2  # flag beats both
    assert settings.models["planner"] == "file-model" and settings.models["reporter"] == "env-model"
    assert settings.models["compressor"] == "gpt-4o-mini"  # default
    assert settings.fanout_concurrency == 4  # default


def test_config_file_with_a_key_must_not_be_readable_by_others(tmp_path: Path) -> None:
    path = _config(tmp_path, 'openai_api_key = "sk-file-secret"\n', mode=0o644)
    with pytest.raises(ConfigError, match="chmod 600"):
        load_settings(env={"DEEPRESEARCH_CONFIG": str(path)})
    os.chmod(path, 0o600)
    settings = load_settings(env={"DEEPRESEARCH_CONFIG": str(path)})
    assert settings.openai_api_key is not None and settings.resolved_engine() == "openai"
    # Secrets never appear in dumps (Dagster metadata, stored requests) or reprs.
    assert "sk-file-secret" not in json.dumps(settings.model_dump(mode="json")) + repr(settings)


def test_config_file_without_secrets_may_be_world_readable(tmp_path: Path) -> None:
    path = _config(tmp_path, 'engine = "offline"\n[search]\nproviders = ["brave"]\n', mode=0o644)
    settings = load_settings(env={"DEEPRESEARCH_CONFIG": str(path)})
    assert settings.engine == "offline" and settings.search.providers == ("brave",)


def test_bad_config_is_one_clear_error(tmp_path: Path) -> None:
    path = _config(tmp_path, "depth = [")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_settings(env={"DEEPRESEARCH_CONFIG": str(path)})
    with pytest.raises(ConfigError, match=r"DEEPRESEARCH_DEPTH: .*less than or equal to 5 \(got '99'\)"):
        load_settings(env={"DEEPRESEARCH_DEPTH": "99"})
    path = _config(tmp_path, "depth = 99")
    with pytest.raises(ConfigError, match=r"depth in .*config.toml: .*less than or equal to 5 \(got 99\)"):
        load_settings(env={"DEEPRESEARCH_CONFIG": str(path)})


@pytest.mark.parametrize(
    "value",
    ['{"my-model": {"input": 0.15, "output": 0.6}}', '{"my-model": [0.15, 0.6]}'],
    ids=["documented-object-form", "list-form"],
)
def test_prices_env_forms(value: str) -> None:
    prices = load_settings(env={"DEEPRESEARCH_PRICES": value}).prices
    assert prices["my-model"] == Price(input=0.15, output=0.6)
    assert prices["gpt-4o"] == Price(input=2.5, output=10.0)  # the built-in table is extended
    # A dated variant is priced by its longest listed prefix; an unknown model is unpriced.
    assert price_for("my-model-2025-01-01", prices) == prices["my-model"]
    assert price_for("gpt-4o-mini-2024-07-18", prices) == prices["gpt-4o-mini"]
    assert price_for("totally-unknown", prices) is None


def test_prices_file_and_errors(tmp_path: Path) -> None:
    file = tmp_path / "prices.json"
    file.write_text('{"m": {"input": 1, "output": 2}}')
    assert load_settings(env={"DEEPRESEARCH_PRICES": str(file)}).prices["m"] == Price(input=1, output=2)
    for bad in ('{"m": {"input": -1, "output": 2}}', '{"m": [1]}', "[1, 2]", "{not json"):
        with pytest.raises(ConfigError, match="DEEPRESEARCH_PRICES"):
            load_settings(env={"DEEPRESEARCH_PRICES": bad})
    with pytest.raises(ValueError):
        parse_prices({"m": "cheap"})


def test_documented_prices_work_through_the_cli(tmp_path: Path, monkeypatch, capsys) -> None:
    """The README's form of DEEPRESEARCH_PRICES used to fail every research (KeyError: 0)."""
    monkeypatch.setenv("DEEPRESEARCH_PRICES", '{"offline-extractive-v1": {"input": 1.0, "output": 2.0}}')
    question = "How do urban heat islands form?"
    assert main(["run", question, "--engine", "offline", "--json", "--max-steps", "1", "--depth", "0"]) == 0
    capsys.readouterr()
    assert main(["metrics", "--json"]) == 0
    totals = json.loads(capsys.readouterr().out)["totals"]
    expected = (totals["prompt_tokens"] * 1.0 + totals["completion_tokens"] * 2.0) / 1e6
    assert totals["cost_usd"] == pytest.approx(expected, rel=1e-6) and expected > 0
    monkeypatch.setenv("DEEPRESEARCH_PRICES", '{"m": {"input": "free"}}')
    assert main(["metrics"]) == 2
    assert "DEEPRESEARCH_PRICES" in capsys.readouterr().err


def test_one_list_of_knobs() -> None:
    """CLI flags, the Dagster resource fields and request files all come from RequestOptions."""
    run = build_parser()._subparsers._group_actions[0].choices["run"]  # type: ignore[union-attr]
    dests = {a.dest for a in run._actions}
    assert set(RequestOptions.knobs()) <= dests
    assert set(REQUEST_OPTIONS) <= set(ResearchConfig.model_fields)


@given(
    depth=st.one_of(st.none(), st.integers(0, 5)),
    breadth=st.one_of(st.none(), st.integers(1, 8)),
    budget=st.one_of(st.none(), st.floats(0, 1e4, allow_nan=False)),
)
def test_options_apply_exactly_what_is_set(depth, breadth, budget) -> None:
    base = load_settings(env={})
    options = RequestOptions(depth=depth, breadth=breadth, budget_dollars=budget)
    settings = base.with_options(options)
    assert settings.depth == (base.depth if depth is None else depth)
    assert settings.breadth == (base.breadth if breadth is None else breadth)
    assert settings.budget_dollars == (base.budget_dollars if budget is None else budget)
    assert settings.max_steps == base.max_steps
