"""The browser: Debian's Chromium driven by Playwright (no browser is downloaded: the system one
is launched by path). Without it the browser tests skip, unless AGENT_REQUIRE_BROWSER=1 (what
`.ci/run` sets, after installing it): then a missing browser fails the run."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from pathlib import Path

import pytest
from playwright.async_api import Browser, async_playwright

from bounded_agents.store.sql import SqlAgentStore
from tests.conftest import emptied_store

CHROMIUM = os.environ.get("AGENT_CHROMIUM", "/usr/bin/chromium")
REQUIRE_BROWSER = os.environ.get("AGENT_REQUIRE_BROWSER") == "1"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
]


def _unavailable(message: str) -> None:
    if REQUIRE_BROWSER:
        pytest.fail(message + " (AGENT_REQUIRE_BROWSER=1)")
    pytest.skip(message)


@pytest.fixture
def chromium() -> str:
    """The system Chromium's path; skip or fail (see the module doc) when there is none."""
    if not Path(CHROMIUM).exists():
        _unavailable(f"no Chromium at {CHROMIUM}: apt-get install chromium")
    return CHROMIUM


@pytest.fixture
async def browser(chromium: str) -> AsyncIterator[Browser]:
    """A headless Chromium, closed after the test."""
    async with async_playwright() as p:
        launched = await p.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
        try:
            yield launched
        finally:
            await launched.close()


@pytest.fixture
async def sql_store(sqlite_url: str) -> AsyncIterator[SqlAgentStore]:
    """SQLite only: the pages' reads run on both backends in `tests/http/test_inspector.py`;
    here the browser is what is under test."""
    async with emptied_store(sqlite_url) as store:
        yield store


@pytest.fixture
async def stack() -> AsyncIterator[AsyncExitStack]:
    async with AsyncExitStack() as s:
        yield s
