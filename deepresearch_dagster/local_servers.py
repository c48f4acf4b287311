"""Throw-away servers on 127.0.0.1 for a team deployment rehearsed on one machine (``make
team-demo``, deploy/team_demo.py) and for its tests (tests/test_team_deployment.py): Postgres
(Debian's ``postgresql`` package, installed by .ci/run), Redis (``redis-server``), an S3-API server
(``moto``'s server, a dev dependency) and Celery workers. Each server listens on a free port, keeps
its files in a temporary folder, and is stopped by its pid. ``unavailable_*()`` say why one cannot
start here.
"""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

HOST = "127.0.0.1"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return sock.getsockname()[1]


def wait_for_port(port: int, proc: subprocess.Popen, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode} before listening on {port}")
        with contextlib.suppress(OSError), socket.create_connection((HOST, port), timeout=0.2):
            return
        time.sleep(0.05)
    raise RuntimeError(f"nothing listens on {HOST}:{port} after {timeout_s:g} s")


# -- Postgres ----------------------------------------------------------------------------------
def postgres_bin() -> Path | None:
    """The folder of Debian's Postgres server binaries (not on PATH), or one on PATH."""
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"), key=lambda p: int(p.parts[-3]))
    if found:
        return found[-1].parent
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None


@dataclass
class Postgres:
    url: str  # postgresql://postgres:<password>@127.0.0.1:<port>/postgres
    password: str
    port: int
    data_dir: Path

    def new_database(self, name: str) -> str:
        """A new, empty database ``name`` on this server (dropped first if it exists); its URL."""
        import psycopg2

        conn = psycopg2.connect(self.url)
        conn.autocommit = True
        try:
            with conn.cursor() as cur:
                cur.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
                cur.execute(f'CREATE DATABASE "{name}"')
        finally:
            conn.close()
        return self.url.rsplit("/", 1)[0] + f"/{name}"

    def restart(self) -> None:
        """Stop the server (its sessions end) and start it again on the same port."""
        bin_dir = postgres_bin()
        assert bin_dir is not None
        log = self.data_dir.parent / "log"
        argv = [str(bin_dir / "pg_ctl"), "-D", str(self.data_dir), "-l", str(log), "-m", "fast", "-w", "restart"]
        subprocess.run(_as_postgres_user(argv), check=True, capture_output=True, timeout=60)


def _as_postgres_user(argv: list[str]) -> list[str]:
    """``initdb`` and ``pg_ctl`` refuse to run as root: as root, run them as the ``postgres`` user."""
    if os.geteuid() != 0:
        return argv
    return ["runuser", "-u", "postgres", "--", *argv]


@contextlib.contextmanager
def postgres() -> Iterator[Postgres]:
    """A new cluster (password authentication, fsync off: a test server) on a free port."""
    bin_dir = postgres_bin()
    if bin_dir is None:
        raise RuntimeError(unavailable_postgres())
    # Not under pytest's tmp_path: its 0700 parents are closed to the postgres user.
    root = Path(tempfile.mkdtemp(prefix="deepresearch-pg-"))
    data = root / "data"
    password = secrets.token_hex(12)
    (root / "pw").write_text(password)
    if os.geteuid() == 0:
        user = pwd.getpwnam("postgres")
        os.chmod(root, 0o700)
        for path in (root, root / "pw"):
            os.chown(path, user.pw_uid, user.pw_gid)
    port = free_port()
    run = {"check": True, "capture_output": True}
    subprocess.run(
        _as_postgres_user(
            [
                str(bin_dir / "initdb"),
                "-D",
                str(data),
                "-U",
                "postgres",
                "--auth=md5",
                f"--pwfile={root / 'pw'}",
                "--no-sync",
                "-E",
                "UTF8",
            ]
        ),
        **run,
    )
    options = (
        f"-p {port} -k {root} -c listen_addresses={HOST} -c fsync=off -c full_page_writes=off "
        "-c password_encryption=md5"
    )
    subprocess.run(
        _as_postgres_user(
            [str(bin_dir / "pg_ctl"), "-D", str(data), "-o", options, "-w", "-l", str(root / "log"), "start"]
        ),
        **run,
    )
    url = f"postgresql://postgres:{password}@{HOST}:{port}/postgres"
    _store_password_as_md5(url, password)
    try:
        yield Postgres(url, password, port, data)
    finally:
        subprocess.run(
            _as_postgres_user([str(bin_dir / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "stop"]),
            capture_output=True,
        )
        shutil.rmtree(root, ignore_errors=True)


def _store_password_as_md5(url: str, password: str) -> None:
    """dagster-postgres opens a connection per statement: scram costs ~25 ms of hashing a connect,
    md5 almost nothing (initdb of Postgres 15 stores the initial password as scram)."""
    import psycopg2

    conn = psycopg2.connect(url)
    conn.autocommit = True
    with conn.cursor() as cur:
        cur.execute("SET password_encryption = 'md5'")
        cur.execute("ALTER USER postgres PASSWORD %s", (password,))
    conn.close()


def unavailable_postgres() -> str | None:
    if postgres_bin() is None:
        return "Postgres server binaries not found (apt-get install postgresql; .ci/run does)"
    if os.geteuid() == 0:
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            return "no postgres user to run initdb as (Debian's postgresql package creates it)"
    return None


# -- Redis -------------------------------------------------------------------------------------
def unavailable_redis() -> str | None:
    return (
        None if shutil.which("redis-server") else "redis-server not found (apt-get install redis-server; .ci/run does)"
    )


@contextlib.contextmanager
def redis() -> Iterator[str]:
    """``redis://127.0.0.1:<port>/0``: no persistence, files in a temporary folder."""
    port = free_port()
    root = Path(tempfile.mkdtemp(prefix="deepresearch-redis-"))
    proc = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", HOST, "--save", "", "--appendonly", "no", "--dir", str(root)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for_port(port, proc)
        yield f"redis://{HOST}:{port}/0"
    finally:
        proc.kill()
        proc.wait()
        shutil.rmtree(root, ignore_errors=True)


# -- S3 API ------------------------------------------------------------------------------------
@dataclass
class S3Server:
    endpoint: str
    access_key: str
    secret_key: str


def unavailable_s3() -> str | None:
    try:
        import moto.server  # noqa: F401
    except ImportError as exc:
        return f"moto[server] is not installed ({exc}): pip install -e '.[dev]'"
    return None


def unavailable_team() -> str | None:
    """Why Postgres, Redis or the S3-API server cannot start here, or None."""
    return next((r for r in (unavailable_postgres(), unavailable_redis(), unavailable_s3()) if r), None)


@contextlib.contextmanager
def s3() -> Iterator[S3Server]:
    """moto's S3-API server on a free port (``moto_server``, from the dev dependencies)."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", HOST, "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for_port(port, proc)
        yield S3Server(f"http://{HOST}:{port}", "testing-access-key", "testing-secret-" + secrets.token_hex(8))
    finally:
        proc.kill()
        proc.wait()


# -- Celery workers ----------------------------------------------------------------------------
def start_worker(name: str, folder: Path, env: dict[str, str], log: str = "worker.log") -> subprocess.Popen:
    """A Celery worker (``-n <name>@<host>``) in a folder of its own: its working copy of the
    artifacts, its DAGSTER_HOME and its log (``log``: another one for a worker started again in
    the same folder). ``env`` carries the shared settings."""
    folder.mkdir(parents=True, exist_ok=True)
    own = {**env, "DEEPRESEARCH_ARTIFACTS_DIR": str(folder / "artifacts"), "DAGSTER_HOME": str(folder / "home")}
    celery = Path(sys.executable).parent / "celery"
    argv = [str(celery), "-A", "deepresearch_dagster.celery_app", "worker", "-Q", "dagster", "--concurrency", "1"]
    argv += ["-n", f"{name}@%h", "--without-heartbeat", "--without-mingle", "--without-gossip", "--loglevel", "INFO"]
    with (folder / log).open("w") as out:
        return subprocess.Popen(argv, cwd=folder, env=own, stdout=out, stderr=subprocess.STDOUT)


def children(pid: int) -> list[int]:
    """The child processes of ``pid`` (a Celery worker's step processes); none once it is gone."""
    with contextlib.suppress(OSError):
        return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    return []


def stop_worker(worker: subprocess.Popen) -> None:
    """SIGKILL a worker's step processes, then the worker, and reap it."""
    for pid in children(worker.pid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    worker.kill()
    worker.wait()


def wait_ready(worker: subprocess.Popen, folder: Path, timeout_s: float = 120.0) -> None:
    """Until the worker's log says it is ready (it then takes tasks), or it exits."""
    log = folder / "worker.log"
    deadline = time.monotonic() + timeout_s
    while " ready." not in log.read_text():
        if worker.poll() is not None:
            raise RuntimeError(f"the Celery worker in {folder} exited:\n{log.read_text()[-2000:]}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"the Celery worker in {folder} is not ready after {timeout_s:g} s")
        time.sleep(0.1)


@contextlib.contextmanager
def celery_workers(names: tuple[str, ...], root: Path, env: dict[str, str]) -> Iterator[dict[str, Path]]:
    """Workers started together (folders ``root/<name>``), ready when entered; killed on exit."""
    started = {name: start_worker(name, root / name, env) for name in names}
    try:
        for name, worker in started.items():
            wait_ready(worker, root / name)
        yield {name: root / name for name in names}
    finally:
        for worker in started.values():
            worker.kill()
            worker.wait()


def cli_json(env: dict[str, str], *argv: str, cwd: Path | None = None) -> dict:
    """``deepresearch ARGV --json --quiet`` in a new process; its JSON, or exit with its error."""
    proc = subprocess.run(
        [sys.executable, "-m", "deepresearch_dagster.cli", *argv, "--json", "--quiet"],
        env=env, cwd=cwd, capture_output=True, text=True, check=False,
    )  # fmt: skip
    if proc.returncode != 0:
        raise SystemExit(f"deepresearch {argv[0]} failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout)


def steps_per_worker(instance: object, run_id: str) -> dict[str, Counter]:
    """For each Celery worker, how many steps of each op it ran (from the run's engine events)."""
    from dagster import DagsterEventType

    ran: dict[str, Counter] = {}
    for entry in instance.all_logs(run_id, of_type=DagsterEventType.ENGINE_EVENT):  # type: ignore[attr-defined]
        metadata = entry.dagster_event.event_specific_data.metadata or {}
        if "Celery worker" in metadata and entry.step_key:
            worker = metadata["Celery worker"].value.split("@")[0]
            ran.setdefault(worker, Counter())[entry.step_key.split("[")[0].split(".")[-1]] += 1
    return ran
