# Two commands on a fresh machine: `make run` and `make test`.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-$(shell cksum pyproject.toml | cut -d' ' -f1)

.PHONY: install run migrate test lint typecheck bench bench-quick screenshot clean

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
