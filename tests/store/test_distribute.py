"""`python -m app distribute`: a migrated database distributed with Citus, as
docs/scale-out.md lays it out, idempotently; and migrations after it still run.

The plan is checked against the schema everywhere; the command itself runs on the session's
Citus cluster (a coordinator and two workers, `tests/citus_cluster.py`), through the CLI as an
operator runs it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import asyncpg
import pytest
import sqlalchemy as sa
from alembic.script import ScriptDirectory

from bounded_agents import cli
from bounded_agents.settings import get_settings
from bounded_agents.store import SqlAgentStore, migrate
from bounded_agents.store.distribute import PLAN, REFERENCE
from bounded_agents.store.schema import metadata, runs
from tests.citus_cluster import CitusCluster
from tests.conftest import CITUS_SHARDS, create_pg_database, drop_pg_database
from tests.factories import assistant, user
from tests.store.test_thread_keys import DISTRIBUTED_BY

HEAD_REVISION = ScriptDirectory.from_config(migrate.alembic_config()).get_current_head()
DISTRIBUTED = [d for d in PLAN if d.colocate_with != REFERENCE]
REFERENCES = {d.table for d in PLAN if d.colocate_with == REFERENCE}
GROUP_HEAD = {
    d.table: d.table if d.colocate_with == "none" else d.colocate_with for d in DISTRIBUTED
}
"""Each distributed table and the table that starts its colocation group."""


def test_the_plan_distributes_every_table_of_the_schema_by_its_key_parents_first() -> None:
    assert {d.table for d in PLAN} == set(metadata.tables)
    assert {d.table: d.column for d in DISTRIBUTED} == {"threads": "id", **DISTRIBUTED_BY}
    assert REFERENCES == {"token_ratios"}, "the one global table: a copy on every node"
    assert all(
        not d.column and not metadata.tables[d.table].foreign_keys
        for d in PLAN
        if d.table in REFERENCES
    )
    order = [d.table for d in PLAN]
    for d in DISTRIBUTED:
        if d.colocate_with != "none":
            assert order.index(d.colocate_with) < order.index(d.table), d
        for fk in metadata.tables[d.table].foreign_keys:
            assert order.index(fk.column.table.name) < order.index(d.table), fk
    assert set(GROUP_HEAD.values()) == {"threads", "actor_usage"}


def _distribute(url: str, monkeypatch: pytest.MonkeyPatch, *args: str) -> int:
    monkeypatch.setenv("AGENT_DATABASE_URL", url)
    get_settings.cache_clear()
    try:
        return cli.main(["distribute", *args])
    finally:
        get_settings.cache_clear()


async def _tables(url: str) -> dict[str, tuple[str, int, int]]:
    """Distributed tables: name -> (distribution column, colocation group, shards)."""
    dsn = url.replace("+asyncpg", "")
    conn = await asyncpg.connect(dsn)
    try:
        rows = await conn.fetch(
            "SELECT table_name::text AS name, distribution_column, colocation_id, shard_count "
            "FROM citus_tables WHERE citus_table_type IN ('distributed', 'reference')"
        )
    finally:
        await conn.close()
    return {
        r["name"]: (r["distribution_column"], r["colocation_id"], r["shard_count"]) for r in rows
    }


@pytest.fixture
def fresh(citus_cluster: CitusCluster) -> Iterator[str]:
    """A database on the cluster with the extension and the workers, nothing migrated."""
    yield asyncio.run(citus_cluster.create_database("agent_dist"))


@pytest.mark.citus
def test_distribute_puts_each_table_in_its_group_and_running_it_again_changes_nothing(
    fresh: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    asyncio.run(migrate.upgrade_url(fresh))
    assert _distribute(fresh, monkeypatch, "--shard-count", str(CITUS_SHARDS)) == 0
    out = capsys.readouterr().out
    assert out.count(": distributed by ") == len(DISTRIBUTED), out
    assert out.count(": made a reference table") == len(REFERENCES), out
    tables = asyncio.run(_tables(fresh))
    assert {t: c for t, (c, _, _) in tables.items()} == {
        **{d.table: d.column for d in DISTRIBUTED},
        **dict.fromkeys(REFERENCES, "<none>"),
    }
    assert {tables[d.table][2] for d in DISTRIBUTED} == {CITUS_SHARDS}
    assert {t: tables[t][1] for t in GROUP_HEAD} == {
        t: tables[head][1] for t, head in GROUP_HEAD.items()
    }
    assert tables["threads"][1] != tables["actor_usage"][1]

    assert _distribute(fresh, monkeypatch) == 0
    again = capsys.readouterr().out
    assert again.count(": already distributed by ") == len(DISTRIBUTED), again
    assert again.count(": already a reference table") == len(REFERENCES), again
    assert asyncio.run(_tables(fresh)) == tables


@pytest.mark.citus
def test_rows_stored_before_distribution_are_read_back_after_it(
    fresh: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A database that ran on one server: its rows move into the shards and stay readable."""

    async def store_a_thread() -> str:
        await migrate.upgrade_url(fresh)
        store = SqlAgentStore.from_url(fresh)
        try:
            thread = await store.create_thread(actor_id="alice", agent="helper", title="before")
            await store.append_messages(thread.id, [user("q"), assistant("a")])
            return thread.id
        finally:
            await store.dispose()

    thread_id = asyncio.run(store_a_thread())
    assert _distribute(fresh, monkeypatch, "--shard-count", str(CITUS_SHARDS)) == 0

    async def read_it_back() -> list[str]:
        store = SqlAgentStore.from_url(fresh)
        try:
            thread = await store.get_thread(thread_id)
            assert thread is not None and thread.title == "before"
            return [m.content for m in thread.messages]
        finally:
            await store.dispose()

    assert asyncio.run(read_it_back()) == ["q", "a"]


@pytest.mark.citus
def test_migrations_after_distribution_run_on_the_coordinator_and_reach_every_shard(
    fresh: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Distributed at revision 0007, then upgraded to the newest: 0008 adds a column and a
    partial index to `runs`, 0009 another index, 0010 the idempotency key's partial unique
    index (it holds `thread_id`, so Citus accepts it), and every revision after them runs here
    on a distributed database too; Citus takes them to every shard, where the key's index
    refuses a second run with one key on one thread."""
    asyncio.run(migrate.upgrade_url(fresh, "0007"))
    assert _distribute(fresh, monkeypatch, "--shard-count", str(CITUS_SHARDS)) == 0
    asyncio.run(migrate.upgrade_url(fresh))
    placed = asyncio.run(_tables(fresh))
    # Tables added after the distribution are placed by their own migrations, as the plan
    # would place them: 0017's as a reference table, 0019's in the thread's group.
    assert set(placed) == {d.table for d in PLAN}
    assert placed["erased_threads"][:2] == ("id", placed["threads"][1])
    assert placed["token_ratios"][0] == "<none>"

    async def check() -> None:
        conn = await asyncpg.connect(fresh.replace("+asyncpg", ""))
        try:
            assert await conn.fetchval("SELECT version_num FROM alembic_version") == HEAD_REVISION
            found = await conn.fetch(
                "SELECT result FROM run_command_on_shards('runs', $$SELECT count(*) FROM "
                "pg_indexes WHERE tablename = '%s' AND indexname LIKE 'ix_runs_prunable%%'$$)"
            )
            assert [r["result"] for r in found] == ["2"] * CITUS_SHARDS
            keyed = await conn.fetch(
                "SELECT result FROM run_command_on_shards('runs', $$SELECT count(*) FROM "
                "pg_indexes WHERE tablename = '%s' AND indexname LIKE "
                "'uq_runs_thread_id_actor_id_idempotency_key%%'$$)"
            )
            assert [r["result"] for r in keyed] == ["1"] * CITUS_SHARDS
            await conn.execute("INSERT INTO threads (id, actor_id, agent) VALUES ('t', 'a', 'x')")
            run = (
                "INSERT INTO runs (id, thread_id, actor_id, agent, status, request, "
                "idempotency_key) VALUES ($1, 't', 'a', 'x', 'completed', '{}', 'k')"
            )
            await conn.execute(run, "r1")
            with pytest.raises(asyncpg.UniqueViolationError):
                await conn.execute(run, "r2")
        finally:
            await conn.close()
        store = SqlAgentStore.from_url(fresh)
        try:
            async with store.engine.begin() as conn_:
                await conn_.execute(
                    sa.select(runs.c.steps_pruned_at).where(runs.c.thread_id == "t")
                )
        finally:
            await store.dispose()

    asyncio.run(check())


@pytest.mark.citus
def test_an_unmigrated_database_is_refused_naming_the_command_to_run_first(
    fresh: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _distribute(fresh, monkeypatch) == 1
    err = capsys.readouterr().err
    assert "python -m app migrate" in err and "Traceback" not in err


@pytest.mark.postgres
def test_a_database_without_citus_is_refused_in_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    url = create_pg_database("agent_nocitus")
    try:
        asyncio.run(migrate.upgrade_url(url))
        assert _distribute(url, monkeypatch) == 1
    finally:
        drop_pg_database(url)
    err = capsys.readouterr().err
    assert err.startswith("error: the ") and "citus" in err.lower()
    assert len(err.strip().splitlines()) == 1


def test_sqlite_is_refused_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _distribute(f"sqlite+aiosqlite:///{tmp_path}/a.db", monkeypatch) == 1
    assert "needs PostgreSQL with the Citus extension" in capsys.readouterr().err
