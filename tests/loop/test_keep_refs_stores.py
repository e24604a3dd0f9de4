"""`load:thread`'s `keep_refs` on stores and policies the first tests did not try (found by a
review of 814acc7): a store with only the base port, a policy that pins the first message."""

from __future__ import annotations

import json
import uuid

import pytest

from bounded_agents.core.history import window_history
from bounded_agents.core.loop import AgentDefinition, AgentLoop
from bounded_agents.core.messages import Message
from bounded_agents.core.ports import HistoryPolicyContext, HistorySelection
from bounded_agents.errors import ProviderError, RunFailed
from bounded_agents.testing import ScriptedProvider, reply
from tests.factories import assistant, user
from tests.loop.conftest import SQL_JOURNAL_ONLY, LoopEnv
from tests.loop.test_keep_refs import SpanCountingStore
from tests.loop.test_plain_store import PlainStore


def _definition() -> AgentDefinition:
    return AgentDefinition(
        name="helper", system_prompt="You help.", policy=window_history(max_messages=3)
    )


@SQL_JOURNAL_ONLY
async def test_a_plain_store_resumes_a_run_with_the_same_prompt(env: LoopEnv) -> None:
    """Found by review (failed on 814acc7): a store with only the base `AgentStore` port runs
    turns (a window policy is allowed on it, test_plain_store.py), but a replay read the kept
    rows through `TurnStore.messages_after`, which such a store lacks: the resume of any failed
    run on it failed. There `load:thread` journals them whole, as before."""
    plain = PlainStore(env.store)
    thread = await plain.create_thread(actor_id="alice", agent="helper", title="t")
    history = [m for i in range(1, 4) for m in (user(f"q{i}"), assistant(f"a{i}"))]
    await plain.append_messages(thread.id, history)
    run_id = str(uuid.uuid4())
    first = ScriptedProvider([ProviderError("down")])

    def loop(model: ScriptedProvider) -> AgentLoop:
        return AgentLoop(
            store=plain,
            runtime=env.journal,
            ledger=env.ledger,
            model=model,
            agents={"helper": _definition()},
        )

    with pytest.raises(RunFailed):
        await loop(first).run_turn(
            agent="helper", thread_id=thread.id, actor_id="alice", content="q4", run_id=run_id
        )
    again = ScriptedProvider([reply("answer")])
    result = await loop(again).resume(run_id)

    assert "keep" in json.loads(await env.step_payload(run_id, "load:thread"))
    assert result.message.content == "answer"
    assert again.calls[0].model_dump_json() == first.calls[0].model_dump_json()


class PinsTheFirst:
    """Keeps the thread's first message (a pinned instruction) and the newest two: a custom
    policy of the kind `HistoryPolicy` allows (it keeps stored rows as read)."""

    read_bound = None

    def select(self, messages: list[Message], ctx: HistoryPolicyContext) -> HistorySelection:
        keep = [messages[0], *messages[-2:]]
        return HistorySelection(keep=keep, drop=messages[1:-2])


async def test_a_replay_of_a_pinned_non_contiguous_window_sends_the_same_prompt(
    env: LoopEnv,
) -> None:
    """A policy that pins the thread's first message keeps seqs 1, 400 and 401: the replay
    reads those rows in two spans (it read the whole span, 401 rows, when review found it)
    and sends the same prompt."""
    history = [m for i in range(200) for m in (user(f"q{i}"), assistant(f"a{i}"))]
    tid = await env.thread(history)
    run_id = str(uuid.uuid4())
    first = ScriptedProvider([ProviderError("down")])
    with pytest.raises(RunFailed):
        await env.loop(first, PinsTheFirst()).run_turn(  # type: ignore[arg-type]
            agent="helper", thread_id=tid, actor_id="alice", content="now?", run_id=run_id
        )
    load = json.loads(await env.step_payload(run_id, "load:thread"))
    assert load["keep_refs"] == [1, 400, 401]
    store, again = SpanCountingStore(env.store), ScriptedProvider([reply("answer")])
    await env.loop(again, PinsTheFirst(), store=store).resume(run_id)  # type: ignore[arg-type]

    assert again.calls[0].model_dump_json() == first.calls[0].model_dump_json()
    sent = [m.content for m in again.calls[0].messages]
    assert sent == ["You help.", "q0", "a199", "now?"]
    assert store.after_reads == [(0, 1), (399, 2)], "the kept rows, not the thread between"
