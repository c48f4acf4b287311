"""A team deployment against real servers (docs/deployment.md): the Dagster instance in Postgres,
the partition lock across hosts, artifacts on an object store, steps on Celery workers. Each server
starts once per test process (session fixtures: the long tests can run on both xdist workers at
once) on 127.0.0.1, from deepresearch_dagster/local_servers.py (``make team-demo`` uses them too);
a test is skipped, with the reason, only where its server cannot be installed."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from deepresearch_dagster import local_servers as servers
from deepresearch_dagster.cli import main
from deepresearch_dagster.core.config import ResearchSettings, load_settings
from deepresearch_dagster.core.errors import ArtifactIntegrityError, ConfigError
from deepresearch_dagster.core.models import ResearchPlan, ToolOutputs
from deepresearch_dagster.core.store.artifacts import ArtifactStore
from deepresearch_dagster.core.store.lineage import LineageStore
from deepresearch_dagster.core.store.object_store import object_root
from deepresearch_dagster.core.store.partition_lock import PartitionBusy, partition_lock
from deepresearch_dagster.launcher import compute_logs_yaml, instance_yaml
from tests.core.store import test_lineage_connections as store_connections
from tests.core.store import test_lineage_queries as store_queries

REPO = Path(__file__).resolve().parents[1]
QUESTION = "What limits solid-state battery manufacturing, and how are companies scaling production?"
SMALL = ("--max-steps", "1", "--depth", "0", "--breadth", "1")  # a short research: the storage is under test


@pytest.fixture(scope="session")
def pg() -> servers.Postgres:
    reason = servers.unavailable_postgres()
    if reason:
        pytest.skip(reason)
    with servers.postgres() as server:
        yield server


BUCKET = "team-artifacts"


@pytest.fixture(scope="session")
def s3() -> servers.S3Server:
    reason = servers.unavailable_s3()
    if reason:
        pytest.skip(reason)
    with servers.s3() as server:
        import boto3

        client = boto3.client(
            "s3",
            endpoint_url=server.endpoint,
            aws_access_key_id=server.access_key,
            aws_secret_access_key=server.secret_key,
            region_name="us-east-1",
        )
        client.create_bucket(Bucket=BUCKET)
        yield server


def use_s3(monkeypatch: pytest.MonkeyPatch, server: servers.S3Server, url: str = f"s3://{BUCKET}/research") -> None:
    monkeypatch.setenv("DEEPRESEARCH_ARTIFACTS_URL", url)
    monkeypatch.setenv("AWS_ENDPOINT_URL", server.endpoint)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", server.access_key)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", server.secret_key)


def _query(url: str, sql: str) -> list[tuple]:
    import psycopg2

    conn = psycopg2.connect(url)
    try:
        with conn.cursor() as cur:
            cur.execute(sql)
            return cur.fetchall()
    finally:
        conn.close()


# -- the rehearsal (first: the longest test of the module, started early) ------------------
def test_four_researches_on_two_workers_survive_a_killed_worker(pg, s3, redis_url, tmp_path):
    from deepresearch_dagster.team_rehearsal import Servers, rehearse

    lines: list[str] = []
    figures = rehearse(tmp_path, REPO, lines.append, Servers(pg, redis_url, s3))
    report = "\n".join(lines) + "\n" + figures.line()
    assert figures.killed, report  # a worker's step process was SIGKILLed while it compressed
    assert figures.researches_finished == figures.researches == 4, report
    assert set(figures.ops_per_worker) == {"w1", "w2"}, report
    assert figures.rows_lost == 0 and figures.rows_duplicated == 0, report
    assert figures.reports_identical == "yes", report
    # Re-executed from failure: no tool call the killed step had made is made again (corpus reads
    # too are served from the tool cache, the raw file fetched from the object store).
    assert figures.tool_calls_repeated == 0 and figures.repeated_tools == {}, report
    assert figures.lineage_rows["tool_calls"] > 0 and figures.lineage_rows["summaries"] > 0, report
    # A recompression under a new prompt: one mapped op per raw output, on both workers.
    assert figures.recompressed > 0 and set(figures.compressions_per_worker) == {"w1", "w2"}, report
    # A whole worker SIGKILLed (nobody reports it): its step went to a worker by itself, so only the
    # run of the killed step process was re-executed.
    assert figures.worker_killed and figures.reexecuted == 1, report
    assert figures.steps_taken_over >= 1, report  # the lost worker's step, started again in its run
    # The compute logs of steps run on either worker are read back from the object store.
    assert set(figures.compute_logs_per_worker) == {"w1", "w2"}, report
    assert all(n > 0 for n in figures.compute_logs_per_worker.values()), report


def test_a_postgres_url_is_read_as_psycopg2_and_kept_secret(monkeypatch):
    monkeypatch.setenv("DEEPRESEARCH_POSTGRES_URL", "postgresql://team:s3cret-pw@db.internal:5433/dagster")
    settings = load_settings()
    # SQLAlchemy 2.1 would pick psycopg 3 for postgresql://, and Dagster's NOTIFY then fails.
    assert settings.postgres == "postgresql+psycopg2://team:s3cret-pw@db.internal:5433/dagster"
    assert "s3cret-pw" not in settings.model_dump_json() and "s3cret-pw" not in repr(settings)
    monkeypatch.setenv("DEEPRESEARCH_POSTGRES_URL", "mysql://team:s3cret-pw@db/x")
    with pytest.raises(ConfigError, match="DEEPRESEARCH_POSTGRES_URL") as info:
        load_settings()
    assert "s3cret-pw" not in str(info.value)


def test_the_generated_instance_templates_are_the_ones_in_deploy():
    assert (REPO / "deploy" / "dagster-postgres.yaml").read_bytes() == instance_yaml(postgres=True)
    team = instance_yaml(postgres=True, compute_logs=compute_logs_yaml("s3://team-research/artifacts"))
    assert (REPO / "deploy" / "dagster-team.yaml").read_bytes() == team


@pytest.mark.fresh_dagster_home
def test_a_research_runs_on_postgres_with_its_artifacts_on_an_object_store(pg, s3, isolated_env, monkeypatch, capsys):
    home = Path(os.environ["DAGSTER_HOME"])
    (home / "dagster.yaml").unlink()  # a new home: it gets the Postgres dagster.yaml
    monkeypatch.setenv("DEEPRESEARCH_POSTGRES_URL", pg.url)
    # Lineage in the same database as Dagster's tables (its own schema: both have a `runs` table).
    monkeypatch.setenv("DEEPRESEARCH_LINEAGE_URL", pg.url)
    use_s3(monkeypatch, s3)
    assert main(["run", QUESTION, "--engine", "offline", "--quiet", *SMALL]) == 0, capsys.readouterr().err
    # The Postgres dagster.yaml, with the compute logs on the object store, beside the artifacts.
    logs = compute_logs_yaml(f"s3://{BUCKET}/research", s3.endpoint)
    assert (home / "dagster.yaml").read_bytes() == instance_yaml(postgres=True, compute_logs=logs)
    # The run, its events and its materializations are in Postgres, none in local SQLite files.
    assert _query(pg.url, "SELECT status FROM runs") == [("SUCCESS",)]
    materialized = _query(pg.url, "SELECT count(*) FROM event_logs WHERE dagster_event_type = 'ASSET_MATERIALIZATION'")
    assert materialized == [(4,)]
    assert not list(home.rglob("*.db"))
    # The password reaches neither Dagster's storage, nor the artifacts, lineage or the home.
    assert _query(pg.url, "SELECT count(*) FROM deepresearch.tool_calls") != [(0,)]
    lineage_text = [("deepresearch.tool_calls", "arguments"), ("deepresearch.llm_calls", "error")]
    for table, column in (("event_logs", "event"), ("runs", "run_body"), *lineage_text):
        leaked = _query(pg.url, f"SELECT count(*) FROM {table} WHERE {column} LIKE '%{pg.password}%'")
        assert leaked == [(0,)], table
    for path in isolated_env.rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            assert pg.password.encode() not in data and s3.secret_key.encode() not in data, path

    # Every file of the research is in the object store, byte for byte, under the same names.
    settings = load_settings()
    shared = object_root(settings)
    (partition,) = [p for p in settings.artifacts_path.iterdir() if p.is_dir() and p.name != "corpus_cache"]
    local = {
        p.relative_to(settings.artifacts_path).as_posix(): p.read_bytes()
        for p in partition.rglob("*")
        if p.is_file() and not p.name.startswith(".")
    }
    assert sorted(shared.keys(partition.name)) == sorted(local)
    assert all(shared.get(key) == data for key, data in local.items())
    for key in shared.keys(partition.name):
        assert s3.secret_key.encode() not in shared.get(key)

    # Another host (an empty working copy) reads the research from the object store, verified.
    other = ArtifactStore(isolated_env / "host-b", partition.name, shared)
    outputs = ToolOutputs.model_validate_json(other.read_text("tool_outputs.json"))
    for call in outputs.calls:
        assert other.read_verified(call.artifact_path, call.sha256) == local[call.artifact_path]
    plan = ResearchPlan.model_validate_json(other.read_text("plan.json"))
    raw_files = other.raw_reader(plan.plan_title).files()
    assert raw_files and sorted(raw_files) == sorted({Path(c.artifact_path).name for c in outputs.calls})
    assert other.read_text("report.md").encode() == local[f"{partition.name}/report.md"]

    # Raw outputs are create-only: the same bytes again are accepted, other bytes refused.
    first = outputs.calls[0].artifact_path
    shared.put_new(first, local[first])
    with pytest.raises(ArtifactIntegrityError, match="refusing to overwrite"):
        shared.put_new(first, b"something else")
    assert shared.get(first) == local[first]


def test_an_unreachable_object_store_is_one_line_naming_it(s3, monkeypatch, capsys):
    use_s3(monkeypatch, s3, "s3://no-such-bucket/research")
    assert main(["run", QUESTION, "--engine", "offline", "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: the artifact store s3://no-such-bucket/research cannot be used")
    assert s3.secret_key not in err and len(err.splitlines()) == 1


def test_an_unreachable_postgres_is_one_line_naming_it(monkeypatch, capsys):
    port = servers.free_port()
    monkeypatch.setenv("DEEPRESEARCH_POSTGRES_URL", f"postgresql://team:pw-not-shown@127.0.0.1:{port}/dagster")
    assert main(["run", QUESTION, "--engine", "offline", "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: Postgres at 127.0.0.1:{port}/dagster cannot be reached")
    assert "DEEPRESEARCH_POSTGRES_URL" in err and "pw-not-shown" not in err and len(err.splitlines()) == 1


# Another host: its own artifact folder, the same Postgres. Prints "held" once it holds the lock,
# then waits for stdin to close; or prints the refusal.
OTHER_HOST = """
import sys
from pathlib import Path
from deepresearch_dagster.core.store.partition_lock import PartitionBusy, partition_lock
url, folder = sys.argv[1:]
try:
    with partition_lock(Path(folder), "shared-question", "run-b", postgres_url=url):
        print("held", flush=True)
        sys.stdin.read()
except PartitionBusy as exc:
    print(exc, flush=True)
"""


def test_the_partition_lock_holds_across_hosts_and_dies_with_its_holder(pg, tmp_path):
    url = ResearchSettings(postgres_url=pg.url).postgres
    other = [sys.executable, "-c", OTHER_HOST, url, str(tmp_path / "host-b")]
    with partition_lock(tmp_path / "host-a", "shared-question", "run-a", postgres_url=url):
        refused = subprocess.run(other, capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=60)
        assert f"research shared-question is already running (pid {os.getpid()} on host" in refused.stdout
        assert "run run-a)" in refused.stdout
    holder = subprocess.Popen(other, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        busy = pytest.raises(PartitionBusy, match=f"pid {holder.pid} on host .*, run run-b")
        with busy, partition_lock(tmp_path / "host-a", "shared-question", "run-a", postgres_url=url):
            pass
        # A holder killed (or its host lost) leaves no lock behind: the server ends its session.
        holder.send_signal(signal.SIGKILL)
        holder.wait()
        with partition_lock(tmp_path / "host-a", "shared-question", "run-a", wait_s=10, postgres_url=url):
            pass
    finally:
        holder.kill()
        holder.wait()


def test_an_existing_artifact_folder_is_pushed_once(s3, tmp_path, monkeypatch, capsys):
    from deepresearch_dagster.core.store import object_store

    folder = tmp_path / "one-machine-artifacts"
    (folder / "old-research" / "raw").mkdir(parents=True)
    (folder / "old-research" / "raw" / "001_search.json").write_text("{}\n")
    (folder / "old-research" / ".run.lock").write_text("pid 1")
    (folder / "lineage.duckdb").write_bytes(b"not pushed")
    monkeypatch.setenv("DEEPRESEARCH_ARTIFACTS_DIR", str(folder))
    use_s3(monkeypatch, s3, f"s3://{BUCKET}/upgraded")
    assert object_store.main(["push"]) == 0
    assert object_store.main(["push"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out == [
        f"1 files uploaded to s3://{BUCKET}/upgraded, 0 already there",
        f"0 files uploaded to s3://{BUCKET}/upgraded, 1 already there",
    ]
    assert object_root(load_settings()).keys("old-research") == ["old-research/raw/001_search.json"]


# A writer on another host: once both are ready, stores its own bytes under the 40 shared names,
# create-only (host-a from the first, host-b from the last), and prints how many it stored and
# how many were refused.
WRITER = """
import sys
from deepresearch_dagster.core.config import load_settings
from deepresearch_dagster.core.errors import ArtifactIntegrityError
from deepresearch_dagster.core.store.object_store import object_root
shared, me = object_root(load_settings()), sys.argv[1]
print("ready", flush=True)
sys.stdin.readline()  # both start together
stored = refused = 0
for i in range(40) if me == "host-a" else reversed(range(40)):  # opposite orders: they meet
    try:
        shared.put_new(f"race/raw/{i:03d}.txt", f"{me} {i}".encode())
        stored += 1
    except ArtifactIntegrityError:
        refused += 1
print(stored, refused)
"""


def test_two_writers_of_the_same_names_never_overwrite_each_other(s3, monkeypatch):
    use_s3(monkeypatch, s3, f"s3://{BUCKET}/race-test")
    writers = [
        subprocess.Popen([sys.executable, "-c", WRITER, name], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        for name in ("host-a", "host-b")
    ]
    assert [w.stdout.readline().strip() for w in writers] == ["ready", "ready"]
    for w in writers:
        w.stdin.write("go\n")
        w.stdin.flush()
    counts = [tuple(map(int, w.communicate(timeout=60)[0].split())) for w in writers]
    assert all(stored + refused == 40 for stored, refused in counts)
    assert sum(stored for stored, _ in counts) == 40  # each name stored once, by one of them
    shared = object_root(load_settings())
    keys = shared.keys("race")
    assert len(keys) == 40
    owners = {key: shared.get(key).decode().split()[0] for key in keys}
    assert sum(owner == "host-a" for owner in owners.values()) == counts[0][0]


@pytest.fixture(scope="session")
def redis_url() -> str:
    reason = servers.unavailable_redis()
    if reason:
        pytest.skip(reason)
    with servers.redis() as url:
        yield url


# -- lineage in Postgres, through DuckDB's postgres extension ---------------------------------------
@pytest.fixture
def lineage(pg, request) -> LineageStore:
    """The store-query tests of tests/core/store, on a Postgres database instead of a file."""
    return LineageStore.at(pg.new_database(f"lineage_{request.node.name[5:40].lower()}"))


# The named queries, run again on Postgres: the same tests as on a DuckDB file.
test_tool_call_and_summary_queries = store_queries.test_tool_call_and_summary_queries
test_research_listing_status_and_prefix = store_queries.test_research_listing_status_and_prefix
test_latest_budget_takes_the_newest_entry_of_each_dimension = (
    store_queries.test_latest_budget_takes_the_newest_entry_of_each_dimension
)
test_tool_cache_serves_a_verified_artifact_and_misses_a_changed_one = (
    store_queries.test_tool_cache_serves_a_verified_artifact_and_misses_a_changed_one
)


def _comparable(value):
    """What must agree between the backends: everything but times, run ids and local paths."""
    if isinstance(value, dict):
        return {k: _comparable(v) for k, v in value.items() if not k.endswith(("_at", "_ms", "_file", "run_id"))}
    if isinstance(value, list | tuple):
        return [_comparable(v) for v in value]
    return value


def test_audit_and_metrics_read_the_same_from_postgres_as_from_a_duckdb_file(pg, isolated_env, monkeypatch, capsys):
    outputs = {}
    for backend in ("file", "postgres"):
        monkeypatch.setenv("DEEPRESEARCH_ARTIFACTS_DIR", str(isolated_env / backend))
        if backend == "postgres":
            monkeypatch.setenv("DEEPRESEARCH_LINEAGE_URL", pg.new_database("lineage_audit"))
        assert main(["run", QUESTION, "--engine", "offline", "--quiet", "--json", *SMALL]) == 0
        key = json.loads(capsys.readouterr().out)["partition_key"]
        assert main(["audit", key, "--json"]) == 0
        audit = json.loads(capsys.readouterr().out)
        assert main(["metrics", "--json"]) == 0
        outputs[backend] = (audit, json.loads(capsys.readouterr().out))
    assert not (isolated_env / "postgres" / "lineage.duckdb").exists()  # nothing went to a file
    (audit, metrics) = outputs["postgres"]
    assert audit["citations"] and metrics["totals"]["tool_calls"] > 0
    assert all(r["created_at"] is not None for r in metrics["researches"])
    assert _comparable(outputs["postgres"]) == _comparable(outputs["file"])

    # The upgrade from one machine: the file's researches copied into Postgres read the same; a
    # second push copies nothing.
    from deepresearch_dagster.core.store import lineage_postgres

    monkeypatch.setenv("DEEPRESEARCH_ARTIFACTS_DIR", str(isolated_env / "file"))
    monkeypatch.setenv("DEEPRESEARCH_LINEAGE_URL", pg.new_database("lineage_pushed"))
    assert lineage_postgres.main(["push"]) == 0 and lineage_postgres.main(["push"]) == 0
    pushed = capsys.readouterr().out.splitlines()
    assert [line.split(" to ")[0] for line in pushed] == ["1 researches copied", "0 researches copied"]
    assert main(["audit", outputs["file"][0]["partition_key"], "--json"]) == 0
    assert _comparable(json.loads(capsys.readouterr().out)) == _comparable(outputs["file"][0])


def test_lineage_statements_go_through_after_a_postgres_restart(pg):
    lineage = LineageStore.at(pg.new_database("lineage_restart"))
    lineage.register_request("before", "Asked before the restart?", {})
    pg.restart()  # every session ends; the extension connects again on the next statement
    lineage.register_request("after", "Asked after the restart?", {"depth": 1})
    assert sorted(r["partition_key"] for r in lineage.list_researches()) == ["after", "before"]


def test_lineage_rows_of_a_session_commit_together_in_postgres_and_a_tool_call_row_survives_a_kill(pg):
    url = pg.new_database("lineage_grouped")
    lineage = LineageStore.at(url)
    lineage.register_request("k", "A question?", {})

    def transactions(write) -> int:  # write transactions Postgres numbered meanwhile (txid_current takes one)
        before = _query(url, "SELECT txid_current()")[0][0]
        write()
        return _query(url, "SELECT txid_current()")[0][0] - before - 1

    def thirty_calls() -> None:
        for _ in range(30):
            lineage.record_llm_call("k", "r1", "compressor", "m", 1, "ok", 1, 1, 1.0, None)

    def in_a_session() -> None:
        with lineage.session():
            thirty_calls()

    assert transactions(thirty_calls) >= 30  # outside a session: each statement commits
    assert transactions(in_a_session) <= 5  # a stage's rows: grouped as in a DuckDB file
    assert _query(url, "SELECT count(*) FROM deepresearch.llm_calls")[0][0] == 60
    store_connections.assert_survives_a_kill(pg.new_database("lineage_killed"))


def test_a_session_s_queued_rows_go_through_a_postgres_restart(pg):
    url = pg.new_database("lineage_restart_session")
    lineage = LineageStore.at(url)
    with lineage.session():
        for status in ("ok", "fallback", "ok"):
            lineage.record_llm_call("k", "r1", "critic", "m", 1, status, 1, 1, 1.0, None, "invalid: x")
        assert len(lineage.role_outcomes("k", ["r1"], "critic")) == 3
        pg.restart()  # the session's connection ends with the server
        lineage.record_llm_call("k", "r1", "critic", "m", 1, "ok", 1, 1, 1.0, None)
    assert _query(url, "SELECT count(*) FROM deepresearch.llm_calls")[0][0] == 4


@pytest.mark.parametrize("old_connection", ["reconnects", "stays_dead"])
def test_a_commit_whose_answer_was_lost_is_not_written_again(pg, monkeypatch, old_connection):
    # The server applies a session's COMMIT and goes away before its answer arrives: the rows are
    # in Postgres, the client sees a lost connection. Writing the transaction again on the next
    # connection would double them; the commit marker written with them says they are there. The
    # extension's connection connects again by itself (the marker is read at once); where it does
    # not, the transaction waits in the queue and the marker is read on the next connection.
    import duckdb

    url = pg.new_database(f"lineage_unsure_{old_connection}")
    lineage = LineageStore.at(url)
    lease, target = lineage._lease, lineage._lease.target
    connect = target.connection
    lost = []

    class AnswerLost:
        def __init__(self, conn):
            self._conn = conn

        def execute(self, sql, parameters=None):
            if lost and old_connection == "stays_dead":
                raise duckdb.IOException("IO Error: Unable to connect to Postgres: connection refused")
            result = self._conn.execute(sql, parameters)
            if sql == "COMMIT" and not lost:
                lost.append(sql)
                pg.restart()  # after the server committed
                raise duckdb.IOException("IO Error: Unable to connect to Postgres: server closed the connection")
            return result

        def __getattr__(self, name):
            return getattr(self._conn, name)

    monkeypatch.setattr(target, "connection", lambda: connect() if lost else AnswerLost(connect()))
    with lineage.session():
        for _ in range(3):
            lineage.record_llm_call("k", "r1", "critic", "m", 1, "ok", 1, 1, 1.0, None)
        with lease.lock, contextlib.suppress(duckdb.IOException):
            lease._close()  # written and committed (unless the lease's thread did it first)
        assert lost, "the commit went through the connection that loses its answer"
        lineage.record_llm_call("k", "r1", "critic", "m", 1, "fallback", 1, 1, 1.0, None)
    assert _query(url, "SELECT status, count(*) FROM deepresearch.llm_calls GROUP BY 1 ORDER BY 1") == [
        ("fallback", 1),
        ("ok", 3),
    ]


def test_two_hosts_caching_the_same_tool_call_at_once_both_go_through(pg):
    # Another host's transaction holds the same tool-cache key, uncommitted: this host's queued
    # INSERT OR REPLACE waits on it, then meets its row once it commits (a duplicate key, measured
    # in the rehearsal: the step failed and was retried whole). Written again, it replaces the row.
    import threading
    import time

    from deepresearch_dagster.core.models import ToolCallRecord
    from deepresearch_dagster.core.store.lineage_postgres import open_connection

    url = pg.new_database("lineage_cache_race")
    lineage = LineageStore.at(url)
    record = ToolCallRecord(
        call_id="c1", step_id="s1", step_title="t", step_description="d", seq=1, tool="local_search",
        arguments={"query": "q"}, artifact_file="c1.json", artifact_path="mine/c1.json", bytes=1, sha256="x",
        raw_tokens=1,
    )  # fmt: skip
    lineage.put_tool_cache("K", record, "listing", {"query": "q"})  # the schema, outside a session
    other = open_connection(url)
    other.execute("DELETE FROM tool_cache")
    other.execute("BEGIN")
    other.execute(
        "INSERT OR REPLACE INTO tool_cache (cache_key, tool, arguments, artifact_path, sha256, kind) "
        "VALUES ('K', 'local_search', '{}', 'theirs/c1.json', 'x', 'listing')"
    )
    found: list = []
    with lineage.session():
        lineage.put_tool_cache("K", record, "listing", {"query": "q"})
        reader = threading.Thread(target=lambda: found.append(lineage.tool_cache_lookup("K", 3600)))
        reader.start()  # writes the queued row first: it waits on the other host's transaction
        time.sleep(0.5)
        other.execute("COMMIT")
        reader.join(30)
    other.close()
    assert found and found[0]["artifact_path"] == "mine/c1.json"
    assert _query(url, "SELECT artifact_path FROM deepresearch.tool_cache") == [("mine/c1.json",)]


def test_a_lost_lineage_connection_s_error_does_not_quote_the_password(pg):
    # What the extension raises on a statement while the server is away (measured with DuckDB 1.5.5).
    import duckdb

    from deepresearch_dagster.core.store import lineage_postgres

    url = pg.new_database("lineage_lost")
    target = lineage_postgres.PostgresLineage(url)
    with pytest.raises(duckdb.IOException) as caught, target():
        raise duckdb.IOException(f'IO Error: Unable to connect to Postgres at "{url}": Connection refused')
    assert pg.password not in str(caught.value) and "Unable to connect" in str(caught.value)
    target.close()


def test_an_unreachable_lineage_database_is_one_line_naming_it(monkeypatch, capsys):
    port = servers.free_port()
    monkeypatch.setenv("DEEPRESEARCH_LINEAGE_URL", f"postgresql://team:pw-not-shown@127.0.0.1:{port}/lineage")
    assert main(["run", QUESTION, "--engine", "offline", "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: the lineage database at 127.0.0.1:{port}/lineage cannot be used")
    assert "DEEPRESEARCH_LINEAGE_URL" in err and "pw-not-shown" not in err and len(err.splitlines()) == 1
