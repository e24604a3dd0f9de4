"""The token quota holds under concurrency, and between the model calls of one run.

Before: `AGENT_TOKEN_QUOTA=20`, 20 threads of one actor, one POST each at once: all 20 were
answered (15x the quota spent in the attack, 29x here), because each turn checked the total
before any of them had booked a token. Now every model call first reserves its estimated cost
in the same atomic step that checks the total (spent + reserved < quota), so the quota is
overshot by at most the one call it last admitted.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from contextlib import AsyncExitStack

from bounded_agents.core.messages import ToolCall
from bounded_agents.testing import ScriptedProvider, reply
from tests.http.conftest import (
    ALICE,
    ModuleFactory,
    assert_error,
    make_app,
    new_thread,
    open_client,
    post,
    transcript,
)

QUOTA = 20
THREADS = 20


async def test_twenty_concurrent_turns_of_one_actor_overshoot_the_quota_by_one_call_at_most(
    stack: AsyncExitStack, make_module: ModuleFactory
) -> None:
    module = make_module(quota=QUOTA)
    client = await open_client(stack, make_app(module))
    threads = [await new_thread(client) for _ in range(THREADS)]
    replies = await asyncio.gather(
        *(post(client, t, f"question {i}") for i, t in enumerate(threads))
    )
    statuses = Counter(r.status_code for r in replies)
    for r in replies:
        if r.status_code != 200:
            assert_error(r, 429, "quota_exceeded")

    spent = await module.loop.ledger.tokens_used("alice")
    calls = [
        row
        for r in replies
        if r.status_code == 200
        for row in await module.loop.ledger.entries_for_run(r.json()["run_id"])
    ]
    largest = max(c.prompt_tokens + c.completion_tokens for c in calls)
    print(
        f"\nquota {QUOTA}, {THREADS} concurrent turns: statuses {dict(statuses)}, "
        f"{spent} tokens spent ({spent - QUOTA} over; the largest call cost {largest})"
    )
    assert statuses[200] >= 1 and set(statuses) <= {200, 429}, statuses
    assert spent - QUOTA <= largest, f"{spent} spent of {QUOTA}: more than one call over"
    # nothing is left reserved once every call ended: the total is what the ledger holds
    assert spent == sum(c.prompt_tokens + c.completion_tokens for c in calls)


async def test_the_quota_is_checked_again_before_each_model_call_of_a_run(
    stack: AsyncExitStack, make_module: ModuleFactory
) -> None:
    call = ToolCall(id="c1", name="read_page", arguments={"url": "https://example.com"})
    provider = ScriptedProvider(
        [reply("", tool_calls=[call], prompt_tokens=20, completion_tokens=20), reply("never")]
    )
    client = await open_client(stack, make_app(make_module(model=provider, quota=30)))
    thread_id = await new_thread(client)
    r = await post(client, thread_id, "read it")
    body = assert_error(r, 429, "quota_exceeded")
    assert body["run_id"]
    assert len(provider.calls) == 1  # the second call of the run was never made
    run = (await client.get(f"/runs/{body['run_id']}", headers=ALICE)).json()
    assert run["status"] == "failed" and run["error"]["code"] == "quota_exceeded"
    assert [m["role"] for m in await transcript(client, thread_id)] == ["user"]
