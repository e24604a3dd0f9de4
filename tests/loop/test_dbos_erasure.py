"""An erasure reaches DBOS too. With `AGENT_DURABLE=dbos` every checkpoint of a run is also a
DBOS step output in DBOS's system database (the selection, the model's answer, the summarizer's
output): a message folded into a summary is there in plain text. Erasing it (the module's
method the routes call, `AgentModule.erase_message`) deletes the thread's runs' workflows, so
no table of the system database holds it afterwards, as no table of the app's does.

The module is driven without its lifespan: DBOS is launched once for the loop tests
(`dbos_launched`), and a module's shutdown would stop it for the tests after this one.
"""

from __future__ import annotations

import base64
import binascii
import sqlite3
import uuid
from pathlib import Path

import pytest

from bounded_agents.core.ports import RunRequest
from bounded_agents.durable.journal_rows import run_row
from bounded_agents.module import AgentModule
from bounded_agents.registry import agent
from bounded_agents.settings import Settings
from bounded_agents.store import SqlAgentStore
from bounded_agents.store.schema import runs
from tests.factories import summary_rows
from tests.http.erasure import SUMMARIZING, RecordingEcho, marker_hits

pytest.importorskip("dbos", reason="the dbos extra is not installed")


@agent(name="helper", system_prompt="You help.")
class Helper:
    pass


def _readable(value: object) -> str:
    """A value as text, a base64 one decoded too: DBOS stores step outputs as base64 pickles,
    where a plain scan would find nothing."""
    text = value.decode(errors="replace") if isinstance(value, bytes) else str(value)
    try:
        decoded = base64.b64decode(text, validate=True).decode(errors="replace")
    except (binascii.Error, ValueError):
        return text
    return text + decoded


def _system_hits(path: Path, marker: str) -> list[str]:
    """`table.column` of every value in DBOS's system database (a SQLite file here) holding
    `marker`, case-insensitively."""
    found: list[str] = []
    with sqlite3.connect(path) as conn:
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        for table in tables:
            cursor = conn.execute(f'SELECT * FROM "{table}"')
            names = [d[0] for d in cursor.description]
            for row in cursor:
                for name, value in zip(names, row, strict=True):
                    if value is not None and marker.lower() in _readable(value).lower():
                        found.append(f"{table}.{name}")
    return found


async def _folded(module: AgentModule, marker: str) -> tuple[str, int]:
    thread = await module.create_thread("helper", actor_id="alice")
    for text in [f"my secret is {marker}", "the order is ORD-7", "a", "b", "c", "d", "e"]:
        await module.run_turn(agent="helper", thread_id=thread.id, actor_id="alice", content=text)
    summaries = await summary_rows(module.store, thread.id)  # type: ignore[arg-type]
    assert summaries and marker in summaries[-1][1], summaries
    return thread.id, 1


def _module(store: SqlAgentStore) -> AgentModule:
    from bounded_agents.durable.dbos_runtime import DbosRuntime

    return AgentModule.for_root(
        store=store,
        journal=DbosRuntime(store.engine, lease_seconds=60),
        model=RecordingEcho(),  # never quotes the user: the marker is in one message
        agents=[Helper],
        history=SUMMARIZING,
        settings=Settings(migrate_on_start=False, metrics=False, tracing=False),
    )


@pytest.mark.parametrize("what", ["message", "thread"])
async def test_an_erasure_leaves_no_byte_of_the_message_in_dbos_system_tables_either(
    sql_store: SqlAgentStore, dbos_launched: Path, what: str
) -> None:
    module = _module(sql_store)
    marker = f"MARK{uuid.uuid4().hex}"
    thread, seq = await _folded(module, marker)
    # the test can fail: DBOS's step outputs hold it before the erasure
    assert _system_hits(dbos_launched, marker), "DBOS keeps the run's checkpoints"

    if what == "message":
        await module.erase_message(thread, seq, actor_id="alice")
    else:
        await module.erase_thread(thread, actor_id="alice")

    assert _system_hits(dbos_launched, marker) == []
    assert await marker_hits(sql_store, marker) == []


@pytest.mark.parametrize("what", ["message", "thread"])
async def test_an_erasure_reaches_dbos_for_a_thread_of_a_thousand_runs(
    sql_store: SqlAgentStore, dbos_launched: Path, what: str
) -> None:
    """Found by attack: DBOS was asked for every run's later attempts in one query, one LIKE
    per run OR-ed, which SQLite refuses past 1,000 (990 runs passed, 999 failed); the store's
    erasure had committed by then, so the erased message stayed in DBOS. Now in batches."""
    module = _module(sql_store)
    marker = f"MARK{uuid.uuid4().hex}"
    thread_id, seq = await _folded(module, marker)
    earlier = [
        {
            **run_row(
                RunRequest(
                    run_id=str(uuid.uuid4()),
                    thread_id=thread_id,
                    actor_id="alice",
                    agent="helper",
                    content="",
                ),
                "completed",
            ),
            "lease_expires_at": None,
        }
        for _ in range(1_000)
    ]
    async with sql_store.engine.begin() as conn:
        await conn.execute(runs.insert(), earlier)
    assert _system_hits(dbos_launched, marker), "DBOS keeps the run's checkpoints"

    if what == "message":
        await module.erase_message(thread_id, seq, actor_id="alice")
    else:
        await module.erase_thread(thread_id, actor_id="alice")

    assert _system_hits(dbos_launched, marker) == []
    assert await marker_hits(sql_store, marker) == []


async def test_a_run_that_ended_as_a_message_erasure_began_is_erased_from_dbos_too(
    sql_store: SqlAgentStore, dbos_launched: Path
) -> None:
    """Found by attack: the erasure reads the thread's run ids before the store's erasure
    takes the thread; a turn that began after that read and ended before it was never live
    (so nothing refused the erasure) nor erased from DBOS, where its `load:thread` kept the
    message. The ids are read again once the erasure has committed (the runs' rows stay)."""
    module = _module(sql_store)
    runtime = module.persistence.journal
    marker = f"MARK{uuid.uuid4().hex}"
    # Folded: the summary quotes it, so the raced turn's `load:thread` (the summary read) holds
    # it in DBOS (its kept messages are journaled by seq, no copy).
    thread_id, seq = await _folded(module, marker)
    read = runtime.thread_run_ids  # type: ignore[attr-defined]
    raced: list[str] = []

    async def read_then_a_turn_lands(thread_id: str) -> list[str]:
        ids: list[str] = await read(thread_id)
        if not raced:  # another request's turn, between the read and the erasure's lock
            done = await module.run_turn(
                agent="helper", thread_id=thread_id, actor_id="alice", content="and then?"
            )
            raced.append(done.run_id)
        return ids

    runtime.thread_run_ids = read_then_a_turn_lands  # type: ignore[attr-defined]
    try:
        await module.erase_message(thread_id, seq, actor_id="alice")
    finally:
        del runtime.thread_run_ids  # type: ignore[attr-defined]

    assert raced, "the turn ran in the window"
    assert _system_hits(dbos_launched, marker) == []
    assert await marker_hits(sql_store, marker) == []
