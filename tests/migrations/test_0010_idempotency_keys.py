"""Revision 0010 (idempotency keys) alters `runs` in place both ways: every row of `runs` and of
`run_steps`, its child, survives the upgrade and the downgrade, on SQLite with foreign keys
enforced (as the app's engine runs migrations) and on PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa

from bounded_agents.store import migrate
from bounded_agents.store.engine import make_engine
from tests.conftest import create_pg_database, drop_pg_database

TABLES = ("threads", "messages", "runs", "run_steps")


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def fresh_url(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite+aiosqlite:///{tmp_path}/keys.db"
        return
    url = create_pg_database("agent_migr10")
    try:
        yield url
    finally:
        drop_pg_database(url)


SEED = [
    "INSERT INTO threads (id, actor_id, agent) VALUES ('t1', 'alice', 'helper')",
    "INSERT INTO messages (thread_id, seq, role, content, run_id) "
    "VALUES ('t1', 1, 'user', 'hi', 'r1'), ('t1', 2, 'assistant', 'hello', 'r1')",
    "INSERT INTO runs (id, thread_id, actor_id, agent, status, request, report) "
    "VALUES ('r1', 't1', 'alice', 'helper', 'completed', '{}', '{}'), "
    "('r2', 't1', 'alice', 'helper', 'failed', '{}', NULL)",
    "INSERT INTO run_steps (thread_id, run_id, position, name, payload) "
    "VALUES ('t1', 'r1', 0, 'persist:user', '{}'), ('t1', 'r1', 1, 'load:thread', '{}'), "
    "('t1', 'r2', 0, 'persist:user', '{}')",
]


async def _counts(engine: Any) -> dict[str, int]:
    async with engine.connect() as conn:
        return {
            t: int((await conn.execute(sa.text(f"SELECT count(*) FROM {t}"))).scalar())
            for t in TABLES
        }


async def _run_columns(engine: Any) -> set[str]:
    async with engine.connect() as conn:
        columns = await conn.run_sync(lambda c: sa.inspect(c).get_columns("runs"))
    return {c["name"] for c in columns}


async def test_0010_keeps_every_run_and_step_up_and_down(fresh_url: str) -> None:
    engine = make_engine(fresh_url)  # the app's engine: PRAGMA foreign_keys=ON on SQLite
    try:
        await migrate.upgrade(engine, "0009")
        async with engine.begin() as conn:
            for statement in SEED:
                await conn.execute(sa.text(statement))
        seeded = await _counts(engine)
        assert seeded == {"threads": 1, "messages": 2, "runs": 2, "run_steps": 3}

        await migrate.upgrade(engine, "0010")
        assert await _counts(engine) == seeded
        assert {"idempotency_key", "request_fingerprint"} <= await _run_columns(engine)
        async with engine.begin() as conn:  # the new index holds one run per key and thread
            await conn.execute(sa.text("UPDATE runs SET idempotency_key = 'k' WHERE id = 'r1'"))
            with pytest.raises(sa.exc.IntegrityError):
                async with conn.begin_nested():
                    await conn.execute(
                        sa.text("UPDATE runs SET idempotency_key = 'k' WHERE id = 'r2'")
                    )

        await migrate.downgrade(engine, "0009")
        assert await _counts(engine) == seeded
        assert not {"idempotency_key", "request_fingerprint"} & await _run_columns(engine)
    finally:
        await engine.dispose()
