"""A read-only lineage database (issue 15): ``deepresearch run`` exits 1 with one line saying the
database is read-only and what to do, no traceback, and the database is left as it was.

Root writes through any file mode, so as root the CLI runs as an unprivileged user (uid/gid
65534, when it can run the interpreter and read the repository) or, failing that, as root without
the capabilities that override file permissions (CAP_DAC_OVERRIDE / CAP_DAC_READ_SEARCH dropped
from the child's bounding set). As another user, the file modes alone do it."""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
QUESTION = "How do urban heat islands form?"
NOBODY = 65534
PR_CAPBSET_DROP = 24
CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH = 1, 2


def _drop_dac_capabilities() -> None:
    """``preexec_fn``: without these two, root obeys file modes like any other user (from the
    bounding set, so the interpreter started by exec does not get them back)."""
    libc = ctypes.CDLL(None, use_errno=True)
    for cap in (CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH):
        if libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP)")


def _runs(how: dict, probe: str) -> bool:
    try:
        done = subprocess.run([sys.executable, "-c", probe], capture_output=True, timeout=30, cwd="/", **how)
    except (OSError, subprocess.SubprocessError):
        return False
    return done.returncode == 0


def _unprivileged() -> tuple[str, dict, int | None]:
    """How to run the CLI so that file modes bind it: (label, subprocess kwargs, uid to own the files)."""
    if os.geteuid() != 0:
        return f"uid {os.geteuid()}, chmod only", {}, None
    as_nobody = {"user": NOBODY, "group": NOBODY, "extra_groups": []}
    if _runs(as_nobody, "import deepresearch_dagster.cli"):
        return f"CLI as uid {NOBODY}", as_nobody, NOBODY
    # E.g. the interpreter lives under /root (mode 0700): nobody cannot even start it.
    without_dac = {"preexec_fn": _drop_dac_capabilities}
    with tempfile.TemporaryDirectory() as tmp:
        locked = Path(tmp) / "locked"
        locked.touch(mode=0o444)
        locked.chmod(0o444)
        # Succeeds only when opening the 0444 file for writing is refused.
        probe = (
            f"import sys\ntry:\n    open({str(locked)!r}, 'a')\nexcept PermissionError:\n    sys.exit(0)\nsys.exit(1)"
        )
        if _runs(without_dac, probe):
            return "CLI as root minus CAP_DAC_OVERRIDE", without_dac, None
    pytest.skip(f"as root, neither uid {NOBODY} (cannot run {sys.executable}) nor dropping CAP_DAC_OVERRIDE works")


@pytest.fixture
def workdir(ready_dagster_home_template: Path) -> Iterator[Path]:
    # Not under pytest's tmp_path: its parents are 0700 to root, and uid 65534 must get in.
    base = Path(tempfile.mkdtemp(prefix="ro-lineage-"))
    base.chmod(0o755)
    shutil.copytree(ready_dagster_home_template, base / "dagster_home")
    (base / "artifacts").mkdir()
    (base / "db").mkdir()
    try:
        yield base
    finally:
        for path in (base / "db", *(base / "db").iterdir()):
            path.chmod(stat.S_IRWXU)
        shutil.rmtree(base, ignore_errors=True)


def _env(base: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "DEEPRESEARCH_"))}
    env.update(
        HOME=str(base),
        DAGSTER_HOME=str(base / "dagster_home"),
        DEEPRESEARCH_ARTIFACTS_DIR=str(base / "artifacts"),
        DEEPRESEARCH_DUCKDB=str(base / "db" / "lineage.duckdb"),
        DEEPRESEARCH_CONFIG=str(base / "no-config.toml"),
        PYTHONPATH=str(REPO),
    )
    return env


def test_a_read_only_lineage_database_is_one_clear_line(workdir: Path, record: Callable[..., None]):
    label, how, owner = _unprivileged()
    db = workdir / "db" / "lineage.duckdb"
    env = _env(workdir)
    made = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from deepresearch_dagster.core.store.lineage import LineageStore; "
            "LineageStore.at(sys.argv[1]).query('select 1')",
            str(db),
        ],
        env=env,
        cwd=workdir,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert made.returncode == 0 and db.exists(), made.stderr[-2000:]
    if owner is not None:
        for dirpath, _, filenames in os.walk(workdir):
            for name in [".", *filenames]:
                os.chown(Path(dirpath) / name, owner, owner)
    db.chmod(0o444)
    db.parent.chmod(0o555)
    before = hashlib.sha256(db.read_bytes()).hexdigest()

    run = subprocess.run(
        [sys.executable, "-m", "deepresearch_dagster.cli", "run", QUESTION, "--engine", "offline", "--quiet"],
        env=env,
        cwd=workdir,
        capture_output=True,
        text=True,
        timeout=50,
        **how,
    )
    lines = [line for line in run.stderr.splitlines() if line.strip()]
    line = lines[0] if lines else ""
    ok = (
        run.returncode == 1
        and len(lines) == 1
        and "Traceback" not in run.stderr
        and line.startswith("error: the lineage database ")
        and str(db) in line
        and "read-only" in line
        and "writable" in line  # what to do
        and hashlib.sha256(db.read_bytes()).hexdigest() == before
    )
    record(f"read-only lineage.duckdb ({label})", "exit 1, one 'read-only' line, no traceback", line[:70], ok)
    assert ok, (run.returncode, run.stderr[-3000:])
