"""MemoryStore: an in-process AgentStore with the FULL read only, and summaries.

It deliberately does not implement `ThreadTurnReader`, so the loop's fallback path (read the
whole thread, then cut it in memory as the bounded read would) is exercised by every test that
uses it. It keeps rolling summaries (`SummaryStore`), so summarizing policies run on it too,
their archived parts (`SummaryArchive`, searched by the fallback scan), and
each thread's last prompt digest (`PromptDigestStore`). It erases (`ErasingStore`) what it holds
(and forgets erased threads' ids after a while: `ErasedThreadPruner`);
it knows no runs, so it cannot refuse an erasure during one as the SQL store does.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from bounded_agents.core.erasure import redact_search_results
from bounded_agents.core.messages import Message, message_digest, unstorable_thread
from bounded_agents.core.ports import (
    AgentStore,
    ArchivedPart,
    ErasedThreadPruner,
    ErasedThreadReader,
    ErasingStore,
    FoldHealth,
    FoldHealthStore,
    NamedThreadCreator,
    PromptDigestStore,
    RunMessagesReader,
    SummaryArchive,
    SummaryStore,
    Thread,
    ThreadLister,
    ThreadListing,
    ThreadSummary,
    Transaction,
)
from bounded_agents.core.prefix import forget_kept_json
from bounded_agents.core.summary import chunk_digest
from bounded_agents.errors import (
    DuplicateMessage,
    InvalidContent,
    ThreadErased,
    ThreadNotFound,
)


class MemoryStore:
    def __init__(self) -> None:
        self._threads: dict[str, Thread] = {}
        self._summaries: dict[str, dict[int, ThreadSummary]] = {}
        self._fold_health: dict[str, FoldHealth] = {}
        self._last_prompts: dict[str, str] = {}
        self._reported: dict[str, int | None] = {}
        self._archive: dict[str, dict[tuple[int, int], ArchivedPart]] = {}
        """Archived summary parts per thread, by (from_seq, to_seq)."""
        self._last_seq: dict[str, int] = {}
        """The newest seq handed out per thread: an erased message's seq is never reused."""
        self._erased: dict[str, float] = {}
        """Ids of threads erased whole, with when (`time.time()`): `create_named_thread`'s
        `unless_erased` refuses them until `prune_erased` forgets them."""
        self._lock = asyncio.Lock()

    async def create_thread(self, *, actor_id: str, agent: str, title: str | None = None) -> Thread:
        return await self.create_named_thread(
            str(uuid.uuid4()), actor_id=actor_id, agent=agent, title=title
        )

    async def create_named_thread(
        self,
        thread_id: str,
        *,
        actor_id: str,
        agent: str,
        title: str | None = None,
        unless_erased: bool = False,
    ) -> Thread:
        reason = unstorable_thread(thread_id=thread_id, actor_id=actor_id, agent=agent, title=title)
        if reason is not None:  # as the SQL stores refuse it
            raise InvalidContent(reason)
        if unless_erased and thread_id in self._erased:
            raise ThreadErased(thread_id)
        existing = self._threads.get(thread_id)
        if existing is not None:
            return existing.model_copy(update={"messages": []})
        now = datetime.now(UTC)
        thread = Thread(
            id=thread_id,
            actor_id=actor_id,
            agent=agent,
            title=title,
            messages=[],
            created_at=now,
            updated_at=now,
        )
        self._threads[thread.id] = thread
        return thread

    async def get_thread(self, thread_id: str) -> Thread | None:
        return self._threads.get(thread_id)

    async def get_thread_info(self, thread_id: str) -> Thread | None:
        thread = self._threads.get(thread_id)
        return None if thread is None else thread.model_copy(update={"messages": []})

    async def append_messages(self, thread_id: str, messages: Sequence[Message]) -> list[Message]:
        async with self._lock:
            thread = self._threads.get(thread_id)
            if thread is None:
                raise ThreadNotFound(thread_id)
            stored_keys = {(m.run_id, m.role) for m in thread.messages if m.run_id is not None}
            for m in messages:
                if m.run_id is not None and (m.run_id, m.role) in stored_keys:
                    raise DuplicateMessage(m.run_id, m.role)
            start = self._last_seq.get(thread_id, 0) + 1
            self._last_seq[thread_id] = start + len(messages) - 1
            stored = [m.model_copy(update={"seq": start + i}) for i, m in enumerate(messages)]
            self._threads[thread_id] = thread.model_copy(
                update={"messages": [*thread.messages, *stored], "updated_at": datetime.now(UTC)}
            )
        return stored

    async def append_answer(
        self,
        thread_id: str,
        messages: Sequence[Message],
        last_prompt: str,
        *,
        tx: object | None = None,
        reported_tokens: int | None = None,
    ) -> list[Message]:
        stored = await self.append_messages(thread_id, messages)
        self._last_prompts[thread_id] = last_prompt
        self._reported[thread_id] = reported_tokens
        return stored

    async def reported_tokens(self, thread_id: str) -> int | None:
        return self._reported.get(thread_id)

    async def last_prompt(self, thread_id: str) -> str | None:
        return self._last_prompts.get(thread_id)

    async def list_messages(
        self, thread_id: str, *, limit: int, before: int | None = None
    ) -> list[Message]:
        thread = self._threads.get(thread_id)
        if thread is None:
            return []
        msgs = [m for m in thread.messages if before is None or (m.seq or 0) < before]
        return msgs[-limit:] if limit else []

    async def list_threads(
        self, actor_id: str, *, limit: int, offset: int = 0
    ) -> list[ThreadListing]:
        mine = [t for t in self._threads.values() if t.actor_id == actor_id]
        mine.sort(key=lambda t: (t.updated_at, t.id), reverse=True)
        return [
            ThreadListing(
                id=t.id,
                agent=t.agent,
                title=t.title,
                messages=len(t.messages),
                created_at=t.created_at,
                updated_at=t.updated_at,
            )
            for t in mine[offset : offset + limit]
        ]

    async def latest_summary(self, thread_id: str) -> ThreadSummary | None:
        kept = self._summaries.get(thread_id, {})
        return kept[max(kept)] if kept else None

    async def save_summary(self, thread_id: str, summary: ThreadSummary) -> None:
        self._summaries.setdefault(thread_id, {}).setdefault(summary.covers_through_seq, summary)

    async def save_summary_if_intact(
        self,
        thread_id: str,
        summary: ThreadSummary,
        folded: Sequence[int],
        base: int | None = None,
        *,
        digest: str | None = None,
    ) -> bool:
        """`IntactSummarySaver`: under the lock `delete_message` takes."""
        async with self._lock:
            thread = self._threads.get(thread_id)
            stored = {m.seq for m in thread.messages} if thread is not None else set()
            if not set(folded) <= stored:
                return False
            if digest is not None and thread is not None:
                lo, hi = min(folded), max(folded)
                rows = [(m.seq or 0, m.role, m.content) for m in thread.messages]
                if chunk_digest([r for r in rows if lo <= r[0] <= hi]) != digest:
                    return False
            if base is not None and base not in self._summaries.get(thread_id, {}):
                return False
            await self.save_summary(thread_id, summary)
            return True

    async def fold_health(self, thread_id: str) -> FoldHealth | None:
        return self._fold_health.get(thread_id)

    async def save_fold_health(
        self, thread_id: str, health: FoldHealth | None, *, tx: Transaction | None = None
    ) -> None:
        if health is None:
            self._fold_health.pop(thread_id, None)
        elif thread_id in self._threads:
            self._fold_health[thread_id] = health

    async def messages_after(self, thread_id: str, after_seq: int, limit: int) -> list[Message]:
        thread = self._threads.get(thread_id)
        if thread is None:
            return []
        return [m for m in thread.messages if (m.seq or 0) > after_seq][:limit]

    async def delete_thread(self, thread_id: str) -> bool:
        async with self._lock:
            forget_kept_json()  # prompt JSON kept in memory (`core.prefix`)
            for kept in (
                self._summaries,
                self._archive,
                self._last_prompts,
                self._reported,
                self._last_seq,
                self._fold_health,
            ):
                kept.pop(thread_id, None)
            if self._threads.pop(thread_id, None) is None:
                return False
            self._erased[thread_id] = time.time()  # dated by the latest erasure
            return True

    async def thread_erased(self, thread_id: str) -> bool:
        return thread_id in self._erased

    async def prune_erased(self, older_than_seconds: float, limit: int) -> int:
        """As the SQL store's (`erase.prune_erased`), by this process's clock."""
        cutoff = time.time() - older_than_seconds
        old = sorted((at, tid) for tid, at in self._erased.items() if at < cutoff)[:limit]
        for _at, thread_id in old:
            del self._erased[thread_id]
        return len(old)

    async def delete_message(self, thread_id: str, seq: int, *, digest: str | None = None) -> bool:
        """The message, the summaries covering it, the thread's prompt digest, and its quotes
        in later `search_history` results (`bounded_agents.core.erasure`); with `digest`, only
        if the message at `seq` is still the one it names."""
        async with self._lock:
            forget_kept_json()  # prompt JSON kept in memory (`core.prefix`)
            thread = self._threads.get(thread_id)
            found = [m for m in thread.messages if m.seq == seq] if thread is not None else []
            if thread is None or not found:
                return False
            if digest is not None and digest != message_digest(found[0]):
                return False
            kept = [_unquoted(m, seq) for m in thread.messages if m.seq != seq]
            self._threads[thread_id] = thread.model_copy(update={"messages": kept})
            summaries = self._summaries.get(thread_id, {})
            for boundary in [b for b in summaries if b >= seq]:
                del summaries[boundary]
            archived = self._archive.get(thread_id, {})
            for span in [s for s in archived if s[0] <= seq <= s[1]]:
                del archived[span]
            self._last_prompts.pop(thread_id, None)
            self._reported.pop(thread_id, None)
            return True

    async def archive_summary_part(
        self,
        thread_id: str,
        from_seq: int,
        to_seq: int,
        content: str,
        *,
        tx: Transaction | None = None,
    ) -> ArchivedPart:
        """`SummaryArchive`: once per range (the first text stays); `tx` is ignored, there is
        no transaction to join."""
        if from_seq > to_seq or from_seq < 0:
            raise ValueError(
                f"an archived part covers from_seq <= to_seq, not {from_seq}..{to_seq}"
            )
        if thread_id not in self._threads:
            raise ThreadNotFound(thread_id)
        part = ArchivedPart(
            from_seq=from_seq, to_seq=to_seq, content=content, created_at=datetime.now(UTC)
        )
        return self._archive.setdefault(thread_id, {}).setdefault((from_seq, to_seq), part)

    async def archived_parts(
        self, thread_id: str, *, limit: int = 100, before_seq: int | None = None
    ) -> list[ArchivedPart]:
        parts = [
            p
            for p in self._archive.get(thread_id, {}).values()
            if before_seq is None or p.to_seq < before_seq
        ]
        parts.sort(key=lambda p: (p.to_seq, p.from_seq), reverse=True)
        return parts[:limit]

    async def run_messages(self, thread_id: str, run_id: str) -> list[Message]:
        thread = self._threads.get(thread_id)
        return [m for m in thread.messages if m.run_id == run_id] if thread else []


def _unquoted(message: Message, seq: int) -> Message:
    """`message` without its search results' quotes of message `seq`."""
    if (message.seq or 0) <= seq or not message.tool_results:
        return message
    redacted = redact_search_results(message.tool_calls, message.tool_results, seq)
    return message if redacted is None else message.model_copy(update={"tool_results": redacted})


if TYPE_CHECKING:  # mypy holds the store to every port the loop probes it for at run time
    _AS_STORE: AgentStore = MemoryStore()
    _AS_DIGESTS: PromptDigestStore = MemoryStore()
    _AS_SUMMARIES: SummaryStore = MemoryStore()
    _AS_RUN_MESSAGES: RunMessagesReader = MemoryStore()
    _AS_NAMED_THREADS: NamedThreadCreator = MemoryStore()
    _AS_LISTER: ThreadLister = MemoryStore()
    _AS_ERASING: ErasingStore = MemoryStore()
    _AS_ERASED_PRUNER: ErasedThreadPruner = MemoryStore()
    _AS_ERASED_READER: ErasedThreadReader = MemoryStore()
    _AS_ARCHIVE: SummaryArchive = MemoryStore()
    _AS_FOLD_HEALTH: FoldHealthStore = MemoryStore()
