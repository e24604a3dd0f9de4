# Two commands on a fresh machine: `make run` and `make test`.
# `make run` installs only what the app runs; `make test` and `make bench` add the dev and bench
# extras. Each install is remembered by a stamp named after pyproject.toml's checksum, so an
# edit to pyproject.toml reinstalls and nothing else does.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
SUM    := $(shell cksum pyproject.toml | cut -d' ' -f1)
RUN_STAMP := $(VENV)/.installed-run-$(SUM)
DEV_STAMP := $(VENV)/.installed-dev-$(SUM)
PIP    := $(BIN)/pip install -q --disable-pip-version-check

.PHONY: install install-run run migrate test test-citus lint typecheck bench bench-recall bench-recall-llama bench-quick bench-throughput bench-peers bench-profile screenshot clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# The runtime dependencies alone, read from pyproject.toml: `python -m app` runs from this
# directory, so the project itself need not be built, and nothing is byte-compiled ahead (Python
# compiles what it imports). This is what keeps a cold `make run` short.
$(RUN_STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -c 'import tomllib; print("\n".join(tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"]))' > $(VENV)/requirements-run.txt
	$(PIP) --no-compile -r $(VENV)/requirements-run.txt
	rm -f $(VENV)/.installed-run-* && touch $@

$(DEV_STAMP): pyproject.toml | $(BIN)/python
	$(PIP) -e '.[dev,bench,frameworks]'
	rm -f $(VENV)/.installed-* && touch $@ $(RUN_STAMP)

## The runtime dependencies only: what `make run` needs.
install-run: $(RUN_STAMP)

## Everything: runtime, dev (pytest, ruff, mypy, the openai SDK...) and bench (matplotlib).
install: $(DEV_STAMP)

## Serve the app on SQLite (./agent.db) with the offline EchoModel at http://127.0.0.1:8000
run: install-run
	$(BIN)/python -m app migrate
	$(BIN)/python -m app serve

migrate: install-run
	$(BIN)/python -m app migrate

## Lint, type-check, then the whole suite (PostgreSQL tests skip without a server unless
## AGENT_REQUIRE_POSTGRES=1, which .ci/run sets).
test: install lint typecheck
	$(BIN)/pytest

## The PostgreSQL tests of the store, journal, loop, HTTP and reliability suites again, on a
## Citus cluster (a coordinator and two workers the tests start in a temporary directory, the
## database distributed by `python -m app distribute`). Needs Citus built into PostgreSQL 15;
## the start-up race test is left out (it makes plain databases of its own).
## (The llama.cpp tests are not in this subset, so AGENT_REQUIRE_LLAMA, which .ci/run exports
## for `make test`, is switched off here: it would fail a run that never meant to run them.)
test-citus: install
	AGENT_TEST_ON_CITUS=1 AGENT_REQUIRE_CITUS=1 AGENT_REQUIRE_POSTGRES=1 AGENT_REQUIRE_LLAMA=0 \
		$(BIN)/pytest -m postgres \
		tests/store tests/durable tests/loop tests/http tests/reliability \
		--ignore=tests/reliability/test_start_up.py

lint: install
	$(BIN)/ruff check app bounded_agents tests bench migrations scripts .ci/lowest_constraints.py
	$(BIN)/ruff format --check app bounded_agents tests bench migrations scripts .ci/lowest_constraints.py

typecheck: install
	$(BIN)/mypy --strict bounded_agents app scripts

## Refresh docs/inspector.png from the browser test (needs /usr/bin/chromium)
screenshot: install
	AGENT_REQUIRE_BROWSER=1 AGENT_INSPECTOR_SCREENSHOT=docs/inspector.png \
		$(BIN)/pytest -q tests/browser

bench: install
	$(BIN)/python -m bench
	$(BIN)/python -m bench --throughput
	$(BIN)/python -m bench --peers
	$(BIN)/python -m bench --recall

## Recall of planted facts by memory layer and summarizer style, one markdown table (2.5
## minutes of CPU, 4-7 on 2 shared cores); SmolLM2 on the legacy material with
## `make bench-recall-llama` (needs `make llama`; about 30 minutes on 2 cores)
bench-recall: install
	$(BIN)/python -m bench --recall

bench-recall-llama: install llama
	$(BIN)/python -m bench --recall-legacy --recall-turns 120 --recall-summarizers llama

## This project's turn beside LangGraph's (add_messages, DeltaChannel) on the same thread content
bench-peers: install
	$(BIN)/python -m bench --peers

## Turns/s with 1, 2 and 4 app processes on one PostgreSQL, and the journal before/after retention
bench-throughput: install
	$(BIN)/python -m bench --throughput

bench-quick: install
	$(BIN)/python -m bench --quick

## cProfile of 200 window-10 turns per backend: the top Python items of a turn
bench-profile: install
	$(BIN)/python -m bench --profile

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache

# --- A real local model, and the dependency bounds ------------------------------------------
.PHONY: llama run-local test-lowest test-newest

## llama.cpp's OpenAI-compatible server and SmolLM2-135M-Instruct in .venv-llama. The first time
## on a machine it builds llama-cpp-python (5-8 min) into ~/.cache/bounded-agents/wheels.
llama:
	PYTHON=$(PYTHON) .ci/install-llama

## The app at http://127.0.0.1:8000 answering with the local model: a real LLM, fully offline.
run-local: install llama
	$(BIN)/python -m app migrate
	$(BIN)/python -m scripts.llama_server

## The suite on the LOWEST runtime versions pyproject.toml declares (less the bench's smoke test:
## the bench extra has bounds of its own; and less the framework adapters, whose extras need
## newer pydantic and OpenTelemetry than the core's bounds, and are tested by `make test`), then on the NEWEST releases; each in its own venv,
## with PostgreSQL required, so both databases run. The dev extra brings the dbos extra, so its
## bounds are pinned too.
test-lowest:
	test -x .venv-lowest/bin/python || $(PYTHON) -m venv .venv-lowest
	.venv-lowest/bin/pip install -q --upgrade pip
	$(PYTHON) .ci/lowest_constraints.py dbos anthropic tiktoken > .venv-lowest/constraints.txt
	.venv-lowest/bin/pip install -q -c .venv-lowest/constraints.txt -e '.[dev]'
	AGENT_REQUIRE_POSTGRES=1 AGENT_DOCS_LEFT_OUT=docs/integrations.md .venv-lowest/bin/pytest \
		-p no:cacheprovider --ignore=tests/bench --ignore=tests/integrations \
		--ignore=tests/install/test_extras.py

test-newest:
	test -x .venv-newest/bin/python || $(PYTHON) -m venv .venv-newest
	.venv-newest/bin/pip install -q --upgrade pip
	.venv-newest/bin/pip install -q --upgrade --upgrade-strategy eager -e '.[dev,bench,frameworks]'
	AGENT_REQUIRE_POSTGRES=1 .venv-newest/bin/pytest -p no:cacheprovider
