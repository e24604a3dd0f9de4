"""The `store` contract fixture: every test written against `store` runs over every backend.

Tests that hold for any store (what the ports promise) take `store`; tests of one backend's
own behaviour (the SQL it sends, its driver errors, its bounded read) take that backend's
fixture (`sql_store` for SQLite and PostgreSQL, from tests/conftest.py).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Protocol

import pytest

from bounded_agents.core.ports import (
    AgentStore,
    NamedThreadCreator,
    RunMessagesReader,
    SummaryStore,
    ThreadInfoReader,
    ThreadLister,
)
from bounded_agents.store import MemoryStore
from tests.conftest import emptied_store


class ContractStore(
    AgentStore,
    ThreadInfoReader,
    SummaryStore,
    RunMessagesReader,
    NamedThreadCreator,
    ThreadLister,
    Protocol,
):
    """What the contract tests call: the base port and the powers every backend here has."""


Opener = Callable[[], AbstractAsyncContextManager[ContractStore]]
Backend = Callable[[pytest.FixtureRequest], Opener]
"""Given the test's request (to reach session fixtures such as a migrated database's URL, which
must be resolved outside the event loop), how to open that backend's store, empty."""


def _memory(_request: pytest.FixtureRequest) -> Opener:
    @asynccontextmanager
    async def opened() -> AsyncIterator[ContractStore]:
        yield MemoryStore()

    return opened


def _sql(backend: str) -> Backend:
    def opener(request: pytest.FixtureRequest) -> Opener:
        url = str(request.getfixturevalue(f"{backend}_url"))
        return lambda: emptied_store(url)

    return opener


STORES = [
    pytest.param(_memory, id="memory"),
    pytest.param(_sql("sqlite"), id="sqlite"),
    pytest.param(_sql("postgres"), id="postgres", marks=pytest.mark.postgres),
]
"""The `store` fixture's parameters, one per backend: how to open it empty for one test (and
close it after). PostgreSQL carries the `postgres` marker, so AGENT_REQUIRE_POSTGRES=1 fails a
run in which no PostgreSQL test passed (see tests/conftest.py)."""


@pytest.fixture(params=STORES)
def store_opener(request: pytest.FixtureRequest) -> Opener:
    """The `store` fixture's backend, resolved synchronously (see `Backend`)."""
    backend: Backend = request.param
    return backend(request)


@pytest.fixture
async def store(store_opener: Opener) -> AsyncIterator[ContractStore]:
    """An empty store of each backend in turn: memory, SQLite, PostgreSQL.

    Add a backend = one file and one fixture parameter: write the store in
    `bounded_agents/store/<backend>.py`, then add `pytest.param(<backend>, id="<name>")` to
    `STORES` (with a marker if it needs a server, as PostgreSQL's `postgres`). Every contract
    test then runs over it unchanged.
    """
    async with store_opener() as opened:
        yield opened
