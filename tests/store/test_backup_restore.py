"""Backup and restore as docs/reliability.md documents them keep the search index right.

SQLite: `sqlite3 live.db .dump | sqlite3 restored.db` renumbers the implicit rowids of a table
without an INTEGER PRIMARY KEY; the FTS5 index (shadow tables dumped as they are) is keyed on
`messages.search_id`, which the dump keeps, so a restored database finds the same messages,
appends new ones without a key clash, and an erasure leaves none of the erased words in the
index (issue 40, break 5: the index was keyed on the rowid, and `codeword4x` found the message
holding `codeword5x`). PostgreSQL: `pg_dump` and `pg_restore` into a new database.

Either way: every search result identical after the restore."""

from __future__ import annotations

import asyncio
import json
import shutil
import sqlite3
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from bounded_agents.core.search import HistorySearchTool
from bounded_agents.core.turn.public import ToolContext
from bounded_agents.store import SqlAgentStore, migrate
from tests.conftest import create_pg_database, drop_pg_database
from tests.factories import assistant, user

PG_BIN = Path("/usr/lib/postgresql/15/bin")
QUERIES = [f"codeword{i}x" for i in range(1, 6)] + ["deploying", "pallet", "note"]


async def _fill(store: SqlAgentStore) -> str:
    """A thread whose messages' rowids a restore renumbers: an erased thread's rows came first,
    so the live rowids start past a gap."""
    gone = await store.create_thread(actor_id="alice", agent="helper")
    await store.append_messages(gone.id, [user(f"gone {i}") for i in range(7)])
    thread = await store.create_thread(actor_id="alice", agent="helper")
    await store.append_messages(
        thread.id,
        [
            m
            for i in range(1, 6)
            for m in (user(f"Please note codeword{i}x, we deployed {i}."), assistant("Noted."))
        ],
    )
    assert await store.delete_thread(gone.id)
    return thread.id


async def _results(store: SqlAgentStore, thread_id: str) -> dict[str, Any]:
    tool = HistorySearchTool(store)
    out: dict[str, Any] = {}
    for q in QUERIES:
        result = await tool.invoke_in_turn(
            {"query": q}, ToolContext(thread_id=thread_id, prompt=())
        )
        out[q] = json.loads(result.content)["results"]
    return out


def _sqlite_dump(live: Path, restored: Path) -> None:
    """The sqlite3 shell's `.dump` piped into a new database, as the issue did; Python's
    `iterdump()` (the same statements) where the shell is not installed."""
    if shutil.which("sqlite3"):
        dump = subprocess.run(
            ["sqlite3", str(live), ".dump"], check=True, capture_output=True
        ).stdout
        subprocess.run(["sqlite3", str(restored)], input=dump, check=True, capture_output=True)
        return
    source, target = sqlite3.connect(live), sqlite3.connect(restored)
    target.executescript("\n".join(source.iterdump()))
    source.close()
    target.close()


def _fts_bytes(path: Path, word: str) -> list[str]:
    """The FTS5 shadow tables' cells holding `word` (case-folded, as the index keeps it)."""
    conn = sqlite3.connect(path)
    hits: list[str] = []
    tables = [
        r[0]
        for r in conn.execute(
            "SELECT name FROM sqlite_master WHERE name LIKE '%fts%' AND type='table'"
        )
    ]
    for name in tables:
        if name in ("messages_fts", "summary_archive_fts"):
            continue  # the virtual tables read the content tables: their shadows hold the index
        for row in conn.execute(f'SELECT * FROM "{name}"'):
            for value in row:
                raw = value if isinstance(value, bytes) else str(value).encode()
                if word.encode() in raw.lower():
                    hits.append(name)
    conn.close()
    return hits


async def test_a_sqlite_dump_and_restore_keeps_the_search_index_right(tmp_path: Path) -> None:
    live, restored = tmp_path / "live.db", tmp_path / "restored.db"
    store = SqlAgentStore.from_url(f"sqlite+aiosqlite:///{live}")
    await store.create_schema()
    tid = await _fill(store)
    before = await _results(store, tid)
    await store.dispose()

    _sqlite_dump(live, restored)
    again = SqlAgentStore.from_url(f"sqlite+aiosqlite:///{restored}")
    try:
        async with again.engine.connect() as conn:  # the dump did renumber the rowids
            rowid, key = (
                await conn.execute(sa.text("SELECT min(rowid), min(search_id) FROM messages"))
            ).one()
        assert (rowid, key) == (1, 8)

        assert await _results(again, tid) == before
        found = await again.search_history(tid, "codeword4x", limit=5)
        assert [h.content for h in found] == ["Please note codeword4x, we deployed 4."]

        await again.append_messages(tid, [user("codeword6x arrives after the restore")])
        assert [h.seq for h in await again.search_history(tid, "codeword6x", limit=5)] == [11]
        assert await again.delete_message(tid, 7)  # codeword4x's message
        assert await again.search_history(tid, "codeword4x", limit=5) == []
        async with again.engine.begin() as conn:  # raises when the index and the table differ
            await conn.execute(
                sa.text(
                    "INSERT INTO messages_fts(messages_fts, rank) VALUES ('integrity-check', 1)"
                )
            )
    finally:
        await again.dispose()
    assert _fts_bytes(restored, "codeword4x") == []
    assert "codeword4x" not in _vocabulary(restored)
    assert "codeword5x" in _vocabulary(restored)  # what is still there, the vocabulary shows


def _vocabulary(path: Path) -> set[str]:
    """The terms FTS5 holds for `messages_fts`, as its `fts5vocab` table lists them (a byte
    scan alone misses a term stored prefix-compressed after a similar one)."""
    conn = sqlite3.connect(path)
    try:
        conn.execute("CREATE VIRTUAL TABLE temp.vocab USING fts5vocab(main, messages_fts, row)")
        return {r[0] for r in conn.execute("SELECT term FROM temp.vocab")}
    finally:
        conn.close()


@pytest.fixture
def pg_pair() -> Iterator[tuple[str, str]]:
    if not (PG_BIN / "pg_dump").exists():
        pytest.skip(f"no pg_dump in {PG_BIN}")
    source, target = create_pg_database("agent_dump"), create_pg_database("agent_restore")
    try:
        yield source, target
    finally:
        drop_pg_database(source)
        drop_pg_database(target)


def _pg_dump_restore(source_url: str, target_url: str, backup: Path) -> None:
    """`pg_dump -Fc` of the source, `pg_restore` into the (empty) target: docs/reliability.md."""
    subprocess.run(
        [str(PG_BIN / "pg_dump"), "-Fc", "-f", str(backup), _libpq(source_url)],
        check=True,
        capture_output=True,
    )
    subprocess.run(
        [str(PG_BIN / "pg_restore"), "--no-owner", "-d", _libpq(target_url), str(backup)],
        check=True,
        capture_output=True,
    )


def _libpq(url: str) -> str:
    return url.replace("postgresql+asyncpg://", "postgresql://")


@pytest.mark.postgres
async def test_a_pg_dump_and_restore_keeps_the_search_results(
    pg_pair: tuple[str, str], tmp_path: Path
) -> None:
    source_url, target_url = pg_pair
    await migrate.upgrade_url(source_url)
    store = SqlAgentStore.from_url(source_url)
    try:
        tid = await _fill(store)
        before = await _results(store, tid)
    finally:
        await store.dispose()

    await asyncio.to_thread(_pg_dump_restore, source_url, target_url, tmp_path / "agent.dump")

    again = SqlAgentStore.from_url(target_url)
    try:
        assert await _results(again, tid) == before
        await again.append_messages(tid, [user("codeword6x arrives after the restore")])
        assert [h.seq for h in await again.search_history(tid, "codeword6x", limit=5)] == [11]
        assert await again.delete_message(tid, 7)
        assert await again.search_history(tid, "codeword4x", limit=5) == []
    finally:
        await again.dispose()
