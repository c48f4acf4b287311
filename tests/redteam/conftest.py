"""Red-team suite (issue 15): every case records (case, expected, observed, pass) and the session
prints them as one table (``make redteam``; the hook is in tests/conftest.py, which also gathers
the rows of pytest-xdist workers). Each test is bounded in time by a hard alarm."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest

HARD_LIMIT_S = 60  # no red-team case may run longer than this, whatever it does


@dataclass
class Row:
    case: str
    expected: str
    observed: str
    passed: bool
    seconds: float


ROWS: list[Row] = []


@pytest.fixture
def record() -> Iterator[Callable[[str, str, str, bool], None]]:
    started = time.monotonic()

    def add(case: str, expected: str, observed: str, passed: bool) -> None:
        ROWS.append(Row(case, expected, observed, bool(passed), round(time.monotonic() - started, 2)))

    yield add


@pytest.fixture(autouse=True)
def hard_time_limit() -> Iterator[None]:
    if not hasattr(signal, "SIGALRM"):
        yield
        return

    def expired(signum: int, frame: object) -> None:
        raise TimeoutError(f"red-team case ran longer than {HARD_LIMIT_S} s")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.alarm(HARD_LIMIT_S)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
