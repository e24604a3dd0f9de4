"""`on_started`: awaited once per run, when its first unit (the run's row, the user's message and
the read) has committed and before any model call; never for a turn refused before it began.
The streaming routes start their response there (`tests/http/test_stream_headers.py`). Both
journals, both databases."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from bounded_agents.core.history import window_history
from bounded_agents.core.ports import ModelRequest, ModelResponse
from bounded_agents.errors import ThreadBusy
from bounded_agents.testing import Gate, ScriptedProvider, reply
from tests.factories import assistant, user
from tests.loop.conftest import LoopEnv

POLICY = window_history(max_messages=10)


def rid() -> str:
    return str(uuid.uuid4())


async def test_on_started_is_awaited_once_after_the_first_unit_and_before_the_model(
    env: LoopEnv,
) -> None:
    tid = await env.thread([user("q0"), assistant("a0")])
    seen: list[str] = []

    async def started() -> None:
        thread = await env.store.get_thread(tid)
        assert thread is not None
        seen.append(f"started with {thread.messages[-1].content!r} stored")

    async def model(_request: ModelRequest) -> ModelResponse:
        seen.append("model")
        return reply("a1")

    loop = env.loop(ScriptedProvider([model]), POLICY)
    await loop.run_turn(
        agent="helper",
        thread_id=tid,
        actor_id="alice",
        content="q1",
        run_id=rid(),
        on_started=started,
    )

    assert seen == ["started with 'q1' stored", "model"]


async def test_on_started_is_not_awaited_for_a_turn_refused_before_it_began(
    env: LoopEnv,
) -> None:
    tid = await env.thread()
    gate = Gate(reply("first"))
    first = asyncio.create_task(
        env.loop(ScriptedProvider([gate]), POLICY).run_turn(
            agent="helper", thread_id=tid, actor_id="alice", content="first", run_id=rid()
        )
    )
    await gate.reached()
    calls: list[str] = []

    async def started() -> None:
        calls.append("started")

    with pytest.raises(ThreadBusy):
        await env.loop(ScriptedProvider([]), POLICY).run_turn(
            agent="helper",
            thread_id=tid,
            actor_id="alice",
            content="second",
            run_id=rid(),
            on_started=started,
        )
    gate.release.set()
    await first
    assert calls == []
