"""A thread with an erased message has a gap in its seqs: the in-memory bounded read (the loop's
read for a store without one of its own) counts what it skipped in seqs, as the SQL read does,
so the fold it owes reaches the page and no message is left out of both prompt and summary."""

from __future__ import annotations

from datetime import UTC, datetime

from bounded_agents.core.messages import Message
from bounded_agents.core.ports import Thread, ThreadSummary, ThreadTurnQuery
from bounded_agents.core.reads import bounded_page


def _thread(seqs: list[int]) -> Thread:
    now = datetime.now(UTC)
    messages = [
        Message(role="user" if s % 2 else "assistant", content=f"m{s}", seq=s) for s in seqs
    ]
    return Thread(
        id="t", actor_id="a", agent="g", messages=messages, created_at=now, updated_at=now
    )


def test_a_gap_below_the_page_is_counted_in_the_skipped_seqs() -> None:
    thread = _thread([1, 2, 4, 5, 6, 7, 8])  # 3 erased
    page = bounded_page(thread, ThreadTurnQuery(thread_id="t", message_limit=4))
    assert [m.seq for m in page.messages] == [5, 6, 7, 8]
    assert page.skipped == 4  # seqs 1-4: a fold through 0 + 4 reaches message 4


def test_the_skipped_seqs_start_after_the_summary_s_boundary() -> None:
    thread = _thread([1, 2, 3, 5, 6, 7, 8, 9])  # 4 erased
    summary = ThreadSummary(text="s", covers_through_seq=2)
    query = ThreadTurnQuery(thread_id="t", message_limit=3, after_summary=True)
    page = bounded_page(thread, query, summary)
    assert [m.seq for m in page.messages] == [7, 8, 9]
    assert page.skipped == 4  # seqs 3-6, of which 4 is a gap


def test_without_a_gap_the_skipped_count_is_the_messages_before_the_page() -> None:
    thread = _thread(list(range(1, 9)))
    page = bounded_page(thread, ThreadTurnQuery(thread_id="t", message_limit=3))
    assert page.skipped == 5
