# One-command setup: `make demo` and `make test` build .venv on first use.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
DEMO ?= fixtures/incidents/cuda_oom_8rank_cascade

.PHONY: demo test patterns evaluate bench clean

$(BIN)/forensics: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e ".[test]"
	touch $@

demo: $(BIN)/forensics
	$(BIN)/forensics analyze $(DEMO) --out forensics-report/demo

test: $(BIN)/forensics
	$(BIN)/python -m pytest

patterns: $(BIN)/forensics
	$(BIN)/forensics patterns validate
	$(BIN)/forensics patterns test

evaluate: $(BIN)/forensics
	$(BIN)/python fixtures/evaluate.py fixtures/incidents fixtures/public

bench: $(BIN)/forensics
	$(BIN)/python -m pip install --quiet -e ".[test,bench]"  # editable: the bench times this checkout
	$(BIN)/python benchmarks/scale.py

clean:
	rm -rf $(VENV) forensics-report .pytest_cache
