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
