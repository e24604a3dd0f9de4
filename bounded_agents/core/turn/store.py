"""Any `AgentStore` lifted to what a turn needs: one read path and one write path.

A turn reads its thread once (bounded by the store when it can, else the whole thread cut the
same way in memory) and writes each message once (with the prompt digest when the store keeps
one, inside the turn's transaction when the store joins it). Which of those a store can do is
asked once, here, with the `supports_*` probes: the loop holds one `TurnStore` and its phases
have no fallback branches. A runtime-checkable protocol's isinstance walks its members on
every call (5-13 us each on CPython 3.11), so probing once also keeps it off the turn's path.
Each method makes exactly the store calls the phase made before (no extra query).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from bounded_agents.core.messages import Message, payload_bytes
from bounded_agents.core.ports import (
    AgentStore,
    FoldHealth,
    FoldHealthStore,
    PromptDigestStore,
    SummaryArchive,
    SummaryStore,
    Thread,
    ThreadInfoReader,
    ThreadSummary,
    ThreadTurnPage,
    ThreadTurnQuery,
    ThreadTurnReader,
    Transaction,
    TransactionalStore,
    supports_bounded_read,
    supports_fold_health,
    supports_prompt_digests,
    supports_summaries,
    supports_summary_archive,
    supports_thread_info,
    supports_transactions,
)
from bounded_agents.core.reads import bounded_page
from bounded_agents.errors import ConfigError, ThreadNotFound

NO_SUMMARIES = "a summarizing history needs a store that keeps summaries"


@dataclass(frozen=True)
class TurnRead:
    """A turn read's page, and what it cost: a report counts `read`, not the page."""

    page: ThreadTurnPage
    read: list[Message]
    """The messages the store returned: the page when the store bounded the read, the whole
    thread when it could not."""
    bounded: bool
    """Whether the store applied the query's limits itself (one bounded round trip)."""
    payload_bytes: int
    """`payload_bytes` of `read`, all of them: what the report counts as bytes read."""


class TurnStore:
    """`store` as a turn uses it: each method one path, whatever powers the store has."""

    def __init__(self, store: AgentStore) -> None:
        self.store = store
        self._info: ThreadInfoReader | None = store if supports_thread_info(store) else None
        self._bounded: ThreadTurnReader | None = store if supports_bounded_read(store) else None
        self._tx: TransactionalStore | None = store if supports_transactions(store) else None
        self._digests: PromptDigestStore | None = store if supports_prompt_digests(store) else None
        self._summaries: SummaryStore | None = store if supports_summaries(store) else None
        self._archive: SummaryArchive | None = store if supports_summary_archive(store) else None
        self._health: FoldHealthStore | None = store if supports_fold_health(store) else None

    @property
    def keeps_summaries(self) -> bool:
        """Whether a summarizing policy can run on this store."""
        return self._summaries is not None

    @property
    def reads_by_seq(self) -> bool:
        """Whether a replay can read the kept messages back by seq (`messages_after`, a
        `SummaryStore`'s): else `load:thread` journals them whole (`core/turn/kept.py`)."""
        return self._summaries is not None

    @property
    def joins_transactions(self) -> bool:
        """Whether its writes and reads can join a unit of work's transaction."""
        return self._tx is not None

    async def thread_info(self, thread_id: str) -> Thread | None:
        """The thread's owner and agent, without its messages when the store can skip them."""
        if self._info is not None:
            return await self._info.get_thread_info(thread_id)
        return await self.store.get_thread(thread_id)

    async def read(self, query: ThreadTurnQuery, *, tx: Transaction | None = None) -> TurnRead:
        """The page `query` selects; `ThreadNotFound` for an unknown thread. With `tx` (and a
        store that joins it) the read sees the transaction's own uncommitted writes."""
        if self._bounded is not None:
            if tx is not None and self._tx is not None:
                page = await self._tx.load_thread_for_turn(query, tx=tx)
            else:
                page = await self._bounded.load_thread_for_turn(query)
            if page is None:
                raise ThreadNotFound(query.thread_id)
            size = page.payload_bytes
            if size is None:  # a store that did not count them: encode them here
                size = sum(payload_bytes(m) for m in page.messages)
            return TurnRead(page=page, read=page.messages, bounded=True, payload_bytes=size)
        thread = await self.store.get_thread(query.thread_id)
        if thread is None:
            raise ThreadNotFound(query.thread_id)
        summary = None
        if query.after_summary and self._summaries is not None:
            summary = await self._summaries.latest_summary(query.thread_id)
        last_prompt = reported = None
        if self._digests is not None:
            last_prompt = await self._digests.last_prompt(query.thread_id)
            reported = await self._digests.reported_tokens(query.thread_id)
        page = bounded_page(thread, query, summary, last_prompt)
        health = await self._health.fold_health(query.thread_id) if self._health else None
        page = page.model_copy(update={"reported_tokens": reported, "fold_health": health})
        size = sum(payload_bytes(m) for m in thread.messages)
        return TurnRead(page=page, read=thread.messages, bounded=False, payload_bytes=size)

    async def append(
        self,
        thread_id: str,
        messages: Sequence[Message],
        *,
        tx: Transaction | None = None,
        last_prompt: str | None = None,
        reported_tokens: int | None = None,
    ) -> list[Message]:
        """Store `messages` at the end of the thread, all or none, with `seq` set. An answer's
        `last_prompt` (and the provider's `reported_tokens`) ride in the same write when the
        store keeps digests; a store without them drops them."""
        if last_prompt is not None and self._digests is not None:
            return await self._digests.append_answer(
                thread_id, messages, last_prompt, tx=tx, reported_tokens=reported_tokens
            )
        if tx is not None and self._tx is not None:
            return await self._tx.append_messages(thread_id, messages, tx=tx)
        return await self.store.append_messages(thread_id, messages)

    async def messages_after(self, thread_id: str, after_seq: int, limit: int) -> list[Message]:
        """A fold's backlog, chunk by chunk; `ConfigError` on a store that keeps no summaries
        (the loop refuses a summarizing agent on one, so only a misuse gets here)."""
        if self._summaries is None:
            raise ConfigError(NO_SUMMARIES)
        return await self._summaries.messages_after(thread_id, after_seq, limit)

    async def save_summary(
        self, thread_id: str, summary: ThreadSummary, *, tx: Transaction | None = None
    ) -> None:
        """Keep the thread's new rolling summary (idempotent per boundary); `ConfigError` on a
        store that keeps none."""
        if self._tx is not None:
            await self._tx.save_summary(thread_id, summary, tx=tx)
        elif self._summaries is not None:
            await self._summaries.save_summary(thread_id, summary)
        else:
            raise ConfigError(NO_SUMMARIES)

    @property
    def archives(self) -> bool:
        """Whether a summary's oldest part can be archived rather than clipped."""
        return self._archive is not None

    async def archive_summary_part(
        self, thread_id: str, span: tuple[int, int], content: str, *, tx: Transaction | None
    ) -> None:
        """Keep `content`, notes written from the messages of `span` (from seq, to seq), in
        the archive (idempotent); nothing on a store without one (the fold then clips)."""
        if self._archive is not None:
            first, last = span
            await self._archive.archive_summary_part(
                thread_id, first, last, content, tx=tx if self._tx is not None else None
            )

    async def save_fold_health(
        self, thread_id: str, health: FoldHealth | None, *, tx: Transaction | None = None
    ) -> None:
        """Keep the thread's fold health (issue 36 backoff); a store that keeps none forgets
        it, and the backoff then lasts the run only."""
        if self._health is not None:
            await self._health.save_fold_health(thread_id, health, tx=tx if self._tx else None)


__all__ = ["NO_SUMMARIES", "TurnRead", "TurnStore"]
