"""No silent loss, as a property: at every turn of a summarizing policy, every stored message is
either sent verbatim or covered by the thread's summary (`seq <= covers_through_seq`), or, while
a backlog is folded over several turns (`fold_calls_per_turn`), among the oldest unsummarized
messages that the run's report counts as `omitted` and the prompt says are left out.

Random transcripts (imported run-less history, tool exchanges, sizes from a word to pages),
random policies (count and token windows, summarized runs, a custom policy that declares a read
bound), random numbers of turns. The in-memory store takes the loop's fallback read, which the
store tests prove equal to the SQL read for every query shape.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bounded_agents.core.history import summarizing_runs_window, window_history
from bounded_agents.core.loop import AgentDefinition, AgentLoop, omission_note
from bounded_agents.core.messages import ChatMessage, Message, ToolCall, ToolResult
from bounded_agents.core.ports import (
    HistoryPolicy,
    HistoryPolicyContext,
    HistorySelection,
    HistorySummary,
    ModelRequest,
    ModelResponse,
    Usage,
)
from bounded_agents.durable import InlineRuntime
from bounded_agents.providers.echo import EchoModel
from bounded_agents.store import MemoryStore
from bounded_agents.store.ledger import MemoryLedger


async def summarize(messages: list[Message], ctx: HistoryPolicyContext) -> HistorySummary:
    return HistorySummary(text=f"through {messages[-1].seq}", usage=Usage(prompt_tokens=1))


class BoundedCustom:
    """Declares a read bound and summarizes: keeps the newest `keep` of what it reads."""

    def __init__(self, bound: int, keep: int) -> None:
        self.max_messages = bound
        self.keep = keep
        self.summarize = summarize

    def select(self, messages: list[Message], ctx: HistoryPolicyContext) -> HistorySelection:
        return HistorySelection(keep=messages[-self.keep :], drop=messages[: -self.keep])


class Watching:
    """Forwards everything the loop reads from the policy and records each selection."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.read_bound = getattr(inner, "read_bound", None)
        self.max_messages = getattr(inner, "max_messages", None)
        self.summarize = inner.summarize
        self.fold_max_tokens = getattr(inner, "fold_max_tokens", None)
        self.kept: list[Message] = []

    def select(self, messages: list[Message], ctx: HistoryPolicyContext) -> HistorySelection:
        selection: HistorySelection = self.inner.select(messages, ctx)
        self.kept = selection.keep
        return selection


policies = st.one_of(
    st.builds(
        lambda m, k: window_history(max_messages=m, summarize=summarize, fold_messages=k),
        st.integers(1, 8),
        st.integers(1, 6),
    ),
    st.builds(
        lambda t, k, b: window_history(
            max_messages=None, max_tokens=t, summarize=summarize, fold_tokens=k, fold_max_tokens=b
        ),
        st.integers(20, 600),
        st.integers(1, 300),
        st.integers(30, 800),
    ),
    st.builds(
        lambda t, r: summarizing_runs_window(summarize, token_threshold=t, keep_recent_runs=r),
        st.integers(10, 800),
        st.integers(1, 4),
    ),
    st.builds(lambda b, k: BoundedCustom(b, min(k, b)), st.integers(1, 8), st.integers(1, 8)),
)

messages = st.builds(
    lambda role, size, tools, run: Message(
        role=role,
        content="w" * size,
        tool_calls=[ToolCall(id=f"c{i}", name="t", arguments={}) for i in range(tools)]
        if role == "assistant"
        else [],
        tool_results=[ToolResult(call_id=f"c{i}", content="r" * size) for i in range(tools)]
        if role == "assistant"
        else [],
        run_id=run,
    ),
    st.sampled_from(["user", "assistant"]),
    st.integers(0, 700),
    st.integers(0, 2),
    st.none(),
)


class Recording(EchoModel):
    """EchoModel that keeps the last chat prompt it was sent."""

    prompt: list[ChatMessage]

    async def complete(self, request: ModelRequest) -> ModelResponse:
        self.prompt = request.messages
        return await super().complete(request)


# Hypothesis warns when the global `random` state moves while it draws an example, taking it
# for a strategy that uses `random`. None here does: DBOS, launched once for the loop tests
# (tests/loop/conftest.py), keeps worker threads that draw from the global `random` (jitter)
# for the rest of the session, and the warning (an error under filterwarnings=error) then
# lands on whichever example was being drawn.
@pytest.mark.filterwarnings("ignore::hypothesis.errors.HypothesisDeprecationWarning")
@settings(max_examples=60)
@given(
    policy=policies,
    history=st.lists(messages, max_size=40),
    turns=st.lists(st.integers(1, 500), min_size=1, max_size=12),
    calls=st.integers(1, 4),
)
def test_every_message_is_sent_or_summarized_at_every_turn(
    policy: HistoryPolicy, history: list[Message], turns: list[int], calls: int
) -> None:
    asyncio.run(_check(policy, history, turns, calls))


async def _check(
    policy: HistoryPolicy, history: list[Message], turns: list[int], calls: int
) -> None:
    store = MemoryStore()
    watching = Watching(policy)
    model = Recording()
    loop = AgentLoop(
        store=store,
        runtime=InlineRuntime(),
        ledger=MemoryLedger(),
        model=model,
        agents={"a": AgentDefinition(name="a", system_prompt="s", policy=watching)},  # type: ignore[arg-type]
        fold_calls_per_turn=calls,
    )
    thread = await store.create_thread(actor_id="u", agent="a")
    if history:
        await store.append_messages(thread.id, history)
    for size in turns:
        result = await loop.run_turn(
            agent="a",
            thread_id=thread.id,
            actor_id="u",
            content="q" * size,
            run_id=str(uuid.uuid4()),
        )
        stored = await store.get_thread(thread.id)
        assert stored is not None
        summary = await store.latest_summary(thread.id)
        covered = summary.covers_through_seq if summary is not None else 0
        sent = {m.seq for m in watching.kept}
        answer_seq = stored.messages[-1].seq  # stored after the prompt was built
        report = result.report.summary
        omitted = report.omitted if report is not None else 0
        pending = report.pending if report is not None else 0
        assert result.report.summary is None or result.report.summary.calls <= calls
        unsent = [
            m.seq
            for m in stored.messages
            if m.seq != answer_seq and m.seq not in sent and (m.seq or 0) > covered
        ]
        # What the summary does not cover and `select` did not keep rides (the degraded
        # history) but for the oldest `omitted`, which the prompt announces.
        assert len(unsent) == pending, f"{unsent} unsent, the report owes {pending}"
        assert unsent == list(range(covered + 1, covered + 1 + pending))
        notes = [
            m.content for m in model.prompt if m.role == "system" and "not in any" in m.content
        ]
        assert notes == ([omission_note(omitted)] if omitted else [])
        history_sent = [m for m in model.prompt[1:] if m.role != "system"]
        assert len(history_sent) >= len(watching.kept) + pending - omitted
