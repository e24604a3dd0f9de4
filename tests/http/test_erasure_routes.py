"""The erasure routes' contract, on SQLite and PostgreSQL: owner only (404 otherwise, deleting
nothing), a thread delete takes all but the ledger, a seq deletes once, hostile seqs are refused
with the error body, and a turn in flight holds the thread against erasure (409)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack

from bounded_agents.core.ports import ModelRequest, ModelResponse, TextDelta
from bounded_agents.providers import EchoModel
from bounded_agents.store.sql import SqlAgentStore
from tests.http.conftest import (
    ALICE,
    BOB,
    ModuleFactory,
    assert_error,
    make_app,
    new_thread,
    open_client,
    post,
    transcript,
)
from tests.http.erasure import SUMMARIZING, RecordingEcho, count_rows, marker_hits

THREAD_TABLES = ("messages", "thread_summaries", "runs", "run_steps")


async def test_a_deleted_thread_is_404_after_and_leaves_only_its_ledger_rows(
    stack: AsyncExitStack, make_module: ModuleFactory, sql_store: SqlAgentStore
) -> None:
    client = await open_client(
        stack, make_app(make_module(model=RecordingEcho(), history=SUMMARIZING))
    )
    marker = f"MARK{uuid.uuid4().hex}"
    thread = await new_thread(client)
    for i in range(6):
        assert (await post(client, thread, f"{marker} turn {i}")).status_code == 200
    assert await marker_hits(sql_store, marker)
    ledger = await count_rows(sql_store, "ledger", thread)
    assert ledger > 0
    assert all([await count_rows(sql_store, t, thread) for t in THREAD_TABLES])

    r = await client.delete(f"/threads/{thread}", headers=ALICE)
    assert r.status_code == 204, r.text

    assert_error(await client.get(f"/threads/{thread}", headers=ALICE), 404, "thread_not_found")
    assert_error(
        await client.get(f"/threads/{thread}/messages", headers=ALICE), 404, "thread_not_found"
    )
    assert await marker_hits(sql_store, marker) == []
    assert [await count_rows(sql_store, t, thread) for t in THREAD_TABLES] == [0, 0, 0, 0]
    assert await count_rows(sql_store, "ledger", thread) == ledger
    assert_error(await client.delete(f"/threads/{thread}", headers=ALICE), 404, "thread_not_found")


async def test_another_actor_s_deletes_are_404_and_delete_nothing(
    stack: AsyncExitStack, make_module: ModuleFactory, sql_store: SqlAgentStore
) -> None:
    client = await open_client(stack, make_app(make_module()))
    marker = f"MARK{uuid.uuid4().hex}"
    thread = await new_thread(client)
    assert (await post(client, thread, f"mine: {marker}")).status_code == 200
    before = await transcript(client, thread)
    hits = sorted(await marker_hits(sql_store, marker))

    for path in (f"/threads/{thread}", f"/threads/{thread}/messages/1"):
        assert_error(await client.delete(path, headers=BOB), 404, "thread_not_found")
    assert_error(await client.delete(f"/threads/{thread}"), 401, "unauthorized")

    assert await transcript(client, thread) == before
    assert sorted(await marker_hits(sql_store, marker)) == hits


async def test_a_seq_deletes_once_and_then_is_404_while_the_rest_of_the_thread_stays(
    stack: AsyncExitStack, make_module: ModuleFactory
) -> None:
    client = await open_client(stack, make_app(make_module()))
    thread = await new_thread(client)
    for text in ("first", "second"):
        assert (await post(client, thread, text)).status_code == 200
    seqs = [m["seq"] for m in await transcript(client, thread)]
    assert seqs == [1, 2, 3, 4]

    assert (await client.delete(f"/threads/{thread}/messages/3", headers=ALICE)).status_code == 204
    again = await client.delete(f"/threads/{thread}/messages/3", headers=ALICE)
    assert_error(again, 404, "message_not_found")
    assert [m["seq"] for m in await transcript(client, thread)] == [1, 2, 4]

    assert (await post(client, thread, "third")).status_code == 200
    # an erased seq is never handed out again: an id a client saw names no other message
    assert [m["seq"] for m in await transcript(client, thread)] == [1, 2, 4, 5, 6]


async def test_hostile_seqs_and_thread_ids_are_refused_with_the_error_body_never_a_500(
    stack: AsyncExitStack, make_module: ModuleFactory
) -> None:
    client = await open_client(stack, make_app(make_module()))
    thread = await new_thread(client)
    assert (await post(client, thread, "hello")).status_code == 200
    hostile = ("0", "-1", str(2**31), str(10**40), "abc", "1.5", "1e3", "%20")
    lax = ("1.0", "+2", "%203", "2%20", "02", "1_0", "\u0662")  # what int() or pydantic would take
    for seq in (*hostile, *lax):
        r = await client.delete(f"/threads/{thread}/messages/{seq}", headers=ALICE)
        assert_error(r, 422, "validation_error")
    for seq in ("3", str(2**31 - 1)):
        r = await client.delete(f"/threads/{thread}/messages/{seq}", headers=ALICE)
        assert_error(r, 404, "message_not_found")
    for bad in ("not-a-uuid", str(uuid.uuid4()), "'; DROP TABLE messages; --"):
        r = await client.delete(f"/threads/{bad}/messages/1", headers=ALICE)
        assert_error(r, 404, "thread_not_found")
        assert_error(await client.delete(f"/threads/{bad}", headers=ALICE), 404, "thread_not_found")
    assert len(await transcript(client, thread)) == 2


class HeldEcho(EchoModel):
    """EchoModel whose chat calls wait for `release` (after setting `started`): a turn held in
    flight, its run's lease live."""

    def __init__(self) -> None:
        super().__init__()
        self.started = asyncio.Event()
        self.release = asyncio.Event()

    async def _hold(self, request: ModelRequest) -> None:
        if request.purpose == "chat":
            self.started.set()
            await self.release.wait()

    async def complete(self, request: ModelRequest) -> ModelResponse:
        await self._hold(request)
        return await super().complete(request)

    async def stream(self, request: ModelRequest) -> AsyncIterator[TextDelta | ModelResponse]:
        await self._hold(request)
        async for event in super().stream(request):
            yield event


async def test_an_erasure_during_a_turn_is_409_thread_busy_and_succeeds_once_the_turn_ends(
    stack: AsyncExitStack, make_module: ModuleFactory
) -> None:
    model = HeldEcho()
    client = await open_client(stack, make_app(make_module(model=model)))
    thread = await new_thread(client)
    model.release.set()
    assert (await post(client, thread, "before")).status_code == 200
    model.release.clear()
    model.started.clear()
    turn = asyncio.create_task(post(client, thread, "during"))
    await asyncio.wait_for(model.started.wait(), 10)

    for path in (f"/threads/{thread}/messages/1", f"/threads/{thread}"):
        assert_error(await client.delete(path, headers=ALICE), 409, "thread_busy")
    model.release.set()
    assert (await turn).status_code == 200
    assert [m["seq"] for m in await transcript(client, thread)] == [1, 2, 3, 4]

    assert (await client.delete(f"/threads/{thread}/messages/1", headers=ALICE)).status_code == 204
    assert [m["seq"] for m in await transcript(client, thread)] == [2, 3, 4]
    assert (await client.delete(f"/threads/{thread}", headers=ALICE)).status_code == 204


async def test_erasures_racing_turns_are_done_or_refused_busy_and_every_turn_answers(
    stack: AsyncExitStack, make_module: ModuleFactory
) -> None:
    client = await open_client(stack, make_app(make_module()))
    thread = await new_thread(client)
    assert (await post(client, thread, "first")).status_code == 200
    outcomes: set[int] = set()
    for i in range(8):
        seq = max(m["seq"] for m in await transcript(client, thread))
        turn, erased = await asyncio.gather(
            post(client, thread, f"turn {i}"),
            client.delete(f"/threads/{thread}/messages/{seq}", headers=ALICE),
        )
        assert turn.status_code == 200, turn.text  # a turn waits for the erasure, never fails
        assert erased.status_code in (204, 409), erased.text
        outcomes.add(erased.status_code)
    assert 204 in outcomes


async def test_two_erasures_of_one_message_at_once_are_one_204_and_one_404(
    stack: AsyncExitStack, make_module: ModuleFactory
) -> None:
    """Attack: the same DELETE sent twice at once (a client retrying on a timeout). The thread's
    lock orders them: one erases, the other finds nothing; never two 204s, never a 500."""
    client = await open_client(stack, make_app(make_module()))
    thread = await new_thread(client)
    for text in ("first", "second"):
        assert (await post(client, thread, text)).status_code == 200
    url = f"/threads/{thread}/messages/3"
    answers = await asyncio.gather(*(client.delete(url, headers=ALICE) for _ in range(2)))
    assert sorted(r.status_code for r in answers) == [204, 404], [r.text for r in answers]
    assert [m["seq"] for m in await transcript(client, thread)] == [1, 2, 4]

    # and a thread erasure racing a message erasure: the thread is gone either way
    both = await asyncio.gather(
        client.delete(f"/threads/{thread}/messages/4", headers=ALICE),
        client.delete(f"/threads/{thread}", headers=ALICE),
    )
    assert all(r.status_code in (204, 404) for r in both), [r.text for r in both]
    assert both[1].status_code == 204
    assert (await client.get(f"/threads/{thread}", headers=ALICE)).status_code == 404
