"""SQLite: an erasure takes the erased bytes out of the database FILES, not only out of the
rows, with no VACUUM: `secure_delete` zeroes what a delete frees, and a TRUNCATE checkpoint after
the erasure empties the `-wal` file, which still holds the pages as they were written (issue 40,
item 10). PostgreSQL keeps dead tuples until a rewrite: docs/http-api.md says what and how."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from pathlib import Path

import pytest

from bounded_agents.module import AgentModule
from bounded_agents.store import migrate
from bounded_agents.store.sql import SqlAgentStore
from tests.factories import summary_rows
from tests.http.conftest import (
    ALICE,
    HelperAgent,
    http_settings,
    make_app,
    new_thread,
    open_client,
    post,
    transcript,
)
from tests.http.erasure import SUMMARIZING, RecordingEcho, SeekerAgent


@pytest.fixture
async def file_store(tmp_path: Path) -> AsyncIterator[tuple[SqlAgentStore, Path]]:
    path = tmp_path / "agent.db"
    url = f"sqlite+aiosqlite:///{path}"
    await migrate.upgrade_url(url)
    store = SqlAgentStore.from_url(url)
    try:
        yield store, path
    finally:
        await store.dispose()


def _file_hits(path: Path, marker: str) -> list[str]:
    """The database's files (main, `-wal`, `-journal`, `-shm`) whose bytes hold `marker`, in any
    case (FTS5 keeps its terms case-folded)."""
    needle = marker.lower().encode()
    return [
        f.name
        for f in sorted(path.parent.glob(path.name + "*"))
        if needle in f.read_bytes().lower()
    ]


async def test_an_erased_message_s_bytes_leave_the_database_file_and_its_wal(
    stack: AsyncExitStack, file_store: tuple[SqlAgentStore, Path]
) -> None:
    store, path = file_store
    module = AgentModule.for_root(
        store=store,
        model=RecordingEcho(),
        agents=(HelperAgent, SeekerAgent),
        history=SUMMARIZING,
        settings=http_settings(),
    )
    client = await open_client(stack, make_app(module))
    marker = f"MARK{uuid.uuid4().hex}"
    thread = await new_thread(client, agent_name="seeker")
    for text in [f"my secret is {marker} " + "padding " * 200, "a", "b", "c", "d", "e"]:
        assert (await post(client, thread, text, agent_name="seeker")).status_code == 200
    assert (
        await post(client, thread, "/search_history secret", agent_name="seeker")
    ).status_code == 200
    assert marker in (await summary_rows(store, thread))[-1][1]
    assert _file_hits(path, marker)  # written: in the WAL, and the file once checkpointed

    r = await client.delete(f"/threads/{thread}/messages/1", headers=ALICE)
    assert r.status_code == 204, r.text

    assert _file_hits(path, marker) == []
    assert path.with_name("agent.db-wal").stat().st_size < 64 * 1024  # truncated, then reused
    assert all(marker not in str(m) for m in await transcript(client, thread))
    async with store.engine.connect() as conn:  # on every connection, whatever the build
        assert (await conn.exec_driver_sql("PRAGMA secure_delete")).scalar_one() == 1
    # the server goes on writing and reading after the checkpoint
    assert (await post(client, thread, "after", agent_name="seeker")).status_code == 200


async def test_an_erased_thread_s_bytes_leave_the_database_file_and_its_wal(
    stack: AsyncExitStack, file_store: tuple[SqlAgentStore, Path]
) -> None:
    store, path = file_store
    module = AgentModule.for_root(
        store=store,
        model=RecordingEcho(),
        agents=(HelperAgent,),
        history=SUMMARIZING,
        settings=http_settings(),
    )
    client = await open_client(stack, make_app(module))
    marker = f"MARK{uuid.uuid4().hex}"
    thread = await new_thread(client)
    for text in [f"my secret is {marker}", "a", "b", "c", "d", "e"]:
        assert (await post(client, thread, text)).status_code == 200
    assert _file_hits(path, marker)

    r = await client.delete(f"/threads/{thread}", headers=ALICE)
    assert r.status_code == 204, r.text

    assert _file_hits(path, marker) == []
