"""No migration loses a row: a database seeded at any revision and upgraded to head keeps every
row of every table with every value, on SQLite and PostgreSQL, by every way the app migrates.

The revisions come from Alembic's script directory, so a new migration is covered without an
edit here; the rows come from the tables as reflected at each revision (`tests/migrations/
rows.py`). Before foreign keys were turned off for migrations, every revision up to 0004 lost
every message, run and run step on SQLite: 0005 rebuilds `threads` (copy, DROP, rename) and the
DROP cascaded.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
import sqlalchemy as sa
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncEngine

from bounded_agents.errors import StoreError
from bounded_agents.module import AgentModule
from bounded_agents.settings import Settings
from bounded_agents.store import SqlAgentStore, migrate
from bounded_agents.store.engine import make_engine
from bounded_agents.store.schema import metadata
from bounded_agents.store.search import include_name
from tests.migrations import rows
from tests.reliability.processes import app_env, run_command

SCRIPT = ScriptDirectory.from_config(migrate.alembic_config())
REVISIONS = [script.revision for script in reversed(list(SCRIPT.walk_revisions()))]
HEAD = REVISIONS[-1]

DROPPED_ON_PURPOSE = {
    ("messages", "id"): "0007: the surrogate key nothing read; messages are keyed by (thread, seq)"
}
"""Columns a migration drops with their values, and why. Anything else gone is a lost value."""
REWRITTEN_BY_DOWNGRADE = {
    ("ledger", "id"): "0007's downgrade renumbers the per-actor ids across actors",
}


def test_the_revisions_are_one_chain_from_the_first_to_head() -> None:
    assert SCRIPT.get_heads() == [HEAD]
    assert len(REVISIONS) >= 9  # 0001..0009 at the time of writing
    first = SCRIPT.get_revision(REVISIONS[0])
    assert first is not None and first.down_revision is None


async def _seed_at(engine: AsyncEngine, revision: str, *, big: bool = True) -> rows.Rows:
    """Migrate an empty database to `revision`, seed it, and return every row as stored."""
    await migrate.upgrade(engine, revision)
    async with engine.begin() as conn:
        await conn.run_sync(lambda c: rows.seed(c, big=big))
    return await _snapshot(engine)


async def _snapshot(engine: AsyncEngine) -> rows.Rows:
    async with engine.connect() as conn:
        return await conn.run_sync(rows.snapshot)


async def _columns(engine: AsyncEngine) -> dict[str, list[str]]:
    async with engine.connect() as conn:
        meta = await conn.run_sync(rows.reflect)
    return {table.name: [c.name for c in table.columns] for table in meta.sorted_tables}


async def _revision(engine: AsyncEngine) -> str | None:
    async with engine.connect() as conn:
        return await conn.run_sync(lambda c: MigrationContext.configure(c).get_current_revision())


@pytest.mark.parametrize("revision", REVISIONS[:-1])
async def test_upgrading_to_head_keeps_every_row_seeded_at(revision: str, fresh_url: str) -> None:
    engine = make_engine(fresh_url)  # the app's engine (foreign keys on, on SQLite)
    try:
        before = await _seed_at(engine, revision)
        assert all(before.values()), rows.counts(before)
        await migrate.upgrade(engine)  # what `python -m app migrate` and start-up run
        assert await _revision(engine) == HEAD
        after = await _snapshot(engine)
    finally:
        await engine.dispose()
    assert rows.differences(before, after, dropped=DROPPED_ON_PURPOSE) == []
    assert {name: n for name, n in rows.counts(after).items() if name in before} == rows.counts(
        before
    )


async def test_down_to_base_and_up_again_keeps_every_row_the_first_revision_has(
    fresh_url: str,
) -> None:
    """From head one revision at a time down to the first: every table the lower revision has
    keeps its row count (a SQLite rebuild on the way down cascades just the same); back at head
    the columns that existed all along hold their values; then down to base, nothing is left,
    and up again the schema is head's. The figures fit an INTEGER: 0004's downgrade narrows the
    ledger's BIGINT token counts back to one, and a larger figure cannot go down."""
    engine = make_engine(fresh_url)
    try:
        seeded = await _seed_at(engine, HEAD, big=False)
        current = seeded
        for lower in reversed(REVISIONS[:-1]):
            await migrate.downgrade(engine, lower)
            assert await _revision(engine) == lower
            now = await _snapshot(engine)
            assert rows.counts(now) == {n: c for n, c in rows.counts(current).items() if n in now}
            current = now
        first = current
        await migrate.upgrade(engine)
        again = await _snapshot(engine)
        assert rows.differences(first, again, dropped=DROPPED_ON_PURPOSE) == []
        assert {n: c for n, c in rows.counts(again).items() if n in first} == rows.counts(first)
        lasting = {
            name: [
                {c: v for c, v in row.items() if (name, c) not in REWRITTEN_BY_DOWNGRADE}
                for row in table_rows
            ]
            for name, table_rows in first.items()
        }
        assert rows.differences(lasting, seeded, dropped=DROPPED_ON_PURPOSE) == []

        await migrate.downgrade(engine, "base")
        async with engine.connect() as conn:
            assert set(await conn.run_sync(lambda c: sa.inspect(c).get_table_names())) == {
                "alembic_version"
            }
        await migrate.upgrade(engine)
        async with engine.connect() as conn:
            diff = await conn.run_sync(
                lambda c: list(
                    compare_metadata(
                        MigrationContext.configure(c, opts={"include_name": include_name}), metadata
                    )
                )
            )
        assert diff == []
    finally:
        await engine.dispose()


@pytest.mark.parametrize("way", ["alembic upgrade head", "python -m app migrate", "start-up"])
async def test_every_way_the_app_migrates_keeps_every_row(way: str, fresh_url: str) -> None:
    """The alembic CLI, `python -m app migrate` (and `make run`, which runs it) and
    AGENT_MIGRATE_ON_START, each from the first revision."""
    engine = make_engine(fresh_url)
    try:
        before = await _seed_at(engine, REVISIONS[0])
    finally:
        await engine.dispose()
    if way == "start-up":
        keep = 100 * 365 * 86_400.0  # the sweep must not prune the seeded journals meanwhile
        settings = Settings(
            database_url=fresh_url,
            migrate_on_start=True,
            journal_retention_seconds=keep,
            failed_run_retention_seconds=keep,
        )
        module = AgentModule.for_root(settings=settings)
        async with module.lifespan():
            pass
    else:
        args = ("-m", "alembic", "upgrade", "head") if way.startswith("alembic") else ()
        done = await run_command(app_env(fresh_url), *(args or ("-m", "app", "migrate")))
        assert done.returncode == 0, done.stderr
    engine = make_engine(fresh_url)
    try:
        assert await _revision(engine) == HEAD
        after = await _snapshot(engine)
    finally:
        await engine.dispose()
    assert rows.differences(before, after, dropped=DROPPED_ON_PURPOSE) == []


def _sqlite_file(url: str) -> str:
    database = make_url(url).database
    assert database is not None
    return database


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite+aiosqlite:///{tmp_path}/app.db"


async def test_the_store_enforces_foreign_keys_again_once_it_migrated(sqlite_url: str) -> None:
    """Migrations run with foreign keys off: the connection they ran on goes back to the pool
    with them on, or the app would store messages of threads that do not exist."""
    store = SqlAgentStore.from_url(sqlite_url)
    try:
        await store.create_schema()
        async with store.engine.connect() as conn:
            assert (await conn.exec_driver_sql("PRAGMA foreign_keys")).scalar_one() == 1
            with pytest.raises(sa.exc.IntegrityError, match="FOREIGN KEY"):
                await conn.exec_driver_sql(
                    "INSERT INTO messages (thread_id, seq, role, content) "
                    "VALUES ('no-such-thread', 1, 'user', 'x')"
                )
        assert store.engine.sync_engine.pool.checkedin() == 1  # the migration's own connection
    finally:
        await store.dispose()


@pytest.fixture
async def dangling(sqlite_url: str) -> str:
    """A SQLite database at the first revision, seeded, plus a message of a thread that does
    not exist (written with foreign keys off, as sqlite3 connects by default)."""
    engine = make_engine(sqlite_url)
    try:
        await _seed_at(engine, REVISIONS[0])
    finally:
        await engine.dispose()
    plain = sqlite3.connect(_sqlite_file(sqlite_url))
    with plain:
        plain.execute(
            "INSERT INTO messages (id, thread_id, seq, role, content) "
            "VALUES (999, 'gone', 1, 'user', 'orphan')"
        )
    plain.close()
    return sqlite_url


async def test_an_upgrade_that_leaves_a_dangling_row_fails_and_changes_nothing(
    dangling: str,
) -> None:
    """`PRAGMA foreign_key_check` after the upgrade, in its transaction: a row whose parent is
    missing fails the migration by name, and the database stays at its revision, every row
    and column as it was (DDL included: the migration is one SQLite transaction)."""
    engine = make_engine(dangling)
    try:
        before, schema = await _snapshot(engine), await _columns(engine)
        with pytest.raises(StoreError, match=r"foreign_key_check.*1 in messages -> threads"):
            await migrate.upgrade(engine)
        assert await _revision(engine) == REVISIONS[0]
        assert await _columns(engine) == schema
        assert rows.differences(before, await _snapshot(engine)) == []
    finally:
        await engine.dispose()


async def test_python_m_app_migrate_says_in_one_line_why_it_refused(dangling: str) -> None:
    done = await run_command(app_env(dangling), "-m", "app", "migrate")
    assert done.returncode == 1
    [line] = done.stderr.strip().splitlines()
    assert line.startswith("error: migration rolled back: PRAGMA foreign_key_check found 1 row")


async def test_a_migration_handed_a_connection_with_foreign_keys_on_refuses_to_start(
    sqlite_url: str,
) -> None:
    """Whoever drives Alembic with a connection of their own on SQLite must turn foreign keys
    off first (before its transaction: inside one the PRAGMA is a no-op). One that forgot is
    refused before any migration runs, not left to cascade."""
    engine = make_engine(sqlite_url)  # foreign keys on
    try:
        cfg = migrate.alembic_config()

        def upgrade(connection: sa.Connection) -> None:
            cfg.attributes["connection"] = connection
            command.upgrade(cfg, "head")

        async with engine.begin() as conn:
            with pytest.raises(StoreError, match="foreign keys"):
                await conn.run_sync(upgrade)
        assert await _revision(engine) is None
    finally:
        await engine.dispose()
