"""A process killed with SIGKILL inside a run's first unit of work, on both databases.

The run's row commits with the user's message and `load:thread` (docs/reliability.md, "The run
row in the first unit"). A process that dies before that commit must leave nothing: no run row
holding the thread (the next turn would get 409 until a sweep), no orphan message, and on SQLite
a database whose integrity check passes and whose write lock is free again.
"""

from __future__ import annotations

import asyncio
import sqlite3
import sys
import uuid
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.engine import make_url

from bounded_agents.core.history import window_history
from bounded_agents.core.loop import AgentDefinition, AgentLoop
from bounded_agents.durable.journal import SqlJournal
from bounded_agents.providers.echo import EchoModel
from bounded_agents.store import SqlAgentStore
from bounded_agents.store.ledger import SqlLedger
from bounded_agents.store.schema import messages, run_steps, runs
from tests.factories import assistant, user
from tests.reliability.first_unit_child import READY
from tests.reliability.processes import ROOT


async def _rows(store: SqlAgentStore, table: sa.Table) -> int:
    async with store.engine.connect() as conn:
        return int((await conn.execute(sa.select(sa.func.count()).select_from(table))).scalar())


def _sqlite_write_lock_free(path: str) -> bool:
    conn = sqlite3.connect(path, timeout=0, isolation_level=None)
    try:
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("ROLLBACK")
        return True
    except sqlite3.OperationalError:
        return False
    finally:
        conn.close()


async def _uncommitted_run_writes(store: SqlAgentStore) -> int:
    """PostgreSQL: other sessions holding a write lock on `runs` (an open, uncommitted INSERT)."""
    async with store.engine.connect() as conn:
        found = await conn.execute(
            sa.text(
                "SELECT count(*) FROM pg_locks WHERE relation = 'runs'::regclass "
                "AND mode = 'RowExclusiveLock' AND pid <> pg_backend_pid()"
            )
        )
        return int(found.scalar_one())


async def _is_mid_transaction(store: SqlAgentStore, url: str) -> bool:
    if store.engine.dialect.name == "sqlite":
        return not _sqlite_write_lock_free(str(make_url(url).database))
    return await _uncommitted_run_writes(store) > 0


async def test_a_process_killed_inside_its_first_unit_leaves_nothing_and_frees_the_thread(
    sql_store: SqlAgentStore, db_url: str, tmp_path: Path
) -> None:
    seeded = [user("q0"), assistant("a0")]
    thread = await sql_store.create_thread(actor_id="alice", agent="helper", title="t")
    await sql_store.append_messages(thread.id, seeded)
    log = (tmp_path / "child.log").open("wb")
    child = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tests.reliability.first_unit_child",
        db_url,
        thread.id,
        str(uuid.uuid4()),
        cwd=ROOT,
        stdout=asyncio.subprocess.PIPE,
        stderr=log,
    )
    log.close()
    try:
        assert child.stdout is not None
        line = await asyncio.wait_for(child.stdout.readline(), 60)
        assert line.decode().strip() == READY, (tmp_path / "child.log").read_text()
        assert await _is_mid_transaction(sql_store, db_url), "the first unit is open, uncommitted"
    finally:
        child.kill()
        await child.wait()

    # PostgreSQL ends the dead client's session (and rolls its transaction back) on its own.
    for _ in range(200):
        if not await _is_mid_transaction(sql_store, db_url):
            break
        await asyncio.sleep(0.05)
    assert not await _is_mid_transaction(sql_store, db_url)
    assert await _rows(sql_store, runs) == 0
    assert await _rows(sql_store, run_steps) == 0
    assert await _rows(sql_store, messages) == len(seeded)
    if sql_store.engine.dialect.name == "sqlite":
        async with sql_store.engine.connect() as conn:
            assert (await conn.execute(sa.text("PRAGMA integrity_check"))).scalar() == "ok"

    # The thread is free at once: a run row left behind would make this a ThreadBusy (409).
    loop = AgentLoop(
        store=sql_store,
        runtime=SqlJournal(sql_store.engine, lease_seconds=60),
        ledger=SqlLedger(sql_store.engine),
        model=EchoModel(),
        agents={
            "helper": AgentDefinition(
                name="helper", system_prompt="You help.", policy=window_history(max_messages=10)
            )
        },
    )
    await loop.run_turn(
        agent="helper", thread_id=thread.id, actor_id="alice", content="after", run_id="next"
    )
    stored = await sql_store.get_thread(thread.id)
    assert stored is not None
    assert [m.role for m in stored.messages] == ["user", "assistant", "user", "assistant"]
    assert stored.messages[2].content == "after"
    async with sql_store.engine.connect() as conn:
        statuses = (await conn.execute(sa.select(runs.c.id, runs.c.status))).all()
    assert [tuple(r) for r in statuses] == [("next", "completed")]
