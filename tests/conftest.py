"""Shared fixtures: one migrated database per backend per session, emptied before each test.

PostgreSQL tests need a server (AGENT_TEST_POSTGRES_URL, default the local one). Without it they
skip, unless AGENT_REQUIRE_POSTGRES=1 (what `.ci/run` sets): then a missing server fails the run.
The `llama` tests (a real local model, tests/providers/test_llama_server.py) follow the same rule
with AGENT_REQUIRE_LLAMA=1, and the `citus` tests (a coordinator and two workers this session
starts, `tests/citus_cluster.py`) with AGENT_REQUIRE_CITUS=1. With AGENT_TEST_ON_CITUS=1 every
PostgreSQL test runs on that cluster instead: `postgres_url` is then a database distributed by
`python -m app distribute` (`make test-citus`).
Each session creates a database of its own name and drops it at the end, so runs never collide.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import asyncpg
import pytest
import sqlalchemy as sa
from hypothesis import settings
from sqlalchemy.engine import make_url

from bounded_agents.store import distribute, migrate
from bounded_agents.store.engine import make_engine
from bounded_agents.store.onehop import OneHopConnection, _on_connection
from bounded_agents.store.schema import metadata
from bounded_agents.store.sql import SqlAgentStore
from tests.citus_cluster import CitusCluster, citus_missing

PG_ADMIN_URL = os.environ.get(
    "AGENT_TEST_POSTGRES_URL", "postgresql+asyncpg://postgres@127.0.0.1:5432/postgres"
)
REQUIRE_POSTGRES = os.environ.get("AGENT_REQUIRE_POSTGRES") == "1"
REQUIRE_LLAMA = os.environ.get("AGENT_REQUIRE_LLAMA") == "1"
REQUIRE_CITUS = os.environ.get("AGENT_REQUIRE_CITUS") == "1"
ON_CITUS = os.environ.get("AGENT_TEST_ON_CITUS") == "1"
CITUS_SHARDS = 4
"""Shards per colocation group in the tests: two per worker, so the threads of a test land on
both workers, and few enough that emptying the tables before each test stays quick (a
TRUNCATE reaches every shard). Production keeps Citus's default of 32."""

_postgres_ran = False
_llama_ran = False
_citus_ran = False

# Property tests assert behaviour, not speed: a 200 ms per-example deadline only adds flakes on a
# shared 2-core machine (timings live in bench/).
settings.register_profile("project", deadline=None)
settings.load_profile("project")


def asyncpg_dsn(url: str) -> str:
    """A SQLAlchemy PostgreSQL URL as asyncpg's own `connect` takes it."""
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


async def terminate_backends(url: str, pids: list[int] | None = None) -> int:
    """`pg_terminate_backend` on backends `pids` of `url`'s server, or on every other backend
    of its database: how many were asked to end. (The pids are typed: Citus adds a bigint
    overload that an untyped call cannot choose from.)"""
    conn = await asyncpg.connect(asyncpg_dsn(url))
    try:
        if pids is None:
            killed = await conn.fetch(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
        else:
            killed = await conn.fetch(
                "SELECT pg_terminate_backend(pid) FROM unnest($1::int[]) AS pid", pids
            )
        return len(killed)
    finally:
        await conn.close()


def recorded_statements(store: SqlAgentStore) -> list[str]:
    """Every statement the store's engine announces to its `before_cursor_execute` listeners
    from now on (both SQLAlchemy's and the driver's way announce), appended as sent."""
    seen: list[str] = []

    def record(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        seen.append(statement)

    sa.event.listen(store.engine.sync_engine, "before_cursor_execute", record)
    return seen


async def _pg_admin(sql: str) -> None:
    conn = await asyncpg.connect(asyncpg_dsn(PG_ADMIN_URL), timeout=5)
    try:
        await conn.execute(sql)
    finally:
        await conn.close()


def create_pg_database(prefix: str = "agent_test") -> str:
    """Create a fresh, uniquely named PostgreSQL database and return its async URL."""
    name = f"{prefix}_{os.getpid()}_{uuid.uuid4().hex[:8]}"
    try:
        asyncio.run(_pg_admin(f'CREATE DATABASE "{name}"'))
    except (OSError, asyncpg.PostgresError, TimeoutError) as exc:
        message = f"PostgreSQL not reachable at {PG_ADMIN_URL}: {exc}"
        if REQUIRE_POSTGRES:
            pytest.fail(message)
        pytest.skip(message)
    return make_url(PG_ADMIN_URL).set(database=name).render_as_string(hide_password=False)


def drop_pg_database(url: str) -> None:
    name = make_url(url).database
    asyncio.run(_pg_admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


@pytest.fixture(scope="session")
def sqlite_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    path: Path = tmp_path_factory.mktemp("db") / "agent.db"
    url = f"sqlite+aiosqlite:///{path}"
    asyncio.run(migrate.upgrade_url(url))
    return url


@pytest.fixture(scope="session")
def citus_cluster() -> Iterator[CitusCluster]:
    """A coordinator and two workers for the session, in a temporary directory."""
    missing = citus_missing()
    if missing is not None:
        if REQUIRE_CITUS:
            pytest.fail(f"AGENT_REQUIRE_CITUS=1 but {missing}")
        pytest.skip(missing)
    cluster = CitusCluster()
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()


async def distributed_database(cluster: CitusCluster, prefix: str = "agent_citus") -> str:
    """A fresh database on `cluster`, migrated and distributed as an operator would do it
    (`python -m app migrate`, then `python -m app distribute`); its coordinator URL."""
    url = await cluster.create_database(prefix)
    await migrate.upgrade_url(url)
    engine = make_engine(url)
    try:
        await distribute.distribute(engine, shard_count=CITUS_SHARDS)
    finally:
        await engine.dispose()
    return url


@pytest.fixture(scope="session")
def citus_url(citus_cluster: CitusCluster) -> str:
    """A migrated, distributed database on the session's cluster (dropped with the cluster)."""
    return asyncio.run(distributed_database(citus_cluster))


@pytest.fixture(scope="session")
def postgres_url(request: pytest.FixtureRequest) -> Iterator[str]:
    if ON_CITUS:
        yield str(request.getfixturevalue("citus_url"))
        return
    url = create_pg_database()
    try:
        asyncio.run(migrate.upgrade_url(url))
        yield url
    finally:
        drop_pg_database(url)


BACKENDS = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]


@pytest.fixture(params=BACKENDS)
def db_url(request: pytest.FixtureRequest) -> str:
    """A migrated database URL, SQLite and PostgreSQL in turn."""
    return str(request.getfixturevalue(f"{request.param}_url"))


async def empty_database(engine: sa.ext.asyncio.AsyncEngine) -> None:
    async with engine.begin() as conn:
        if conn.dialect.name == "postgresql":
            names = ", ".join(t.name for t in metadata.sorted_tables)
            await conn.execute(sa.text(f"TRUNCATE {names} RESTART IDENTITY CASCADE"))
        else:
            for table in reversed(metadata.sorted_tables):
                await conn.execute(table.delete())


@contextmanager
def worker_calls() -> Iterator[list[str]]:
    """The calls into an aiosqlite worker thread (one thread hand-over each) made while the block
    runs, named by the function the thread ran. Empty on PostgreSQL, which has no such thread."""
    calls: list[str] = []
    original = OneHopConnection._execute

    async def counted(self: OneHopConnection, fn: Any, *args: Any, **kwargs: Any) -> Any:
        calls.append(getattr(args[1] if fn is _on_connection else fn, "__name__", repr(fn)))
        return await original(self, fn, *args, **kwargs)

    OneHopConnection._execute = counted  # type: ignore[method-assign]
    try:
        yield calls
    finally:
        OneHopConnection._execute = original  # type: ignore[method-assign]


@asynccontextmanager
async def emptied_store(url: str, **engine_options: Any) -> AsyncIterator[SqlAgentStore]:
    """A SqlAgentStore on `url` with every table emptied first, disposed on the way out."""
    store = SqlAgentStore.from_url(url, **engine_options)
    await empty_database(store.engine)
    try:
        yield store
    finally:
        await store.dispose()


@pytest.fixture
async def sql_store(db_url: str) -> AsyncIterator[SqlAgentStore]:
    """A SqlAgentStore on an emptied database: every test starts from zero rows."""
    async with emptied_store(db_url) as store:
        yield store


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    global _postgres_ran, _llama_ran, _citus_ran
    if report.when == "call" and report.passed and "postgres" in report.keywords:
        _postgres_ran = True
        _citus_ran = _citus_ran or ON_CITUS
    if report.when == "call" and report.passed and "llama" in report.keywords:
        _llama_ran = True
    if report.when == "call" and report.passed and "citus" in report.keywords:
        _citus_ran = True


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """With PostgreSQL (or the llama server) required, a run in which none of its tests passed
    is a failure: a skip or a deselection must not pass for green."""
    if REQUIRE_POSTGRES and not _postgres_ran and session.testscollected:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
        print("\nAGENT_REQUIRE_POSTGRES=1 but no PostgreSQL test passed: failing the run.")
    if REQUIRE_LLAMA and not _llama_ran and session.testscollected:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
        print("\nAGENT_REQUIRE_LLAMA=1 but no llama.cpp server test passed: failing the run.")
    if REQUIRE_CITUS and not _citus_ran and session.testscollected:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
        print("\nAGENT_REQUIRE_CITUS=1 but no Citus test passed: failing the run.")
