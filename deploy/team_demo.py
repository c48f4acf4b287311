"""``make team-demo``: a team deployment rehearsed on one machine, with a fault (docs/deployment.md).

Starts Postgres, Redis, an S3-API server and two Celery workers on 127.0.0.1 (free ports, throw-away
data); researches 4 questions, 2 at a time, their steps on the workers; SIGKILLs the process of a
worker that is compressing, and re-executes that failed run from failure; SIGKILLs another
compressing worker whole and starts it again (its step goes to a worker by itself); reads both
workers' compute logs from the object store; researches the same questions on the embedded
default as the reference; prints one JSON line of figures
(deepresearch_dagster/team_rehearsal.py, the same code tests/test_team_deployment.py runs) and
stops every server and worker it started, by pid. Progress goes to stderr.

    PYTHONPATH=. .venv/bin/python deploy/team_demo.py
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from deepresearch_dagster import local_servers as servers
from deepresearch_dagster.team_rehearsal import rehearse

REPO = Path(__file__).resolve().parents[1]


def main(argv: list[str] | None = None) -> int:
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args(argv)
    reason = servers.unavailable_team()
    if reason:
        print(f"team-demo: {reason}", file=sys.stderr)
        return 2
    root = Path(tempfile.mkdtemp(prefix="deepresearch-team-demo-"))
    figures = rehearse(root, REPO, say=lambda line: print(f"team-demo: {line}", file=sys.stderr, flush=True))
    print(figures.line())
    print(f"team-demo: servers and workers stopped; local copies and worker logs in {root}", file=sys.stderr)
    done = figures.researches_finished == figures.researches and figures.reports_identical == "yes"
    return 0 if done else 1


if __name__ == "__main__":
    sys.exit(main())
