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
from tests.http.test_erasure_errors import EchoingRefusal
from tests.http.test_openai_sdk import openai_app


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


async def test_under_inline_durability_two_erasures_at_once_are_one_204_and_one_404(
    stack: AsyncExitStack, make_module: ModuleFactory
) -> None:
    """Found by review of the fix above: the first version held the thread as a running turn
    does, so a second erasure at once was a 409 "turn running" (under a journal: a 404). The
    second now waits for the first, and then finds the message gone."""
    module = make_module(settings=http_settings(durable="inline"))
    client = await open_client(stack, make_app(module))
    thread_id = await new_thread(client)
    for text in ("first", "second"):
        assert (await post(client, thread_id, text)).status_code == 200
    url = f"/threads/{thread_id}/messages/3"
    answers = await asyncio.gather(*(client.delete(url, headers=ALICE) for _ in range(2)))
    assert sorted(r.status_code for r in answers) == [204, 404], [r.text for r in answers]
    assert [m["seq"] for m in await transcript(client, thread_id)] == [1, 2, 4]


async def test_under_inline_durability_an_erased_message_leaves_its_runs_request(
    stack: AsyncExitStack, make_module: ModuleFactory
) -> None:
    """The inline runtime keeps its runs' requests in memory: an erasure blanks their text, as
    the SQL journal blanks `runs.request`; the run itself still answers (its report)."""
    module = make_module(settings=http_settings(durable="inline"))
    client = await open_client(stack, make_app(module))
    thread_id = await new_thread(client)
    marker = f"SECRET-{uuid.uuid4().hex}"
    answered = await post(client, thread_id, f"my card is {marker}")
    run_id = answered.json()["run_id"]
    assert (
        await client.delete(f"/threads/{thread_id}/messages/1", headers=ALICE)
    ).status_code == 204

    record = await module.loop.runtime.get_run(run_id)
    assert record is not None and record.status == "completed"
    assert marker not in record.model_dump_json()


def _views(run_id: str) -> dict[str, str]:
    return {
        "run": f"/runs/{run_id}",
        "response": f"/v1/responses/{run_id}",
        "inspector": f"/inspect/runs/{run_id}",
    }


async def test_inline_runtime_redacts_a_failed_runs_provider_echo_when_its_message_is_erased(
    stack: AsyncExitStack, make_module: ModuleFactory
) -> None:
    """As under the SQL journal (tests/http/test_erasure_errors.py): a failed run's error text
    loses what the provider echoed of the erased message, in `GET /runs/{id}`,
    `/v1/responses/{id}` and the inspector's run page. Found by attack: the inline runtime's
    records in memory kept it."""
    module = make_module(model=EchoingRefusal(), settings=http_settings(durable="inline"))
    client = await open_client(stack, openai_app(module))
    marker = f"MARK{uuid.uuid4().hex}"
    thread = await new_thread(client)
    r = await post(client, thread, f"refuse {marker}")
    assert r.status_code == 502, r.text
    run_id = r.json()["run_id"]
    assert marker in r.json()["error"]["message"]

    erased = await client.delete(f"/threads/{thread}/messages/1", headers=ALICE)
    assert erased.status_code == 204, erased.text

    leaks = {}
    for name, path in _views(run_id).items():
        shown = await client.get(path, headers=ALICE)
        if marker in shown.text:
            leaks[name] = shown.text[:300]
    assert leaks == {}, f"the erased message is still quoted by: {leaks}"
