"""The adapters' folds (`ThreadHistory.compact`, `compact_if_due`) hold to what the loop's do.
Found by attack: a summarizer answering a chat reply was stored as the summary (the loop
refuses it as `unrelated`), and a summarizer outage failed every LangChain write after its
messages were stored (5 of 6; a retried write stored them twice), calling the dead summarizer
on every write."""

from __future__ import annotations

import pytest
from langchain_core.messages import AIMessage, HumanMessage

from bounded_agents.core.fold_health import unrelated_fold
from bounded_agents.core.messages import Message
from bounded_agents.core.ports import HistoryPolicyContext, HistorySummary
from bounded_agents.integrations.items import Projection
from bounded_agents.integrations.langchain import BoundedChatMessageHistory
from bounded_agents.integrations.openai_agents import BoundedSession
from bounded_agents.store import SqlAgentStore
from tests.integrations.helpers import NotesSummarizer, rows_read

JUNK = (
    "Sure, happy to help! I'd love to hear more about what you are thinking. Feel free to "
    "share anything else today, and let me know if there is something I can help with. "
    "Thanks so much, this sounds really interesting and fun!"
)


class ChatReplies:
    """A summarizer whose model answers the fold request like a chat turn."""

    def __init__(self) -> None:
        self.chunks: list[list[Message]] = []

    async def __call__(self, messages: list[Message], ctx: HistoryPolicyContext) -> HistorySummary:
        self.chunks.append(messages)
        return HistorySummary(text=JUNK, model="junk")


def facts(n: int) -> list[dict[str, str]]:
    return [
        {
            "role": "user",
            "content": f"My order ORD-{4400 + n} ships to warehouse WH-{n} in "
            f"Rotterdam on March {n + 1}, invoice INV-{9000 + n}.",
        },
        {
            "role": "assistant",
            "content": f"Noted: ORD-{4400 + n}, WH-{n}, Rotterdam, March {n + 1}, INV-{9000 + n}.",
        },
    ]


async def test_a_chat_reply_given_as_the_summary_is_refused_not_stored(
    sql_store: SqlAgentStore,
) -> None:
    summarizer = ChatReplies()
    session = BoundedSession("facts", sql_store, keep_runs=1, summarizer=summarizer)
    for n in range(6):
        await session.add_items(facts(n))  # type: ignore[arg-type]
    outcome = await session.compact(force=True)
    assert outcome is not None and summarizer.chunks
    # The loop's own judgement of this answer, for this chunk:
    assert unrelated_fold(JUNK, summarizer.chunks[0], None) == "unrelated"
    assert outcome.refused == "unrelated", outcome
    view = await session.get_items()
    assert not any(JUNK[:20] in str(item) for item in view), view[:1]


WRITES = 40


class Down:
    def __init__(self) -> None:
        self.calls = 0

    async def __call__(self, messages: list[Message], ctx: HistoryPolicyContext) -> HistorySummary:
        self.calls += 1
        raise ConnectionError("summarizer endpoint is down")


async def test_langchain_writes_succeed_once_each_and_back_off_while_the_summarizer_is_down(
    sql_store: SqlAgentStore,
) -> None:
    down = Down()
    history = BoundedChatMessageHistory(
        "user-7", sql_store, keep_runs=1, summarizer=down, fold_items=2
    )
    failures = 0
    for n in range(WRITES):
        run = [HumanMessage(f"question {n}"), AIMessage(f"answer {n}")]
        try:
            await history.aadd_messages(run)
        except Exception:
            failures += 1
            # What a caller does with a failed write: try it again.
            try:
                await history.aadd_messages(run)
            except Exception:
                pass
    stored = await history.history.newest(1000)
    texts = [e.message.content for e in stored]
    assert failures == 0, f"{failures} of {WRITES} writes failed after storing their run"
    assert len(texts) == len(set(texts)) == 2 * WRITES, texts
    # the backoff: without it every write after the second calls it (39 of 40)
    assert down.calls <= 6, down.calls


async def test_a_due_fold_after_a_write_reads_the_bounded_view_once(
    sql_store: SqlAgentStore,
) -> None:
    """`compact_if_due` reads the view to decide, and folds from that same view: one bounded
    read (it read it again inside `compact` before), and the fold is made."""
    notes = NotesSummarizer()
    history = BoundedChatMessageHistory(
        "user-8", sql_store, keep_runs=1, summarizer=notes, fold_items=2
    )
    for n in range(2):
        await history.history.append(
            [
                (Projection("user", f"question {n}"), '"q"'),
                (Projection("assistant", f"answer {n}"), '"a"'),
            ],
            run_id=f"run-{n}",
        )
    with rows_read(sql_store) as reads:
        outcome = await history.history.compact_if_due(notes, fold_items=2)
    assert outcome is not None and outcome.folded == 2 and notes.calls == 1, outcome
    assert [name for name, _ in reads].count("load_thread_for_turn") == 1, reads


class Answers:
    """A summarizer answering `text` (the facts folded first, so it stands for its chunk)."""

    def __init__(self, text: str) -> None:
        self.text = text

    async def __call__(self, messages: list[Message], ctx: HistoryPolicyContext) -> HistorySummary:
        return HistorySummary(
            text="\n".join(m.content for m in messages) + self.text, model="notes"
        )


async def test_a_summary_with_a_nul_or_a_lone_surrogate_is_stored_cleaned_on_every_database(
    sql_store: SqlAgentStore,
) -> None:
    """As the loop's folds (`storable_text`). Found by attack: PostgreSQL refused every such
    summary (39 summarizer calls in 40 writes, no summary stored, no backoff), SQLite stored
    the NUL, and a lone surrogate made `compact` raise a raw UnicodeEncodeError."""
    session = BoundedSession("dirty", sql_store, keep_runs=1, summarizer=Answers(" a\x00b \ud800"))
    for n in range(4):
        await session.add_items(facts(n))  # type: ignore[arg-type]

    outcome = await session.compact(force=True)

    assert outcome is not None and outcome.refused is None and outcome.folded > 0
    assert outcome.summary is not None and outcome.summary.text.endswith(" a\ufffdb \ufffd")
    stored = await sql_store.latest_summary(session.history.thread_id)
    assert stored is not None and stored.text == outcome.summary.text


async def test_a_summarizer_that_answers_no_summary_is_named_in_one_line(
    sql_store: SqlAgentStore,
) -> None:
    async def wrong(messages: list[Message], ctx: HistoryPolicyContext) -> HistorySummary:
        return "just text"  # type: ignore[return-value]

    session = BoundedSession("wrong", sql_store, keep_runs=1, summarizer=wrong)
    for n in range(4):
        await session.add_items(facts(n))  # type: ignore[arg-type]

    with pytest.raises(TypeError, match=r"^the summarizer returned str, not a HistorySummary$"):
        await session.compact(force=True)
    assert await sql_store.latest_summary(session.history.thread_id) is None
