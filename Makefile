# One entry point per job. Every target creates the virtualenv first if it is missing.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml | sha1sum | cut -c1-12)
PYTEST_ARGS ?=

.PHONY: install check check-static check-tests test test-unit lint typecheck docs demo up fuzz load bench bench-quick flower ts-types clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	$(BIN)/pip install -q --no-deps -e clients/openai-agents -e clients/langgraph
	rm -f $(VENV)/.installed-*
	touch $(STAMP)

install: $(STAMP)

## make test: the whole suite against a throwaway Postgres and Redis (started and stopped here), including
## the benchmark smoke run (tests/bench/test_bench_quick.py: every figure produced, no timing asserted).
test: $(STAMP)
	$(BIN)/python scripts/testenv.py run -- $(BIN)/pytest -q $(PYTEST_ARGS)

## make check: the fast loop, no services needed: ruff (lint, then format), the import contracts and mypy
## --strict, beside the unit tests and the contract tests' SQLite cases (two jobs, one per core; each one's
## output is shown when it ends). A test that needs Postgres or Redis carries the `postgres` or `redis` mark
## (tests/conftest.py), which the run leaves out.
check: $(STAMP)
	$(MAKE) --no-print-directory -j2 --output-sync=target check-static check-tests

check-static:
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports
	$(BIN)/mypy

check-tests:
	$(BIN)/pytest -q -p no:schemathesis -m "not postgres and not redis" tests/unit tests/contract $(PYTEST_ARGS)

## make test-unit: the tests that need no services.
test-unit: $(STAMP)
	$(BIN)/pytest -q tests/unit $(PYTEST_ARGS)

## make demo: the embedded stack plays a long sample conversation through the real API, then a summary.
demo: $(STAMP)
	$(BIN)/om demo

## make up: the embedded stack in the foreground (API on port 8088), for development.
up: $(STAMP)
	$(BIN)/om up

## make fuzz SEEDS=N DSEEDS=M FIRST=K: the in-process interleaving fuzz (N seeds), then the same fuzz across
## processes (M seeds: two API processes, three Celery workers, concurrent HTTP clients); Postgres and Redis
## started here.
SEEDS ?= 2000
DSEEDS ?= 200
FIRST ?= 0
fuzz: $(STAMP)
	$(BIN)/python scripts/testenv.py run -- sh -c '$(BIN)/python -m tests.fuzz.run --seeds $(SEEDS) --first $(FIRST) && $(BIN)/python -m tests.fuzz.distributed --seeds $(DSEEDS) --first $(FIRST)'

## make load LOAD_THREADS=50 LOAD_DURATION=300: concurrent chats against the API with workers and a fake model
## of 1-2 s latency; prints requests/s, turn p50/p99, lost requests, and checks every thread's invariants.
LOAD_THREADS ?= 50
LOAD_DURATION ?= 300
load: $(STAMP)
	$(BIN)/python scripts/testenv.py run -- $(BIN)/python -m tests.load.run --threads $(LOAD_THREADS) --duration $(LOAD_DURATION)

## make bench: the benchmark suite (writes bench-results.json and PNG plots); bench-quick: the reduced set.
bench: $(STAMP)
	$(BIN)/python scripts/testenv.py run -- $(BIN)/python -m tests.bench.run

bench-quick: $(STAMP)
	$(BIN)/python scripts/testenv.py run -- $(BIN)/pytest -q -s -p no:schemathesis -p no:hypothesispytest tests/bench/test_bench_quick.py

## make flower: Flower against OM_REDIS_URL (start the stack first, e.g. make up).
flower: $(STAMP)
	$(BIN)/om flower

## make lint: ruff, then the import contracts of pyproject.toml ([tool.importlinter]: the layers, a core
## without web framework, task queue or Redis).
lint: $(STAMP)
	$(BIN)/ruff check om_core om_local om_adapters om_workers om_api om_app clients/python clients/openai-agents clients/langgraph tests scripts
	$(BIN)/lint-imports

typecheck: $(STAMP)
	$(BIN)/mypy

## make docs: rewrite the reference pages (docs/reference/: options, settings, HTTP API) from the code, after
## a change to the configuration model, a settings model or the API; commit the result
## (tests/unit/test_reference_docs.py fails while a page differs).
docs: $(STAMP)
	$(BIN)/python scripts/gen_reference.py

## make ts-types: regenerate the TypeScript client's types (clients/typescript/src/schema.ts) from the
## server's OpenAPI document, after an API change; commit the result (tests/client_ts/ checks it).
ts-types: $(STAMP)
	cd clients/typescript && npm ci --no-audit --no-fund && OM_PYTHON=$(abspath $(BIN))/python npm run generate

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .import_linter_cache
