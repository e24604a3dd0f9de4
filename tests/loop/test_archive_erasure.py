"""An archived summary part is stored with every seq its summary covers, the new chunk's
included: an appending summarizer puts the chunk's notes in the archived head, and a part
labelled with the previous boundary kept an erased message's text in `summary_archive` and in
search (attack round 4)."""

from __future__ import annotations

import uuid

import pytest

from bounded_agents.core.history import HistoryPolicyContext, HistorySummary, window_history
from bounded_agents.core.messages import Message
from bounded_agents.core.ports import Usage
from bounded_agents.testing import ScriptedProvider, reply
from tests.factories import assistant, user
from tests.loop.conftest import LoopEnv

SECRET = "passport PX4471QZ"


async def appending_rambler(messages: list[Message], ctx: HistoryPolicyContext) -> HistorySummary:
    """An appending summarizer (previous notes first, the new chunk's notes after) whose
    new notes are long: what `carry="append"` with a verbose model produces."""
    usage = Usage(prompt_tokens=10, completion_tokens=10)
    if ctx.fold_task == "compress":  # cannot compress: hands the same text back
        assert ctx.summary is not None
        return HistorySummary(text=ctx.summary.text, usage=usage)
    notes = "\n".join(f"- {m.role} said: {m.content}" for m in messages)
    new = "\n".join([notes] * 12)
    previous = ctx.summary.text if ctx.summary is not None else ""
    return HistorySummary(text=f"{previous}\n{new}".strip(), usage=usage)


@pytest.mark.parametrize("runtime_name", ["sql"])
async def test_erasing_a_message_removes_it_from_every_archived_part(env: LoopEnv) -> None:
    tid = await env.thread(
        [m for i in range(4) for m in (user(f"q{i} films"), assistant(f"a{i} ok"))]
    )
    model = ScriptedProvider([reply(f"answer {i}") for i in range(40)])
    policy = window_history(max_messages=4, summarize=appending_rambler, fold_max_tokens=600)
    loop = env.loop(model, policy)
    secret_seq = None
    for i in range(14):
        content = f"my {SECRET} is private" if i == 3 else f"turn {i} about films"
        result = await loop.run_turn(
            agent="helper",
            thread_id=tid,
            actor_id="alice",
            content=content,
            run_id=str(uuid.uuid4()),
        )
        if i == 3:
            secret_seq = (result.message.seq or 0) - 1
    assert secret_seq is not None
    parts = await env.store.archived_parts(tid)
    quoting = [p for p in parts if SECRET in p.content]
    assert quoting, f"precondition: an archived part quotes the secret ({parts})"

    assert await env.store.delete_message(tid, secret_seq)

    left = [
        (p.from_seq, p.to_seq) for p in await env.store.archived_parts(tid) if SECRET in p.content
    ]
    found = await env.store.search_history(tid, "PX4471QZ", limit=10)
    hits = [(h.seq, h.role, h.from_seq) for h in found]
    assert (left, hits) == ([], []), f"erased seq {secret_seq}: archived {left}, search {hits}"
