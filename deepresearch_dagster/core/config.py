"""The one reader of configuration.

Precedence: CLI flag / per-request option > environment variable > config file > default.
Nothing else in the package reads ``os.environ``; everything below receives a
:class:`ResearchSettings` (plain immutable data). Secrets (API keys, a SearXNG URL that may
carry credentials) are ``SecretStr`` fields excluded from every dump, so settings can be shown
in Dagster metadata or stored with a request without leaking them.

The config file is TOML: ``$DEEPRESEARCH_CONFIG``, else ``$XDG_CONFIG_HOME/deepresearch/config.toml``
(``~/.config/deepresearch/config.toml``). Its top-level keys are the field names below
(``engine = "openai"``, ``depth = 2``), plus the tables ``[models]``, ``[max_tokens]``,
``[temperatures]``, ``[search]``, ``[prices]`` and ``[mcp_servers.<name>]`` (docs/tools.md). A file
holding a key or a credential (an MCP server's ``env`` or ``headers`` too) must not be readable
by group or others: a world-readable secret on a shared machine is a leaked secret, so such a file
is refused with a message saying how to fix it rather than silently used.
"""

from __future__ import annotations

import json
import os
import re
import stat
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from .errors import ConfigError
from .llm.pricing import DEFAULT_PRICES, Price, parse_prices

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

ROLES = ("planner", "researcher", "compressor", "critic", "reporter")
DEFAULT_MODELS = {
    "planner": "gpt-4o-mini",
    "researcher": "gpt-4o-mini",
    "compressor": "gpt-4o-mini",
    "critic": "gpt-4o-mini",
    "reporter": "gpt-4o",
}
# Output budgets per role: compressions are short by contract, reports are long.
DEFAULT_MAX_TOKENS = {"planner": 1500, "researcher": 800, "compressor": 900, "critic": 900, "reporter": 4000}
PACKAGE_DIR = Path(__file__).resolve().parents[1]
DEFAULT_CORPUS = PACKAGE_DIR / "corpus"
CONFIG_ENV = "DEEPRESEARCH_CONFIG"
PROVIDER_NAMES = ("tavily", "brave", "searxng", "serpapi")


def _flag(flag: str) -> dict[str, Any]:
    return {"flag": flag}


class RequestOptions(BaseModel):
    """The single list of per-research knobs. CLI flags (``deepresearch run``), the Dagster
    resource/launchpad config and request files are all derived from these fields; ``None``
    means "the configured default". Values are validated by applying them to the settings."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    engine: Literal["auto", "offline", "openai"] | None = Field(
        default=None, description="offline (no network), openai (OPENAI_API_KEY / OPENAI_BASE_URL) or auto"
    )
    corpus_dir: str | None = Field(default=None, description="folder of documents for local_search")
    depth: int | None = Field(
        default=None,
        description="reflection rounds after the first pass (default 1; 0 = none)",
        json_schema_extra=_flag("--depth"),
    )
    breadth: int | None = Field(
        default=None, description="query variants searched per step (default 3)", json_schema_extra=_flag("--breadth")
    )
    max_steps: int | None = Field(
        default=None, description="plan steps (default 5, at most 7)", json_schema_extra=_flag("--max-steps")
    )
    max_sources_per_step: int | None = Field(
        default=None,
        description="top-ranked sources read per step (default 2)",
        json_schema_extra=_flag("--max-sources"),
    )
    max_tool_calls_per_step: int | None = Field(
        default=None, description="tool calls per step (default 8)", json_schema_extra=_flag("--tool-calls")
    )
    drafts: int | None = Field(
        default=None,
        description="reports written for the judge to choose from (default 1)",
        json_schema_extra=_flag("--drafts"),
    )
    revisions: int | None = Field(
        default=None,
        description="critique-and-revise rounds of the report (default 1; 0 = none)",
        json_schema_extra=_flag("--revisions"),
    )
    budget_tokens: int | None = Field(
        default=None,
        description="token cap for the research (default 400000)",
        json_schema_extra=_flag("--budget-tokens"),
    )
    budget_dollars: float | None = Field(
        default=None, description="dollar cap (default 2.0)", json_schema_extra=_flag("--budget-dollars")
    )
    budget_llm_calls: int | None = Field(
        default=None, description="LLM call cap (default 300)", json_schema_extra=_flag("--budget-llm-calls")
    )
    budget_tool_calls: int | None = Field(
        default=None, description="tool call cap (default 150)", json_schema_extra=_flag("--budget-tool-calls")
    )
    budget_wall_s: float | None = Field(
        default=None, description="wall-time cap in seconds (default 3600)", json_schema_extra=_flag("--budget-seconds")
    )

    @classmethod
    def knobs(cls) -> dict[str, tuple[str, type, str]]:
        """Numeric knobs with a CLI flag: field -> (flag, type, help)."""
        out = {}
        for name, info in cls.model_fields.items():
            extra = info.json_schema_extra if isinstance(info.json_schema_extra, dict) else {}
            if "flag" in extra:
                kind = float if "float" in str(info.annotation) else int
                out[name] = (str(extra["flag"]), kind, info.description or "")
        return out

    def set_values(self) -> dict[str, Any]:
        return {k: v for k, v in self.model_dump().items() if v not in (None, "")}


REQUEST_OPTIONS = tuple(RequestOptions.model_fields)


class SearchSettings(BaseModel):
    """Web search providers, tried in ``providers`` order; unconfigured ones are skipped."""

    model_config = ConfigDict(frozen=True)

    providers: tuple[str, ...] = PROVIDER_NAMES
    timeout_s: float = Field(default=15.0, gt=0, allow_inf_nan=False)
    tavily_api_key: SecretStr | None = Field(default=None, exclude=True, repr=False)
    tavily_base_url: str = "https://api.tavily.com"
    brave_api_key: SecretStr | None = Field(default=None, exclude=True, repr=False)
    brave_base_url: str = "https://api.search.brave.com"
    # A self-hosted endpoint may carry basic-auth credentials in its URL: a secret too.
    searxng_url: SecretStr | None = Field(default=None, exclude=True, repr=False)
    serpapi_api_key: SecretStr | None = Field(default=None, exclude=True, repr=False)
    serpapi_base_url: str = "https://serpapi.com"

    @property
    def configured(self) -> bool:
        return any(
            getattr(self, f) is not None for f in ("tavily_api_key", "brave_api_key", "searxng_url", "serpapi_api_key")
        )


class MCPServerSettings(BaseModel):
    """One MCP server (``[mcp_servers.<name>]``): a stdio command, or a streamable HTTP ``url``.
    ``env`` and ``headers`` values are secrets (tokens live there): excluded from every dump and
    redacted from error texts. ``arguments`` are fixed: set on every call of the server's tools
    that take them and hidden from the model (a repository path is the user's choice, not the
    model's)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    command: str | None = None
    args: tuple[str, ...] = ()
    env: dict[str, SecretStr] = Field(default_factory=dict, exclude=True, repr=False)
    cwd: str | None = None
    url: str | None = None
    headers: dict[str, SecretStr] = Field(default_factory=dict, exclude=True, repr=False)
    allow: tuple[str, ...] = ()  # tool names (without the server prefix); empty: all
    deny: tuple[str, ...] = ()
    arguments: dict[str, Any] = Field(default_factory=dict)
    timeout_s: float | None = Field(default=None, gt=0, allow_inf_nan=False)  # else tool_timeout_s

    @model_validator(mode="after")
    def _one_transport(self) -> MCPServerSettings:
        if bool(self.command) == bool(self.url):
            raise ValueError("give either command (stdio) or url (streamable HTTP)")
        return self


class ResearchSettings(BaseModel):
    model_config = ConfigDict(frozen=True)

    engine: Literal["auto", "offline", "openai"] = "auto"
    artifacts_dir: str = "artifacts"
    duckdb_path: str = ""
    corpus_dir: str = ""
    # List the passages nearest the query in meaning beside those with its words (core/documents/embeddings.py);
    # off, or without the model files, the words alone.
    semantic_search: bool = True
    requests_dir: str = ""  # default <artifacts>/requests
    recurring_file: str = "recurring.yaml"
    max_steps: int = Field(default=5, ge=1, le=7)
    max_tool_calls_per_step: int = Field(default=8, ge=1, le=30)
    max_sources_per_step: int = Field(default=2, ge=1, le=10)  # top-K results read per step
    depth: int = Field(default=1, ge=0, le=5)  # reflection rounds after the first pass
    breadth: int = Field(default=3, ge=1, le=8)  # query variants searched per step
    fanout_concurrency: int = Field(default=4, ge=1, le=16)
    sufficiency_threshold: int = Field(default=7, ge=1, le=10)
    max_followups_per_round: int = Field(default=2, ge=1, le=5)
    budget_tokens: int = Field(default=400_000, ge=0)
    budget_dollars: float = Field(default=2.0, ge=0)
    budget_llm_calls: int = Field(default=300, ge=0)
    budget_tool_calls: int = Field(default=150, ge=0)
    # A deadline: 0 s would stop every research before it starts (inf: no wall-time cap).
    budget_wall_s: float = Field(default=3600.0, gt=0)
    report_lookups: int = Field(default=3, ge=0, le=10)
    drafts: int = Field(default=1, ge=1, le=5)  # reports the judge chooses from (core/roles/revision.py)
    revisions: int = Field(default=1, ge=0, le=3)  # critique-and-revise rounds of the report
    openai_base_url: str | None = None
    openai_api_key: SecretStr | None = Field(default=None, exclude=True, repr=False)
    models: dict[str, str] = Field(default_factory=lambda: dict(DEFAULT_MODELS))
    max_tokens: dict[str, int] = Field(default_factory=lambda: dict(DEFAULT_MAX_TOKENS))
    temperature: float = Field(default=0.0, ge=0.0, le=2.0)
    # Per-role overrides of ``temperature`` (DEEPRESEARCH_TEMPERATURE_<ROLE>).
    role_temperatures: dict[str, float] = Field(default_factory=dict)
    # Timeouts are > 0 and finite: every model call has a wall deadline (0 or -1 is a typo, not "none").
    llm_timeout_s: float = Field(default=120.0, gt=0.0, allow_inf_nan=False)
    llm_max_attempts: int = Field(default=4, ge=1, le=10)
    llm_backoff_base_s: float = Field(default=1.0, ge=0.0)
    llm_backoff_max_s: float = Field(default=30.0, ge=0.0)
    # Where the engine's capability ladder starts (json_object_schema: llama.cpp's
    # {"type": "json_object", "schema": ...}); a server's refusals step it down at run time.
    response_format: Literal["json_schema", "json_object_schema", "json_object", "none"] = "json_schema"
    # Client timeout = llm_timeout_s + max_tokens / llm_tokens_per_s (the assumed generation speed).
    llm_tokens_per_s: float = Field(default=20.0, gt=0.0, allow_inf_nan=False)
    # Answers are streamed: a server silent for llm_idle_timeout_s (+ the prompt's reading time,
    # core/llm/openai_engine.PROMPT_TOKENS_PER_S) is cut long before the whole answer's deadline.
    llm_stream: bool = True
    llm_idle_timeout_s: float = Field(default=30.0, gt=0.0, allow_inf_nan=False)
    # The models' context window in tokens; unset: read from the server when it says
    # (core/llm/server_info.py), and every prompt is fitted to it.
    context_window: int | None = Field(default=None, gt=256)
    # How the reporter model writes the sections every sentence of which must cite: "write"
    # (prose), "select" (it picks, from numbered findings that verify, which answer the question:
    # a small model's prose rarely verifies), "auto": select when the context window is 8,192
    # tokens or less (a small local server), else write.
    report_style: Literal["auto", "write", "select"] = "auto"
    # "raw" injects whole tool outputs instead of summaries: the baseline for benchmarks only.
    context_mode: Literal["compressed", "raw"] = "compressed"
    # Role -> replacement prompt file (replays: recompress with another prompt version).
    prompt_files: dict[str, str] = Field(default_factory=dict)
    tool_cache_ttl_s: float = Field(default=86_400.0, ge=0.0)
    # The tool_outputs asset check fails below this context reduction (seed 000 §10: > 80 %).
    min_context_reduction_pct: float = Field(default=80.0, ge=0.0, le=100.0)
    fetch_allow_loopback: bool = False
    fetch_allow_private: bool = False
    fetch_respect_robots: bool = True
    enable_fetch: bool = False
    search: SearchSettings = Field(default_factory=SearchSettings)
    # A team deployment's Postgres (docs/deployment.md): the Dagster instance storage and the
    # partition locks across hosts. It carries a password: a secret, never dumped.
    postgres_url: SecretStr | None = Field(default=None, exclude=True, repr=False)
    # Artifacts shared by every host (docs/deployment.md): ``s3://bucket/prefix`` on AWS S3 or any
    # S3-API store (MinIO, R2: ``s3_endpoint``). ``artifacts_dir`` is then each host's working copy.
    artifacts_url: str = Field(default="", pattern=r"^(s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9](/.*)?)?$")
    s3_endpoint: str | None = None
    s3_region: str = "us-east-1"
    s3_access_key_id: SecretStr | None = Field(default=None, exclude=True, repr=False)
    s3_secret_access_key: SecretStr | None = Field(default=None, exclude=True, repr=False)
    # Lineage shared by every host (docs/deployment.md): a Postgres database that DuckDB attaches
    # (core/store/lineage_postgres.py); unset: the DuckDB file (``duckdb_path``). Carries a password.
    lineage_url: SecretStr | None = Field(default=None, exclude=True, repr=False)
    # Steps on Celery workers (``redis://host:6379/0``): broker and result backend. May carry a password.
    celery_broker_url: SecretStr | None = Field(default=None, exclude=True, repr=False)
    # A step whose whole worker is lost (no renewal of its claim for this long) goes to another
    # worker (celery_app.py): longer waits less on a worker that is only busy, never duplicates.
    celery_worker_lost_s: float = Field(default=120.0, ge=2.0, allow_inf_nan=False)
    # USD per 1M tokens; DEEPRESEARCH_PRICES / [prices] extend the built-in table.
    prices: dict[str, Price] = Field(default_factory=lambda: dict(DEFAULT_PRICES))
    # Tools from outside the core (docs/tools.md): MCP servers by name, and the Python plugins of
    # the `deepresearch.tools` entry point (all installed ones unless named in plugins_deny).
    # Out of every dump as a whole: a URL or an argument may carry a credential too.
    mcp_servers: dict[str, MCPServerSettings] = Field(default_factory=dict, exclude=True, repr=False)
    plugins_deny: tuple[str, ...] = ()
    # Every MCP or plugin call: a wall deadline and a cap on its raw output (a bigger answer is a
    # recorded failure, not a truncated source).
    tool_timeout_s: float = Field(default=60.0, gt=0, allow_inf_nan=False)
    tool_max_output_bytes: int = Field(default=5_000_000, ge=1_000)
    # A corpus PDF/Office file whose reader takes longer is skipped (core/documents/worker.py).
    extract_deadline_s: float = Field(default=60.0, gt=0, allow_inf_nan=False)

    @field_validator("mcp_servers")
    @classmethod
    def _server_names(cls, value: dict[str, MCPServerSettings]) -> dict[str, MCPServerSettings]:
        bad = [n for n in value if not re.fullmatch(r"[A-Za-z0-9_-]{1,32}", n)]
        if bad:
            raise ValueError(f"MCP server names are letters, digits, '-' and '_' (got {', '.join(bad)})")
        return value

    @field_validator("postgres_url", "lineage_url", mode="before")
    @classmethod
    def _postgres_scheme(cls, value: Any, info: ValidationInfo) -> Any:
        """Dagster's storage gets ``postgresql+psycopg2://``: with SQLAlchemy 2.1 a bare
        ``postgresql://`` selects psycopg 3, and Dagster's ``NOTIFY run_events, $1`` then fails (runs
        stay NOT_STARTED). Lineage gets ``postgresql://``, the form libpq (under DuckDB's postgres
        extension) reads."""
        text = value.get_secret_value() if isinstance(value, SecretStr) else value
        if not isinstance(text, str) or not text.strip():
            return None
        scheme, sep, rest = text.strip().partition("://")
        if not sep or scheme not in ("postgres", "postgresql", "postgresql+psycopg2"):
            raise ValueError("must be a postgresql://user:password@host:port/database URL")
        return f"{'postgresql+psycopg2' if info.field_name == 'postgres_url' else 'postgresql'}://{rest}"

    @classmethod
    def from_env(cls, **overrides: Any) -> ResearchSettings:
        """Defaults < config file < environment < ``overrides`` (None values are ignored)."""
        return load_settings(overrides)

    def with_options(self, options: RequestOptions | Mapping[str, Any]) -> ResearchSettings:
        """Per-request options on top; raises pydantic's ValidationError for bad values."""
        if not isinstance(options, RequestOptions):
            options = RequestOptions.model_validate({k: v for k, v in options.items() if k in REQUEST_OPTIONS})
        picked = options.set_values()
        if not picked:
            return self
        # Validate through the model so constraints (ranges, literals) apply to the options too.
        merged = {**self.model_dump(), **picked}
        validated = ResearchSettings.model_validate(merged)
        return self.model_copy(update={k: getattr(validated, k) for k in picked})

    @property
    def artifacts_path(self) -> Path:
        return Path(self.artifacts_dir).resolve()

    @property
    def duckdb_file(self) -> Path:
        return Path(self.duckdb_path).resolve() if self.duckdb_path else self.artifacts_path / "lineage.duckdb"

    @property
    def corpus_path(self) -> Path:
        return Path(self.corpus_dir).resolve() if self.corpus_dir else DEFAULT_CORPUS

    @property
    def requests_path(self) -> Path:
        return Path(self.requests_dir).resolve() if self.requests_dir else self.artifacts_path / "requests"

    @property
    def recurring_path(self) -> Path:
        return Path(self.recurring_file).resolve()

    @property
    def celery_broker(self) -> str | None:
        return self.celery_broker_url.get_secret_value() if self.celery_broker_url else None

    @property
    def lineage_postgres(self) -> str | None:
        """The shared lineage database's URL (``postgresql://``), or None: the DuckDB file."""
        return self.lineage_url.get_secret_value() if self.lineage_url else None

    @property
    def lineage_database(self) -> str:
        """What ``LineageStore.at`` opens: the Postgres URL, or the DuckDB file's path."""
        return self.lineage_postgres or str(self.duckdb_file)

    @property
    def lineage_label(self) -> str:
        """Where lineage is, to print: the DuckDB file, or the Postgres database without its password."""
        if not self.lineage_postgres:
            return str(self.duckdb_file)
        from urllib.parse import urlsplit

        parts = urlsplit(self.lineage_postgres)
        return f"postgresql://{parts.hostname}:{parts.port or 5432}{parts.path}"

    @property
    def postgres(self) -> str | None:
        """The team deployment's Postgres URL (``postgresql+psycopg2://``), or None (embedded)."""
        return self.postgres_url.get_secret_value() if self.postgres_url else None

    def resolved_engine(self) -> Literal["offline", "openai"]:
        if self.engine != "auto":
            return self.engine
        return "openai" if (self.openai_api_key or self.openai_base_url) else "offline"

    def role_temperature(self, role: str) -> float:
        return self.role_temperatures.get(role, self.temperature)


# -- sources -----------------------------------------------------------------------------------
# Scalar settings and the variable each is read from (pydantic converts the strings).
ENV_VARS = {
    "engine": "DEEPRESEARCH_ENGINE",
    "artifacts_dir": "DEEPRESEARCH_ARTIFACTS_DIR",
    "duckdb_path": "DEEPRESEARCH_DUCKDB",
    "corpus_dir": "DEEPRESEARCH_CORPUS",
    "requests_dir": "DEEPRESEARCH_REQUESTS_DIR",
    "recurring_file": "DEEPRESEARCH_RECURRING",
    "openai_base_url": "OPENAI_BASE_URL",
    "openai_api_key": "OPENAI_API_KEY",
    "postgres_url": "DEEPRESEARCH_POSTGRES_URL",
    "artifacts_url": "DEEPRESEARCH_ARTIFACTS_URL",
    # The names every S3 client reads.
    "s3_endpoint": "AWS_ENDPOINT_URL",
    "s3_region": "AWS_REGION",
    "s3_access_key_id": "AWS_ACCESS_KEY_ID",
    "s3_secret_access_key": "AWS_SECRET_ACCESS_KEY",
    "celery_broker_url": "DEEPRESEARCH_CELERY_BROKER_URL",
    "celery_worker_lost_s": "DEEPRESEARCH_CELERY_WORKER_LOST_S",
    "lineage_url": "DEEPRESEARCH_LINEAGE_URL",
    "temperature": "DEEPRESEARCH_TEMPERATURE",
    "llm_timeout_s": "DEEPRESEARCH_LLM_TIMEOUT",
    "llm_max_attempts": "DEEPRESEARCH_LLM_MAX_ATTEMPTS",
    "llm_backoff_base_s": "DEEPRESEARCH_LLM_BACKOFF_BASE",
    "llm_backoff_max_s": "DEEPRESEARCH_LLM_BACKOFF_MAX",
    "response_format": "DEEPRESEARCH_RESPONSE_FORMAT",
    "llm_tokens_per_s": "DEEPRESEARCH_LLM_TOKENS_PER_S",
    "llm_stream": "DEEPRESEARCH_LLM_STREAM",
    "llm_idle_timeout_s": "DEEPRESEARCH_LLM_IDLE_TIMEOUT",
    "context_window": "DEEPRESEARCH_CONTEXT_WINDOW",
    "max_steps": "DEEPRESEARCH_MAX_STEPS",
    "max_tool_calls_per_step": "DEEPRESEARCH_MAX_TOOL_CALLS_PER_STEP",
    "max_sources_per_step": "DEEPRESEARCH_MAX_SOURCES_PER_STEP",
    "depth": "DEEPRESEARCH_DEPTH",
    "breadth": "DEEPRESEARCH_BREADTH",
    "fanout_concurrency": "DEEPRESEARCH_FANOUT_CONCURRENCY",
    "sufficiency_threshold": "DEEPRESEARCH_SUFFICIENCY_THRESHOLD",
    "budget_tokens": "DEEPRESEARCH_BUDGET_TOKENS",
    "budget_dollars": "DEEPRESEARCH_BUDGET_DOLLARS",
    "budget_llm_calls": "DEEPRESEARCH_BUDGET_LLM_CALLS",
    "budget_tool_calls": "DEEPRESEARCH_BUDGET_TOOL_CALLS",
    "budget_wall_s": "DEEPRESEARCH_BUDGET_WALL_S",
    "tool_cache_ttl_s": "DEEPRESEARCH_TOOL_CACHE_TTL",
    "fetch_allow_loopback": "DEEPRESEARCH_FETCH_ALLOW_LOOPBACK",
    "fetch_allow_private": "DEEPRESEARCH_FETCH_ALLOW_PRIVATE",
    "fetch_respect_robots": "DEEPRESEARCH_FETCH_RESPECT_ROBOTS",
    "enable_fetch": "DEEPRESEARCH_ENABLE_FETCH",
    "semantic_search": "DEEPRESEARCH_SEMANTIC_SEARCH",
    "context_mode": "DEEPRESEARCH_CONTEXT_MODE",
    "report_style": "DEEPRESEARCH_REPORT_STYLE",
    "min_context_reduction_pct": "DEEPRESEARCH_MIN_CONTEXT_REDUCTION",
    "tool_timeout_s": "DEEPRESEARCH_TOOL_TIMEOUT",
    "tool_max_output_bytes": "DEEPRESEARCH_TOOL_MAX_OUTPUT_BYTES",
    "extract_deadline_s": "DEEPRESEARCH_EXTRACT_DEADLINE",
}
SEARCH_ENV_VARS = {
    "timeout_s": "DEEPRESEARCH_SEARCH_TIMEOUT",
    "tavily_api_key": "TAVILY_API_KEY",
    "tavily_base_url": "TAVILY_BASE_URL",
    "brave_api_key": "BRAVE_API_KEY",
    "brave_base_url": "BRAVE_BASE_URL",
    "searxng_url": "SEARXNG_URL",
    "serpapi_api_key": "SERPAPI_API_KEY",
    "serpapi_base_url": "SERPAPI_BASE_URL",
}
PROVIDERS_ENV = "DEEPRESEARCH_SEARCH_PROVIDERS"
PRICES_ENV = "DEEPRESEARCH_PRICES"
ROLE_TABLES = {"models": "DEEPRESEARCH_MODEL_{}", "max_tokens": "DEEPRESEARCH_MAX_TOKENS_{}"}
TEMPERATURE_ENV = "DEEPRESEARCH_TEMPERATURE_{}"


def environment() -> Mapping[str, str]:
    return os.environ


def config_file_path(env: Mapping[str, str] | None = None) -> Path:
    env = environment() if env is None else env
    if env.get(CONFIG_ENV):
        return Path(env[CONFIG_ENV]).expanduser()
    base = Path(env.get("XDG_CONFIG_HOME") or Path.home() / ".config")
    return base / "deepresearch" / "config.toml"


def _holds_secret(data: Mapping[str, Any]) -> bool:
    search = data.get("search") if isinstance(data.get("search"), Mapping) else {}
    keys = [k for k in data if str(k).endswith(("api_key", "access_key"))]
    keys += [k for k in search if str(k).endswith("api_key")]
    servers = data.get("mcp_servers") if isinstance(data.get("mcp_servers"), Mapping) else {}
    mcp = any(isinstance(s, Mapping) and (s.get("env") or s.get("headers")) for s in servers.values())
    url_keys = ("postgres_url", "celery_broker_url", "lineage_url")
    urls = (search.get("searxng_url", ""), *(data.get(k, "") for k in url_keys))
    return bool(keys) or mcp or any("@" in str(v) for v in urls)


def read_config_file(path: Path) -> dict[str, Any]:
    """The file's values as settings fields; ConfigError (one clear line) when it is unusable."""
    try:
        data = tomllib.loads(path.read_text("utf-8"))
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror or exc}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {path} is not valid TOML: {exc}") from exc
    if _holds_secret(data) and os.name == "posix":
        mode = stat.S_IMODE(path.stat().st_mode)
        if mode & 0o077:
            raise ConfigError(
                f"config file {path} holds an API key but is readable by group/others (mode {mode:o}); "
                f"run: chmod 600 {path}"
            )
    values = dict(data)
    if "temperatures" in values:
        values["role_temperatures"] = values.pop("temperatures")
    if "prices" in values:
        values["prices"] = _prices({**DEFAULT_PRICES}, values["prices"], f"[prices] in {path}")
    for table in ("models", "max_tokens"):
        if table in values:
            defaults = DEFAULT_MODELS if table == "models" else DEFAULT_MAX_TOKENS
            values[table] = {**defaults, **values[table]}
    return values


def _prices(base: dict[str, Price], value: Any, where: str) -> dict[str, Price]:
    try:
        return {**base, **parse_prices(value)}
    except ValueError as exc:
        raise ConfigError(f"{where}: {exc}") from exc


def _from_env(env: Mapping[str, str], base: dict[str, Any]) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for field_name, var in ENV_VARS.items():
        if env.get(var, "").strip():
            values[field_name] = env[var].strip()
    for table, pattern in ROLE_TABLES.items():
        current = dict(base.get(table) or (DEFAULT_MODELS if table == "models" else DEFAULT_MAX_TOKENS))
        for role in ROLES:
            if env.get(pattern.format(role.upper()), "").strip():
                current[role] = env[pattern.format(role.upper())].strip()
        values[table] = current
    temps = dict(base.get("role_temperatures") or {})
    for role in ROLES:
        if env.get(TEMPERATURE_ENV.format(role.upper()), "").strip():
            temps[role] = env[TEMPERATURE_ENV.format(role.upper())].strip()
    values["role_temperatures"] = temps
    search = dict(base.get("search") or {})
    for field_name, var in SEARCH_ENV_VARS.items():
        if env.get(var, "").strip():
            search[field_name] = env[var].strip()
    if env.get(PROVIDERS_ENV, "").strip():
        search["providers"] = env[PROVIDERS_ENV]
    if isinstance(search.get("providers"), str):
        search["providers"] = tuple(dict.fromkeys(n.strip().lower() for n in search["providers"].split(",") if n))
    unknown = [n for n in search.get("providers", ()) if n not in PROVIDER_NAMES]
    if unknown:
        raise ConfigError(
            f"unknown search provider(s) in {PROVIDERS_ENV}: {', '.join(unknown)}; "
            f"choose from {', '.join(PROVIDER_NAMES)}"
        )
    values["search"] = search
    if env.get(PRICES_ENV, "").strip():
        raw = env[PRICES_ENV].strip()
        try:
            text = raw if raw.startswith("{") else Path(raw).read_text("utf-8")
            parsed = json.loads(text)
        except OSError as exc:
            raise ConfigError(f"{PRICES_ENV}: cannot read {raw}: {exc.strerror or exc}") from exc
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{PRICES_ENV} is not valid JSON: {exc}") from exc
        values["prices"] = _prices(dict(base.get("prices") or DEFAULT_PRICES), parsed, PRICES_ENV)
    return values


def describe_validation_error(exc: ValidationError, names: Mapping[str, str] | None = None) -> str:
    """pydantic's errors as one line: ``where: message (got value); …``. ``names`` maps a field to
    what the user typed it as (``--depth``, ``DEEPRESEARCH_MAX_STEPS``) so the line names that."""
    parts = []
    for e in exc.errors():
        loc = ".".join(map(str, e["loc"]))
        where = (names or {}).get(loc, loc)
        message = e["msg"].removeprefix("Value error, ")
        got = e.get("input")
        plain = isinstance(got, str | int | float) and not isinstance(got, bool)
        secretish = any(w in loc for w in ("key", "url", "secret"))  # may carry credentials
        shown = f" (got {got!r})" if plain and not secretish else ""
        parts.append(f"{where}: {message}{shown}" if where else message)
    return "; ".join(parts)


def option_names() -> dict[str, str]:
    """Request option -> the CLI flag it is given as (``budget_wall_s`` -> ``--budget-seconds``)."""
    return {name: flag for name, (flag, _kind, _help) in RequestOptions.knobs().items()}


def load_settings(overrides: Mapping[str, Any] | None = None, env: Mapping[str, str] | None = None) -> ResearchSettings:
    env = environment() if env is None else env
    values: dict[str, Any] = {}
    path = config_file_path(env)
    if path.is_file():
        values.update(read_config_file(path))
    from_file = set(values)
    from_env = _from_env(env, values)
    values.update(from_env)
    given = {k: v for k, v in (overrides or {}).items() if v is not None}
    values.update(given)
    # Name each bad value the way the user gave it: the variable, else the config file's key.
    names = {f: f"{f} in {path}" for f in from_file}
    names |= {f: ENV_VARS[f] for f in from_env if f in ENV_VARS and f not in given}
    names |= {f"search.{f}": var for f, var in SEARCH_ENV_VARS.items() if env.get(var, "").strip()}
    try:
        settings = ResearchSettings.model_validate(values)
    except ValidationError as exc:
        raise ConfigError(f"invalid configuration: {describe_validation_error(exc, names)}") from exc
    _register_secrets(settings)
    return settings


def _register_secrets(settings: ResearchSettings) -> None:
    """Every configured key is redacted from error texts by value (``core/errors.py: redact``)."""
    from .errors import register_secret

    register_secret(settings.openai_api_key)
    register_secret(settings.s3_secret_access_key)
    for name in ("tavily_api_key", "brave_api_key", "serpapi_api_key"):
        register_secret(getattr(settings.search, name))
    for server in settings.mcp_servers.values():
        for value in [*server.env.values(), *server.headers.values()]:
            register_secret(value)
            # "Bearer <token>": the token alone may show up in a server's error text too.
            register_secret(value.get_secret_value().rpartition(" ")[2])
        for part in _url_credentials(server.url or ""):
            register_secret(part)
    for url in (settings.search.searxng_url, settings.postgres_url, settings.celery_broker_url, settings.lineage_url):
        if url is not None:
            for part in _url_credentials(url.get_secret_value()):
                register_secret(part)


def _url_credentials(url: str) -> list[str]:
    """The password of ``scheme://user:password@host`` URLs, for redaction; the user only when
    there is no password (``https://<token>@host``): a user name such as ``postgres`` is no
    secret, and redacting it everywhere would garble messages ("DuckDB's *** extension")."""
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(url)
    except ValueError:
        return []
    return [parts.password] if parts.password else [p for p in (parts.username,) if p]


# -- the process environment that other programs read -----------------------------------------
def dagster_home() -> Path:
    """The Dagster instance folder: $DAGSTER_HOME, else ./.dagster_home."""
    return Path(environment().get("DAGSTER_HOME") or Path.cwd() / ".dagster_home").resolve()


def export_dagster_home(home: Path) -> None:
    """Dagster reads DAGSTER_HOME itself (``DagsterInstance.get``)."""
    os.environ["DAGSTER_HOME"] = str(home)


POSTGRES_URL_ENV = ENV_VARS["postgres_url"]
CELERY_BROKER_ENV = ENV_VARS["celery_broker_url"]


def export_postgres_url(url: str) -> None:
    """A Postgres ``dagster.yaml`` names the URL as ``{env: DEEPRESEARCH_POSTGRES_URL}`` (so the
    password is never written in the file): a URL from the config file is handed to Dagster so."""
    os.environ[POSTGRES_URL_ENV] = url


def export_celery_broker(url: str) -> None:
    """The Celery executor's config names the broker as ``{env: DEEPRESEARCH_CELERY_BROKER_URL}``
    (never stored with the run's config): a URL from the config file is handed to Dagster so."""
    os.environ[CELERY_BROKER_ENV] = url


FIX_DAGSTER_YAML = "fix it, or move it aside to get the default one"


def check_dagster_yaml(home: Path) -> None:
    """``<home>/dagster.yaml``, when it exists, parses as YAML into a mapping: checked before Dagster
    is loaded (Dagster's own error is a 70-line traceback); :class:`ConfigError` otherwise."""
    path = home / "dagster.yaml"
    if not path.exists():
        return
    import yaml

    try:
        data = yaml.safe_load(path.read_bytes().decode("utf-8"))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConfigError(f"{path} is not valid YAML{where} ({problem}): {FIX_DAGSTER_YAML}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{path} is not UTF-8 text: {FIX_DAGSTER_YAML}") from None
    except OSError as exc:
        raise ConfigError(f"{path} cannot be read ({exc.strerror or exc}): {FIX_DAGSTER_YAML}") from None
    if data is not None and not isinstance(data, dict):
        raise ConfigError(f"{path} holds a {type(data).__name__}, not a mapping of settings: {FIX_DAGSTER_YAML}")
