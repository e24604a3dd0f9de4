"""A database failure at the very end of a turn, when the run is marked completed. Before: the
client got 503 without a run id, the run stayed `running` with its lease and the thread
answered 409 until the sweep (two minutes). Now the answer and the run's end commit together;
if that commit fails, the answer is stored on its own and the end is retried; if the database
is still failing, the client gets the stored answer with its run id, and the end is recorded
before the next turn on the thread is refused: that turn works at once."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AsyncExitStack, contextmanager
from typing import Any

from sqlalchemy import event, exc

from bounded_agents.durable.journal import END_ATTEMPTS
from bounded_agents.store.sql import SqlAgentStore
from tests.http.conftest import (
    ALICE,
    ModuleFactory,
    make_app,
    new_thread,
    open_client,
    post,
    transcript,
)


@contextmanager
def failing_run_ends(store: SqlAgentStore, times: int) -> Iterator[list[int]]:
    """The statement that ends a run fails `times` times with the driver's OperationalError
    (a connection lost, a disk full), wrapped as SQLAlchemy wraps what the driver raises.
    Matched inside the statement: on PostgreSQL the run's end goes with its unit's journal rows
    as one statement, the rows a CTE in front of it (`direct.write_later`)."""
    failed: list[int] = []
    engine = store.engine.sync_engine

    def fail(conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        if "UPDATE runs SET status" in statement and "report=" in statement:
            if len(failed) < times:
                failed.append(1)
                orig = conn.dialect.loaded_dbapi.OperationalError("injected: disk I/O error")
                raise exc.OperationalError(statement, None, orig)

    event.listen(engine, "before_cursor_execute", fail)
    try:
        yield failed
    finally:
        event.remove(engine, "before_cursor_execute", fail)


async def test_a_failed_end_of_run_answers_with_the_run_id_and_frees_the_thread_at_once(
    stack: AsyncExitStack, make_module: ModuleFactory, sql_store: SqlAgentStore
) -> None:
    client = await open_client(stack, make_app(make_module()))
    thread_id = await new_thread(client)
    # One failure for the transaction that holds the answer and the end, then every retry of
    # the end alone once the answer is stored on its own.
    with failing_run_ends(sql_store, times=1 + END_ATTEMPTS) as failed:
        first = await post(client, thread_id, "first")
    assert first.status_code == 200, first.text  # the answer is stored: the client gets it
    assert len(failed) == 1 + END_ATTEMPTS  # every retry failed
    run_id = first.json()["run_id"]
    assert (await client.get(f"/runs/{run_id}", headers=ALICE)).json()["status"] == "running"

    second = await post(client, thread_id, "second")  # at once, not after the lease
    assert second.status_code == 200, second.text
    run = (await client.get(f"/runs/{run_id}", headers=ALICE)).json()
    assert run["status"] == "completed" and run["model_calls"], run
    assert [m["role"] for m in await transcript(client, thread_id)] == ["user", "assistant"] * 2


async def test_a_blip_at_the_end_of_a_run_is_retried_through(
    stack: AsyncExitStack, make_module: ModuleFactory, sql_store: SqlAgentStore
) -> None:
    client = await open_client(stack, make_app(make_module()))
    thread_id = await new_thread(client)
    with failing_run_ends(sql_store, times=1) as failed:
        r = await post(client, thread_id, "hello")
    assert failed == [1] and r.status_code == 200, r.text
    run = (await client.get(f"/runs/{r.json()['run_id']}", headers=ALICE)).json()
    assert run["status"] == "completed"
