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
