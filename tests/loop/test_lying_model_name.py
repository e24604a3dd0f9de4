"""A provider that names its model with 300 characters (the ledger's column holds 200)."""

from __future__ import annotations

import uuid

from bounded_agents.core.history import window_history
from bounded_agents.core.ports import MODEL_NAME_CHARS, ModelResponse, Usage
from bounded_agents.testing import ScriptedProvider
from tests.loop.conftest import LoopEnv


async def test_an_overlong_model_name_from_the_provider_does_not_fail_the_turn(
    env: LoopEnv,
) -> None:
    long_name = "m" * 300
    provider = ScriptedProvider(
        [ModelResponse(content="fine", model=long_name, usage=Usage(prompt_tokens=3))]
    )
    loop = env.loop(provider, window_history(max_messages=10))
    tid = await env.thread([])
    result = await loop.run_turn(
        agent="helper", thread_id=tid, actor_id="alice", content="hi", run_id=str(uuid.uuid4())
    )
    assert result.message.content == "fine"
    booked = await env.ledger.entries_for_run(result.run_id)
    assert [e.model for e in booked] == ["m" * MODEL_NAME_CHARS]
