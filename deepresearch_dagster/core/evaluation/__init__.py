"""Research quality measured on questions nobody here wrote: suites, scores read from stored
artifacts (never from a re-run), evaluations that resume, comparisons and compressor replays.

Plain Python: the CLI (``deepresearch eval``), the Dagster evaluation assets and the benchmarks
call the same functions.
"""
