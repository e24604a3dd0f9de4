"""Revision 0022 (lz4 compression): on PostgreSQL the large text columns compress new values
with lz4, a value stored before keeps pglz and reads back whole, and the downgrade gives the
columns back to the server's default; every row is kept both ways. On SQLite it changes
nothing. (This machine's PostgreSQL has lz4: the test says so rather than pass without it.)"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from bounded_agents.store import migrate
from bounded_agents.store.engine import make_engine
from tests.migrations.conftest import migration_constant, seeded_at

HEAD = "0022_lz4_compression"
BEFORE = "0021_search_thread_key"
COLUMNS = migration_constant("0022", "COLUMNS")

BIG = "x" * 3000 + "".join(chr(65 + i % 26) for i in range(30_000))
"""Over TOAST's threshold (about 2 KB) and compressible: stored compressed."""

SEED = [
    "INSERT INTO threads (id, actor_id, agent, title) VALUES ('t1', 'alice', 'helper', 'x')",
    "INSERT INTO runs (id, thread_id, actor_id, agent, status, request) "
    "VALUES ('r1', 't1', 'alice', 'helper', 'completed', '{}')",
    f"INSERT INTO run_steps (thread_id, run_id, position, name, payload) "
    f"VALUES ('t1', 'r1', 0, 'before', '{BIG}')",
]


async def _scalar(engine: Any, sql: str) -> Any:
    async with engine.connect() as conn:
        return (await conn.execute(sa.text(sql))).scalar_one()


async def _methods(engine: Any) -> set[str]:
    """The compression each listed column is set to ('' = the server's default)."""
    out = set()
    async with engine.connect() as conn:
        for table, column in COLUMNS:
            method = (
                await conn.execute(
                    sa.text(
                        "SELECT attcompression::text FROM pg_attribute "
                        "WHERE attrelid = CAST(:t AS regclass) AND attname = :c"
                    ),
                    {"t": table, "c": column},
                )
            ).scalar_one()
            out.add(method)
    return out


async def test_0022_compresses_new_values_with_lz4_and_keeps_every_row(fresh_url: str) -> None:
    engine = make_engine(fresh_url)
    try:
        await seeded_at(engine, BEFORE, SEED)
        await migrate.upgrade(engine, HEAD)
        async with engine.begin() as conn:
            await conn.execute(
                sa.text(
                    "INSERT INTO run_steps (thread_id, run_id, position, name, payload) "
                    "VALUES ('t1', 'r1', 1, 'after', :p)"
                ),
                {"p": BIG},
            )
        assert await _scalar(engine, "SELECT count(*) FROM run_steps") == 2
        assert await _scalar(engine, "SELECT count(DISTINCT payload) FROM run_steps") == 1
        if engine.dialect.name == "postgresql":
            assert await _methods(engine) == {"l"}
            by_step = "SELECT pg_column_compression(payload) FROM run_steps WHERE name = "
            assert await _scalar(engine, by_step + "'before'") == "pglz"
            assert await _scalar(engine, by_step + "'after'") == "lz4"

        await migrate.downgrade(engine, BEFORE)
        assert await _scalar(engine, "SELECT count(*) FROM run_steps") == 2
        assert await _scalar(engine, "SELECT max(payload) FROM run_steps") == BIG
        if engine.dialect.name == "postgresql":
            assert await _methods(engine) == {""}
    finally:
        await engine.dispose()
