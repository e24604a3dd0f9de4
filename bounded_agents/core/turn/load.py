"""The turn's reads and writes: the bounded read, `load:thread`, messages and summaries stored."""

from __future__ import annotations

import logging

from bounded_agents.core.checkpoints import (
    FoldPayload,
    JsonObject,
    load_thread_payload,
    seq_payload,
    summary_saved_payload,
)
from bounded_agents.core.messages import (
    Message,
    journal_form,
)
from bounded_agents.core.policies import (
    policy_summarizer,
    read_bound,
)
from bounded_agents.core.ports import (
    DurableContext,
    HistoryPolicy,
    HistoryPolicyContext,
    JsonValue,
    ReadBound,
    ThreadSummary,
    ThreadTurnPage,
    ThreadTurnQuery,
    Transaction,
)
from bounded_agents.core.report import (
    RunReport,
)
from bounded_agents.core.turn.constants import (
    BACKLOG_READ_ROWS,
)
from bounded_agents.core.turn.prompts import (
    _count_read,
    _fold_range,
    _page_context,
)
from bounded_agents.core.turn.spend import SpendPhase
from bounded_agents.core.turn.state import _Digest
from bounded_agents.errors import (
    DuplicateMessage,
)

log = logging.getLogger("bounded_agents.core.loop")
"""The loop's one logger, whichever turn module logs: log configuration keeps working."""


class LoadPhase(SpendPhase):
    async def _load_rolling(
        self,
        ctx: DurableContext,
        thread_id: str,
        policy: HistoryPolicy,
        hctx: HistoryPolicyContext,
        report: RunReport,
    ) -> JsonValue:
        """The `load:thread` step: the bounded read, `select`, and for a summarizing policy the
        fold this turn owes: every message from the summary's boundary through the newest one
        `select` dropped or the read skipped. The fold's messages that the page holds are
        journaled whole (seq and run id included: a summarizer may group by run); older ones
        are read chunk by chunk by the fold itself."""
        summarizer = policy_summarizer(policy)
        page = await self._read_page(
            thread_id, read_bound(policy), summarizer is not None, report, await self._tx(ctx)
        )
        # The idle time is taken here, inside the step: a replay reads the selection back.
        idle = self.idle_seconds(page.previous_at)
        selection = policy.select(page.messages, _page_context(hctx, page, idle))
        summary: JsonObject | None = None
        fold: FoldPayload | None = None
        if summarizer is not None:
            boundary, through = _fold_range(page, selection)
            if page.summary is not None:
                summary = page.summary.model_dump(mode="json", exclude_defaults=True)
            if through > boundary:
                fold = {
                    "through": through,
                    "messages": [
                        m.model_dump(mode="json", exclude_defaults=True)
                        for m in page.messages
                        if (m.seq or 0) <= through
                    ],
                }
                if page.fold_health is not None:  # issue 36: the backoff decides from the journal
                    fold["health"] = page.fold_health.model_dump(mode="json")
        return load_thread_payload(
            [journal_form(m) for m in selection.keep],
            last_prompt=page.last_prompt,
            summary=summary,
            fold=fold,
            title=page.title,
            has_assistant_message=page.has_assistant_message,
        )

    async def _persist(
        self,
        ctx: DurableContext,
        thread_id: str,
        message: Message,
        digest: _Digest | None = None,
    ) -> JsonValue:
        """Idempotent: a replay after a crash between the write and its journal entry finds the
        message already stored (one per run and role) and does not store it twice. (In a shared
        transaction the two commit together; a journal written before that may still differ.)
        With `last_prompt` (an answer's), a store that keeps prompt digests remembers it in the
        same write."""
        tx = await self._tx(ctx)
        prompt, reported = (digest.prompt, digest.reported) if digest is not None else (None, None)
        try:
            stored = await self.turn_store.append(
                thread_id, [message], tx=tx, last_prompt=prompt, reported_tokens=reported
            )
            return seq_payload(stored[0].seq)
        except DuplicateMessage:
            return seq_payload(None)

    async def _read_page(
        self,
        thread_id: str,
        bound: ReadBound | None,
        after_summary: bool,
        report: RunReport,
        tx: Transaction | None = None,
    ) -> ThreadTurnPage:
        """The turn read: bounded by the store when it can (one round trip), else the whole
        thread cut the same way in memory. The report says what was actually read. With `tx`
        it reads inside the turn's transaction, which holds the turn's own user message."""
        query = ThreadTurnQuery.of(thread_id, bound, after_summary=after_summary)
        read = await self.turn_store.read(query, tx=tx)
        page = read.page
        if read.bounded:
            report.read_bound = query.message_limit
            report.read_token_bound = query.token_limit
            report.read_run_bound = query.run_limit
        if page.summary is not None:
            report.read_after_seq = page.summary.covers_through_seq
        _count_read(report, read.read)  # unbounded: no bound reached the store, all was read
        return page

    async def _fetch_backlog(
        self, thread_id: str, after_seq: int, through: int, known: dict[int | None, Message]
    ) -> None:
        # Only the gap: up to the next message the fold already holds (the turn read's page).
        held = [s for s in known if s is not None and after_seq < s <= through]
        rows = min(BACKLOG_READ_ROWS, (min(held) if held else through + 1) - after_seq - 1)
        for m in await self.turn_store.messages_after(thread_id, after_seq, max(1, rows)):
            if m.seq is not None and m.seq <= through:
                known.setdefault(m.seq, m)

    async def _save_summary(
        self, ctx: DurableContext, thread_id: str, summary: ThreadSummary
    ) -> JsonValue:
        await self.turn_store.save_summary(thread_id, summary, tx=await self._tx(ctx))
        return summary_saved_payload(summary.covers_through_seq)
