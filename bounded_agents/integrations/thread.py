"""The shared core of the framework adapters: one framework item is one stored message.

Each adapter (`openai_agents`, `pydantic_ai`, `langchain`) only knows its framework's shapes; it
hands this module, per item, a `Projection` (the role and plain text the store indexes,
searches, bounds by runs and summarizes) and the item's own JSON, kept VERBATIM beside it, so
every item type round-trips, even one no adapter knows. What comes back is an `Entry` per stored
row: its `seq`, and the item as it was stored.

The verbatim JSON rides on the message as one attachment of media type `ITEM_MEDIA_TYPE`, whose
`data` is the item's JSON text (not base64: it is text already, and an erasure scan must find
it): `integrations.items`, with the thread ids. No provider is ever sent an attachment's data,
and the summarizer is handed the projection only (`for_summary`), so nothing here changes what
the project's own loop sends. A fold itself is `integrations.folds`; this module decides when.

Runs: the store cuts a thread at its user messages (`split_runs`), so an adapter projects to
`user` only the item that STARTS a run (the human's turn); tool calls, tool outputs and
everything else the agent did is `assistant`. A bounded read by runs therefore never separates
a tool call from its output, whatever lies between them. A view that begins inside a run (the
item cap cut it: a thread where no item starts a run) begins where the adapter's `links` say no
answer is left without its call (`items.view_start`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from bounded_agents.core.fold_health import MAX_WAIT_SEQS, backoff_after, may_fold, same_health
from bounded_agents.core.messages import Message, message_digest, unstorable_text
from bounded_agents.core.ports import (
    AgentStore,
    ErasingStore,
    NamedThreadCreator,
    Summarizer,
    SummaryStore,
    Thread,
    ThreadInfoReader,
    ThreadSummary,
    ThreadTurnQuery,
    ThreadTurnReader,
    TranscriptReader,
    supports_bounded_read,
    supports_erasure,
    supports_fold_health,
    supports_named_threads,
    supports_summaries,
    supports_thread_info,
    supports_transcripts,
)
from bounded_agents.core.summary import (
    DEFAULT_FOLD_MAX_TOKENS,
    render_history_summary,
)
from bounded_agents.errors import (
    ConfigError,
    DuplicateMessage,
    InvalidInput,
    StoreError,
    ThreadNotFound,
)
from bounded_agents.integrations.folds import FoldOutcome, FoldTarget, fold_backlog
from bounded_agents.integrations.items import (
    NO_LINKS,
    Links,
    Projection,
    legacy_thread_id_for,
    orphan_answers,
    stored_message,
    thread_id_for,
    verbatim,
    view_start,
)

DEFAULT_KEEP_RUNS = 10
"""Runs the bounded view keeps verbatim unless told otherwise."""

DEFAULT_FOLD_ITEMS = 200
"""Unsummarized items past the kept runs that make `compact_if_due` fold."""

DEFAULT_MAX_ITEMS = 500
"""Items the bounded view reads at most, whatever its runs hold: the bound of a thread whose
runs never end (no item starts one) or whose kept runs are longer than this."""

_CLEARED_RETRIES = 8
"""Times a write starts its thread again after finding it cleared under it, before the next
clear's `ThreadNotFound` is raised (as `pop` gives up after eight)."""

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Entry:
    """One stored item: its position in the thread and the item as stored (None when the row
    was not written by an adapter: then `message` is all there is)."""

    seq: int
    item: Any
    message: Message


@dataclass(frozen=True)
class BoundedView:
    """What a turn is given: the thread's summary (None before the first fold), then the kept
    runs' entries, oldest first. `rows_read` is how many message rows the read returned."""

    summary: ThreadSummary | None
    entries: list[Entry]
    skipped: int = 0
    """Unsummarized items older than the kept runs (what the next fold takes)."""
    rows_read: int = 0
    fold_through: int = 0
    """The newest seq the next fold may take: the row before the view's first, or, when the
    view kept none of the page, the page's last (found by review: a page skipped whole was
    folded by nothing, so it was in neither the view nor the summary)."""

    @property
    def summary_text(self) -> str | None:
        """The summary worded for the prompt (`render_history_summary`), or None."""
        return None if self.summary is None else render_history_summary(self.summary.text)


def _entry(message: Message) -> Entry:
    return Entry(seq=message.seq or 0, item=verbatim(message), message=message)


@dataclass
class ThreadHistory:
    """One framework session's thread in the store: append items, read the bounded view or
    the raw newest items, erase, fold.

    `store` must be a `SqlAgentStore` or any store with the same powers (bounded read, named
    threads, transcripts, summaries, erasure); a store without one is refused here, at
    construction, not at the first turn.
    """

    store: AgentStore
    session_id: str
    actor_id: str = "local"
    agent: str = "integration"
    keep_runs: int = DEFAULT_KEEP_RUNS
    max_items: int = DEFAULT_MAX_ITEMS
    """The most items a bounded view reads, however many its `keep_runs` runs hold."""
    links: Callable[[Any], Links] | None = None
    """The adapter's reading of how an item (its stored JSON) ties to its neighbours: the calls
    it makes and answers, and whether the next item goes with it (`items.Links`). Where a view
    or a fold may cut inside a run depends on it; None: nowhere but at a run's start."""
    items_lead: bool = False
    """Whether an item may lead the next (`Links.leads`: the Agents SDK's reasoning items). A
    page's first row, whose predecessor is not read, may then be led by a left-out item, so it
    is taken only when nothing unsummarized lies before it. Found by review: trusting no first
    row for adapters whose items never lead skipped valid pages whole."""
    thread_id: str = field(init=False)
    """The session's thread: `thread_id_for`'s, or its legacy id while a session stored before
    this release is found there (`_resolve`, on every call)."""

    def __post_init__(self) -> None:
        if self.keep_runs < 1:
            raise ConfigError(f"keep_runs must be at least 1, got {self.keep_runs!r}")
        if self.max_items < 1:
            raise ConfigError(f"max_items must be at least 1, got {self.max_items!r}")
        self._own_id = thread_id_for(self.session_id, actor_id=self.actor_id, agent=self.agent)
        self._legacy_id = legacy_thread_id_for(self.session_id)
        self.thread_id = self._own_id
        missing = [
            name
            for name, probe in (
                ("a bounded read (load_thread_for_turn)", supports_bounded_read),
                ("named threads (create_named_thread)", supports_named_threads),
                ("thread info (get_thread_info)", supports_thread_info),
                ("transcripts (list_messages)", supports_transcripts),
                ("summaries (latest_summary, save_summary)", supports_summaries),
                ("erasure (delete_message, delete_thread)", supports_erasure),
            )
            if not probe(self.store)
        ]
        if missing:
            raise ConfigError(
                f"{type(self.store).__name__} cannot back a framework session: it lacks "
                + ", ".join(missing)
            )

    # The probes held at construction; these views give the type checker the same facts.
    @property
    def _reader(self) -> ThreadTurnReader:
        assert supports_bounded_read(self.store)
        return self.store

    @property
    def _transcripts(self) -> TranscriptReader:
        assert supports_transcripts(self.store)
        return self.store

    @property
    def _summaries(self) -> SummaryStore:
        assert supports_summaries(self.store)
        return self.store

    @property
    def _eraser(self) -> ErasingStore:
        assert supports_erasure(self.store)
        return self.store

    @property
    def _creator(self) -> NamedThreadCreator:
        assert supports_named_threads(self.store)
        return self.store

    @property
    def _info(self) -> ThreadInfoReader:
        assert supports_thread_info(self.store)
        return self.store

    async def _resolve(self) -> Thread | None:
        """The session's thread, its id in `thread_id`: the one `thread_id_for` names (one
        primary-key read), else, when there is none, the thread this session was stored in
        before ids named their actor, if it is this actor's and this adapter's (one more read;
        no new thread is made there). Asked on every call, never cached: a legacy thread
        cleared since is left for the session's own id."""
        thread = await self._info.get_thread_info(self._own_id)
        if thread is None and self._legacy_id != self._own_id:
            legacy = await self._info.get_thread_info(self._legacy_id)
            if legacy is not None and self._mine(legacy):
                self.thread_id = self._legacy_id
                return legacy
        self.thread_id = self._own_id
        return thread

    async def check_owner(self) -> None:
        """Refuse, as not found, a thread that is not this actor's and this adapter's: before
        EVERY read and erasure (`_resolve`). Its id names both, so no other actor's session
        can hold it; the check stays for a thread made under that id by other means. A
        thread not created yet is nobody's: reads find it empty."""
        thread = await self._resolve()
        if thread is not None and not self._mine(thread):
            raise ThreadNotFound(self.thread_id)

    async def ensure_thread(self) -> None:
        """Before every write: the thread resolved and checked as `check_owner` does, and
        created (under `thread_id_for`'s id) when there is none yet."""
        thread = await self._resolve()
        if thread is None:
            thread = await self._creator.create_named_thread(
                self.thread_id, actor_id=self.actor_id, agent=self.agent
            )
        if not self._mine(thread):
            raise ThreadNotFound(self.thread_id)

    def _mine(self, thread: Thread) -> bool:
        return thread.actor_id == self.actor_id and thread.agent == self.agent

    # --- writes ----------------------------------------------------------------------------

    async def append(
        self,
        items: Sequence[tuple[Projection, str]],
        *,
        run_id: str | None = None,
        keys: Sequence[str] | None = None,
    ) -> list[int]:
        """Store `items` (projection, JSON text) at the end of the thread, all or none, in
        order, and return their seqs. `run_id` marks the FIRST item, so the same batch saved
        twice under one run id is stored once: the second call returns [] (`DuplicateMessage`
        from the store's unique (thread, run, role) key). `keys` instead marks EVERY item with
        its own key, so each item is stored once whatever batches it comes in: a batch that
        meets a stored item is stored item by item, in order, each one already stored
        skipped (an item is skipped only once it is stored, so concurrent savers keep the
        order). Every item is checked before any is written: one the store cannot hold fails
        the call naming its index, with nothing written."""
        if not items:
            return []
        marks = list(keys) if keys is not None else [run_id] + [None] * (len(items) - 1)
        built = [
            stored_message(p, text, mark) for (p, text), mark in zip(items, marks, strict=True)
        ]
        for i, message in enumerate(built):
            reason = unstorable_text(message)
            if reason is not None:
                raise InvalidInput(f"item {i} cannot be stored: {reason}")
        await self.ensure_thread()
        try:
            return await self._append_built(built)
        except DuplicateMessage:
            if keys is None or len(built) == 1:
                return []
        seqs: list[int] = []
        for message in built:
            try:
                seqs += await self._append_built([message])
            except DuplicateMessage:
                continue
        return seqs

    async def _append_built(self, built: list[Message]) -> list[int]:
        """Append `built`; a thread cleared by another session object (or process) since is
        started again and the write retried, up to `_CLEARED_RETRIES` times (found by attack:
        one retry lost to a second clear, 6-10 of 150 writes on PostgreSQL with a clear every
        30 ms raised ThreadNotFound where the session promises to start afresh)."""
        for _ in range(_CLEARED_RETRIES):
            try:
                stored = await self.store.append_messages(self.thread_id, built)
            except ThreadNotFound:
                await self.ensure_thread()
                continue
            return [m.seq or 0 for m in stored]
        stored = await self.store.append_messages(self.thread_id, built)
        return [m.seq or 0 for m in stored]

    # --- reads -----------------------------------------------------------------------------

    async def bounded(self, keep_runs: int | None = None) -> BoundedView:
        """The summary and the newest `keep_runs` runs after it, at most `max_items` items, in
        ONE bounded read: the rows read are those items whatever the thread's length.

        A run starts at a `user` item, so a thread where no item does (an agent saving its own
        steps only) is one run, and the runs bound alone read all of it: found by attack, 1,000
        rows read after 1,000 appends. The item cap bounds that read too. When the view begins
        inside a run, it begins where the adapter's `links` leave no answer without its call
        and no call without its reasoning (`items.view_start`): the items before are skipped
        with the rest, so the next fold takes a call and its output together."""
        await self.check_owner()
        runs = self.keep_runs if keep_runs is None else keep_runs
        query = ThreadTurnQuery(
            thread_id=self.thread_id,
            run_limit=runs,
            message_limit=self.max_items,
            after_summary=True,
        )
        page = await self._reader.load_thread_for_turn(query)
        if page is None:
            return BoundedView(summary=None, entries=[])
        entries = [_entry(m) for m in page.messages]
        skipped = page.skipped
        if entries and self.links is not None:
            links = [NO_LINKS if e.item is None else self.links(e.item) for e in entries]
            cut = 0
            if entries[0].message.role != "user":
                # The view begins inside a run (the cap cut it, a fold ended inside it, or an
                # item was erased): from the first place no answer lacks its call and no call
                # its reasoning (found by review: an erased seq left the page one row short
                # of the cap, and the view began on an output), or the page's first user item,
                # whichever comes first (a run's start, once the answers below are dropped).
                # With neither, the page is skipped whole and folded next: found by attack, a
                # page kept whole began on a call without its reasoning item, which the
                # Responses API refuses on every turn.
                trusted = page.skipped == 0 or not self.items_lead or links[0].leads
                found = view_start(links, first_trusted=trusted)
                first_user = next(
                    (i for i, e in enumerate(entries) if e.message.role == "user"), len(entries)
                )
                cut = min(first_user, len(entries) if found is None else found)
            # An answer whose call is older than the view, in the view still: a call approved
            # after the user's next message (the Agents SDK's `RunState`, LangGraph's resume)
            # stores its output in a later run than its call, and found by attack, a view
            # beginning at that run's user item sent the output alone. It is left out of the
            # view (not the thread: it folds, and is found by search, with its run).
            orphans = orphan_answers(links[cut:])
            kept = [e for i, e in enumerate(entries[cut:]) if i not in orphans]
            skipped += cut
        else:
            kept = entries
        if kept:
            fold_through = kept[0].seq - 1
        else:
            fold_through = entries[-1].seq if entries else 0
        return BoundedView(
            summary=page.summary,
            entries=kept,
            skipped=skipped,
            rows_read=len(page.messages),
            fold_through=fold_through,
        )

    async def opening(self, view: BoundedView) -> Entry | None:
        """The thread's first item when `view` no longer holds it (folded or skipped), else
        None: one row, read only then. A framework that writes its agent's standing
        instructions into the first request only (Pydantic AI's `system_prompt`) needs it back
        once the bounded view has moved past that request."""
        if (
            view.summary is None
            and view.skipped == 0
            and (not view.entries or view.entries[0].seq <= 1)
        ):
            return None
        found = await self._summaries.messages_after(self.thread_id, 0, 1)
        if not found or (view.entries and (found[0].seq or 0) >= view.entries[0].seq):
            return None
        return _entry(found[0])

    async def newest(self, n: int) -> list[Entry]:
        """The raw newest `n` items, oldest first (no summary, no run cut)."""
        if n <= 0:
            return []
        await self.check_owner()
        found = await self._transcripts.list_messages(self.thread_id, limit=n)
        return [_entry(m) for m in found]

    # --- erasure ---------------------------------------------------------------------------

    async def pop(self) -> Entry | None:
        """Erase the newest item (and every summary covering it) and return it; None when the
        thread is empty. Two pops racing never return the same item, and a pop never erases
        an item it did not read: the erasure names the row read (its digest), so a thread
        cleared and started again between the read and the erasure, whose seqs start at 1
        again, loses nothing (found by attack: the new thread's item at that seq was erased
        and the old one returned). The digest holds the item's JSON, not only its projection:
        two items can project to the same text (found by review)."""
        for _ in range(8):
            newest = await self.newest(1)
            if not newest:
                return None
            digest = message_digest(newest[0].message)
            if await self._eraser.delete_message(self.thread_id, newest[0].seq, digest=digest):
                return newest[0]
        raise ThreadNotFound(self.thread_id)  # emptied under us eight times over: give up

    async def clear(self) -> None:
        """Erase the whole thread (messages, summaries, search index); the session starts
        afresh on its next write."""
        await self.check_owner()
        await self._eraser.delete_thread(self.thread_id)

    # --- folding ---------------------------------------------------------------------------

    async def compact(
        self,
        summarizer: Summarizer,
        *,
        keep_runs: int | None = None,
        fold_max_tokens: int = DEFAULT_FOLD_MAX_TOKENS,
    ) -> FoldOutcome:
        """Fold every unsummarized item older than the newest `keep_runs` runs into the
        thread's rolling summary, chunk by chunk (each within `fold_max_tokens`), through the
        project's summarizer path: each answer is checked (`fold_rejection`), held to the
        summary cap (`clip_summary`) and saved with its boundary (idempotent per boundary, so a
        fold cut short by a crash resumes where it stopped). The raw items stay in the thread."""
        return await self._fold(await self.bounded(keep_runs), summarizer, fold_max_tokens)

    async def _fold(
        self, view: BoundedView, summarizer: Summarizer, fold_max_tokens: int
    ) -> FoldOutcome:
        """`compact` over a view already read (`compact_if_due` read it to decide)."""
        if view.skipped == 0 or view.fold_through < 1:
            return FoldOutcome(summary=view.summary)
        target = FoldTarget(
            self.store,
            self.thread_id,
            agent=self.agent,
            actor_id=self.actor_id,
            links=self.links,
        )
        return await fold_backlog(
            target, view.summary, view.fold_through, summarizer, fold_max_tokens
        )

    async def compact_if_due(
        self,
        summarizer: Summarizer,
        *,
        fold_items: int = DEFAULT_FOLD_ITEMS,
        fold_max_tokens: int = DEFAULT_FOLD_MAX_TOKENS,
    ) -> FoldOutcome | None:
        """`compact` when at least `fold_items` unsummarized items lie past the kept runs (one
        bounded read to find out); None when not due. Between folds the view only grows at its
        end, so a provider's prompt cache keeps matching it.

        Called after a write, so it never fails the write (a fold owed but not made never fails
        the chat, as in the loop; found by attack: a summarizer outage failed every LangChain
        write after its messages were stored, and a retried write stored them twice): a
        summarizer that raises is logged and reported as `refused="failed:<error>"`. After a
        refused or failed fold the thread backs off as the loop's do, on a store that keeps
        fold health (`FoldHealthStore`): no attempt until the thread has grown by the backoff
        (`refused="backoff"`), so a broken summarizer is not called again on every write.

        Nor does the thread fail the write: a database error anywhere in the fold (the reads
        that decide it, the owner check among them, as well as the summary's write) is logged
        and reported as `refused="failed:store"`, with no backoff, any other error of those
        reads as `refused="failed:<error>"`, and a thread gone or another's since the write as
        `refused="erased"` (see `_not_folded`). Found by attack:
        the deciding read ran before the fold's error handling, so a database blip there
        raised out of LangChain's `aadd_messages` after its messages were stored, and the
        caller's retry stored them twice."""
        try:
            view = await self.bounded()
            if view.skipped < fold_items:
                return None
            newest = view.entries[-1].seq if view.entries else view.fold_through
            keeper = self.store if supports_fold_health(self.store) else None
            health = await keeper.fold_health(self.thread_id) if keeper is not None else None
        except Exception as exc:  # the read, not the fold: no summary is known, no backoff
            return self._not_folded(None, exc)
        if health is not None and health.retry_after_seq > newest + MAX_WAIT_SEQS:
            # No wait this thread earned ends that far past its newest seq (seqs only grow):
            # a fold that failed while the session was cleared wrote the old thread's backoff
            # onto the new one after the clear (found by attack: at seq 2 the new thread
            # waited until seq 603, and 78 items went unsummarized). It is not this thread's.
            health = None
        if not may_fold(health, newest):
            return FoldOutcome(summary=view.summary, refused="backoff")
        try:
            outcome = await self._fold(view, summarizer, fold_max_tokens)
        except (ThreadNotFound, StoreError) as exc:  # the thread's failure: no backoff
            return self._not_folded(view.summary, exc)
        except Exception as exc:  # the summarizer's failure, whatever it raised
            log.warning("thread %s: the fold failed (%s); it is retried later", self.thread_id, exc)
            outcome = FoldOutcome(summary=view.summary, refused=f"failed:{type(exc).__name__}")
        if keeper is not None:
            after = backoff_after(outcome.refused, health, newest)
            if not same_health(health, after):
                try:
                    await keeper.save_fold_health(self.thread_id, after)
                except StoreError as exc:  # the write it follows is stored: do not fail it
                    log.warning("thread %s: fold health not kept (%s)", self.thread_id, exc)
        return outcome

    def _not_folded(self, summary: ThreadSummary | None, exc: Exception) -> FoldOutcome:
        """What `compact_if_due` reports when the thread, not the summarizer, stopped its fold
        after a write it must not fail. No backoff starts (the summarizer did nothing wrong),
        and no fold health is written: a thread gone or another's is not this call's to
        write to. `summary` is None when the read that would have found it failed."""
        if isinstance(exc, ThreadNotFound):
            log.warning("thread %s: not folded, gone or another's since the write", self.thread_id)
            return FoldOutcome(summary=summary, refused="erased")
        if isinstance(exc, StoreError):
            log.warning("thread %s: the database failed the fold (%s)", self.thread_id, exc)
            return FoldOutcome(summary=summary, refused="failed:store")
        log.warning("thread %s: the fold could not read the thread (%s)", self.thread_id, exc)
        return FoldOutcome(summary=summary, refused=f"failed:{type(exc).__name__}")


__all__ = [
    "DEFAULT_FOLD_ITEMS",
    "DEFAULT_KEEP_RUNS",
    "DEFAULT_MAX_ITEMS",
    "BoundedView",
    "Entry",
    "FoldOutcome",
    "ThreadHistory",
]
