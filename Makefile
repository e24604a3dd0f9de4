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

.PHONY: install install-run run migrate test lint typecheck bench bench-quick screenshot clean

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
	$(PIP) -e '.[dev,bench]'
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

lint: install
	$(BIN)/ruff check app tests bench migrations

typecheck: install
	$(BIN)/mypy --strict app

## Refresh docs/inspector.png from the browser test (needs /usr/bin/chromium)
screenshot: install
	AGENT_REQUIRE_BROWSER=1 AGENT_INSPECTOR_SCREENSHOT=docs/inspector.png \
		$(BIN)/pytest -q tests/browser

bench: install
	$(BIN)/python -m bench

bench-quick: install
	$(BIN)/python -m bench --quick

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
