"""UI smoke test: the real ``dagster-webserver`` on 127.0.0.1 loads workspace.yaml, shows the four
assets and a registered partition over GraphQL, and runs that partition when asked to."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
from dagster import AssetKey, DagsterInstance

from deepresearch_dagster.core.config import ResearchSettings
from deepresearch_dagster.core.pipeline import register
from deepresearch_dagster.core.store.lineage import LineageStore
from deepresearch_dagster.defs.partitions import RESEARCH_PARTITIONS_NAME

REPO = Path(__file__).resolve().parents[1]
ASSETS = {"research_plan", "tool_outputs", "compressed_summaries", "research_report"}
TIMEOUT_S = 120


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """The webserver and its code server share a session started for them: end all of it."""
    if proc.poll() is not None:
        return
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)


def test_webserver_shows_assets_and_partition_and_runs_it(isolated_env, corpus_dir):
    # Without the daemon, runs must start on launch instead of waiting in the queue.
    home = Path(os.environ["DAGSTER_HOME"])
    (home / "dagster.yaml").write_text(
        "telemetry:\n  enabled: false\nrun_coordinator:\n"
        "  module: dagster._core.run_coordinator\n  class: DefaultRunCoordinator\n"
    )
    settings = ResearchSettings.from_env()
    question = "How do sodium-ion batteries work and what do they cost?"
    key = register(
        LineageStore.at(settings.duckdb_file), question, {"engine": "offline", "corpus_dir": str(corpus_dir)}
    )
    DagsterInstance.get().add_dynamic_partitions(RESEARCH_PARTITIONS_NAME, [key])
    # A configured MCP server is listed on tool_outputs' definition (issue 29); the run's process
    # reads the configuration again, after the file is gone, so the research starts no server.
    config = Path(os.environ["DEEPRESEARCH_CONFIG"])
    server = REPO / "tests" / "fixtures" / "mcp" / "notes_server.py"
    config.write_text(f'[mcp_servers.notes]\ncommand = "{sys.executable}"\nargs = ["{server}"]\n')
    config.chmod(0o600)

    port = _free_port()
    log = (isolated_env / "webserver.log").open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "dagster_webserver", "-h", "127.0.0.1", "-p", str(port), "-w", "workspace.yaml"],
        cwd=REPO,
        env=dict(os.environ),
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        with httpx.Client(base_url=base, timeout=30, trust_env=False) as http:
            deadline = time.monotonic() + TIMEOUT_S
            while True:
                assert proc.poll() is None, (isolated_env / "webserver.log").read_text()[-3000:]
                try:
                    if http.get("/server_info").status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                assert time.monotonic() < deadline, "webserver did not come up"
                time.sleep(0.25)

            def gql(query: str, **variables: Any) -> dict[str, Any]:
                response = http.post("/graphql", json={"query": query, "variables": variables})
                response.raise_for_status()
                body = response.json()
                assert "errors" not in body, body["errors"]
                return body["data"]

            # The code location loads in its own process; wait until it is up.
            while True:
                data = gql(
                    "{ workspaceOrError { ... on Workspace { locationEntries { name locationOrLoadError {"
                    " __typename ... on PythonError { message } } } } } }"
                )
                (entry,) = data["workspaceOrError"]["locationEntries"]
                status = entry["locationOrLoadError"]
                if status and status["__typename"] == "RepositoryLocation":
                    break
                assert not status or status["__typename"] != "PythonError", status
                assert time.monotonic() < deadline, "code location did not load"
                time.sleep(0.25)
            location = entry["name"]

            nodes = gql("{ assetNodes { assetKey { path } isPartitioned } }")["assetNodes"]
            assert {n["assetKey"]["path"][-1] for n in nodes} >= ASSETS
            assert all(n["isPartitioned"] for n in nodes if n["assetKey"]["path"][-1] in ASSETS)
            node = gql(
                "query($path: [String!]!) { assetNodeOrError(assetKey: {path: $path}) {"
                " ... on AssetNode { partitionKeys } } }",
                path=["research_plan"],
            )["assetNodeOrError"]
            assert key in node["partitionKeys"]
            tools_node = """query { assetNodeOrError(assetKey: {path: ["tool_outputs"]}) { ... on AssetNode {
                metadataEntries { label ... on MarkdownMetadataEntry { mdStr } ... on IntMetadataEntry { intValue } }
                assetMaterializations(limit: 1) { metadataEntries { label ... on IntMetadataEntry { intValue } } }
            } } }"""
            defined = {e["label"]: e for e in gql(tools_node)["assetNodeOrError"]["metadataEntries"]}
            assert "mcp server notes (stdio: " in defined["mcp_servers"]["mdStr"]
            assert defined["mcp_server_count"]["intValue"] == 1
            config.unlink()

            launched = gql(
                "mutation($params: ExecutionParams!) { launchRun(executionParams: $params) { __typename"
                " ... on LaunchRunSuccess { run { runId } } ... on PythonError { message }"
                " ... on RunConfigValidationInvalid { errors { message } } } }",
                params={
                    "selector": {
                        "repositoryLocationName": location,
                        "repositoryName": "__repository__",
                        "jobName": "research_job",
                    },
                    "runConfigData": {},
                    "executionMetadata": {"tags": [{"key": "dagster/partition", "value": key}]},
                },
            )["launchRun"]
            assert launched["__typename"] == "LaunchRunSuccess", launched
            run_id = launched["run"]["runId"]

            run_deadline = time.monotonic() + 180
            while True:
                run = gql("query($id: ID!) { runOrError(runId: $id) { ... on Run { status } } }", id=run_id)[
                    "runOrError"
                ]
                if run["status"] in ("SUCCESS", "FAILURE", "CANCELED"):
                    break
                assert time.monotonic() < run_deadline, f"run still {run['status']}"
                time.sleep(0.25)  # a cheap query: the run's end is seen within a quarter second
            assert run["status"] == "SUCCESS"
            # What the defences against untrusted content did, as ints on the materialization.
            (materialization,) = gql(tools_node)["assetNodeOrError"]["assetMaterializations"]
            counts = {e["label"]: e.get("intValue") for e in materialization["metadataEntries"]}
            assert {k: counts.get(k) for k in ("tainted_calls", "refused_calls", "flagged_sources")} == dict.fromkeys(
                ("tainted_calls", "refused_calls", "flagged_sources"), 0
            )
    finally:
        _stop(proc)
        log.close()
    assert proc.poll() is not None
    assert (settings.artifacts_path / key / "report.md").is_file()
    materialized = DagsterInstance.get().get_materialized_partitions
    assert all(key in materialized(AssetKey(name)) for name in ASSETS)
