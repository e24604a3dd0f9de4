"""The optional powers of a model, a store, a durable runtime and a ledger, and their probes.

A port's base protocol is what every implementation has; a power is what only some do. Each power
is ONE `runtime_checkable` Protocol here with ONE probe, `supports_<power>(obj) ->
TypeGuard[TheProtocol]`, and the probe is the only way code asks: never `isinstance` of a concrete
class, never `getattr`/`hasattr` on a method name, never a wrapper's `__getattr__`. A wrapper
(an observing runtime) declares the powers of what it wraps by implementing them. `POWERS` lists
every one, so a new power is one protocol, one probe and one row there, and one row in the table
of docs/architecture.md ("Optional powers"), which says who has each (tests/core/test_powers.py
checks both).

What every store and every ledger has is their base contract, not a power: `AgentStore`
(`core/ports/store.py`: thread info, prompt digests, summaries, a run's messages, named threads,
listing, transcripts, erasure) and `Ledger` (`core/ports/ledger.py`: quota reservations). Their
old probes (`supports_thread_info`, ..., `supports_reservations`) stay, true of every conforming
store, while the turn's `TurnStore`/`TurnLedger` still call them.

One power is not here: `SqlJournalHost` (`bounded_agents.store.host`, probe `hosts_sql_journal`),
a store on this project's SQL schema, because it names SQLAlchemy's `AsyncEngine` and the core
imports no framework. It follows the same style.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol, TypeGuard, TypeVar, runtime_checkable

from bounded_agents.core.messages import Message
from bounded_agents.core.ports.durable import Transaction
from bounded_agents.core.ports.model import ModelRequest, ModelResponse, TextDelta
from bounded_agents.core.ports.runtime_powers import (
    ErasedRunSweeper,
    JournalFigures,
    JournalPruner,
    KeyedRunFinder,
    OwnerCheckingRuntime,
    RatioBook,
    RunEraser,
    RunExecutor,
    RunForgetter,
    RuntimeLauncher,
    RunTimelineReader,
    ThreadHolder,
    TransactionalLedger,
    ledger_supports_transactions,
    supports_erased_run_sweep,
    supports_journal_figures,
    supports_keyed_runs,
    supports_launch,
    supports_ledger_transactions,
    supports_owner_check,
    supports_pruning,
    supports_ratio_book,
    supports_reservations,
    supports_run_erasure,
    supports_run_executor,
    supports_run_forgetting,
    supports_run_timeline,
    supports_thread_holding,
)
from bounded_agents.core.ports.store import (
    ArchivedPart,
    ErasingStore,
    FoldHealth,
    NamedThreadCreator,
    PromptDigestStore,
    RunMessagesReader,
    SearchHit,
    SummaryStore,
    ThreadInfoReader,
    ThreadLister,
    ThreadSummary,
    ThreadTurnPage,
    ThreadTurnQuery,
    TranscriptReader,
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


@runtime_checkable
class TokenCountingProvider(Protocol):
    """Optional: a provider that counts a request's input tokens exactly without running it
    (Anthropic's free count-tokens endpoint). The loop asks it once per model and process,
    before the model has reported any usage, to learn its token ratio ahead of the first fold
    (`bounded_agents.core.turn.spend.count_before_learning`)."""

    async def count_tokens(self, request: ModelRequest) -> int: ...


def supports_token_counting(model: object) -> TypeGuard[TokenCountingProvider]:
    return isinstance(model, TokenCountingProvider)


# --- store ---------------------------------------------------------------------------------


def supports_thread_info(store: object) -> TypeGuard[ThreadInfoReader]:
    """Base contract now (`AgentStore`): true of every store. Kept while the turn's
    `TurnStore` still probes it; not a power (not in `POWERS`)."""
    return isinstance(store, ThreadInfoReader)


@runtime_checkable
class ThreadTurnReader(Protocol):
    """Optional: a store that can read just what a turn needs."""

    async def load_thread_for_turn(self, query: ThreadTurnQuery) -> ThreadTurnPage | None: ...


def supports_bounded_read(store: object) -> TypeGuard[ThreadTurnReader]:
    """runtime_checkable looks for the method name only, which is all a probe needs."""
    return isinstance(store, ThreadTurnReader)


def supports_prompt_digests(store: object) -> TypeGuard[PromptDigestStore]:
    """Base contract now (`AgentStore`): true of every store. Kept while the turn's
    `TurnStore` still probes it; not a power (not in `POWERS`)."""
    return isinstance(store, PromptDigestStore)


def supports_summaries(store: object) -> TypeGuard[SummaryStore]:
    """Base contract now (`AgentStore`): true of every store. Kept while the turn's
    `TurnStore` still probes it; not a power (not in `POWERS`)."""
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


def supports_run_messages(store: object) -> TypeGuard[RunMessagesReader]:
    """Base contract now (`AgentStore`): true of every store. Kept while the turn's
    `TurnStore` still probes it; not a power (not in `POWERS`)."""
    return isinstance(store, RunMessagesReader)


def supports_named_threads(store: object) -> TypeGuard[NamedThreadCreator]:
    """Base contract now (`AgentStore`): true of every store. Kept while the turn's
    `TurnStore` still probes it; not a power (not in `POWERS`)."""
    return isinstance(store, NamedThreadCreator)


def supports_thread_listing(store: object) -> TypeGuard[ThreadLister]:
    """Base contract now (`AgentStore`): true of every store. Kept while the turn's
    `TurnStore` still probes it; not a power (not in `POWERS`)."""
    return isinstance(store, ThreadLister)


def supports_transcripts(store: object) -> TypeGuard[TranscriptReader]:
    """Base contract now (`AgentStore`): true of every store. Kept while the turn's
    `TurnStore` still probes it; not a power (not in `POWERS`)."""
    return isinstance(store, TranscriptReader)


def supports_erasure(store: object) -> TypeGuard[ErasingStore]:
    """Base contract now (`AgentStore`): true of every store. Kept while the turn's
    `TurnStore` still probes it; not a power (not in `POWERS`)."""
    return isinstance(store, ErasingStore)


@runtime_checkable
class ErasedThreadPruner(Protocol):
    """Optional: a store that keeps the ids of threads erased whole (so a keyed retry of an
    erased conversation is refused: `create_named_thread(..., unless_erased=True)`) ends that
    keeping after a retention: the owner's id, kept with the thread's, is personal data."""

    async def prune_erased(self, older_than_seconds: float, limit: int) -> int:
        """Forget up to `limit` erased threads' ids kept at least `older_than_seconds`, oldest
        first; how many went."""
        ...


def supports_erased_pruning(store: object) -> TypeGuard[ErasedThreadPruner]:
    return isinstance(store, ErasedThreadPruner)


@runtime_checkable
class ErasedThreadReader(Protocol):
    """Optional: a store that keeps erased threads' ids answers whether one was erased, without
    making it. A keyed `/v1` request over quota must not create its thread, yet its retry after
    the conversation was deleted is owed the same answer as under quota (410 `answer_erased`,
    the key's turn ran), not a 429 that invites a retry that can never succeed."""

    async def thread_erased(self, thread_id: str) -> bool:
        """Whether `thread_id` was erased whole and its id is still kept."""
        ...


def supports_erased_reads(store: object) -> TypeGuard[ErasedThreadReader]:
    return isinstance(store, ErasedThreadReader)


@runtime_checkable
class HistorySearcher(Protocol):
    """Optional: a store with a full-text index over what its threads' models saw (message
    text, tool results but the search tool's own, archived summary parts), so the history
    search tool (`bounded_agents.core.search`) ranks a whole thread in one indexed query
    instead of scanning its newest rows (the fallback every other store gets)."""

    async def search_history(
        self, thread_id: str, query: str, *, limit: int, max_chars: int | None = None
    ) -> list[SearchHit]:
        """Up to `limit` hits of `thread_id` matching any word of `query` (stemmed as the
        index's language says), best first: relevance weighed with recency, newest first
        among equals. `query` is whatever the model wrote: words, never syntax, so no input
        may raise (a quote, `*`, `NEAR(`, `-`); a query with no word finds nothing. The read
        names the thread: it never returns, ranks against or scans another thread's rows.
        `max_chars`: only rows whose text and tool results (an archived part's text) are at
        most this long together, ranked among themselves (the statements a value's form is
        followed to, `core.search_forms`: a pasted log holding the word many times would take
        every place otherwise)."""
        ...

    async def messages_at(self, thread_id: str, seqs: Collection[int]) -> list[Message]:
        """The messages of `thread_id` at `seqs` (those that exist), oldest first, in one read:
        the users' replies to the questions a search found (`core.search_results.reply_hits`)."""
        ...


def supports_history_search(store: object) -> TypeGuard[HistorySearcher]:
    return isinstance(store, HistorySearcher)


@runtime_checkable
class SearchIndexer(Protocol):
    """Optional: a store whose search index is kept only for the threads of agents that
    search, so a turn of any other agent never feeds it (issue 37)."""

    async def index_agents(self, searching: Collection[str], not_searching: Collection[str]) -> int:
        """From now on index the threads of `searching` (their messages stored before are
        indexed first, in bounded batches: search finds them) and no new message of
        `not_searching`'s threads; agents in neither are left as they are. Returns how many
        messages were indexed."""
        ...


def supports_search_indexing(store: object) -> TypeGuard[SearchIndexer]:
    return isinstance(store, SearchIndexer)


@runtime_checkable
class SummaryArchive(Protocol):
    """Optional: a store that keeps the parts of a summary that could not be compressed below
    its cap, instead of their being clipped away: searchable, listed for the inspector, erased
    with the thread and with any message they cover."""

    async def archive_summary_part(
        self,
        thread_id: str,
        from_seq: int,
        to_seq: int,
        content: str,
        *,
        tx: Transaction | None = None,
    ) -> ArchivedPart:
        """Store the notes written from messages `from_seq..to_seq`; idempotent on (thread,
        range, text): a replayed fold stores the part once."""
        ...

    async def archived_parts(
        self, thread_id: str, *, limit: int = 100, before_seq: int | None = None
    ) -> list[ArchivedPart]:
        """The thread's archived parts, newest range first, at most `limit`, those ending
        before `before_seq` when given (paging)."""
        ...


def supports_summary_archive(store: object) -> TypeGuard[SummaryArchive]:
    return isinstance(store, SummaryArchive)


@runtime_checkable
class IntactSummarySaver(Protocol):
    """Optional: a store that saves a summary only while every message it was made from is
    still stored, checked under the lock an erasure takes. A fold outside a run (the framework
    adapters': `integrations.ThreadHistory`) holds no lease an erasure would refuse for, so an
    erasure can land between its read and its save (found by attack: the summary then kept the
    erased text); the loop's folds run inside a run, which the erasure refuses, and need none."""

    async def save_summary_if_intact(
        self,
        thread_id: str,
        summary: ThreadSummary,
        folded: Sequence[int],
        base: int | None = None,
        *,
        digest: str | None = None,
    ) -> bool:
        """Save `summary` (as `save_summary`) if the messages at `folded` (the seqs it was made
        from) are all still stored and, when it was written on top of the summary ending at
        `base`, that summary is still stored (an erasure of any message it covers deletes it);
        False, and nothing saved, otherwise. With `digest` (`core.summary.chunk_digest` of the
        chunk's rows), the rows from the first to the last of `folded` must be those very rows:
        a thread erased and made again under its id has the same seqs."""
        ...


def supports_intact_summaries(store: object) -> TypeGuard[IntactSummarySaver]:
    return isinstance(store, IntactSummarySaver)


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
    Power("model", TokenCountingProvider, supports_token_counting),
    Power("store", ThreadTurnReader, supports_bounded_read),
    Power("store", FoldHealthStore, supports_fold_health),
    Power("store", TransactionalStore, supports_transactions),
    Power("store", HistorySearcher, supports_history_search),
    Power("store", SearchIndexer, supports_search_indexing),
    Power("store", SummaryArchive, supports_summary_archive),
    Power("store", IntactSummarySaver, supports_intact_summaries),
    Power("store", MigratingStore, supports_migrations),
    Power("store", DisposableStore, supports_disposal),
    Power("store", ErasedThreadPruner, supports_erased_pruning),
    Power("store", ErasedThreadReader, supports_erased_reads),
    Power("runtime", KeyedRunFinder, supports_keyed_runs),
    Power("runtime", RunExecutor, supports_run_executor),
    Power("runtime", RunTimelineReader, supports_run_timeline),
    Power("runtime", JournalPruner, supports_pruning),
    Power("runtime", RunEraser, supports_run_erasure),
    Power("runtime", ErasedRunSweeper, supports_erased_run_sweep),
    Power("runtime", RunForgetter, supports_run_forgetting),
    Power("runtime", RuntimeLauncher, supports_launch),
    Power("runtime", ThreadHolder, supports_thread_holding),
    Power("runtime", OwnerCheckingRuntime, supports_owner_check),
    Power("context", JournalFigures, supports_journal_figures),
    Power("ledger", TransactionalLedger, supports_ledger_transactions),
    Power("ledger", RatioBook, supports_ratio_book),
)
"""Every optional power, in the module docstring's order."""


__all__ = [
    "POWERS",
    "ClosingModelProvider",
    "DisposableStore",
    "ErasedRunSweeper",
    "ErasedThreadPruner",
    "ErasedThreadReader",
    "FoldHealthStore",
    "HistorySearcher",
    "IntactSummarySaver",
    "JournalFigures",
    "JournalPruner",
    "KeyedRunFinder",
    "MigratingStore",
    "OwnerCheckingRuntime",
    "Power",
    "RatioBook",
    "RunEraser",
    "RunExecutor",
    "RunForgetter",
    "RunTimelineReader",
    "RuntimeLauncher",
    "SearchIndexer",
    "StreamingModelProvider",
    "SummaryArchive",
    "ThreadHolder",
    "ThreadTurnReader",
    "TokenCountingProvider",
    "TransactionalLedger",
    "TransactionalStore",
    "ledger_supports_transactions",
    "supports_bounded_read",
    "supports_closing",
    "supports_disposal",
    "supports_erased_pruning",
    "supports_erased_reads",
    "supports_erased_run_sweep",
    "supports_erasure",
    "supports_fold_health",
    "supports_history_search",
    "supports_intact_summaries",
    "supports_journal_figures",
    "supports_keyed_runs",
    "supports_launch",
    "supports_ledger_transactions",
    "supports_migrations",
    "supports_named_threads",
    "supports_owner_check",
    "supports_prompt_digests",
    "supports_pruning",
    "supports_ratio_book",
    "supports_reservations",
    "supports_run_erasure",
    "supports_run_executor",
    "supports_run_forgetting",
    "supports_run_messages",
    "supports_run_timeline",
    "supports_search_indexing",
    "supports_streaming",
    "supports_summaries",
    "supports_summary_archive",
    "supports_thread_holding",
    "supports_thread_info",
    "supports_thread_listing",
    "supports_token_counting",
    "supports_transactions",
    "supports_transcripts",
]
