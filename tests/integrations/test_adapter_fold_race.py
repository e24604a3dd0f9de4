"""An erasure that lands while an adapter's fold (`ThreadHistory.compact`, which the LangChain,
Agents SDK and Pydantic AI adapters run after their writes) is summarizing. The fold holds no
run an erasure would refuse for, so the erasure succeeds; the summary of the message it read
before must then not be stored (attack round 4: it was, and the erased text lived on in
`thread_summaries`). `IntactSummarySaver` checks under the erasure's own lock."""

from __future__ import annotations

from bounded_agents.core.history import HistoryPolicyContext, HistorySummary
from bounded_agents.core.messages import Message
from bounded_agents.core.ports import Usage
from bounded_agents.integrations import Projection, ThreadHistory
from bounded_agents.store import SqlAgentStore
from tests.factories import summary_rows

SECRET = "passport PX4471QZ"


def run(n: int, text: str) -> list[tuple[Projection, str]]:
    return [
        (Projection("user", text), f'{{"q": {n}}}'),
        (Projection("assistant", f"answer {n} about the films"), f'{{"a": {n}}}'),
    ]


def notes(messages: list[Message]) -> HistorySummary:
    return HistorySummary(
        text="\n".join(f"- {m.content}" for m in messages),
        usage=Usage(prompt_tokens=10, completion_tokens=10),
    )


async def test_an_erasure_during_an_adapter_fold_leaves_no_summary_of_the_message(
    sql_store: SqlAgentStore,
) -> None:
    history = ThreadHistory(sql_store, "race", keep_runs=1)
    seqs = await history.append(run(0, f"my {SECRET} for the films booking"))
    for n in range(1, 4):
        await history.append(run(n, f"question {n} about the films booking"))
    secret_seq = seqs[0]
    erased: list[bool] = []

    async def slow_notes(messages: list[Message], ctx: HistoryPolicyContext) -> HistorySummary:
        # Meanwhile the user erases the message (DELETE .../messages/{seq}): it succeeds.
        erased.append(await sql_store.delete_message(history.thread_id, secret_seq))
        return notes(messages)

    outcome = await history.compact(slow_notes)

    assert erased == [True]
    assert outcome.refused == "erased" and outcome.summary is None
    assert await summary_rows(sql_store, history.thread_id) == []

    # The next fold folds what is left, without the message.
    async def plain(messages: list[Message], ctx: HistoryPolicyContext) -> HistorySummary:
        return notes(messages)

    again = await history.compact(plain)
    assert again.refused is None and again.folded > 0
    assert [SECRET in text for _, text in await summary_rows(sql_store, history.thread_id)] == [
        False
    ]


async def test_an_erasure_of_an_earlier_chunk_during_a_later_one_leaves_no_summary_of_it(
    sql_store: SqlAgentStore,
) -> None:
    """A fold of several chunks: the message is in the FIRST chunk, whose summary is stored;
    it is erased while the second chunk is summarized (a review found it). The erasure deletes
    the first summary, and the second, written on top of it, must not be stored either."""
    history = ThreadHistory(sql_store, "race2", keep_runs=1)
    seqs = await history.append(run(0, f"my {SECRET} for the films booking"))
    for n in range(1, 8):
        await history.append(run(n, f"question {n} about the films booking " + "x" * 300))
    calls: list[int] = []

    async def slow_notes(messages: list[Message], ctx: HistoryPolicyContext) -> HistorySummary:
        calls.append(len(messages))
        if len(calls) == 2:  # the first chunk's summary is stored by now
            assert await sql_store.delete_message(history.thread_id, seqs[0])
        prior = ctx.summary.text + "\n" if ctx.summary is not None else ""
        return HistorySummary(
            text=prior + "\n".join(f"- {m.content[:60]}" for m in messages),
            usage=Usage(prompt_tokens=10, completion_tokens=10),
        )

    outcome = await history.compact(slow_notes, fold_max_tokens=400)

    assert len(calls) == 2 and outcome.refused == "erased"
    quoting = [s for s, text in await summary_rows(sql_store, history.thread_id) if SECRET in text]
    assert quoting == []


async def _cleared_and_made_again(
    store: SqlAgentStore, session: str, *, restarted_by: str
) -> tuple[ThreadHistory, object]:
    """A fold of `session` (alice's) while, inside the summarizer's call, the session is
    cleared and started again by `restarted_by` with two runs of its own: the same seqs."""
    history = ThreadHistory(store, session, actor_id="alice", keep_runs=1)
    await history.append(run(0, f"my {SECRET} for the films booking"))
    for n in range(1, 3):
        await history.append(run(n, f"question {n} about the films booking"))

    async def slow_notes(messages: list[Message], ctx: HistoryPolicyContext) -> HistorySummary:
        await ThreadHistory(store, session, actor_id="alice").clear()
        again = ThreadHistory(store, session, actor_id=restarted_by)
        for n in range(3):
            await again.append(run(n, f"fresh question {n} about the trains"))
        return notes(messages)

    return history, await history.compact(slow_notes)


async def test_a_session_cleared_and_started_again_during_a_fold_gets_no_summary_of_the_old(
    sql_store: SqlAgentStore,
) -> None:
    """Found by attack: the new conversation has the old one's seqs, so the count of the
    chunk's rows matched, and the erased conversation's summary was stored on the new one (its
    view then led with the erased text and hid its own first messages)."""
    history, outcome = await _cleared_and_made_again(sql_store, "restart", restarted_by="alice")

    assert getattr(outcome, "refused", None) == "erased"
    assert await summary_rows(sql_store, history.thread_id) == []
    view = await ThreadHistory(sql_store, "restart", actor_id="alice", keep_runs=3).bounded()
    assert view.summary is None
    assert view.entries[0].message.content == "fresh question 0 about the trains"
    assert all(SECRET not in e.message.content for e in view.entries)


async def test_another_actors_session_of_the_same_id_gets_no_summary_of_the_erased_one(
    sql_store: SqlAgentStore,
) -> None:
    history, outcome = await _cleared_and_made_again(sql_store, "shared-id", restarted_by="bob")

    assert getattr(outcome, "refused", None) == "erased"
    assert await summary_rows(sql_store, history.thread_id) == []
    bobs = await ThreadHistory(sql_store, "shared-id", actor_id="bob", keep_runs=3).bounded()
    assert bobs.summary is None and all(SECRET not in e.message.content for e in bobs.entries)


async def test_the_memory_store_saves_a_summary_only_over_the_rows_it_was_made_from() -> None:
    """The same check in `MemoryStore` (which backs no adapter, but holds to the port)."""
    from bounded_agents.core.ports import ThreadSummary
    from bounded_agents.core.summary import chunk_digest
    from bounded_agents.store.memory import MemoryStore

    store = MemoryStore()
    thread = await store.create_named_thread("mem", actor_id="alice", agent="a")
    stored = await store.append_messages(
        thread.id,
        [Message(role="user", content=f"my {SECRET}"), Message(role="assistant", content="ok")],
    )
    made = chunk_digest([(m.seq or 0, m.role, m.content) for m in stored])
    summary = ThreadSummary(text="notes", covers_through_seq=2, model="notes")
    await store.delete_thread(thread.id)
    await store.create_named_thread("mem", actor_id="alice", agent="a")
    await store.append_messages(
        thread.id, [Message(role="user", content="fresh"), Message(role="assistant", content="4")]
    )

    assert not await store.save_summary_if_intact(thread.id, summary, [1, 2], digest=made)
    assert await store.latest_summary(thread.id) is None
    assert await store.save_summary_if_intact(thread.id, summary, [1, 2])  # seqs alone: held
