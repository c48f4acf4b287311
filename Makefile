# Fresh machine: `make demo` (install + one offline research), `make test`, `make dev` (UI).
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
export DAGSTER_HOME ?= $(CURDIR)/.dagster_home
DEMO_QUESTION ?= What are the main challenges in commercializing solid-state batteries, and how are manufacturers addressing them?

.PHONY: install demo test dev lint bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $@

install: $(VENV)/.installed

demo: install
	$(BIN)/deepresearch run "$(DEMO_QUESTION)" --show-report

test: install
	$(BIN)/python -m pytest -q

dev: install
	$(BIN)/dagster dev -w workspace.yaml -h 127.0.0.1 -p 3000

# Quick mode by default; `make bench BENCH_ARGS=--full` for the larger sizes.
bench: install
	PYTHONPATH=$(CURDIR) $(BIN)/python benchmarks/run_all.py $(BENCH_ARGS)

lint: install
	$(BIN)/ruff check deepresearch_dagster tests benchmarks

clean:
	rm -rf artifacts/*/ artifacts/lineage.duckdb* .dagster_home/*
