"""Erasure while a turn runs, under `AGENT_DURABLE=inline`: 409 `thread_busy`, as with a
journal (docs/http-api.md, "Erasure"). The inline runtime keeps its running runs in memory only,
where the store's live-run check (a `runs` row) cannot see them; before it held the thread
(`ThreadHolder`), the erasure was a 204 and the turn, still holding the erased message in its
prompt, stored an answer quoting it: a copy the erasure said was gone."""

from __future__ import annotations

import asyncio
import uuid
from contextlib import AsyncExitStack

from bounded_agents.core.ports import ModelRequest, ModelResponse
from bounded_agents.testing import ScriptedProvider
from tests.http.conftest import (
    ALICE,
    ModuleFactory,
    assert_error,
    http_settings,
    make_app,
    new_thread,
    open_client,
    post,
    transcript,
)


class _EchoGate:
    """Holds the turn's model call until released, then echoes the prompt's last user text."""

    def __init__(self) -> None:
        self.entered = asyncio.Event()
        self.release = asyncio.Event()

    async def __call__(self, request: ModelRequest) -> ModelResponse:
        self.entered.set()
        await self.release.wait()
        said = [m.content for m in request.messages if m.role == "user"][-1]
        return ModelResponse(content=f"you said: {said}")


async def test_under_inline_durability_an_erasure_during_a_turn_is_409_thread_busy(
    stack: AsyncExitStack, make_module: ModuleFactory
) -> None:
    gate = _EchoGate()
    module = make_module(model=ScriptedProvider([gate]), settings=http_settings(durable="inline"))
    client = await open_client(stack, make_app(module))
    thread_id = await new_thread(client)
    marker = f"SECRET-{uuid.uuid4().hex}"
    turn = asyncio.create_task(post(client, thread_id, f"my card is {marker}"))
    async with asyncio.timeout(10):
        await gate.entered.wait()

    erased = await client.delete(f"/threads/{thread_id}/messages/1", headers=ALICE)
    gate.release.set()
    answered = await turn

    stored = await transcript(client, thread_id)
    assert erased.status_code == 409, (
        f"erasure during the turn answered {erased.status_code}; the thread now holds "
        f"{[(m['seq'], m['content']) for m in stored]}"
    )
    assert_error(erased, 409, "thread_busy")
    assert answered.status_code == 200, answered.text
    assert [m["seq"] for m in stored] == [1, 2]


async def test_under_inline_durability_a_thread_erasure_during_a_turn_is_409_and_keeps_it(
    stack: AsyncExitStack, make_module: ModuleFactory
) -> None:
    """The whole thread likewise: refused while the turn runs (it was a 204, and the turn then
    failed on a thread gone under it), and erasable once the turn has ended."""
    gate = _EchoGate()
    module = make_module(model=ScriptedProvider([gate]), settings=http_settings(durable="inline"))
    client = await open_client(stack, make_app(module))
    thread_id = await new_thread(client)
    turn = asyncio.create_task(post(client, thread_id, "hello"))
    async with asyncio.timeout(10):
        await gate.entered.wait()

    erased = await client.delete(f"/threads/{thread_id}", headers=ALICE)
    gate.release.set()
    answered = await turn

    assert_error(erased, 409, "thread_busy")
    assert answered.status_code == 200, answered.text
    assert [m["seq"] for m in await transcript(client, thread_id)] == [1, 2]
    assert (await client.delete(f"/threads/{thread_id}", headers=ALICE)).status_code == 204
