"""The app behind a real PgBouncer in transaction mode (AGENT_DB_PGBOUNCER=1).

Each transaction may run on another server connection there, so a prepared statement made in
one may be missing or another client's in the next. Many concurrent turns, on more app
connections than PgBouncer has server connections, must all be answered and stored; and the
server connections outlive the app's processes, so whatever one process prepared under a
name is still there for the next one (a restart, a second process) to collide with.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
import sqlalchemy as sa
from sqlalchemy.engine import make_url

from bounded_agents.core.history import window_history
from bounded_agents.core.loop import AgentDefinition, AgentLoop
from bounded_agents.durable import SqlJournal
from bounded_agents.providers.echo import EchoModel
from bounded_agents.store import SqlAgentStore
from bounded_agents.store.ledger import SqlLedger
from bounded_agents.store.schema import messages
from tests.conftest import create_pg_database, drop_pg_database, empty_database
from tests.reliability.processes import App, app_env, free_port, run_command

pytestmark = pytest.mark.postgres

PGBOUNCER = shutil.which("pgbouncer") or "/usr/sbin/pgbouncer"
SERVER_CONNECTIONS = 3
THREADS = 12


@contextmanager
def _bouncer(database_url: str) -> Iterator[str]:
    """A PgBouncer in transaction mode in front of `database_url`'s database; yields its URL."""
    if not Path(PGBOUNCER).exists():
        message = "pgbouncer is missing: apt-get install pgbouncer"
        if os.environ.get("AGENT_REQUIRE_POSTGRES") == "1":
            pytest.fail(message)
        pytest.skip(message)
    url = make_url(database_url)
    port = free_port()
    folder = Path(tempfile.mkdtemp(prefix="pgbouncer-"))
    folder.chmod(0o777)  # PgBouncer refuses to run as root: it runs as `postgres` here
    (folder / "users.txt").write_text('"postgres" ""\n')
    (folder / "pgbouncer.ini").write_text(
        f"""[databases]
{url.database} = host={url.host} port={url.port or 5432} dbname={url.database}
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {port}
unix_socket_dir =
auth_type = trust
auth_file = {folder / "users.txt"}
pool_mode = transaction
default_pool_size = {SERVER_CONNECTIONS}
max_client_conn = 200
logfile = {folder / "pgbouncer.log"}
"""
    )
    for path in folder.iterdir():
        path.chmod(0o666)
    command = [PGBOUNCER, str(folder / "pgbouncer.ini")]
    if os.geteuid() == 0:
        command[1:1] = ["-u", "postgres"]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_listening(port)
        yield url.set(port=port).render_as_string(hide_password=False)
    finally:
        process.terminate()
        process.wait(10)
        shutil.rmtree(folder, ignore_errors=True)


def _wait_listening(port: int) -> None:
    for _ in range(100):  # PgBouncer takes a moment to listen
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise AssertionError("PgBouncer did not come up")


@pytest.fixture
def pgbouncer(postgres_url: str) -> Iterator[str]:
    """PgBouncer in front of the session's migrated test database."""
    with _bouncer(postgres_url) as url:
        yield url


@pytest.fixture
def pgbouncer_fresh() -> Iterator[str]:
    """PgBouncer in front of an empty database of its own, for the app to migrate."""
    database = create_pg_database("agent_bounced")
    try:
        with _bouncer(database) as url:
            yield url
    finally:
        drop_pg_database(database)


@pytest.fixture
async def bounced_store(pgbouncer: str) -> AsyncIterator[SqlAgentStore]:
    store = SqlAgentStore.from_url(pgbouncer, pool_size=8, max_overflow=8, pgbouncer=True)
    await empty_database(store.engine)
    try:
        yield store
    finally:
        await store.dispose()


async def test_concurrent_turns_through_pgbouncer_in_transaction_mode(
    bounced_store: SqlAgentStore,
) -> None:
    store = bounced_store
    loop = AgentLoop(
        store=store,
        runtime=SqlJournal(store.engine),
        ledger=SqlLedger(store.engine),
        model=EchoModel(),
        agents={
            "helper": AgentDefinition(
                name="helper", system_prompt="You help.", policy=window_history(max_messages=6)
            )
        },
    )
    threads = [
        (await store.create_thread(actor_id="alice", agent="helper", title=None)).id
        for _ in range(THREADS)
    ]

    async def turns(thread_id: str) -> None:
        for i in range(3):
            await loop.run_turn(
                agent="helper",
                thread_id=thread_id,
                actor_id="alice",
                content=f"q{i}",
                run_id=f"{thread_id[:30]}-{i}",
            )

    await asyncio.gather(*(turns(t) for t in threads))
    async with store.engine.connect() as conn:
        stored = (await conn.execute(sa.select(sa.func.count()).select_from(messages))).scalar_one()
    assert stored == THREADS * 3 * 2


async def _one_turn(app: App) -> None:
    async with httpx.AsyncClient(base_url=app.url, trust_env=False, timeout=30) as client:
        created = await client.post("/agents/assistant/threads", json={})
        assert created.status_code == 201, created.text
        path = f"/agents/assistant/threads/{created.json()['id']}/messages"
        answered = await client.post(path, json={"content": "hello"})
        assert answered.status_code == 200, answered.text


async def test_processes_restart_and_run_side_by_side_through_pgbouncer(
    pgbouncer_fresh: str, tmp_path: Path
) -> None:
    """`migrate` twice (a first run, then a restart) by both the app and the alembic CLI, then
    two `serve` processes side by side, each answering a turn and sweeping every 0.2 s, then
    the first restarted. Every engine these build (the start-up probe, the migration, the
    server's pool and its sweep, the CLI's) honours AGENT_DB_PGBOUNCER. Before, the probe's
    plain engine left `__asyncpg_stmt_1__` on a server connection and the next process's probe
    failed on it: `prepared statement "__asyncpg_stmt_1__" already exists`."""
    env = app_env(pgbouncer_fresh, AGENT_DB_PGBOUNCER="true", AGENT_SWEEP_SECONDS="0.2")
    for command in [("-m", "app", "migrate"), ("-m", "alembic", "upgrade", "head")] * 2:
        done = await run_command(env, *command)
        assert done.returncode == 0, f"{command}: {done.stderr}"
    first, second = App(env, tmp_path / "first.log"), App(env, tmp_path / "second.log")
    try:
        await first.start()
        await second.start()
        await _one_turn(first)
        await _one_turn(second)
        await asyncio.sleep(0.5)  # a few sweeps each
        await first.stop()
        await first.start()
        await _one_turn(first)
    finally:
        await asyncio.gather(first.stop(), second.stop())
    for log in (first.log, second.log):
        assert "prepared statement" not in log.read_text(), log.read_text()
