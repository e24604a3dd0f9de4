"""The thread store's base port and the values a turn's bounded read speaks.

`AgentStore` is what every store has: the three methods a turn cannot do without, and the
parts every store of the project has kept (thread info, prompt digests, summaries, a run's
messages, named threads, listing, transcripts, erasure), each a protocol of its own here so a
reader can name the part it uses. The optional powers that remain (a bounded read,
transactions, search, migrations, disposal) are in `bounded_agents.core.ports.powers`, with
their probes; docs/architecture.md lists them with who has them.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Protocol, runtime_checkable

from pydantic import Field

from bounded_agents.core.messages import Message
from bounded_agents.core.ports.durable import Transaction
from bounded_agents.core.ports.frozen import Frozen


class Thread(Frozen):
    id: str
    actor_id: str
    agent: str
    title: str | None = None
    messages: list[Message] = Field(default_factory=list)
    created_at: datetime | None = None
    updated_at: datetime | None = None


class ThreadSummary(Frozen):
    """A thread's rolling summary: every message with `seq <= covers_through_seq` is folded
    into `text` and is never sent verbatim again."""

    text: str
    covers_through_seq: int = Field(ge=0)
    model: str = ""
    """The model that wrote it, as the ledger names it."""
    prompt_tokens: int = Field(default=0, ge=0)
    completion_tokens: int = Field(default=0, ge=0)
    run_id: str | None = None
    """The run whose turn made it."""


class FoldHealth(Frozen):
    """How a thread's folds are going, kept with the thread so it survives restarts: the last
    fold's outcome, the consecutive refused or failed folds, and the `seq` before which the
    next attempt waits (`bounded_agents.core.fold_health`). A thread that never failed has
    none (None): the plain healthy state costs no write."""

    outcome: str = "ok"
    """`ok` (a summary was stored), or the refusal reason of the last attempt (`empty`,
    `unrelated`, `failed:timeout`, ...)."""
    failures: int = Field(default=0, ge=0)
    """Consecutive refused or failed folds; 0 once one is stored again."""
    retry_after_seq: int = Field(default=0, ge=0)
    """No fold is attempted before the thread's newest message reaches this seq."""
    owed: int = Field(default=0, ge=0)
    """Messages beyond the window the summary did not cover after that attempt."""


class ReadBound(Frozen):
    """Which newest messages of a thread a turn needs: the bound a policy declares and the
    store reads by. Every limit counts from the newest message backwards.

    `widest=False` reads the messages inside EVERY given limit (a window with a count and a
    token budget keeps only what satisfies both); `widest=True` those inside ANY (a policy that
    keeps whole runs but checks a token threshold needs both stretches). No limit: everything.
    """

    messages: int | None = Field(default=None, ge=0)
    """The newest n messages."""
    tokens: int | None = Field(default=None, ge=0)
    """The newest messages whose token estimates (`estimate_message_tokens`) add up to at most
    this; the newest always counts, as in a window's token walk."""
    runs: int | None = Field(default=None, ge=1)
    """The newest n runs, whole (a run starts at each user message, see `split_runs`); at
    least 1, the run in flight."""
    widest: bool = False


class ThreadTurnQuery(Frozen):
    thread_id: str
    message_limit: int | None = Field(default=None, ge=0)
    """Newest rows to return; None reads the whole thread. 0 returns no messages."""
    token_limit: int | None = Field(default=None, ge=0)
    """See `ReadBound.tokens`."""
    run_limit: int | None = Field(default=None, ge=1)
    """See `ReadBound.runs`."""
    widest: bool = False
    """See `ReadBound.widest`."""
    after_summary: bool = False
    """Read only what the thread's newest summary does not cover (`seq > covers_through_seq`)
    and return that summary with the page."""
    count_unread: bool = False
    """With `after_summary`: also count the messages the seqs skipped before the page hold
    (`ThreadTurnPage.unread`), in a second statement sent only when seqs were skipped. The loop
    asks, as what a turn owes is counted in messages; a reader that would not use the count
    (an adapter's history between compactions, which skips seqs on most loads) leaves it off
    and keeps its one statement."""

    @classmethod
    def of(
        cls,
        thread_id: str,
        bound: ReadBound | None,
        *,
        after_summary: bool,
        count_unread: bool = False,
    ) -> ThreadTurnQuery:
        if bound is None:
            return cls(thread_id=thread_id, after_summary=after_summary, count_unread=count_unread)
        return cls(
            thread_id=thread_id,
            message_limit=bound.messages,
            token_limit=bound.tokens,
            run_limit=bound.runs,
            widest=bound.widest,
            after_summary=after_summary,
            count_unread=count_unread,
        )


class ThreadTurnPage(Frozen):
    messages: list[Message]
    """The newest messages the query's limits select, oldest first."""
    title: str | None
    has_assistant_message: bool
    """Whether the thread was EVER answered: asked of the whole thread, never of the page."""
    summary: ThreadSummary | None = None
    """The newest summary, when the query asked for `after_summary` and there is one."""
    skipped: int = 0
    """Seqs older than the page the query left unread (after the summary's boundary, when it
    asked for `after_summary`). A summarizing policy must fold them: nobody else will. An
    erased message leaves its seq in this count (a fold through `boundary + skipped` reaches
    the page); `unread` counts the messages."""
    unread: int | None = Field(default=None, ge=0)
    """How many messages those `skipped` seqs hold, when the store counted them (it does when
    the query asked for `after_summary` and `count_unread` and seqs were skipped); None
    otherwise. Fewer than `skipped` when messages there were erased: what a turn says it owes
    counts these."""
    tokens_before: int = Field(default=0, ge=0)
    """Estimated tokens (`estimate_message_tokens`, as stored) of every message of the thread
    older than the page's first one; 0 for an empty page. With `skipped` it says where the page
    sits in the thread, so a hysteresis window cuts where it would over the whole thread."""
    last_prompt: str | None = None
    reported_tokens: int | None = None
    """What the provider reported for the thread's last chat call (prompt plus completion):
    the history as the model counted it, before this turn's message. None when that call's
    usage was an estimate, or no store keeps it."""
    """The digest of the thread's last chat prompt (`bounded_agents.core.prefix`), when the store
    keeps one: what the first model call of this turn is compared with."""
    previous_at: datetime | None = None
    """When the message before the page's newest was stored (timezone-aware), if the page holds
    it. In a turn the newest is the turn's own user message, so this is the thread's last
    activity before it: how long the thread sat idle (`HistoryPolicyContext.idle_seconds`).
    None when the page does not hold it, or when that message was erased (the seq before the
    newest is then a gap): unknown, so nothing is folded early."""
    fold_health: FoldHealth | None = None
    """The thread's fold health (a store that keeps it: `FoldHealthStore`); None when it never
    failed or the store keeps none."""
    payload_bytes: int | None = Field(default=None, ge=0)
    """UTF-8 bytes of the page's messages as the store holds them (content and JSON text,
    `bounded_agents.core.messages.payload_bytes` of each): what a turn's report counts as read.
    A store counts them from the text it read, far cheaper than encoding the messages again;
    None when it did not (the turn then encodes them)."""


class ThreadListing(Frozen):
    """One line of an actor's thread list: what the inspector shows before opening a thread."""

    id: str
    agent: str
    title: str | None = None
    messages: int = 0
    """Messages the thread holds (its last `seq`)."""
    created_at: datetime | None = None
    updated_at: datetime | None = None
    """Last activity: the newest message, or the thread's creation."""


@runtime_checkable
class ThreadInfoReader(Protocol):
    """Every store can answer "whose thread is this" without reading its messages."""

    async def get_thread_info(self, thread_id: str) -> Thread | None: ...


@runtime_checkable
class PromptDigestStore(Protocol):
    """Every store remembers each thread's last chat prompt as a digest, so the first
    model call of a run can say how much of it it reuses (`prefix_reused`). The digest is
    written with the run's answer, in the same transaction (no write of its own), and comes
    back with the next turn's bounded read (`ThreadTurnPage.last_prompt`)."""

    async def append_answer(
        self,
        thread_id: str,
        messages: Sequence[Message],
        last_prompt: str,
        *,
        tx: Transaction | None = None,
        reported_tokens: int | None = None,
    ) -> list[Message]:
        """`append_messages`, and the thread's last prompt is now `last_prompt` (and the
        provider's count of it, `reported_tokens`, when it gave one); with `tx` (a
        `TransactionalStore`'s), inside that transaction."""
        ...

    async def reported_tokens(self, thread_id: str) -> int | None:
        """The `reported_tokens` `append_answer` stored last, for a read that did not return
        it."""
        ...

    async def last_prompt(self, thread_id: str) -> str | None:
        """The digest `append_answer` stored last, for a read that did not return it."""
        ...


@runtime_checkable
class SummaryStore(Protocol):
    """Every store keeps each thread's rolling summary. A summarizing policy needs
    one: without it every turn would have to summarize the whole thread again."""

    async def latest_summary(self, thread_id: str) -> ThreadSummary | None:
        """The summary with the highest `covers_through_seq`, or None."""
        ...

    async def save_summary(self, thread_id: str, summary: ThreadSummary) -> None:
        """Store it, keyed by (thread, `covers_through_seq`). Idempotent: saving a boundary
        that is already stored changes nothing, so a replayed fold never writes twice."""
        ...

    async def messages_after(self, thread_id: str, after_seq: int, limit: int) -> list[Message]:
        """Up to `limit` messages with `seq > after_seq`, oldest first: a backlog, chunk by
        chunk."""
        ...


@runtime_checkable
class RunMessagesReader(Protocol):
    """Every store can read the messages one run wrote without reading the thread."""

    async def run_messages(self, thread_id: str, run_id: str) -> list[Message]:
        """The run's user message and answer (whichever are stored), in seq order."""
        ...


@runtime_checkable
class NamedThreadCreator(Protocol):
    """Every store creates a thread under an id the caller chose, once. A request
    that starts a new thread with an Idempotency-Key names it after the actor and the key, so
    its retry finds the same thread (and the key's run in it) instead of starting another."""

    async def create_named_thread(
        self,
        thread_id: str,
        *,
        actor_id: str,
        agent: str,
        title: str | None = None,
        unless_erased: bool = False,
    ) -> Thread:
        """The thread `thread_id`: created now, or as it already was (whoever owns it: the
        caller checks). With `unless_erased`, an id erased whole (`delete_thread`) is refused with
        `ThreadErased` and nothing is made: a keyed request's retry after its conversation was
        deleted. Checked after the insert, in its transaction, so an erasure that commits
        while the insert waits for its lock is seen too."""
        ...


@runtime_checkable
class ThreadLister(Protocol):
    """Every store lists an actor's threads, newest activity first, a page at a time."""

    async def list_threads(
        self, actor_id: str, *, limit: int, offset: int = 0
    ) -> list[ThreadListing]: ...


@runtime_checkable
class TranscriptReader(Protocol):
    """Every store pages through a thread's transcript without reading the whole
    thread (what the transcript route serves)."""

    async def list_messages(
        self, thread_id: str, *, limit: int, before: int | None = None
    ) -> list[Message]:
        """Up to `limit` messages with `seq < before` (the newest page when None), oldest first."""
        ...


@runtime_checkable
class ErasingStore(Protocol):
    """Every store erases a message or a whole thread (the right to erasure): no
    byte of it stays in the store, summaries made of it and later `search_history` results
    quoting it included (`bounded_agents.core.erasure`); one transaction each,
    refused with `ThreadBusy` while a live run holds the thread. Ledger rows stay, and so
    does the id of a thread erased whole (with its owner's), nothing of its content."""

    async def delete_thread(self, thread_id: str) -> bool:
        """Erase the thread and all of it but its ledger rows and its id (which
        `create_named_thread(..., unless_erased=True)` then refuses);
        False if there was none."""
        ...

    async def delete_message(self, thread_id: str, seq: int, *, digest: str | None = None) -> bool:
        """Erase one message and every summary covering it (the next turns fold that span
        again from what is left); False if the thread has no message `seq`.

        With `digest` (`core.messages.message_digest` of the message as the caller read it:
        seq, role, text and attachments), only that message: False, and nothing erased, when
        the row at `seq` is another (the thread erased and made again under its id since)."""
        ...


@runtime_checkable
class AgentStore(
    ThreadInfoReader,
    PromptDigestStore,
    SummaryStore,
    RunMessagesReader,
    NamedThreadCreator,
    ThreadLister,
    TranscriptReader,
    ErasingStore,
    Protocol,
):
    """Every store: a thread's messages written and read, and the parts it inherits."""

    async def create_thread(
        self, *, actor_id: str, agent: str, title: str | None = None
    ) -> Thread: ...

    async def get_thread(self, thread_id: str) -> Thread | None:
        """Every message of the thread, in seq order; None for an unknown thread."""
        ...

    async def append_messages(self, thread_id: str, messages: Sequence[Message]) -> list[Message]:
        """Store `messages` at the end of the thread, all or none; returns them with `seq` set."""
        ...


class ArchivedPart(Frozen):
    """An archived part of a thread's summary: notes the summary could no longer hold under its
    cap, kept (not dropped) with the seq range of the messages they were written from, and
    searchable (`bounded_agents.core.search`). Erased with the thread, and when a message it
    covers is erased (it may quote it)."""

    from_seq: int = Field(ge=0)
    to_seq: int = Field(ge=0)
    content: str
    created_at: datetime | None = None


class SearchHit(Frozen):
    """One candidate of a full-text search (`HistorySearcher.search_history`): a message, or an
    archived summary part (`from_seq` set, `seq` = its `to_seq`, `role` "summary").

    What the store's index decided is carried as is, so the core renders every store alike:
    `relevance` (higher is better, recency already weighed in), `terms` (which of the query's
    terms, by position in `search_terms`, the hit holds: how `newer` is told), and `marked`,
    the matched text with each match between `MARK_START` and `MARK_END` (the message's
    content, or its tool results' text when only they matched: `in_tools`)."""

    seq: int
    role: str
    content: str
    """The message's whole content (what the prompt would show): skip checks compare it."""
    marked: str
    relevance: float
    terms: frozenset[int] = frozenset()
    at: datetime | None = None
    from_seq: int | None = None
    in_tools: bool = False
    """The match is in the message's tool results, not its content: `marked` is their text."""


MARK_START = "\x02"
MARK_END = "\x03"
"""Around each match in `SearchHit.marked`: control characters no stored text is searched for."""


__all__ = [
    "MARK_END",
    "MARK_START",
    "AgentStore",
    "ArchivedPart",
    "ErasingStore",
    "FoldHealth",
    "NamedThreadCreator",
    "PromptDigestStore",
    "ReadBound",
    "RunMessagesReader",
    "SearchHit",
    "SummaryStore",
    "Thread",
    "ThreadInfoReader",
    "ThreadLister",
    "ThreadListing",
    "ThreadSummary",
    "ThreadTurnPage",
    "ThreadTurnQuery",
    "TranscriptReader",
]
