# Two commands on a fresh machine: `make run` and `make test`.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-$(shell cksum pyproject.toml | cut -d' ' -f1)

.PHONY: install run migrate test lint typecheck bench bench-quick clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev,bench]'
	rm -f $(VENV)/.installed-* && touch $@

install: $(STAMP)

## Serve the app on SQLite (./agent.db) with the offline EchoModel at http://127.0.0.1:8000
run: install
	$(BIN)/python -m app migrate
	$(BIN)/python -m app serve

migrate: install
	$(BIN)/python -m app migrate

## Lint, type-check, then the whole suite (PostgreSQL tests skip without a server unless
## AGENT_REQUIRE_POSTGRES=1, which .ci/run sets).
test: install lint typecheck
	$(BIN)/pytest

lint: install
	$(BIN)/ruff check app tests bench migrations scripts .ci/lowest_constraints.py

typecheck: install
	$(BIN)/mypy --strict app scripts

bench: install
	$(BIN)/python -m bench

bench-quick: install
	$(BIN)/python -m bench --quick

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
## the bench extra has bounds of its own), then on the NEWEST releases; each in its own venv,
## with PostgreSQL required, so both databases run.
test-lowest:
	test -x .venv-lowest/bin/python || $(PYTHON) -m venv .venv-lowest
	.venv-lowest/bin/pip install -q --upgrade pip
	$(PYTHON) .ci/lowest_constraints.py > .venv-lowest/constraints.txt
	.venv-lowest/bin/pip install -q -c .venv-lowest/constraints.txt -e '.[dev]'
	AGENT_REQUIRE_POSTGRES=1 .venv-lowest/bin/pytest -p no:cacheprovider --ignore=tests/bench

test-newest:
	test -x .venv-newest/bin/python || $(PYTHON) -m venv .venv-newest
	.venv-newest/bin/pip install -q --upgrade pip
	.venv-newest/bin/pip install -q --upgrade --upgrade-strategy eager -e '.[dev,bench]'
	AGENT_REQUIRE_POSTGRES=1 .venv-newest/bin/pytest -p no:cacheprovider
