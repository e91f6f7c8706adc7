# Every target that needs the virtualenv builds it from scratch when it is missing,
# so `make serve` and `make test` are the only set-up a fresh machine needs.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: serve test test-fast lint docs-layout bench bench-quick clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test,bench]'
	touch $(STAMP)

# The demo's state (the log's anchor, the run user's home) stays beside its workspace, outside
# it, so that `make clean` forgets both and the next `make serve` starts a new log.
serve: $(STAMP)
	mkdir -p var/workspace
	FOLDLINE_STATE_DIR=var/state $(BIN)/foldline serve --workspace var/workspace

test: $(STAMP)
	$(BIN)/python -m pytest

# The suites that need no SIGKILL, no gunicorn and no long run, for the edit loop.
test-fast: $(STAMP)
	$(BIN)/python -m pytest -m "not crash and not server and not slow"

lint: $(STAMP)
	$(BIN)/ruff check engine adapters projections tests bench
	$(BIN)/ruff format --check engine adapters projections tests bench
	$(BIN)/mypy

# docs/layout.md is generated from the tree (tests/arch/test_docs_layout.py checks it).
docs-layout: $(STAMP)
	$(BIN)/python -m tests.support.layout

bench: $(STAMP)
	$(BIN)/python -m bench.run --runs 3

bench-quick: $(STAMP)
	$(BIN)/python -m bench.run --quick

clean:
	rm -rf $(VENV) var .pytest_cache .hypothesis
