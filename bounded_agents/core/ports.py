"""The SPI: what the loop needs from a model, a store, a durable runtime and a ledger.

Ports are `typing.Protocol`s so third parties implement them without inheriting from us.
Optional powers are protocols of their own, probed at run time (`supports_bounded_read`,
`supports_streaming`, `supports_reservations`), never by `isinstance` of a concrete class.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager
from datetime import datetime
from typing import Any, Literal, Protocol, TypeAlias, TypeGuard, TypeVar, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

from bounded_agents.core.messages import ChatMessage, Message, ToolCall


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


# --- model ---------------------------------------------------------------------------------


MAX_CALL_TOKENS = 1_000_000_000
"""The most tokens one model call may report per field. No model reads or writes a billion
tokens in one call, so a larger (or negative) figure is a broken or hostile provider: it is
refused as a bad response rather than booked, where it would skew the ledger and any quota."""


class Usage(_Frozen):
    """Tokens one model call spent, as the provider reported them (or as estimated)."""

    prompt_tokens: int = Field(default=0, ge=0, le=MAX_CALL_TOKENS)
    completion_tokens: int = Field(default=0, ge=0, le=MAX_CALL_TOKENS)
    estimated: bool = False
    """True when the figures are the project's token estimate, not the provider's count (a
    server that reports none, `EchoModel`, a summarizer that returns no usage)."""
    cached_tokens: int | None = Field(default=None, ge=0, le=MAX_CALL_TOKENS)
    """Of `prompt_tokens`, those the provider served from its prompt cache (OpenAI's
    `usage.prompt_tokens_details.cached_tokens`); None when it did not say. Included in
    `prompt_tokens`, not added to it: a quota counts them, a price list may discount them."""


class ToolSpec(_Frozen):
    """A tool as advertised to the model: a name, what it is for, and a JSON schema."""

    name: str
    description: str = ""
    parameters: dict[str, Any] = Field(default_factory=lambda: {"type": "object", "properties": {}})


class ModelRequest(_Frozen):
    messages: list[ChatMessage]
    tools: list[ToolSpec] = Field(default_factory=list)
    purpose: str = "chat"
    """`chat` for agent steps, `history_summary` for the summarizer (kept in the ledger)."""
    max_tokens: int | None = Field(default=None, ge=1)
    """At most this many tokens of answer, when the caller needs a bound (the summarizer's
    call: a summary rides in every later prompt). A provider may pass it on
    (`OpenAICompatibleProvider` sends it in place of its own configured cap); the caller
    enforces its bound on what comes back anyway, so a provider that ignores it cannot grow
    the prompt."""


class ModelResponse(_Frozen):
    content: str
    tool_calls: list[ToolCall] = Field(default_factory=list)
    usage: Usage = Usage()
    model: str = ""
    finish_reason: str | None = None
    """Why the model stopped, as the provider said (`stop`, `length`, `tool_calls`,
    `content_filter`), or None when it did not say. A fold refuses a `length` summary: it was
    cut off, and would be stored as if it were whole."""


class TextDelta(_Frozen):
    """A piece of streamed answer text."""

    text: str


@runtime_checkable
class ModelProvider(Protocol):
    async def complete(self, request: ModelRequest) -> ModelResponse: ...


@runtime_checkable
class StreamingModelProvider(Protocol):
    """Optional: a provider that streams. The last event is the full `ModelResponse`."""

    def stream(self, request: ModelRequest) -> AsyncIterator[TextDelta | ModelResponse]: ...


def supports_streaming(model: ModelProvider) -> TypeGuard[StreamingModelProvider]:
    return isinstance(model, StreamingModelProvider)


# --- store ---------------------------------------------------------------------------------


class Thread(_Frozen):
    id: str
    actor_id: str
    agent: str
    title: str | None = None
    messages: list[Message] = Field(default_factory=list)
    created_at: datetime | None = None
    updated_at: datetime | None = None


@runtime_checkable
class AgentStore(Protocol):
    async def create_thread(
        self, *, actor_id: str, agent: str, title: str | None = None
    ) -> Thread: ...

    async def get_thread(self, thread_id: str) -> Thread | None:
        """Every message of the thread, in seq order; None for an unknown thread."""
        ...

    async def append_messages(self, thread_id: str, messages: Sequence[Message]) -> list[Message]:
        """Store `messages` at the end of the thread, all or none; returns them with `seq` set."""
        ...


@runtime_checkable
class ThreadInfoReader(Protocol):
    """Optional: a store that can answer "whose thread is this" without reading its messages."""

    async def get_thread_info(self, thread_id: str) -> Thread | None: ...


class ThreadSummary(_Frozen):
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


class ReadBound(_Frozen):
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


class ThreadTurnQuery(_Frozen):
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

    @classmethod
    def of(cls, thread_id: str, bound: ReadBound | None, *, after_summary: bool) -> ThreadTurnQuery:
        if bound is None:
            return cls(thread_id=thread_id, after_summary=after_summary)
        return cls(
            thread_id=thread_id,
            message_limit=bound.messages,
            token_limit=bound.tokens,
            run_limit=bound.runs,
            widest=bound.widest,
            after_summary=after_summary,
        )


class ThreadTurnPage(_Frozen):
    messages: list[Message]
    """The newest messages the query's limits select, oldest first."""
    title: str | None
    has_assistant_message: bool
    """Whether the thread was EVER answered: asked of the whole thread, never of the page."""
    summary: ThreadSummary | None = None
    """The newest summary, when the query asked for `after_summary` and there is one."""
    skipped: int = 0
    """Messages older than the page the query left unread (after the summary's boundary, when
    it asked for `after_summary`). A summarizing policy must fold them: nobody else will."""
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


class ThreadListing(_Frozen):
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
class ThreadLister(Protocol):
    """Optional: a store that lists an actor's threads, newest activity first, a page at a time."""

    async def list_threads(
        self, actor_id: str, *, limit: int, offset: int = 0
    ) -> list[ThreadListing]: ...


def supports_thread_listing(store: object) -> TypeGuard[ThreadLister]:
    return isinstance(store, ThreadLister)


# --- history policy SPI ---------------------------------------------------------------------
# The types a history policy and a summarizer speak. They live here, beside the other ports, so
# `core/history.py` (the built-in policies) and `core/summary.py` (the built-in summarizer) both
# depend on them without depending on each other.


class HistorySelection(_Frozen):
    """What `select` decided: `keep` is sent (oldest first), `drop` is left out.

    For a summarizing policy, `drop` (with anything older the read skipped) is folded into the
    thread's rolling summary; for any other it is gone from the prompt.
    """

    keep: list[Message]
    drop: list[Message]


class HistorySummary(_Frozen):
    """A summarizer's result. `usage` None means the summarizer could not say what it cost: the
    ledger books the token estimate instead, flagged as estimated. `model` names the model that
    wrote it, so the ledger books the summary under the same name as that model's chat calls."""

    text: str
    usage: Usage | None = None
    model: str | None = None
    finish_reason: str | None = None
    """The model's own reason for stopping, when the summarizer used one (`length` means the
    summary was cut off and is refused; `tool_calls` that it acted instead of writing)."""


class HistoryPolicyContext(_Frozen):
    """Who a turn is for, and what the thread already folded. A frozen model so fields can be
    added without changing any signature."""

    thread_id: str
    agent: str
    actor_id: str
    run_id: str
    summary: ThreadSummary | None = None
    """The thread's rolling summary so far. `select` sees only messages it does not cover; a
    summarizer must fold its text into the next summary, or what it held is lost."""
    skipped: int = 0
    """Messages after the summary's boundary that the bounded read left unread (older than the
    ones `select` is given). Non-zero means the history is past any bound the policy declared.
    Without a summary it is also where `select`'s messages start: the first one has
    `seq == skipped + 1`."""
    tokens_before: int = 0
    """Estimated tokens (`estimate_message_tokens`) of every message of the thread older than
    the first one `select` is given: where they start in the thread's running token count."""
    reported_tokens: int | None = None
    """The provider's own count of the thread's last chat call (prompt plus completion), when
    it reported one: the history as the model saw it before this turn's message."""
    summary_max_tokens: int | None = Field(default=None, ge=1)
    """Set for a summarizer call: the estimated tokens (`estimate_message_tokens`) the summary
    it returns may have. A longer one is clipped to it by the loop (see
    `bounded_agents.core.summary.clip_summary`), so a summarizer should ask for less
    (`summarize_with_model` tells the model a word limit and asks for fewer model tokens)."""
    fold_task: Literal["fold", "compress"] = "fold"
    """What a summarizer call is asked for. `fold`: extend `summary` with `messages`.
    `compress`: `messages` is empty and `summary` outgrew `summary_max_tokens`; return it
    shorter, keeping every identifier, decision, constraint and current value. A summarizer
    that ignores it and returns the summary unchanged gets it clipped, and the clip reported."""


Summarizer: TypeAlias = Callable[[list[Message], HistoryPolicyContext], Awaitable[HistorySummary]]
"""Folds messages into a summary: `(messages, ctx)`, with the summary so far in `ctx.summary`.
May do I/O: it runs in a checkpoint of its own."""

SummaryRenderer: TypeAlias = Callable[[str], str]
"""Words a summary for the prompt. Must be pure."""


@runtime_checkable
class HistoryPolicy(Protocol):
    """Decides which stored messages a turn sends. Only `select` is required.

    The loop also reads optional attributes with `getattr(policy, name, None)`:

    - `read_bound: ReadBound | None`: what the store reads. Declaring it is a PROMISE that
      `select` over only those messages keeps what it would keep over all of them. None reads
      everything (after the summary's boundary, for a summarizing policy). The older
      `max_messages: int` is read as `ReadBound(messages=max_messages)`.
    - `summarize: Summarizer | None`: makes the policy a ROLLING summarizer: `select` is handed
      only what the thread's summary does not cover, and what it drops (plus anything older the
      read skipped) is folded into the next summary, chunk by chunk, with the summary so far.
    - `render_summary: SummaryRenderer | None`: words the summary as the leading system message;
      None means `render_history_summary`.

    These are not protocol members, so `isinstance(obj, HistoryPolicy)` checks `select` only.
    """

    def select(self, messages: list[Message], ctx: HistoryPolicyContext) -> HistorySelection:
        """Split `messages` (oldest first; the last is the current user message) into keep and
        drop. Must be pure: it runs inside the journaled `load:thread` step."""
        ...


# --- durable runtime -----------------------------------------------------------------------

JsonValue: TypeAlias = Any
"""A value `json.dumps` accepts; what a durable step returns and its journal stores."""

Transaction: TypeAlias = object
"""An open unit of work a durable context hands out. Opaque to the core: it only passes it from
the context to the store and the ledger, which join it if it is theirs (same database)."""


@runtime_checkable
class DurableContext(Protocol):
    """One run's journal, as the loop sees it."""

    async def step(self, name: str, fn: Callable[[], Awaitable[JsonValue]]) -> JsonValue:
        """Run `fn` once and journal its result; on replay return the journaled result."""
        ...

    async def patched(self, marker: str) -> bool:
        """Temporal-style versioning: True on a new run (which records the marker); False on a
        run journaled before the marker existed, without spending a position for the question."""
        ...

    def unit_of_work(self) -> AbstractAsyncContextManager[None]:
        """Steps journaled inside the block commit together when it ends, in ONE transaction
        with the writes made through `transaction()`: all of them or none. Nothing is held
        open while a step's function runs until it asks for the transaction, so a model or tool
        call inside the block holds no transaction. On replay nothing is opened."""
        ...

    async def transaction(self) -> Transaction | None:
        """The block's transaction, opened now if it is not yet (its first statement checks the
        run's lease), for writes that must commit with the journal's rows. None outside a
        block, or when the runtime shares none: such writes then commit on their own."""
        ...


class Idempotency(_Frozen):
    """A turn's Idempotency-Key and what it was sent with: a repeat of the key (same actor,
    same thread) is answered with the first run's outcome, never run again; a repeat whose
    `fingerprint` differs is refused."""

    key: str
    fingerprint: str
    """A digest of the request the key came with (the HTTP layer's, see
    bounded_agents/http/idempotency)."""


class RunRequest(_Frozen):
    """What a run was asked to do: enough to resume it in another process."""

    run_id: str
    thread_id: str
    actor_id: str
    agent: str
    content: str
    idempotency: Idempotency | None = None
    """Set when the turn came with an Idempotency-Key: the runtime records the run under it, and
    refuses a second run under the same key with `TurnInProgress` (see `DurableRuntime.begin`).
    Only `begin` needs it: a request read back from a runtime may leave it out."""


class RunRecord(_Frozen):
    """A run as the durable runtime keeps it."""

    request: RunRequest
    status: str
    """`running`, `completed` or `failed`."""
    error_code: str | None = None
    error_message: str | None = None
    report: dict[str, Any] | None = None
    """The `RunReport` as JSON, once the run ended (completed or failed)."""
    created_at: datetime | None = None
    """When the run began (None where the runtime does not keep it)."""


@runtime_checkable
class DurableRuntime(Protocol):
    """Where runs live: it hands out a `DurableContext` per run and holds the thread lease."""

    async def begin(
        self, request: RunRequest, *, shared_first_unit: bool = False
    ) -> DurableContext:
        """Start a new run; `ThreadBusy` while another run holds the thread, and
        `TurnInProgress` (naming it) when a run under the request's `idempotency` key exists on
        the thread, running or ended: a runtime on a database decides it by a unique index, so
        two concurrent begins with one key never both start a run.

        `shared_first_unit`: every write of the run's first unit of work joins that unit's
        transaction, so the runtime may record the run in it (one commit less per turn)
        instead of committing it here. The caller promises no write of its own in between
        (on SQLite such a write would wait for the very transaction it sits in), to enter
        `keep_alive(run_id)` at once (leaving it rolls back a first unit never taken up,
        and a cancellation leaves nothing of the run) and to call `fail` if the attempt
        fails."""
        ...

    async def reopen(self, run_id: str) -> tuple[RunRequest, DurableContext]:
        """Take an unfinished run back (its journal replays); `RunNotFound` if there is none."""
        ...

    def keep_alive(self, run_id: str) -> AbstractAsyncContextManager[None]:
        """Hold the run's lease while the block runs (the loop wraps each run in it)."""
        ...

    async def complete(
        self, run_id: str, report: dict[str, Any], *, tx: Transaction | None = None
    ) -> None:
        """Mark the run completed; with `tx`, in that transaction (with the answer's write)."""
        ...

    async def fail(
        self, run_id: str, error_code: str, error_message: str, report: dict[str, Any]
    ) -> None: ...

    async def get_run(self, run_id: str) -> RunRecord | None: ...

    async def claim_expired(self, limit: int) -> list[str]:
        """Take up to `limit` runs still marked running whose lease ran out (their process
        died) for this process to resume, and return their ids. Concurrent callers in other
        processes get other runs; `reopen` of a run returned here needs no second claim."""
        ...


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


_T = TypeVar("_T")

RunResumer: TypeAlias = Callable[[str], Awaitable[object]]
"""Finishes a run from its journal, given its id: the loop's `resume`."""


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


class RunTrace(_Frozen):
    """A run as a thread's timeline shows it: its outcome and the journal entries that say what
    its model was sent. Built from the journal, never from a second read of the thread."""

    run_id: str
    status: str
    seq: int
    """The seq of the run's user message: the thread's length when the turn began."""
    created_at: datetime | None = None
    error_code: str | None = None
    error_message: str | None = None
    report: dict[str, Any] | None = None
    """The `RunReport` as JSON, once the run ended."""
    steps: list[str] = []
    """Checkpoint names journaled so far, in order (a run in flight shows how far it got)."""
    payloads: dict[str, JsonValue] = {}
    """The journaled results of `load:thread` and `history:summarize[:n]`: the kept messages,
    the summary read, the fold and the summaries made."""
    pruned: bool = False
    """The run's journal was deleted by retention: steps and payloads are gone, the report
    stays."""


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


PrunedStatus = Literal["completed", "failed"]
"""The ends of a run whose journal retention deletes: each has its own retention."""


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


MODEL_NAME_CHARS = 200
"""The longest model name a ledger row or a summary row keeps. The name comes from the
provider's response, so the loop cuts it to this rather than fail a turn over it."""

IDEMPOTENCY_KEY_CHARS = 255
"""The longest Idempotency-Key a run keeps (Stripe's bound too); a longer one is refused."""


class LedgerEntry(_Frozen):
    run_id: str
    thread_id: str
    actor_id: str
    agent: str
    purpose: str
    model: str
    prompt_tokens: int
    completion_tokens: int
    estimated: bool = False
    """The figures are the token estimate, not the provider's count (see `Usage.estimated`)."""
    cached_tokens: int = 0
    """Of `prompt_tokens`, those the provider served from its prompt cache (0 when it did not
    say): booked apart so cost figures can price them differently."""


@runtime_checkable
class Ledger(Protocol):
    """Where every model call's tokens are written, so no spend goes unaccounted."""

    async def record(self, entry: LedgerEntry) -> None: ...

    async def tokens_used(self, actor_id: str) -> int:
        """All tokens (prompt + completion) the actor has spent, for quotas."""
        ...

    async def entries_for_run(self, run_id: str) -> list[LedgerEntry]: ...


@runtime_checkable
class TransactionalLedger(Protocol):
    """Optional: a ledger whose rows can join a durable context's transaction, so a model step
    and its ledger row commit once."""

    joins_transactions: bool

    async def record(self, entry: LedgerEntry, *, tx: Transaction | None = None) -> None: ...


def ledger_supports_transactions(ledger: object) -> TypeGuard[TransactionalLedger]:
    return isinstance(ledger, TransactionalLedger)


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


__all__ = [
    "IDEMPOTENCY_KEY_CHARS",
    "MAX_CALL_TOKENS",
    "MODEL_NAME_CHARS",
    "AgentStore",
    "DurableContext",
    "DurableRuntime",
    "HistoryPolicy",
    "HistoryPolicyContext",
    "HistorySelection",
    "HistorySummary",
    "Idempotency",
    "JournalPruner",
    "JsonValue",
    "KeyedRunFinder",
    "Ledger",
    "LedgerEntry",
    "ModelProvider",
    "ModelRequest",
    "ModelResponse",
    "NamedThreadCreator",
    "PromptDigestStore",
    "PrunedStatus",
    "QuotaReserver",
    "ReadBound",
    "RunExecutor",
    "RunMessagesReader",
    "RunRecord",
    "RunRequest",
    "RunResumer",
    "RunTimelineReader",
    "RunTrace",
    "StreamingModelProvider",
    "Summarizer",
    "SummaryRenderer",
    "SummaryStore",
    "TextDelta",
    "Thread",
    "ThreadInfoReader",
    "ThreadLister",
    "ThreadListing",
    "ThreadSummary",
    "ThreadTurnPage",
    "ThreadTurnQuery",
    "ThreadTurnReader",
    "ToolSpec",
    "Transaction",
    "TransactionalLedger",
    "TransactionalStore",
    "Usage",
    "ledger_supports_transactions",
    "supports_bounded_read",
    "supports_keyed_runs",
    "supports_named_threads",
    "supports_prompt_digests",
    "supports_pruning",
    "supports_reservations",
    "supports_run_executor",
    "supports_run_messages",
    "supports_run_timeline",
    "supports_streaming",
    "supports_summaries",
    "supports_thread_listing",
    "supports_transactions",
]
