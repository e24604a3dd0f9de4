"""Shared pieces of the adapter tests: a read counter on the store, a summarizer that needs no
model, and the checks every adapter's long-thread test makes."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from bounded_agents.core.messages import Message
from bounded_agents.core.ports import HistoryPolicyContext, HistorySummary
from bounded_agents.store import SqlAgentStore

READS = ("get_thread", "load_thread_for_turn", "list_messages", "messages_after", "run_messages")


@contextmanager
def rows_read(store: SqlAgentStore) -> Iterator[list[tuple[str, int]]]:
    """Every message row any read of `store` returns while the block runs, as (method, rows)
    per call: a read of the whole thread would show as its length, whichever method made it."""
    counts: list[tuple[str, int]] = []
    originals = {name: getattr(store, name) for name in READS}

    def counted(name: str) -> Any:
        original = originals[name]

        async def read(*args: Any, **kwargs: Any) -> Any:
            found = await original(*args, **kwargs)
            if found is None:
                counts.append((name, 0))
            elif isinstance(found, list):
                counts.append((name, len(found)))
            else:  # a Thread or a ThreadTurnPage
                counts.append((name, len(found.messages)))
            return found

        return read

    for name in READS:
        setattr(store, name, counted(name))
    try:
        yield counts
    finally:
        for name in READS:
            delattr(store, name)


class NotesSummarizer:
    """A `Summarizer` without a model: the summary so far plus every folded message's text,
    so a test can see what a summary holds (and that erasure took it out)."""

    def __init__(self) -> None:
        self.calls = 0

    async def __call__(self, messages: list[Message], ctx: HistoryPolicyContext) -> HistorySummary:
        self.calls += 1
        before = ctx.summary.text if ctx.summary is not None else "notes:"
        # Keep only the newest lines: a summary has a cap, and the tests fold 10,000 items.
        lines = [*before.splitlines(), *(m.content for m in messages if m.content)][-40:]
        return HistorySummary(text="\n".join(lines), model="notes")
