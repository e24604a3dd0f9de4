"""The migrated schema is ready for Citus: every key of a thread's tables holds `thread_id`,
every key of the usage tables `actor_id` (docs/scale-out.md).

Citus distributes a table by one column and refuses a primary key, unique constraint or unique
index without it, and a foreign key between distributed tables that does not include it. The
database is inspected as the migrations left it (not the metadata), on both backends; the
schema of revision 0006 is inspected too, to show the check finds what 0007 fixed.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from bounded_agents.store import migrate
from bounded_agents.store.engine import make_engine
from tests.conftest import create_pg_database, drop_pg_database

DISTRIBUTED_BY = {
    "messages": "thread_id",
    "runs": "thread_id",
    "run_steps": "thread_id",
    "thread_summaries": "thread_id",
    "summary_archive": "thread_id",
    "erased_threads": "id",
    "ledger": "actor_id",
    "actor_usage": "actor_id",
}
"""Each distributed table and the column it is distributed by. `threads` is distributed by
`id`, which is the thread id: its key is checked apart. `erased_threads.id` is a thread id too
(of a thread erased whole)."""


def key_violations(conn: sa.Connection) -> list[str]:
    """Every key that would stop Citus from distributing the tables, described; [] when none."""
    inspector = sa.inspect(conn)
    found: list[str] = []
    if inspector.get_pk_constraint("threads")["constrained_columns"] != ["id"]:
        found.append("threads: primary key is not (id)")
    for table, column in DISTRIBUTED_BY.items():
        if not inspector.has_table(table):
            continue  # an older revision's schema (0006) has no such table yet: no key to check
        keys = [("primary key", inspector.get_pk_constraint(table)["constrained_columns"])]
        keys += [
            (f"unique constraint {u['name']}", u["column_names"])
            for u in inspector.get_unique_constraints(table)
        ]
        keys += [
            (f"unique index {i['name']}", i["column_names"])
            for i in inspector.get_indexes(table)
            if i["unique"]
        ]
        for kind, columns in keys:
            if column not in columns:
                found.append(f"{table}: {kind} ({', '.join(map(str, columns))}) lacks {column}")
        for fk in inspector.get_foreign_keys(table):
            pairs = dict(zip(fk["constrained_columns"], fk["referred_columns"], strict=True))
            target = fk["referred_table"]
            # To threads, the thread id is its `id`; to another distributed table, its column.
            wanted = "id" if target == "threads" else DISTRIBUTED_BY.get(target)
            if pairs.get(column) != wanted:
                found.append(
                    f"{table}: foreign key ({', '.join(pairs)}) -> {target} does not pair "
                    f"{column} with {target}.{wanted}"
                )
    return found


async def _violations(url: str) -> list[str]:
    engine = make_engine(url)
    try:
        async with engine.connect() as conn:
            return await conn.run_sync(key_violations)
    finally:
        await engine.dispose()


async def test_every_key_of_the_migrated_schema_holds_the_distribution_column(
    db_url: str,
) -> None:
    assert await _violations(db_url) == []


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def fresh_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite+aiosqlite:///{tmp_path}/keys.db"
        return
    url = create_pg_database("agent_keys")
    try:
        yield url
    finally:
        drop_pg_database(url)


async def test_the_check_finds_the_keys_of_revision_0006(fresh_url: str) -> None:
    """The schema before 0007 fails the check, key by key: it is not vacuous."""
    engine = make_engine(fresh_url)
    try:
        await migrate.upgrade(engine, "0006")
    finally:
        await engine.dispose()
    found = await _violations(fresh_url)
    assert "messages: primary key (id) lacks thread_id" in found
    assert "runs: primary key (id) lacks thread_id" in found
    assert "run_steps: primary key (run_id, position) lacks thread_id" in found
    assert "ledger: primary key (id) lacks actor_id" in found
    assert any(v.startswith("run_steps: foreign key (run_id) -> runs") for v in found), found
    assert not any(v.startswith(("thread_summaries", "actor_usage", "threads")) for v in found)
