"""MCP servers and Python plugins as tools (issue 29), against a real MCP server written with the
SDK (tests/fixtures/mcp/notes_server.py, over stdio and streamable HTTP) and a plugin found through
a real ``deepresearch.tools`` entry point (a distribution put on sys.path)."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from deepresearch_dagster.cli import main
from deepresearch_dagster.core.config import MCPServerSettings, load_settings
from deepresearch_dagster.core.errors import ConfigError
from deepresearch_dagster.core.llm.engine import ToolCallRequest
from deepresearch_dagster.core.models import PlanStep, ResearchPlan
from deepresearch_dagster.core.pipeline import research_stage
from deepresearch_dagster.core.roles.researcher import ResearchState, StepRun, build_toolbox, run_calls
from deepresearch_dagster.core.store.audit import audit_research, metrics
from deepresearch_dagster.core.tools.external import plugin_tools

FIXTURES = Path(__file__).parents[1] / "fixtures"
SERVER = str(FIXTURES / "mcp" / "notes_server.py")
TOKEN = "notes-token-4f9a2c"  # the server's secret: must reach the server and nothing else


def notes_server(**extra: object) -> dict[str, object]:
    return {"command": sys.executable, "args": [SERVER], "env": {"NOTES_TOKEN": TOKEN}, **extra}


@pytest.fixture
def plugin_on_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """The glossary plugin as an installed distribution (dist-info with entry_points.txt)."""
    monkeypatch.syspath_prepend(str(FIXTURES / "plugin"))


def _plan() -> ResearchPlan:
    return ResearchPlan.model_validate(
        {
            "plan_title": "Release 2.4 queue",
            "steps": [
                {
                    "step_id": 1,
                    "title": "Release 2.4 ingestion queue",
                    "description": "Find why release 2.4 moved the ingestion queue to Postgres.",
                    "queries": ["release 2.4 ingestion queue Postgres"],
                }
            ],
        }
    )


def test_plugin_and_mcp_tools_are_called_like_built_in_ones(make_context, plugin_on_path):
    ctx = make_context(mcp_servers={"notes": notes_server(allow=["search_notes", "env_token"])}, depth=0)
    plan = _plan()
    outputs = research_stage(ctx, plan)
    by_tool = {c.tool: c for c in outputs.calls}
    # The offline researcher picked the outside tools whose descriptions match the step.
    assert {"notes.search_notes", "glossary"} <= set(by_tool), sorted(by_tool)
    assert "notes.env_token" not in by_tool  # its description shares nothing with the step
    raw_dir = ctx.store.raw_dir(plan.plan_title)
    for name in ("notes.search_notes", "glossary"):
        call = by_tool[name]
        assert call.status == "ok" and call.error is None
        raw = (raw_dir / call.artifact_file).read_text("utf-8")
        assert "Postgres" in raw if name == "notes.search_notes" else "ingestion queue" in raw
        assert call.source and call.source.startswith(("mcp://notes/search_notes?", "tool://glossary?"))
        summary = next(s for s in outputs.summaries if s.call_id == call.call_id)
        assert summary.result.is_useful
    # One lineage row each, per-tool figures in metrics and audit.
    tools = {r["tool"]: r for r in metrics(ctx.lineage, ctx.settings.prices).tools}
    assert tools["notes.search_notes"]["calls"] == 1 and tools["glossary"]["calls"] == 1
    audit = audit_research(ctx.lineage, ctx.settings.artifacts_path, ctx.partition_key, ctx.settings.prices)
    assert {"notes.search_notes", "glossary"} <= {t["tool"] for t in audit.tools}
    # The server's token reached the server only: not the artifacts, not the lineage file.
    for path in ctx.settings.artifacts_path.rglob("*"):
        if path.is_file():
            assert TOKEN.encode() not in path.read_bytes(), path


def test_the_model_is_offered_mcp_tools_with_their_schemas(make_context, fake_openai):
    ctx = make_context(engine="openai", mcp_servers={"notes": notes_server(allow=["search_notes"])}, depth=0)
    # OpenAI function names allow no dot: the model calls the wire name, lineage keeps the real one.
    fake_openai.script("researcher", {"tool_calls": [("notes__search_notes", {"query": "ingestion queue"})]})
    outputs = research_stage(ctx, _plan())
    offered = {t["function"]["name"]: t["function"] for t in fake_openai.requests_for("researcher")[0]["tools"]}
    assert offered["notes__search_notes"]["parameters"]["required"] == ["query"]
    assert "Search the team's engineering notes" in offered["notes__search_notes"]["description"]
    (call,) = [c for c in outputs.calls if c.tool == "notes.search_notes"]
    assert call.status == "ok" and call.arguments == {"query": "ingestion queue"}
    assert call.source == "mcp://notes/search_notes?query=ingestion+queue"


COMMITS = [
    "Initial configuration with a Redis ingestion queue",
    "Move the ingestion queue to Postgres because Redis lost jobs on restart",
    "Retry failed ingestion jobs three times to survive transient database errors",
    "Renew TLS certificates automatically after the billing outage in incident 17",
]


def git_repository(path: Path) -> Path:
    path.mkdir()
    git = ["git", "-C", str(path), "-c", "user.name=Dev", "-c", "user.email=dev@example.org"]
    subprocess.run([*git, "init", "-q"], check=True)
    for i, message in enumerate(COMMITS):
        (path / "config.txt").write_text(f"version {i}\n")
        subprocess.run([*git, "add", "config.txt"], check=True)
        subprocess.run([*git, "commit", "-q", "-m", message], check=True)
    return path


def test_a_server_nobody_here_wrote_and_every_fault_bounded(make_context, plugin_on_path, tmp_path):
    """The reference git server (PyPI ``mcp-server-git``, a dev dependency) over a fixture repository
    (a fixed argument: a model naming another repository is overridden), beside the notes server,
    whose failing tools each end as one recorded line. One toolbox: the servers start together."""
    git = {
        "command": str(Path(sys.executable).parent / "mcp-server-git"),
        "arguments": {"repo_path": str(git_repository(tmp_path / "repo"))},
        "allow": ["git_log", "git_show"],
    }
    ctx = make_context(
        mcp_servers={"notes": notes_server(), "git": git},
        tool_timeout_s=1.5,
        tool_max_output_bytes=100_000,
        fanout_concurrency=1,
    )
    plan = _plan()
    toolbox = build_toolbox(ctx, plan.plan_title)
    try:
        assert "notes.picture" in toolbox.tools and "broken" in toolbox.tools
        assert sorted(n for n in toolbox.tools if n.startswith("git.")) == ["git.git_log", "git.git_show"]
        assert "repo_path" not in toolbox.tools["git.git_log"].schema["properties"]
        requests = [
            ToolCallRequest("notes.fail", {}),
            ToolCallRequest("notes.huge", {"size": 200_000}),
            ToolCallRequest("notes.picture", {}),
            ToolCallRequest("notes.search_notes", {"query": 7}),  # not the schema's string
            ToolCallRequest("broken", {"term": "queue"}),
            ToolCallRequest("notes.hang", {}),
            ToolCallRequest("notes.crash", {}),
            ToolCallRequest("notes.search_notes", {"query": "incident"}),
            # Made before the crash: served from its stored artifact (what a resumed research does).
            ToolCallRequest("notes.search_notes", {"query": "queue"}),
        ]
        step = PlanStep.model_validate(plan.steps[0].model_dump())
        run, state = StepRun(step, []), ResearchState()
        before = [
            ToolCallRequest("notes.search_notes", {"query": "queue"}),
            ToolCallRequest("notes.env_token", {}),
            ToolCallRequest("git.git_log", {"max_count": 3}),
            ToolCallRequest("git.git_show", {"revision": "HEAD~1"}),
            ToolCallRequest("git.git_show", {"revision": "HEAD", "repo_path": "/"}),
        ]
        (first, _), (_, token), (log, log_raw), (show, show_raw), (_, head_raw) = run_calls(
            ctx, plan, toolbox, run, state, before
        )
        assert first.status == "ok" and not first.cached
        assert token == "token present"  # its env reached the server (and only it: see the first test)
        assert log.status == show.status == "ok", (log.error, show.error)
        assert all(m in log_raw for m in COMMITS[1:]) and COMMITS[0] not in log_raw
        assert COMMITS[2] in show_raw and "version 2" in show_raw
        assert COMMITS[3] in head_raw  # this repository's HEAD, not another one's
        assert show.source == "mcp://git/git_show?revision=HEAD~1"
        started = time.monotonic()
        stored = run_calls(ctx, plan, toolbox, run, state, requests)
        elapsed = time.monotonic() - started
    finally:
        toolbox.close()
    *stored, (cached, cached_raw) = stored
    assert cached.status == "ok" and cached.cached and "Postgres" in cached_raw
    errors = [record.error for record, _ in stored]
    assert all(record.status == "error" for record, _ in stored), errors
    expected = [
        "notes.fail returned an error",
        "notes.huge: output of 200,",  # … bytes is over the cap
        "notes.picture returned only binary content (image (image/png))",
        "invalid arguments for notes.search_notes: query",
        "broken failed: KeyError",
        "notes.hang: no answer within 1.5 s",
        "notes.crash: the server closed the connection",
        "notes.search_notes: the server closed the connection",
    ]
    for error, start in zip(errors, expected, strict=True):
        assert error.startswith(start), error
        assert "\n" not in error and "Traceback" not in error
    assert elapsed < 15
    # Each failure is a lineage row with its reason, and its raw artifact (the error) is on disk.
    rows = ctx.lineage.query("SELECT tool, error FROM tool_call_failures WHERE partition_key = ?", [ctx.partition_key])
    assert len(rows) == len(requests) - 1
    for record, _ in stored:
        assert (ctx.settings.artifacts_path / record.artifact_path).is_file()


@pytest.fixture
def http_notes_server() -> Iterator[int]:
    """The notes server over streamable HTTP on 127.0.0.1, in a thread of the test process (no
    interpreter to start), behind a check that requests carry the configured bearer token."""
    import importlib.util

    import uvicorn

    spec = importlib.util.spec_from_file_location("notes_server", SERVER)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    app = module.server.streamable_http_app()

    async def guarded(scope, receive, send):
        if scope["type"] == "http" and dict(scope["headers"]).get(b"authorization") != f"Bearer {TOKEN}".encode():
            await send({"type": "http.response.start", "status": 401, "headers": []})
            await send({"type": "http.response.body", "body": b""})
            return
        await app(scope, receive, send)

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(guarded, host="127.0.0.1", port=port, log_level="critical"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.02)  # uvicorn offers no event for "listening"
    yield port
    server.should_exit = True
    thread.join(10)


def test_streamable_http_server_with_headers_and_the_tools_command(
    tmp_path, plugin_on_path, http_notes_server, monkeypatch, capsys
):
    config = tmp_path / "config.toml"
    config.write_text(
        f'[mcp_servers.wiki]\nurl = "http://127.0.0.1:{http_notes_server}/mcp"\n'
        f'headers = {{ Authorization = "Bearer {TOKEN}" }}\ndeny = ["crash", "hang", "huge", "picture", "fail"]\n'
        "arguments = { limit = 1 }\n"
        '[mcp_servers.nohttp]\nurl = "http://127.0.0.1:{port}/mcp"\nallow = ["search_*"]\n'.replace(
            "{port}", str(http_notes_server)
        )
        + '[mcp_servers.missing]\ncommand = "/nonexistent/mcp-server"\n'
    )
    config.chmod(0o600)
    monkeypatch.setenv("DEEPRESEARCH_CONFIG", str(config))
    assert main(["tools", "--json"]) == 0
    out = capsys.readouterr()
    listing = json.loads(out.out)
    names = {t["name"]: t for t in listing["tools"]}
    assert set(names) == {"wiki.search_notes", "wiki.env_token", "glossary", "broken"}
    assert names["wiki.search_notes"]["origin"] == "mcp:wiki"
    assert names["glossary"]["origin"] == "plugin:dr-glossary-plugin"
    # A fixed argument is the user's: hidden from the model's schema.
    assert set(names["wiki.search_notes"]["parameters"]["properties"]) == {"query"}
    # Without the header the server refuses: that server's tools are not offered, with one line.
    problems = sorted(listing["problems"])
    assert [p.split(":")[0] for p in problems] == ["mcp server missing", "mcp server nohttp"]
    assert all("cannot start (" in p and "\n" not in p for p in problems)
    assert TOKEN not in out.out + out.err


def test_server_settings_keep_secrets_out_of_dumps_and_refuse_readable_files(tmp_path):
    server = MCPServerSettings.model_validate(notes_server(headers={"Authorization": f"Bearer {TOKEN}"}))
    assert TOKEN not in json.dumps(server.model_dump()) and TOKEN not in repr(server)
    settings = load_settings({"mcp_servers": {"notes": notes_server()}}, env={})
    assert "mcp_servers" not in settings.model_dump() and TOKEN not in repr(settings)
    assert settings.with_options({"depth": 0}).mcp_servers == settings.mcp_servers
    with pytest.raises(ValidationError, match="either command"):
        MCPServerSettings.model_validate({"command": "x", "url": "http://127.0.0.1:1/mcp"})
    config = tmp_path / "config.toml"
    config.write_text(f'[mcp_servers.notes]\ncommand = "x"\nenv = {{ NOTES_TOKEN = "{TOKEN}" }}\n')
    config.chmod(0o644)
    with pytest.raises(ConfigError, match="chmod 600"):
        load_settings(env={"DEEPRESEARCH_CONFIG": str(config)})
    config.chmod(0o600)
    assert load_settings(env={"DEEPRESEARCH_CONFIG": str(config)}).mcp_servers["notes"].command == "x"
    with pytest.raises(ConfigError, match="server names"):
        load_settings({"mcp_servers": {"a.b": {"command": "x"}}}, env={})


def test_plugins_are_found_by_entry_point_and_can_be_denied(plugin_on_path):
    tools, problems = plugin_tools()
    assert [t.name for t in tools] == ["broken", "glossary"] and not problems
    tools, _ = plugin_tools(deny=("broken",))
    assert [t.name for t in tools] == ["glossary"]


GIT_QUESTION = "What changed in the last three commits of this repository and why?"


def _git_research(corpus_dir: Path, tmp_path: Path, engine: str) -> tuple[Path, Any, Any]:
    """The reference git server over a fixture repository, allowed its read-only tools as
    docs/tools.md configures it, researched end to end (no Dagster: the same stages)."""
    from deepresearch_dagster.core.config import ResearchSettings
    from deepresearch_dagster.core.pipeline import run_research

    repo = git_repository(tmp_path / "repo")
    git = {
        "command": str(Path(sys.executable).parent / "mcp-server-git"),
        "arguments": {"repo_path": str(repo)},
        "allow": ["git_log", "git_show", "git_diff*"],
    }
    settings = ResearchSettings.from_env(engine=engine, corpus_dir=str(corpus_dir), mcp_servers={"git": git})
    ctx, report = run_research(GIT_QUESTION, settings, {"depth": 0}, log=lambda m: None)
    return repo, ctx, report


def _cited_commits(repo: Path, report: Any) -> list[str]:
    """The shas of the last three commits whose sha and message one verified quote holds."""
    shas = subprocess.run(
        ["git", "-C", str(repo), "log", "-3", "--format=%H"], capture_output=True, text=True, check=True
    ).stdout.split()
    quotes = [c["quote"] for c in report.citation_checks if c["verified"]]
    pairs = zip(shas, reversed(COMMITS[1:]), strict=True)
    return [sha for sha, message in pairs if any(sha in q and message in q for q in quotes)]


def test_a_repository_history_researched_offline_cites_each_commit(corpus_dir, tmp_path):
    """Issue 29's done-when on the offline engine. The diff tools' descriptions match the question
    too; the researcher still reaches `git_log` (a tool that told an earlier step nothing yields to
    one not tried; one that failed is not called again), its entries are records that answer the
    step, and the report quotes each of the last three commits, sha and message, in a verified
    citation that the audit traces to the call."""
    repo, ctx, report = _git_research(corpus_dir, tmp_path, "offline")
    calls = ctx.lineage.query(
        "SELECT tool, status FROM tool_calls WHERE partition_key = ? AND tool LIKE 'git.%'", [ctx.partition_key]
    )
    assert ("git.git_log", "ok") in {(c["tool"], c["status"]) for c in calls}
    assert sum(c["tool"] == "git.git_show" for c in calls) <= 1  # it failed on the step's text: once
    cited = _cited_commits(repo, report)
    assert len(cited) == 3 and all(sha in report.markdown for sha in cited), report.citation_checks
    audit = audit_research(ctx.lineage, ctx.settings.artifacts_path, ctx.partition_key, ctx.settings.prices)
    (log,) = {(c.tool, c.artifact_verified) for c in audit.citations if c.source.startswith("mcp://git/")}
    assert log == ("git.git_log", True)


def test_a_repository_history_researched_through_the_openai_engine(corpus_dir, tmp_path, fake_openai):
    """The same through the openai engine against the fake model server: the model picks
    revisions from the log; the fake's compressor cannot summarize a log (it keeps sentences
    ending in a full stop) and falls back to the extractive one, which reads the log's records."""
    fake_openai.script(
        "researcher",
        {"tool_calls": [("git__git_log", {"max_count": 3})]},
        {"tool_calls": [("git__git_show", {"revision": "HEAD~1"})]},
    )
    repo, ctx, report = _git_research(corpus_dir, tmp_path, "openai")
    offered = {t["function"]["name"]: t["function"] for t in fake_openai.requests_for("researcher")[0]["tools"]}
    assert "repo_path" not in offered["git__git_log"]["parameters"]["properties"]
    rows = ctx.lineage.query("SELECT * FROM tool_calls WHERE partition_key = ?", [ctx.partition_key])
    calls = {c["tool"]: c for c in rows}
    assert calls["git.git_log"]["status"] == calls["git.git_show"]["status"] == "ok"
    assert calls["git.git_log"]["source"] == "mcp://git/git_log?max_count=3"
    assert _cited_commits(repo, report)  # at least one commit, sha and message, in a verified quote


def test_the_offline_researcher_skips_failed_tools_and_tries_new_ones_first():
    from deepresearch_dagster.core.heuristics.tool_choice import choose_tool_calls

    def tool(name: str, description: str, required: bool = False) -> dict[str, Any]:
        props = {"revision": {"type": "string"}} if required else {"max_count": {"type": "integer", "default": 10}}
        schema = {"properties": props, "required": ["revision"] if required else []}
        return {"name": name, "description": description, "parameters": schema}

    tools = [
        tool("git.git_diff_staged", "Shows changes that are staged for commit"),
        tool("git.git_log", "Shows the commit logs"),
        tool("git.git_show", "Shows the contents of a commit", required=True),
        tool("notes.env_token", "Say whether the server received its token"),
    ]
    step = {"title": "What changed in the last three commits", "description": "", "queries": []}
    payload = {"step": step, "external_tools": tools, "calls": []}
    # Most shared terms first ("changes", "commit"), then by name; a tool sharing none is not called.
    assert [n for n, _ in choose_tool_calls(payload)] == ["git.git_diff_staged", "git.git_log"]
    payload["earlier_outcomes"] = {"git.git_diff_staged": "not useful", "git.git_log": "failed"}
    chosen = choose_tool_calls(payload)
    assert [n for n, _ in chosen] == ["git.git_show", "git.git_diff_staged"]
    assert chosen[0][1] == {"revision": "What changed in the last three commits"}  # the step's text
    payload["calls"] = [{"tool": "git.git_show", "arguments": {}}]  # made in this step already
    assert [n for n, _ in choose_tool_calls(payload)] == ["git.git_diff_staged"]
