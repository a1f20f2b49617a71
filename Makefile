# One command each: `make test` (set up + run the suite), `make demo` (set up + run the offline demo).
PY      ?= python3
VENV    ?= .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed

.PHONY: setup test demo bench lint typecheck coverage mutation clean

setup: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --disable-pip-version-check uv || true
	if [ -x $(BIN)/uv ]; then \
	  $(BIN)/uv pip install -q --python $(BIN)/python --compile-bytecode -e '.[dev]'; \
	else \
	  $(BIN)/python -m pip install -q --disable-pip-version-check -e '.[dev]'; \
	fi
	$(BIN)/python -m compileall -q src/ctxagent > /dev/null  # as a wheel install does (PYTHONDONTWRITEBYTECODE=1 here)
	touch $(STAMP)

test: setup
	$(BIN)/python -m pytest -q -n 2 $(TESTS)

demo: setup
	PATH="$(CURDIR)/$(BIN):$$PATH" bash examples/prices/demo.sh

bench: setup
	if [ -x $(BIN)/uv ]; then \
	  $(BIN)/uv pip install -q --python $(BIN)/python -e '.[dev,bench]'; \
	else \
	  $(BIN)/python -m pip install -q -e '.[dev,bench]'; \
	fi
	$(BIN)/python -m benchmarks

# The suite under coverage (branches; subprocess runs of the CLI included), then the report of
# strategies/, sessions/ and agent/ and the total. Slower than `make test`: not part of it.
COVERAGE_FILE ?= $(CURDIR)/.coverage
coverage: setup
	if [ -x $(BIN)/uv ]; then \
	  $(BIN)/uv pip install -q --python $(BIN)/python -e '.[dev,cov]'; \
	else \
	  $(BIN)/python -m pip install -q -e '.[dev,cov]'; \
	fi
	rm -f $(COVERAGE_FILE) $(COVERAGE_FILE).*
	COVERAGE_FILE=$(COVERAGE_FILE) $(BIN)/coverage run -m pytest -q -n 2 $(TESTS)
	COVERAGE_FILE=$(COVERAGE_FILE) $(BIN)/coverage combine -q
	COVERAGE_FILE=$(COVERAGE_FILE) $(BIN)/coverage report --include='*/ctxagent/strategies/*,*/ctxagent/sessions/*,*/ctxagent/agent/*'
	COVERAGE_FILE=$(COVERAGE_FILE) $(BIN)/coverage report | tail -1

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
