"""The bounded turn read, defined over a list: what `ThreadTurnReader.load_thread_for_turn` must
return for a thread, computed in memory.

It is the contract the SQL store implements in one statement, and the loop's own read for a
store that can only hand over whole threads, so both paths give `select` the same messages. Every
limit is a `seq` floor (numbered 1..n, with a gap only where a message was erased), so
combining them is a max (every limit) or a min (any limit) of floors.
"""

from __future__ import annotations

from collections.abc import Sequence

from bounded_agents.core.messages import Message, payload_bytes
from bounded_agents.core.ports import Thread, ThreadSummary, ThreadTurnPage, ThreadTurnQuery
from bounded_agents.core.tokens import estimate_message_tokens


def _token_floor(messages: Sequence[Message], budget: int) -> int:
    """Index of the oldest message in the longest newest stretch within `budget`; the newest
    message always counts, even alone over it."""
    total, floor = 0, len(messages)
    for i in range(len(messages) - 1, -1, -1):
        total += estimate_message_tokens(messages[i])
        if total > budget:
            break
        floor = i
    return min(floor, max(0, len(messages) - 1))


def _run_floor(messages: Sequence[Message], runs: int) -> int:
    """Index where the `runs`-th newest run starts (its user message), or 0 if there are fewer."""
    seen = 0
    for i in range(len(messages) - 1, -1, -1):
        if messages[i].role == "user":
            seen += 1
            if seen == runs:
                return i
    return 0


def page_floor(messages: Sequence[Message], query: ThreadTurnQuery) -> int:
    """Index of the first message of `messages` (oldest first) the query's limits keep."""
    n = len(messages)
    floors: list[int] = []
    if query.message_limit is not None:
        floors.append(max(0, n - query.message_limit))
    if query.token_limit is not None:
        floors.append(_token_floor(messages, query.token_limit))
    if query.run_limit is not None:
        floors.append(_run_floor(messages, query.run_limit))
    if not floors:
        return 0
    return min(floors) if query.widest else max(floors)


def bounded_page(
    thread: Thread,
    query: ThreadTurnQuery,
    summary: ThreadSummary | None = None,
    last_prompt: str | None = None,
) -> ThreadTurnPage:
    """The page a bounded read of `thread` returns for `query`. `summary` is the thread's newest
    summary; it bounds the page only when the query asks for `after_summary`. `last_prompt` is
    handed back as is (the store keeps it beside the thread, see `PromptDigestStore`)."""
    boundary = summary.covers_through_seq if (query.after_summary and summary) else 0
    after = [m for m in thread.messages if (m.seq or 0) > boundary]
    floor = page_floor(after, query)
    page = after[floor:]
    before = len(thread.messages) - len(page)
    # Seqs skipped, as the SQL read counts them: an erased message leaves a gap, and a fold
    # through `boundary + skipped` must still reach the page.
    skipped = (page[0].seq or 0) - boundary - 1 if page and page[0].seq else floor
    return ThreadTurnPage(
        messages=page,
        title=thread.title,
        has_assistant_message=any(m.role == "assistant" for m in thread.messages),
        summary=summary if query.after_summary else None,
        skipped=skipped,
        unread=floor if query.after_summary and query.count_unread and skipped else None,
        tokens_before=sum(estimate_message_tokens(m) for m in thread.messages[:before])
        if page
        else 0,
        last_prompt=last_prompt,
        payload_bytes=sum(payload_bytes(m) for m in page),
    )


__all__ = ["bounded_page", "page_floor"]
