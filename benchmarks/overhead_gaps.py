"""Where benchmark 4's overhead goes: the main thread sampled while no fake call is in flight.

Runs the research of benchmark 4 (orchestration_overhead.py: same fakes, same warm-up) once, plain
or through Dagster, at 200 ms per call, while a thread samples every thread's stack every 2 ms.
Afterwards it keeps only the main thread's samples taken while no fake call was in flight (the
time "wall − critical path" is made of, set-up excluded) and counts them by the two deepest frames
of the project, Dagster, SQLAlchemy or DuckDB. A diagnostic, not a figure: sampling from Python
costs CPU of its own and a sample shows where the thread was, including waits for a lock or the GIL.

  PYTHONPATH=. .venv/bin/python benchmarks/overhead_gaps.py [plain|dagster] [--top N]
"""

from __future__ import annotations

import argparse
import collections
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

from common import (
    clean_env,
    count_duckdb_connects,
    guard_extractive_compressor,
    load_pages,
    services_process,
    web_services,
)
from orchestration_overhead import measure

MARKS = ("deepresearch_dagster", "/dagster/", "sqlalchemy", "duckdb")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("kind", nargs="?", default="plain", choices=("plain", "dagster"))
    parser.add_argument("--top", type=int, default=30)
    parser.add_argument("--depth", type=int, default=2, help="how many of the deepest frames name a sample")
    parser.add_argument("--fakes-in-process", action="store_true", help="serve the fakes from threads of this process")
    args = parser.parse_args(argv)
    clean_env()
    guard_extractive_compressor()
    count_duckdb_connects()
    samples: list[tuple[float, list[tuple[str, str]]]] = []
    stop = threading.Event()
    main_id = threading.main_thread().ident

    def sample() -> None:
        while not stop.is_set():
            frame = sys._current_frames().get(main_id)
            stack = []
            while frame is not None:
                stack.append((frame.f_code.co_filename, frame.f_code.co_name))
                frame = frame.f_back
            samples.append((time.perf_counter(), stack[::-1]))
            time.sleep(0.002)

    serve = web_services(load_pages()) if args.fakes_in_process else services_process()
    with tempfile.TemporaryDirectory(prefix="bench-gaps-") as tmp_name, serve as services:
        tmp = Path(tmp_name)
        os.environ.update(services.env)
        services.set_steps(1)
        for i, kind in enumerate(("plain", "dagster")):  # the benchmark's warm-up
            measure(tmp, services, kind, 0.0, 90 + i)
        services.set_steps(3)
        sampler = threading.Thread(target=sample, daemon=True)
        start = time.perf_counter()
        sampler.start()
        row = measure(tmp, services, args.kind, 0.2, 1)
        stop.set()
        sampler.join()
        run_start = start + row["setup_excluded_s"]
        calls = sorted(i for i in services.intervals() if i[0] >= run_start)
    in_gaps = [s for t, s in samples if t >= run_start and not any(a <= t <= b for a, b in calls)]
    where: collections.Counter[str] = collections.Counter()
    for stack in in_gaps:
        ours = [f"{Path(f).name}:{name}" for f, name in stack if any(m in f for m in MARKS)]
        where[" > ".join(ours[-args.depth :]) or "(other)"] += 1
    print(
        f"{args.kind} at 200 ms: wall {row['wall_s']} s, critical path {row['critical_path_s']} s, "
        f"overhead {row['overhead_s']} s; {len(in_gaps)} of {len(samples)} samples while no call was in flight"
    )
    share = row["overhead_s"] / max(1, len(in_gaps))
    for stack, n in where.most_common(args.top):
        print(f"{n:5d}  ~{n * share:5.2f} s  {stack}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
