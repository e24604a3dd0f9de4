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
| store   | ThreadInfoReader       | supports_thread_info         | SqlAgentStore, MemoryStore |
| store   | ThreadTurnReader       | supports_bounded_read        | SqlAgentStore              |
| store   | PromptDigestStore      | supports_prompt_digests      | SqlAgentStore, MemoryStore |
| store   | SummaryStore           | supports_summaries           | SqlAgentStore, MemoryStore |
| store   | TransactionalStore     | supports_transactions        | SqlAgentStore              |
| store   | RunMessagesReader      | supports_run_messages        | SqlAgentStore, MemoryStore |
| store   | NamedThreadCreator     | supports_named_threads       | SqlAgentStore, MemoryStore |
| store   | ThreadLister           | supports_thread_listing      | SqlAgentStore, MemoryStore |
| store   | TranscriptReader       | supports_transcripts         | SqlAgentStore, MemoryStore |
| store   | HistorySearcher        | supports_history_search      | SqlAgentStore              |
| runtime | KeyedRunFinder         | supports_keyed_runs          | SqlJournal, InlineRuntime  |
| runtime | RunExecutor            | supports_run_executor        | DbosRuntime                |
| runtime | RunTimelineReader      | supports_run_timeline        | SqlJournal                 |
| runtime | JournalPruner          | supports_pruning             | SqlJournal                 |
| ledger  | TransactionalLedger    | supports_ledger_transactions | SqlLedger                  |
| ledger  | QuotaReserver          | supports_reservations        | SqlLedger, MemoryLedger    |

One power is not here: `SqlJournalHost` (`bounded_agents.store.host`, probe `hosts_sql_journal`),
a store on this project's SQL schema, because it names SQLAlchemy's `AsyncEngine` and the core
imports no framework. It follows the same style.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol, TypeGuard, TypeVar, runtime_checkable

from bounded_agents.core.messages import Message
from bounded_agents.core.ports.durable import PrunedStatus, RunResumer, RunTrace, Transaction
from bounded_agents.core.ports.ledger import LedgerEntry
from bounded_agents.core.ports.model import ModelRequest, ModelResponse, TextDelta
from bounded_agents.core.ports.store import (
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


# --- durable runtime -----------------------------------------------------------------------


@runtime_checkable
class KeyedRunFinder(Protocol):
    """Optional: a runtime that finds a run by its Idempotency-Key. `begin` already refuses a
    second run under a key; this lets a request refused before `begin` (a spent quota) still
    be answered with the run its key names."""

    async def find_keyed_run(
        self, thread_id: str, actor_id: str, key: str
    ) -> tuple[str, str] | None:
        """(run id, request fingerprint) of the run under `key`, or None."""
        ...


def supports_keyed_runs(runtime: object) -> TypeGuard[KeyedRunFinder]:
    return isinstance(runtime, KeyedRunFinder)


@runtime_checkable
class RunExecutor(Protocol):
    """Optional: a durable runtime that executes each attempt of a run itself, as a workflow of
    an outside engine (`DbosRuntime`: a DBOS workflow). The engine's own recovery then calls
    the run again after a restart, through the resumer the loop registers; the runtime's lease
    stays the thread's lock. A runtime without it is simply awaited by the loop (`SqlJournal`)."""

    def register_resumer(self, resume: RunResumer) -> None:
        """What the engine's recovery calls with a run id (the loop registers its `resume`)."""
        ...

    async def execute(self, run_id: str, attempt: Callable[[], Awaitable[_T]]) -> _T:
        """Run one attempt of the run (begun or reopened just before) inside the engine's
        workflow, and return what it returns; its context's steps are that workflow's steps."""
        ...


def supports_run_executor(runtime: object) -> TypeGuard[RunExecutor]:
    return isinstance(runtime, RunExecutor)


@runtime_checkable
class RunTimelineReader(Protocol):
    """Optional: a durable runtime that lists a thread's runs with their journal (`SqlJournal`)."""

    async def thread_runs(
        self, thread_id: str, *, limit: int, before_seq: int | None = None
    ) -> list[RunTrace]:
        """The newest `limit` runs whose user message has `seq < before_seq`, newest first."""
        ...


def supports_run_timeline(runtime: object) -> TypeGuard[RunTimelineReader]:
    return isinstance(runtime, RunTimelineReader)


@runtime_checkable
class JournalPruner(Protocol):
    """Optional: a durable runtime whose finished runs' journals can be deleted (`SqlJournal`)."""

    async def prune_steps(
        self, older_than_seconds: float, limit: int, *, status: PrunedStatus = "completed"
    ) -> int:
        """Delete the journals of up to `limit` runs that ended with `status` at least that
        long ago; returns how many runs were pruned (fewer than `limit`: none are left now)."""
        ...


def supports_pruning(runtime: object) -> TypeGuard[JournalPruner]:
    return isinstance(runtime, JournalPruner)


# --- ledger --------------------------------------------------------------------------------


@runtime_checkable
class TransactionalLedger(Protocol):
    """Optional: a ledger whose rows can join a durable context's transaction, so a model step
    and its ledger row commit once."""

    joins_transactions: bool

    async def record(self, entry: LedgerEntry, *, tx: Transaction | None = None) -> None: ...


def supports_ledger_transactions(ledger: object) -> TypeGuard[TransactionalLedger]:
    return isinstance(ledger, TransactionalLedger)


ledger_supports_transactions = supports_ledger_transactions
"""The probe's earlier name, kept for code written against it."""


@runtime_checkable
class QuotaReserver(Protocol):
    """Optional: a ledger that holds tokens for a model call while it is in flight, so a quota
    holds under concurrency. The actor's total counts spent AND reserved tokens; a call may
    start only while that total is below the quota, checked and bumped in one atomic step."""

    async def reserve(self, actor_id: str, tokens: int, limit: int) -> bool:
        """Add `tokens` to the actor's total if it is below `limit`, atomically; False (and
        nothing added) when it is not."""
        ...

    async def release(self, actor_id: str, tokens: int) -> None:
        """Give back a reservation whose call failed (it spent nothing the ledger knows of)."""
        ...

    async def record_reserved(
        self, entry: LedgerEntry, reserved: int, *, tx: Transaction | None = None
    ) -> None:
        """`record(entry)` and give back the call's reservation, in one transaction: the
        total goes from reserved to spent without a moment in which it counts neither."""
        ...


def supports_reservations(ledger: object) -> TypeGuard[QuotaReserver]:
    return isinstance(ledger, QuotaReserver)


# --- the list ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Power:
    """One optional power: what has it (`on`), its protocol and its probe."""

    on: Literal["model", "store", "runtime", "ledger"]
    protocol: type
    probe: Callable[[object], bool]


POWERS: tuple[Power, ...] = (
    Power("model", StreamingModelProvider, supports_streaming),
    Power("store", ThreadInfoReader, supports_thread_info),
    Power("store", ThreadTurnReader, supports_bounded_read),
    Power("store", PromptDigestStore, supports_prompt_digests),
    Power("store", SummaryStore, supports_summaries),
    Power("store", TransactionalStore, supports_transactions),
    Power("store", RunMessagesReader, supports_run_messages),
    Power("store", NamedThreadCreator, supports_named_threads),
    Power("store", ThreadLister, supports_thread_listing),
    Power("store", TranscriptReader, supports_transcripts),
    Power("store", HistorySearcher, supports_history_search),
    Power("runtime", KeyedRunFinder, supports_keyed_runs),
    Power("runtime", RunExecutor, supports_run_executor),
    Power("runtime", RunTimelineReader, supports_run_timeline),
    Power("runtime", JournalPruner, supports_pruning),
    Power("ledger", TransactionalLedger, supports_ledger_transactions),
    Power("ledger", QuotaReserver, supports_reservations),
)
"""Every optional power, in the module docstring's order."""


__all__ = [
    "POWERS",
    "HistorySearcher",
    "JournalPruner",
    "KeyedRunFinder",
    "NamedThreadCreator",
    "Power",
    "PromptDigestStore",
    "QuotaReserver",
    "RunExecutor",
    "RunMessagesReader",
    "RunTimelineReader",
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
    "supports_history_search",
    "supports_keyed_runs",
    "supports_ledger_transactions",
    "supports_named_threads",
    "supports_prompt_digests",
    "supports_pruning",
    "supports_reservations",
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
