"""The app behind a real PgBouncer in transaction mode (AGENT_DB_PGBOUNCER=1).

Each transaction may run on another server connection there, so a prepared statement made in
one may be missing or another client's in the next. Many concurrent turns, on more app
connections than PgBouncer has server connections, must all be answered and stored.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import make_url

from app.core.history import window_history
from app.core.loop import AgentDefinition, AgentLoop
from app.durable import SqlJournal
from app.providers.echo import EchoModel
from app.store import SqlAgentStore
from app.store.ledger import SqlLedger
from app.store.schema import messages
from tests.conftest import empty_database
from tests.reliability.processes import free_port

pytestmark = pytest.mark.postgres

PGBOUNCER = shutil.which("pgbouncer") or "/usr/sbin/pgbouncer"
SERVER_CONNECTIONS = 3
THREADS = 12


@pytest.fixture
def pgbouncer(postgres_url: str) -> Iterator[str]:
    """A PgBouncer in transaction mode in front of the test database; yields its URL."""
    if not Path(PGBOUNCER).exists():
        message = "pgbouncer is missing: apt-get install pgbouncer"
        if os.environ.get("AGENT_REQUIRE_POSTGRES") == "1":
            pytest.fail(message)
        pytest.skip(message)
    url = make_url(postgres_url)
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
        yield url.set(port=port).render_as_string(hide_password=False)
    finally:
        process.terminate()
        process.wait(10)
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
async def bounced_store(pgbouncer: str) -> AsyncIterator[SqlAgentStore]:
    store = SqlAgentStore.from_url(pgbouncer, pool_size=8, max_overflow=8, pgbouncer=True)
    for _ in range(100):  # PgBouncer takes a moment to listen
        try:
            await empty_database(store.engine)
            break
        except Exception:
            await asyncio.sleep(0.05)
    else:
        raise AssertionError("PgBouncer did not come up")
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
