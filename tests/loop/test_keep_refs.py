"""`load:thread` names the kept messages by seq (issue 37, sixth round): the run builds its
prompt from the rows it read, a replay reads the same rows again (one read of the window's
span), and a message the policy made itself is journaled whole, so a replay sends it too."""

from __future__ import annotations

import json
import uuid

import pytest

from bounded_agents.core.history import window_history
from bounded_agents.core.messages import Message
from bounded_agents.core.ports import HistoryPolicyContext, HistorySelection
from bounded_agents.errors import ProviderError, RunFailed
from bounded_agents.testing import ScriptedProvider, reply
from tests.factories import assistant, user
from tests.loop.conftest import CountingStore, LoopEnv


class SpanCountingStore(CountingStore):
    """Counts `messages_after` reads: (after_seq, limit) of each."""

    def __init__(self, inner: object) -> None:
        super().__init__(inner)  # type: ignore[arg-type]
        self.after_reads: list[tuple[int, int]] = []

    async def messages_after(self, thread_id: str, after_seq: int, limit: int) -> list[Message]:
        self.after_reads.append((after_seq, limit))
        return await super().messages_after(thread_id, after_seq, limit)


class Annotating:
    """Keeps the newest three messages, the oldest of them rewritten, and adds a note of its
    own: two messages that are not stored rows."""

    read_bound = None

    def select(self, messages: list[Message], ctx: HistoryPolicyContext) -> HistorySelection:
        kept = messages[-3:]
        rewritten = kept[0].model_copy(update={"content": kept[0].content.upper()})
        note = Message(role="system", content="a note the policy wrote")
        return HistorySelection(keep=[note, rewritten, *kept[1:]], drop=messages[:-3])


def _history(n: int) -> list[Message]:
    return [m for i in range(n) for m in (user(f"q{i}"), assistant(f"a{i}"))]


async def _failed_then_resumed(
    env: LoopEnv, policy: object
) -> tuple[str, str, str, SpanCountingStore, SpanCountingStore]:
    """A turn whose model call fails after `load:thread` committed, resumed by a new loop:
    (run id, first prompt, resumed prompt, the first attempt's store, the resume's)."""
    tid = await env.thread(_history(4))
    run_id = str(uuid.uuid4())
    first_store, model = SpanCountingStore(env.store), ScriptedProvider([ProviderError("down")])
    with pytest.raises(RunFailed):
        await env.loop(model, policy, store=first_store).run_turn(  # type: ignore[arg-type]
            agent="helper", thread_id=tid, actor_id="alice", content="now?", run_id=run_id
        )
    again_store, again = SpanCountingStore(env.store), ScriptedProvider([reply("answer")])
    await env.loop(again, policy, store=again_store).resume(run_id)  # type: ignore[arg-type]
    return (
        run_id,
        model.calls[0].model_dump_json(),
        again.calls[0].model_dump_json(),
        first_store,
        again_store,
    )


async def test_a_replay_reads_the_kept_rows_once_by_seq_and_sends_the_same_prompt(
    env: LoopEnv,
) -> None:
    run_id, first, resumed, first_store, again_store = await _failed_then_resumed(
        env, window_history(max_messages=3)
    )
    load = json.loads(await env.step_payload(run_id, "load:thread"))
    assert load["keep_refs"] == [7, 8, 9]  # q3, a3 and the user's "now?"
    assert resumed == first
    assert first_store.after_reads == [], "the first attempt used the rows it read"
    assert again_store.bounded_reads == [] and again_store.full_reads == 0
    assert again_store.after_reads == [(6, 3)], "one read of the kept span"


async def test_messages_the_policy_made_ride_whole_and_a_replay_sends_them(
    env: LoopEnv,
) -> None:
    run_id, first, resumed, _, again_store = await _failed_then_resumed(env, Annotating())
    load = json.loads(await env.step_payload(run_id, "load:thread"))
    assert load["keep_refs"] == [
        {"role": "system", "content": "a note the policy wrote"},
        {"role": "user", "content": "Q3", "seq": 7},
        8,
        9,
    ]
    assert resumed == first
    sent = [m["content"] for m in json.loads(resumed)["messages"]]
    assert sent == ["You help.", "a note the policy wrote", "Q3", "a3", "now?"]
    assert again_store.after_reads == [(7, 2)], "only the stored rows are read"
