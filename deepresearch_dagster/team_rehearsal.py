"""A team deployment rehearsed on one machine, with faults (issue 25; ``make team-demo``,
deploy/team_demo.py, and tests/test_team_deployment.py run it).

Postgres (Dagster's instance, the partition locks, the lineage through DuckDB), Redis (the
Celery broker), an S3-API server (the artifacts, the compute logs) and two Celery workers in
folders of their own, all on 127.0.0.1 (:mod:`.local_servers`). Four researches through
``deepresearch run``, two at a time, their steps on the workers; while one research's
``tool_outputs`` step is compressing on a worker, that worker's process running the step is
SIGKILLed (the worker's Celery parent then reports the task lost: the run fails, and is
re-executed from failure); while another's is, its whole worker is SIGKILLed and started again
(nobody reports that: the step goes to a worker by itself, celery_app.py). The same four
questions are researched on the embedded default (DuckDB file, local folder, one process) as the
reference. :func:`rehearse` returns the figures (:class:`Figures`).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from . import local_servers as servers
from .core.store import team_queries as queries

if TYPE_CHECKING:
    from .core.store.object_store import ObjectRoot

QUESTIONS = (
    "What limits solid-state battery manufacturing, and how are companies scaling production?",
    "How do urban heat islands form, and what cools a city?",
    "Who built the first programmable computers, and how were they programmed?",
    "Which solid electrolytes do solid-state batteries use, and what are their trade-offs?",
)
RESEARCH_OPTIONS = ("--engine", "offline", "--max-steps", "2", "--depth", "0")
WORKERS = ("w1", "w2")
BUCKET, PREFIX = "team-rehearsal", "research"
AT_ONCE = 2
# A lost worker's step goes to another after this long (the default, 120 s, is for real hosts).
WORKER_LOST_S = 6
TEAM_VARIABLES = ("DEEPRESEARCH_", "AWS_", "DAGSTER_HOME")


@dataclass
class Figures:
    researches_finished: int = 0
    researches: int = 0
    ops_per_worker: dict[str, int] = field(default_factory=dict)
    lineage_rows: dict[str, int] = field(default_factory=dict)
    rows_lost: int = 0
    rows_duplicated: int = 0
    rows_of_the_failed_attempt: int = 0
    tool_calls_repeated: int = 0
    repeated_tools: dict[str, int] = field(default_factory=dict)  # tool -> calls executed again
    recompressed: int = 0  # summaries of one research recompressed under a new prompt, fanned out
    compressions_per_worker: dict[str, int] = field(default_factory=dict)
    killed: str = ""  # "<worker> pid <pid> during <partition>'s compressions", or "" when no kill happened
    worker_killed: str = ""  # the same for the whole worker killed (parent and step process)
    compute_logs_per_worker: dict[str, int] = field(default_factory=dict)  # steps whose log the store serves
    reexecuted: int = 0  # runs re-executed from failure (the whole worker's step needs none)
    steps_taken_over: int = 0  # steps a worker started again in their run, the killed worker's lost ones
    reports_identical: str = "no"
    wall_s: float = 0.0

    def line(self) -> str:
        return json.dumps(asdict(self), sort_keys=False)


def _cli(env: dict[str, str], question: str, cwd: Path) -> subprocess.Popen:
    argv = [sys.executable, "-m", "deepresearch_dagster.cli", "run", question, *RESEARCH_OPTIONS, "--json", "--quiet"]
    return subprocess.Popen(argv, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _plain_env(root: Path) -> dict[str, str]:
    """The embedded default: none of the team settings, a home and an artifact folder of its own."""
    from .core.config import environment

    env = {k: v for k, v in environment().items() if not k.startswith(TEAM_VARIABLES)}
    return {**env, "DAGSTER_HOME": str(root / "home"), "DEEPRESEARCH_ARTIFACTS_DIR": str(root / "artifacts")}


def _run_all(env: dict[str, str], cwd: Path, watch: Callable[[], None] | None = None) -> dict[str, dict]:
    """Every question through ``deepresearch run``, ``AT_ONCE`` at a time; question -> its JSON
    summary, or {"exit": code, "stderr": ...} when it failed. ``watch`` is called while they run."""
    (Path(env["DAGSTER_HOME"])).mkdir(parents=True, exist_ok=True)
    waiting, running, done = list(QUESTIONS), {}, {}
    while waiting or running:
        while waiting and len(running) < AT_ONCE:
            question = waiting.pop(0)
            running[question] = _cli(env, question, cwd)
        for question, proc in list(running.items()):
            if proc.poll() is not None:
                out, err = proc.communicate()
                done[question] = json.loads(out) if proc.returncode == 0 else {"exit": proc.returncode, "stderr": err}
                del running[question]
        if watch is not None:
            watch()
        time.sleep(0.05)
    return done


@dataclass
class _Kill:
    worker: str
    pid: int
    partition: str
    before: set[tuple[str, str]]  # (tool, arguments) executed before the kill
    # Whole worker killed: what every stage had written by then (queries.stage_rows).
    rows: Counter = field(default_factory=Counter)

    def __str__(self) -> str:
        return f"{self.worker} pid {self.pid} during {self.partition}'s compressions"


class _Killer:
    """Watches Postgres while the researches run. The first research whose ``tool_outputs`` step
    runs on a worker and has compressed a tool output gets that worker's step process SIGKILLed
    (the worker's Celery parent reports the loss: the run fails). The next such research, of
    another question, gets its whole worker SIGKILLed, parent and step process, as a lost host:
    nobody reports that, and the step must go to another worker by itself (celery_app.py). The
    lost worker is started again at once (the host back), so both take the steps that follow."""

    def __init__(
        self, url: str, workers: dict[str, subprocess.Popen], restart: Callable[[str], None], say: Callable[[str], None]
    ) -> None:
        self.url, self.workers, self.restart, self.say = url, workers, restart, say
        self.step: _Kill | None = None
        self.worker: _Kill | None = None

    def __call__(self) -> None:
        if self.worker is not None:
            return
        for worker, partition in queries.compressing_steps(self.url):
            steps = servers.children(self.workers[worker].pid) if worker in self.workers else []
            if not steps or (self.step is not None and partition == self.step.partition):
                continue
            whole = self.step is not None
            for pid in ([self.workers[worker].pid] if whole else []) + steps:  # the parent first: it reports nothing
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            kill = _Kill(worker, self.workers[worker].pid if whole else steps[0], partition, set())
            kill.before = set(queries.executed_calls(self.url, partition))
            what = "worker" if whole else "step process of worker"
            self.say(f"SIGKILLed the {what} {kill}")
            if whole:
                kill.rows = queries.stage_rows(self.url)
                self.workers[worker].wait()
                self.worker = kill
                self.restart(worker)
            else:
                self.step = kill
            return


def _recompress(env: dict[str, str], cwd: Path, root: Path, say: Callable[[str], None]) -> int:
    """The first question's research recompressed under a new compressor prompt (``deepresearch
    recompress``): every raw output again, one mapped op each, over the workers."""
    from .core.naming import partition_key_for

    prompt = root / "compressor_v2.md"
    prompt.write_text((Path(__file__).parent / "prompts" / "compressor.md").read_text("utf-8") + "\n", "utf-8")
    key = partition_key_for(QUESTIONS[0])
    say(f"recompressing {key} under a new prompt, fanned out over the workers")
    out = servers.cli_json(env, "recompress", key, "--prompt-file", str(prompt), cwd=cwd)
    return int(out["summaries"])


@dataclass
class Servers:
    postgres: servers.Postgres
    broker: str  # redis://127.0.0.1:<port>/0
    s3: servers.S3Server


@contextlib.contextmanager
def started_servers() -> Iterator[Servers]:
    """Postgres, Redis and the S3-API server, each stopped by its pid on exit."""
    with servers.postgres() as pg, servers.redis() as broker, servers.s3() as store:
        yield Servers(pg, broker, store)


@contextlib.contextmanager
def _workers(root: Path, env: dict[str, str]) -> Iterator[dict[str, subprocess.Popen]]:
    """The workers by name (a worker started again replaces its entry: all are stopped on exit)."""
    workers = {name: servers.start_worker(name, root / "workers" / name, env) for name in WORKERS}
    try:
        yield workers
    finally:
        for worker in workers.values():
            servers.stop_worker(worker)


def _shared_settings(team: Servers) -> dict[str, str]:
    """What every host of the rehearsal shares: a database of its own on the Postgres server
    (Dagster's tables, the locks, the lineage), the broker, a bucket of its own."""
    import boto3

    client = boto3.client(
        "s3", endpoint_url=team.s3.endpoint, aws_access_key_id=team.s3.access_key,
        aws_secret_access_key=team.s3.secret_key, region_name="us-east-1",
    )  # fmt: skip
    with contextlib.suppress(client.exceptions.BucketAlreadyOwnedByYou):
        client.create_bucket(Bucket=BUCKET)
    url = team.postgres.new_database("team_rehearsal")
    return {
        "DEEPRESEARCH_POSTGRES_URL": url,
        "DEEPRESEARCH_LINEAGE_URL": url,
        "DEEPRESEARCH_CELERY_BROKER_URL": team.broker,
        "DEEPRESEARCH_CELERY_WORKER_LOST_S": str(WORKER_LOST_S),
        "DEEPRESEARCH_ARTIFACTS_URL": f"s3://{BUCKET}/{PREFIX}",
        "AWS_ENDPOINT_URL": team.s3.endpoint,
        "AWS_ACCESS_KEY_ID": team.s3.access_key,
        "AWS_SECRET_ACCESS_KEY": team.s3.secret_key,
        "AWS_REGION": "us-east-1",
    }


def _single_machine(root: Path) -> dict[str, bytes]:
    """The reference: every question on the embedded default (DuckDB file, local folder), in
    this process, through the pipeline the assets call (core/pipeline.py); question -> report.md."""
    from .core.config import load_settings
    from .core.pipeline import run_research

    plain = {"lineage_url": None, "artifacts_url": "", "postgres_url": None, "celery_broker_url": None}
    # The CLI runs' environment, so the reference differs from them by the deployment alone.
    paths = {"artifacts_dir": str(root / "artifacts"), "duckdb_path": str(root / "lineage.duckdb")}
    settings = load_settings(paths, env=_plain_env(root))
    settings = settings.model_copy(update=plain)
    options = dict(zip(RESEARCH_OPTIONS[::2], RESEARCH_OPTIONS[1::2], strict=True))
    options = {k.removeprefix("--").replace("-", "_"): (v if k == "--engine" else int(v)) for k, v in options.items()}
    reports = {}
    for question in QUESTIONS:
        ctx, _ = run_research(question, settings.with_options(options), options)
        reports[question] = (ctx.store.partition_dir / "report.md").read_bytes()
    return reports


def rehearse(
    root: Path, cwd: Path, say: Callable[[str], None] = lambda _: None, team: Servers | None = None
) -> Figures:
    """The whole scenario in ``root`` (temporary folders of every process), on ``team``'s servers
    or on servers of its own; every server and worker it starts is stopped before it returns."""
    if team is None:
        with started_servers() as own:
            return rehearse(root, cwd, say, own)
    started = time.monotonic()
    said = say
    say = lambda line: said(f"[{time.monotonic() - started:5.1f} s] {line}")  # noqa: E731
    figures = Figures(researches=len(QUESTIONS))
    env = {**_plain_env(root / "host"), **_shared_settings(team)}
    url = env["DEEPRESEARCH_POSTGRES_URL"]
    with _workers(root, env) as workers:
        say(f"single machine: {len(QUESTIONS)} researches in this process (embedded default) while the workers start")
        single = _single_machine(root / "single")
        for name, worker in workers.items():
            servers.wait_ready(worker, root / "workers" / name)
        say(f"team: {len(QUESTIONS)} researches, {AT_ONCE} at a time, steps on workers {', '.join(workers)}")

        def restart(name: str) -> None:
            say(f"starting {name} again (the host back); its lost step goes to a worker within {WORKER_LOST_S} s")
            workers[name] = servers.start_worker(name, root / "workers" / name, env, log="worker-restarted.log")

        killer = _Killer(url, workers, restart, say)
        team_runs = _run_all(env, cwd, killer)
        figures.killed, figures.worker_killed = str(killer.step or ""), str(killer.worker or "")
        for question in [q for q, out in team_runs.items() if "exit" in out]:
            say(f"failed: {question}: {team_runs[question]['stderr'].strip()[-300:]}")
            figures.reexecuted += _reexecute(env, url, question, say)
        figures.researches_finished = queries.succeeded_partitions(url, "research_job")
        figures.lineage_rows, per = queries.lineage_counts(url)
        reference = queries.lineage_counts_file(root / "single" / "lineage.duckdb")
        restarted = queries.restarted_steps(url)
        figures.steps_taken_over = len(restarted)
        # Rows of the attempts done again: the failed run's killed step (read now: its process is
        # gone) and the lost worker's steps (read at the kill: their new attempt has the same run id).
        extra = _of_steps(queries.stage_rows(url), queries.failed_steps(url))
        extra += _of_steps(killer.worker.rows if killer.worker else Counter(), restarted)
        figures.rows_of_the_failed_attempt = sum(extra.values())
        for key in sorted(set(per) | set(reference)):
            figures.rows_lost += max(0, reference[key] - per[key])
            figures.rows_duplicated += max(0, per[key] - extra.get(key, 0) - reference[key])
            if per[key] < reference[key] or per[key] - extra.get(key, 0) > reference[key]:
                say(
                    f"{key[0]} rows of {key[1]}: {per[key]} ({extra.get(key, 0)} of the failed or lost attempt), "
                    f"{reference[key]} on one machine"
                )
        repeated: Counter = Counter()
        for kill in (killer.step, killer.worker):
            if kill is not None:
                for tool, arguments in _repeated(url, kill.partition, kill.before):
                    say(f"made again after the kill: {kill.partition} {tool} {arguments}")
                    repeated[tool] += 1
        figures.repeated_tools = dict(sorted(repeated.items()))
        figures.tool_calls_repeated = sum(repeated.values())
        figures.reports_identical = _reports_identical(env, single)
        figures.compute_logs_per_worker = _compute_logs(env, url)
        # Last, as it adds a summary version to the lineage compared above.
        figures.recompressed = _recompress(env, cwd, root, say)
        figures.compressions_per_worker = queries.steps_per_worker(url, "compress_tool_output")
        figures.ops_per_worker = queries.steps_per_worker(url)
    figures.wall_s = round(time.monotonic() - started, 1)
    return figures


def _of_steps(rows: Counter, steps: set[tuple[str, str]]) -> Counter:
    """Rows per (table, partition) of ``rows`` (queries.stage_rows) written by ``steps`` (run id, step
    key). The lost worker's steps are those started again in their run, whichever research they
    belong to: a step of another research may have started on it before its start was reported."""
    out: Counter = Counter()
    for (table, partition, run_id, stage), n in rows.items():
        if (run_id, stage) in steps:
            out[(table, partition)] += n
    return out


def _reexecute(env: dict[str, str], url: str, question: str, say: Callable[[str], None]) -> int:
    """Re-execute the question's failed run from failure; 1 when there was one, else 0."""
    from .core.naming import partition_key_for

    key = partition_key_for(question)
    last = queries.last_run(url, "research_job", key)
    if last is None or last[1] != "FAILURE":
        say(f"nothing to re-execute for {key}: its last run is {last[1] if last else 'missing'}")
        return 0
    run_id = last[0]
    say(f"re-executing run {run_id} ({key}) from failure")
    code = (
        "import sys\n"
        "from deepresearch_dagster.core.config import export_postgres_url, load_settings\n"
        "from deepresearch_dagster.launcher import ensure_instance\n"
        "from deepresearch_dagster.defs.runs import reexecute_from_failure\n"
        "export_postgres_url(load_settings().postgres)\n"
        "outcome = reexecute_from_failure('research_job', sys.argv[1], ensure_instance())\n"
        "print('SUCCESS' if outcome.success else outcome.message)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code, run_id], env=env, capture_output=True, text=True, check=False)
    say(f"  re-execution: {(proc.stdout.strip() or proc.stderr.strip()[-500:]).splitlines()[-1:]}")
    return 1


def _repeated(url: str, partition: str, before: set[tuple[str, str]]) -> list[tuple[str, str]]:
    """Tool calls executed before the kill and executed again after it (not served from the tool
    cache): (tool, arguments)."""
    return [(tool, args) for tool, args in queries.executed_calls(url, partition) if (tool, args) in before]


def _shared_root(env: dict[str, str], url: str | None = None) -> ObjectRoot:
    """The object store as a host of the rehearsal reads it (``url``: another prefix of the bucket)."""
    from .core.config import ResearchSettings
    from .core.store.object_store import ObjectRoot

    settings = ResearchSettings(
        artifacts_url=url or env["DEEPRESEARCH_ARTIFACTS_URL"], s3_endpoint=env["AWS_ENDPOINT_URL"],
        s3_access_key_id=env["AWS_ACCESS_KEY_ID"], s3_secret_access_key=env["AWS_SECRET_ACCESS_KEY"],
    )  # fmt: skip
    return ObjectRoot.from_settings(settings)


def _compute_logs(env: dict[str, str], url: str) -> dict[str, int]:
    """Steps of each worker whose compute log (stdout or stderr) is read back from the object store,
    where the instance's compute log manager put it (launcher.compute_logs_yaml)."""
    logs = _shared_root(env, f"s3://{BUCKET}/{PREFIX}-compute-logs")
    read = {}
    for worker, keys in queries.captured_logs(url).items():
        found = [k for k in keys if any(logs.get(f"storage/{'/'.join(k)}.{ext}") for ext in ("err", "out"))]
        read[worker] = len(found)
    return dict(sorted(read.items()))


def _reports_identical(env: dict[str, str], single: dict[str, bytes]) -> str:
    """report.md of every research, read from the object store, against the single-machine run's."""
    from .core.naming import partition_key_for
    from .core.store.artifacts import partition_folder

    shared = _shared_root(env)
    same = all(shared.get(f"{partition_folder(partition_key_for(q))}/report.md") == single[q] for q in QUESTIONS)
    return "yes" if same else "no"
