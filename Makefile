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

# The suite in TEST_WORKERS processes (pytest-xdist): most of its tests wait on servers and
# subprocesses, not the CPU, so there are more workers than cores. Each file runs whole in
# one worker (--dist loadfile): its module fixtures are built once, and a resource of the
# whole machine belongs to one file (DEVELOPERS.md, ADR 0051). Files are handed out in the
# order tests/conftest.py collects them, those with a slow test first, so that no long file
# starts last. TEST_WORKERS=0: one process.
TEST_WORKERS ?= 4
# test-fast waits on its subprocesses (git, runners, postgres) as much as it computes: on a
# 2-core box four workers took 55.8 s against 56.2-59.2 s with three (docs/benchmarks.md).
FAST_WORKERS ?= 4
DISTRIBUTE := --dist loadfile --no-loadscope-reorder
# The suite starts about a thousand Python subprocesses (foldline, servers, runners); without
# bytecode each compiles every module it imports again (about 1 s of CPU for `foldline`, 0.3 s
# with it), and pytest rewrites every test module again in every worker. So the suite keeps
# its bytecode in the venv, out of the source tree, even where PYTHONDONTWRITEBYTECODE is set
# (as in the image and on shared boxes); `make clean` forgets it with the venv.
TEST_ENV := PYTHONDONTWRITEBYTECODE= PYTHONPYCACHEPREFIX=$(CURDIR)/$(VENV)/pycache

test: $(STAMP)
	$(TEST_ENV) $(BIN)/python -m pytest -n $(TEST_WORKERS) $(DISTRIBUTE)

# The suites that need no SIGKILL, no gunicorn and no long run, for the edit loop.
test-fast: $(STAMP)
	$(TEST_ENV) $(BIN)/python -m pytest -n $(FAST_WORKERS) $(DISTRIBUTE) -m "not crash and not server and not slow"

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
