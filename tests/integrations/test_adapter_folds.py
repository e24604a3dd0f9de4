"""The adapters' folds (`ThreadHistory.compact`, `compact_if_due`) hold to what the loop's do.
Found by attack: a summarizer answering a chat reply was stored as the summary (the loop
refuses it as `unrelated`), and a summarizer outage failed every LangChain write after its
messages were stored (5 of 6; a retried write stored them twice), calling the dead summarizer
on every write. Found by a later attack: so did a database blip in the read deciding the fold."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart, UserPromptPart

from bounded_agents.core.fold_health import unrelated_fold
from bounded_agents.core.messages import Message
from bounded_agents.core.ports import FoldHealth, HistoryPolicyContext, HistorySummary
from bounded_agents.errors import StoreError
from bounded_agents.integrations.items import Projection
from bounded_agents.integrations.langchain import BoundedChatMessageHistory
from bounded_agents.integrations.openai_agents import BoundedSession
from bounded_agents.integrations.pydantic_ai import BoundedMessageStore
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


Instead = Callable[..., Awaitable[Any]]


def pydantic_run(n: int) -> list[ModelMessage]:
    return [
        ModelRequest(parts=[UserPromptPart(f"question {n}")]),
        ModelResponse(parts=[TextPart(f"answer {n}")]),
    ]


def once_after_the_write(
    monkeypatch: pytest.MonkeyPatch, store: SqlAgentStore, method: str, instead: Instead
) -> list[str]:
    """`store.method` answered by `instead(original, *args)` once, never again: at its first
    call after the next `append_messages` has committed (the write is stored; the fold after
    it meets the failure). Returns the methods that failed, so a test knows it was met."""
    armed: list[bool] = []
    met: list[str] = []
    append = store.append_messages
    original = getattr(store, method)

    async def appended(*args: Any, **kwargs: Any) -> Any:
        stored = await append(*args, **kwargs)
        if not met:  # once: a retried write meets no failure
            armed.append(True)
        return stored

    async def failing(*args: Any, **kwargs: Any) -> Any:
        if armed:
            armed.clear()
            met.append(method)
            return await instead(original, *args, **kwargs)
        return await original(*args, **kwargs)

    monkeypatch.setattr(store, "append_messages", appended)
    monkeypatch.setattr(store, method, failing)
    return met


async def database_blip(original: Instead, *args: Any, **kwargs: Any) -> Any:
    raise StoreError("database unreachable (ConnectionResetError)")


async def langchain_write_retried_if_failed(
    history: BoundedChatMessageHistory,
) -> tuple[Exception | None, list[str]]:
    """One run written as a caller does: tried again if the write failed. Returns the
    failure, if any, and the thread's texts after."""
    run = [HumanMessage("the question"), AIMessage("the answer")]
    failed: Exception | None = None
    try:
        await history.aadd_messages(run)
    except Exception as exc:
        failed = exc
        await history.aadd_messages(run)  # what a caller does with a failed write
    return failed, [e.message.content for e in await history.history.newest(1000)]


@pytest.mark.parametrize("method", ["get_thread_info", "load_thread_for_turn", "fold_health"])
async def test_a_database_error_in_the_fold_check_after_a_langchain_write_never_fails_it(
    sql_store: SqlAgentStore,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    method: str,
) -> None:
    """The reads that decide a fold after the write (the owner check, the bounded view, the
    fold health) ran before the fold's error handling. Found by attack: a database blip there
    raised out of `aadd_messages` after its messages were stored, and the caller's retry
    stored them twice."""
    history = BoundedChatMessageHistory(
        "blip", sql_store, keep_runs=1, summarizer=NotesSummarizer(), fold_items=2
    )
    for n in range(3):  # a fold is due after every write from here on
        await history.aadd_messages([HumanMessage(f"question {n}"), AIMessage(f"answer {n}")])
    met = once_after_the_write(monkeypatch, sql_store, method, database_blip)

    failed, texts = await langchain_write_retried_if_failed(history)

    assert met == [method]
    copies = texts.count("the question")
    assert copies == 1, f"stored {copies} times: the write raised {failed!r} and was retried"
    assert failed is None
    assert "the database failed the fold" in caplog.text


async def test_a_thread_another_actors_since_a_langchain_write_never_fails_the_write(
    sql_store: SqlAgentStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The owner check of the fold after a write finds the thread another's (made under this
    id by other means since): the write is stored, so it stands and the fold is left, as
    `erased`, writing nothing to that thread."""
    history = BoundedChatMessageHistory(
        "taken", sql_store, keep_runs=1, summarizer=NotesSummarizer(), fold_items=2
    )
    for n in range(3):
        await history.aadd_messages([HumanMessage(f"question {n}"), AIMessage(f"answer {n}")])

    async def anothers(original: Instead, *args: Any, **kwargs: Any) -> Any:
        thread = await original(*args, **kwargs)
        return thread.model_copy(update={"actor_id": "mallory"})

    met = once_after_the_write(monkeypatch, sql_store, "get_thread_info", anothers)

    failed, texts = await langchain_write_retried_if_failed(history)

    assert met == ["get_thread_info"]
    copies = texts.count("the question")
    assert copies == 1, f"stored {copies} times: the write raised {failed!r} and was retried"
    assert failed is None


async def test_a_pydantic_save_with_compact_is_not_failed_by_a_database_error_after_storing(
    sql_store: SqlAgentStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`save(..., compact=True)` shares the fold after the write: a blip in its bounded read
    neither fails the save nor makes it report the messages it stored as unstored."""
    history = BoundedMessageStore(
        sql_store, keep_runs=1, summarizer=NotesSummarizer(), fold_items=2
    )
    for n in range(3):
        await history.save(pydantic_run(n), conversation_id="blip", compact=True)
    met = once_after_the_write(monkeypatch, sql_store, "load_thread_for_turn", database_blip)

    stored = await history.save(pydantic_run(3), conversation_id="blip", compact=True)

    assert met == ["load_thread_for_turn"] and stored == 2
    assert len(await history.thread("blip").newest(100)) == 8


async def test_the_sdk_sessions_due_fold_reports_a_database_error_in_its_read_as_failed_store(
    sql_store: SqlAgentStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The runner calls `run_compaction` after `add_items` has stored the run: a blip in the
    read deciding the fold fails the run no more than the fold's own store errors do."""
    session = BoundedSession(
        "blip", sql_store, keep_runs=1, summarizer=NotesSummarizer(), fold_items=2
    )
    for n in range(3):
        await session.add_items(facts(n))  # type: ignore[arg-type]
    monkeypatch.setattr(sql_store, "load_thread_for_turn", partial(database_blip, None))

    outcome = await session.compact()

    assert outcome is not None and outcome.refused == "failed:store", outcome


async def test_a_backoff_written_after_a_clear_does_not_hold_the_new_threads_folds(
    sql_store: SqlAgentStore,
) -> None:
    """Found by attack: a fold that failed while its session was cleared wrote its backoff,
    counted on the old thread's seqs (to seq 603), onto the new thread of the same id, which
    then never folded (0 summarizer calls in 39 writes, 78 items unsummarized)."""
    notes = NotesSummarizer()
    history = BoundedChatMessageHistory(
        "user-8", sql_store, keep_runs=1, summarizer=notes, fold_items=2
    )
    await history.aadd_messages([HumanMessage("question 0"), AIMessage("answer 0")])
    await history.aclear()
    await history.aadd_messages([HumanMessage("question 1"), AIMessage("answer 1")])
    # What the racing fold wrote after the clear: the old thread's backoff.
    await sql_store.save_fold_health(
        history.history.thread_id, FoldHealth(outcome="failed:X", failures=6, retry_after_seq=603)
    )
    calls = notes.calls
    for n in range(2, 5):
        await history.aadd_messages([HumanMessage(f"question {n}"), AIMessage(f"answer {n}")])

    assert notes.calls > calls
    view = await history.history.bounded()
    assert view.summary is not None and "question 2" in view.summary.text


class ChatReply:
    """A summarizer whose model answers every fold with a chat reply."""

    def __init__(self) -> None:
        self.calls = 0

    async def __call__(self, messages: list[Message], ctx: HistoryPolicyContext) -> HistorySummary:
        self.calls += 1
        return HistorySummary(text="Sure! How can I help you today?", model="chat")


def invoice_run(i: int) -> list[dict[str, str]]:
    return [
        {"role": "user", "content": f"What is the status of invoice {1000 + i} for Contoso?"},
        {"type": "function_call", "call_id": f"c{i}", "name": "lookup_invoice", "arguments": "{}"},
        {"type": "function_call_output", "call_id": f"c{i}", "output": f"invoice {1000 + i}: paid"},
        {"type": "message", "role": "assistant", "content": f"Invoice {1000 + i} was paid."},
    ]


async def test_a_chat_reply_to_small_folds_is_never_stored_as_the_summary(
    sql_store: SqlAgentStore,
) -> None:
    """Found by attack: with folds of 4 items each chunk held under 20 terms and the reply
    under 4, "too small to judge": it was stored 38 times of 38 in place of the notes."""
    reply = ChatReply()
    session = BoundedSession("small-folds", sql_store, keep_runs=2, summarizer=reply, fold_items=4)
    outcomes = []
    for i in range(12):
        await session.add_items(invoice_run(i))  # type: ignore[arg-type]
        outcomes.append(await session.compact())

    assert reply.calls > 0
    assert all(o is None or o.refused in {"unrelated", "backoff"} for o in outcomes), outcomes
    view = await session.get_items()
    assert not any("How can I help" in str(item) for item in view)
