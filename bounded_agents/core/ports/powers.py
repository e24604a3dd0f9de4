"""The optional powers of a model, a store, a durable runtime and a ledger, and their probes.

A port's base protocol is what every implementation has; a power is what only some do. Each power
is ONE `runtime_checkable` Protocol here with ONE probe, `supports_<power>(obj) ->
TypeGuard[TheProtocol]`, and the probe is the only way code asks: never `isinstance` of a concrete
class, never `getattr`/`hasattr` on a method name, never a wrapper's `__getattr__`. A wrapper
(an observing runtime) declares the powers of what it wraps by implementing them. `POWERS` lists
every one, so a new power is one protocol, one probe and one row there (a test checks that).

| on      | power                  | probe                        | has it                     |
|---------|------------------------|------------------------------|----------------------------|
| model   | StreamingModelProvider | supports_streaming           | OpenAICompatibleProvider   |
| model   | ClosingModelProvider   | supports_closing             | OpenAICompatibleProvider   |
| store   | ThreadInfoReader       | supports_thread_info         | SqlAgentStore, MemoryStore |
| store   | ThreadTurnReader       | supports_bounded_read        | SqlAgentStore              |
| store   | PromptDigestStore      | supports_prompt_digests      | SqlAgentStore, MemoryStore |
| store   | SummaryStore           | supports_summaries           | SqlAgentStore, MemoryStore |
| store   | FoldHealthStore        | supports_fold_health         | SqlAgentStore, MemoryStore |
| store   | TransactionalStore     | supports_transactions        | SqlAgentStore              |
| store   | RunMessagesReader      | supports_run_messages        | SqlAgentStore, MemoryStore |
| store   | NamedThreadCreator     | supports_named_threads       | SqlAgentStore, MemoryStore |
| store   | ThreadLister           | supports_thread_listing      | SqlAgentStore, MemoryStore |
| store   | TranscriptReader       | supports_transcripts         | SqlAgentStore, MemoryStore |
| store   | ErasingStore           | supports_erasure             | SqlAgentStore, MemoryStore |
| store   | HistorySearcher        | supports_history_search      | SqlAgentStore              |
| store   | MigratingStore         | supports_migrations          | SqlAgentStore              |
| store   | DisposableStore        | supports_disposal            | SqlAgentStore              |
| runtime | KeyedRunFinder         | supports_keyed_runs          | SqlJournal, InlineRuntime  |
| runtime | RunExecutor            | supports_run_executor        | DbosRuntime                |
| runtime | RunTimelineReader      | supports_run_timeline        | SqlJournal                 |
| runtime | JournalPruner          | supports_pruning             | SqlJournal                 |
| runtime | RunEraser              | supports_run_erasure         | DbosRuntime                |
| runtime | RuntimeLauncher        | supports_launch              | DbosRuntime                |
| context | JournalFigures         | supports_journal_figures     | the project's contexts     |
| ledger  | TransactionalLedger    | supports_ledger_transactions | SqlLedger                  |
| ledger  | QuotaReserver          | supports_reservations        | SqlLedger, MemoryLedger    |

One power is not here: `SqlJournalHost` (`bounded_agents.store.host`, probe `hosts_sql_journal`),
a store on this project's SQL schema, because it names SQLAlchemy's `AsyncEngine` and the core
imports no framework. It follows the same style.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol, TypeGuard, TypeVar, runtime_checkable

from bounded_agents.core.messages import Message
from bounded_agents.core.ports.durable import Transaction
from bounded_agents.core.ports.model import ModelRequest, ModelResponse, TextDelta
from bounded_agents.core.ports.runtime_powers import (
    JournalFigures,
    JournalPruner,
    KeyedRunFinder,
    QuotaReserver,
    RunEraser,
    RunExecutor,
    RuntimeLauncher,
    RunTimelineReader,
    TransactionalLedger,
    ledger_supports_transactions,
    supports_journal_figures,
    supports_keyed_runs,
    supports_launch,
    supports_ledger_transactions,
    supports_pruning,
    supports_reservations,
    supports_run_erasure,
    supports_run_executor,
    supports_run_timeline,
)
from bounded_agents.core.ports.store import (
    FoldHealth,
    Thread,
    ThreadListing,
    ThreadSummary,
    ThreadTurnPage,
    ThreadTurnQuery,
)

_T = TypeVar("_T")


# --- model ---------------------------------------------------------------------------------


@runtime_checkable
class StreamingModelProvider(Protocol):
    """Optional: a provider that streams. The last event is the full `ModelResponse`."""

    def stream(self, request: ModelRequest) -> AsyncIterator[TextDelta | ModelResponse]: ...


def supports_streaming(model: object) -> TypeGuard[StreamingModelProvider]:
    return isinstance(model, StreamingModelProvider)


@runtime_checkable
class ClosingModelProvider(Protocol):
    """Optional: a provider holding connections (an HTTP client's pool), which the module's
    lifespan closes on the way out, after the last turn."""

    async def aclose(self) -> None: ...


def supports_closing(model: object) -> TypeGuard[ClosingModelProvider]:
    return isinstance(model, ClosingModelProvider)


# --- store ---------------------------------------------------------------------------------


@runtime_checkable
class ThreadInfoReader(Protocol):
    """Optional: a store that can answer "whose thread is this" without reading its messages."""

    async def get_thread_info(self, thread_id: str) -> Thread | None: ...


def supports_thread_info(store: object) -> TypeGuard[ThreadInfoReader]:
    return isinstance(store, ThreadInfoReader)


@runtime_checkable
class ThreadTurnReader(Protocol):
    """Optional: a store that can read just what a turn needs."""

    async def load_thread_for_turn(self, query: ThreadTurnQuery) -> ThreadTurnPage | None: ...


def supports_bounded_read(store: object) -> TypeGuard[ThreadTurnReader]:
    """runtime_checkable looks for the method name only, which is all a probe needs."""
    return isinstance(store, ThreadTurnReader)


@runtime_checkable
class PromptDigestStore(Protocol):
    """Optional: a store that remembers each thread's last chat prompt as a digest, so the first
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


def supports_prompt_digests(store: object) -> TypeGuard[PromptDigestStore]:
    return isinstance(store, PromptDigestStore)


@runtime_checkable
class SummaryStore(Protocol):
    """Optional: a store that keeps each thread's rolling summary. A summarizing policy needs
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


def supports_summaries(store: object) -> TypeGuard[SummaryStore]:
    return isinstance(store, SummaryStore)


@runtime_checkable
class FoldHealthStore(Protocol):
    """Optional: a store that keeps each thread's fold health (`FoldHealth`: the last fold's
    outcome and the backoff after refused or failed folds), so a restart does not forget a
    failing summarizer's backoff. Its bounded turn read returns it on the page
    (`ThreadTurnPage.fold_health`)."""

    async def fold_health(self, thread_id: str) -> FoldHealth | None:
        """The thread's fold health; None when it never failed (or no such thread)."""
        ...

    async def save_fold_health(
        self, thread_id: str, health: FoldHealth | None, *, tx: Transaction | None = None
    ) -> None:
        """Replace it (None: plainly healthy). Idempotent; with `tx`, inside that transaction."""
        ...


def supports_fold_health(store: object) -> TypeGuard[FoldHealthStore]:
    return isinstance(store, FoldHealthStore)


@runtime_checkable
class TransactionalStore(Protocol):
    """Optional: a store whose turn writes and turn read can join a durable context's
    transaction (`DurableContext.transaction()`), so a checkpoint and its writes commit once."""

    joins_transactions: bool

    async def append_messages(
        self, thread_id: str, messages: Sequence[Message], *, tx: Transaction | None = None
    ) -> list[Message]: ...

    async def load_thread_for_turn(
        self, query: ThreadTurnQuery, *, tx: Transaction | None = None
    ) -> ThreadTurnPage | None: ...

    async def save_summary(
        self, thread_id: str, summary: ThreadSummary, *, tx: Transaction | None = None
    ) -> None: ...


def supports_transactions(store: object) -> TypeGuard[TransactionalStore]:
    return isinstance(store, TransactionalStore)


@runtime_checkable
class RunMessagesReader(Protocol):
    """Optional: a store that can read the messages one run wrote without reading the thread."""

    async def run_messages(self, thread_id: str, run_id: str) -> list[Message]:
        """The run's user message and answer (whichever are stored), in seq order."""
        ...


def supports_run_messages(store: object) -> TypeGuard[RunMessagesReader]:
    return isinstance(store, RunMessagesReader)


@runtime_checkable
class NamedThreadCreator(Protocol):
    """Optional: a store that creates a thread under an id the caller chose, once. A request
    that starts a new thread with an Idempotency-Key names it after the actor and the key, so
    its retry finds the same thread (and the key's run in it) instead of starting another."""

    async def create_named_thread(
        self, thread_id: str, *, actor_id: str, agent: str, title: str | None = None
    ) -> Thread:
        """The thread `thread_id`: created now, or as it already was (whoever owns it: the
        caller checks)."""
        ...


def supports_named_threads(store: object) -> TypeGuard[NamedThreadCreator]:
    return isinstance(store, NamedThreadCreator)


@runtime_checkable
class ThreadLister(Protocol):
    """Optional: a store that lists an actor's threads, newest activity first, a page at a time."""

    async def list_threads(
        self, actor_id: str, *, limit: int, offset: int = 0
    ) -> list[ThreadListing]: ...


def supports_thread_listing(store: object) -> TypeGuard[ThreadLister]:
    return isinstance(store, ThreadLister)


@runtime_checkable
class TranscriptReader(Protocol):
    """Optional: a store that pages through a thread's transcript without reading the whole
    thread (what the transcript route serves)."""

    async def list_messages(
        self, thread_id: str, *, limit: int, before: int | None = None
    ) -> list[Message]:
        """Up to `limit` messages with `seq < before` (the newest page when None), oldest first."""
        ...


def supports_transcripts(store: object) -> TypeGuard[TranscriptReader]:
    return isinstance(store, TranscriptReader)


@runtime_checkable
class ErasingStore(Protocol):
    """Optional: a store that erases a message or a whole thread (the right to erasure): no
    byte of it stays in the store, summaries made of it and later `search_history` results
    quoting it included (`bounded_agents.core.erasure`); one transaction each,
    refused with `ThreadBusy` while a live run holds the thread. Ledger rows stay."""

    async def delete_thread(self, thread_id: str) -> bool:
        """Erase the thread and all of it but its ledger rows; False if there was none."""
        ...

    async def delete_message(self, thread_id: str, seq: int) -> bool:
        """Erase one message and every summary covering it (the next turns fold that span
        again from what is left); False if the thread has no message `seq`."""
        ...


def supports_erasure(store: object) -> TypeGuard[ErasingStore]:
    return isinstance(store, ErasingStore)


@runtime_checkable
class HistorySearcher(Protocol):
    """Optional: a store with a full-text index over its messages, so the history search tool
    (`bounded_agents.core.search`) ranks a whole thread in one indexed query instead of scanning
    its newest rows (the fallback every other store gets)."""

    async def search_messages(self, thread_id: str, query: str, *, limit: int) -> list[Message]:
        """Up to `limit` messages of `thread_id` whose content matches any word of `query`,
        best first. `query` is whatever the model wrote: words, never syntax, so no input may
        raise (a quote, `*`, `NEAR(`, `-`); a query with no word finds nothing. The read names
        the thread: it never returns, ranks against or scans another thread's messages."""
        ...


def supports_history_search(store: object) -> TypeGuard[HistorySearcher]:
    return isinstance(store, HistorySearcher)


@runtime_checkable
class MigratingStore(Protocol):
    """Optional: a store that brings its own database to the newest schema; the module's
    lifespan runs it at start-up when AGENT_MIGRATE_ON_START is on (the default)."""

    async def create_schema(self) -> None: ...


def supports_migrations(store: object) -> TypeGuard[MigratingStore]:
    return isinstance(store, MigratingStore)


@runtime_checkable
class DisposableStore(Protocol):
    """Optional: a store holding connections (a pool), closed at shutdown by the module that
    built it (a store passed to `for_root` is its owner's to close)."""

    async def dispose(self) -> None: ...


def supports_disposal(store: object) -> TypeGuard[DisposableStore]:
    return isinstance(store, DisposableStore)


# --- the list ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Power:
    """One optional power: what has it (`on`), its protocol and its probe."""

    on: Literal["model", "store", "runtime", "context", "ledger"]
    protocol: type
    probe: Callable[[object], bool]


POWERS: tuple[Power, ...] = (
    Power("model", StreamingModelProvider, supports_streaming),
    Power("model", ClosingModelProvider, supports_closing),
    Power("store", ThreadInfoReader, supports_thread_info),
    Power("store", ThreadTurnReader, supports_bounded_read),
    Power("store", PromptDigestStore, supports_prompt_digests),
    Power("store", SummaryStore, supports_summaries),
    Power("store", FoldHealthStore, supports_fold_health),
    Power("store", TransactionalStore, supports_transactions),
    Power("store", RunMessagesReader, supports_run_messages),
    Power("store", NamedThreadCreator, supports_named_threads),
    Power("store", ThreadLister, supports_thread_listing),
    Power("store", TranscriptReader, supports_transcripts),
    Power("store", ErasingStore, supports_erasure),
    Power("store", HistorySearcher, supports_history_search),
    Power("store", MigratingStore, supports_migrations),
    Power("store", DisposableStore, supports_disposal),
    Power("runtime", KeyedRunFinder, supports_keyed_runs),
    Power("runtime", RunExecutor, supports_run_executor),
    Power("runtime", RunTimelineReader, supports_run_timeline),
    Power("runtime", JournalPruner, supports_pruning),
    Power("runtime", RunEraser, supports_run_erasure),
    Power("runtime", RuntimeLauncher, supports_launch),
    Power("context", JournalFigures, supports_journal_figures),
    Power("ledger", TransactionalLedger, supports_ledger_transactions),
    Power("ledger", QuotaReserver, supports_reservations),
)
"""Every optional power, in the module docstring's order."""


__all__ = [
    "POWERS",
    "ClosingModelProvider",
    "DisposableStore",
    "ErasingStore",
    "FoldHealthStore",
    "HistorySearcher",
    "JournalFigures",
    "JournalPruner",
    "KeyedRunFinder",
    "MigratingStore",
    "NamedThreadCreator",
    "Power",
    "PromptDigestStore",
    "QuotaReserver",
    "RunEraser",
    "RunExecutor",
    "RunMessagesReader",
    "RunTimelineReader",
    "RuntimeLauncher",
    "StreamingModelProvider",
    "SummaryStore",
    "ThreadInfoReader",
    "ThreadLister",
    "ThreadTurnReader",
    "TransactionalLedger",
    "TransactionalStore",
    "TranscriptReader",
    "ledger_supports_transactions",
    "supports_bounded_read",
    "supports_closing",
    "supports_disposal",
    "supports_erasure",
    "supports_fold_health",
    "supports_history_search",
    "supports_journal_figures",
    "supports_keyed_runs",
    "supports_launch",
    "supports_ledger_transactions",
    "supports_migrations",
    "supports_named_threads",
    "supports_prompt_digests",
    "supports_pruning",
    "supports_reservations",
    "supports_run_erasure",
    "supports_run_executor",
    "supports_run_messages",
    "supports_run_timeline",
    "supports_streaming",
    "supports_summaries",
    "supports_thread_info",
    "supports_thread_listing",
    "supports_transactions",
    "supports_transcripts",
]
