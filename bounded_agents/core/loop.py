"""AgentLoop: one run answers one user message, every outside effect behind a checkpoint.

Checkpoints, in order (docs/reliability.md has the whole table):

    persist:user                  the user's message, so `select` sees it as the newest
    patch:agent:rolling-summary   (marker; a run journaled before it replays its old path)
    load:thread                   the bounded read + `select`; records the SELECTION, the
                                  thread's summary and the fold this turn owes
    history:summarize[:n]         one per fold chunk: the summary so far + only new messages
    persist:usage:history[:n]     that chunk's ledger row
    persist:summary[:n]           that chunk's summary row (idempotent: thread + boundary)
    model:<n>                     one per model step (its ledger row is written inside it;
                                  its prompt's digest is journaled for the next step's
                                  prefix figures)
    tool:<n>:<call id>            one per tool call
    persist:assistant             the answer, tool calls and results on ONE message (and
                                  the last prompt's digest, in the same write)

A replay reads each journaled result back instead of running it: the store is not read again,
`select` and the summarizer are not called again, and the model gets the same prompt byte for
byte. `select` must therefore be pure; anything non-deterministic belongs in `summarize`.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeAlias

from pydantic import BaseModel, ConfigDict

from bounded_agents.core.context_window import ChatMiddleware
from bounded_agents.core.history import split_runs
from bounded_agents.core.messages import (
    MAX_TOOL_ARGUMENT_DEPTH,
    ChatMessage,
    Message,
    ToolCall,
    ToolResult,
    journal_form,
    nesting_depth,
    payload_bytes,
    storable_json,
    storable_text,
    to_chat_messages,
)
from bounded_agents.core.ports import (
    MODEL_NAME_CHARS,
    AgentStore,
    DurableContext,
    DurableRuntime,
    HistoryPolicy,
    HistoryPolicyContext,
    HistorySelection,
    HistorySummary,
    Idempotency,
    JsonValue,
    Ledger,
    LedgerEntry,
    ModelProvider,
    ModelRequest,
    ModelResponse,
    PromptDigestStore,
    QuotaReserver,
    ReadBound,
    RunRequest,
    Summarizer,
    SummaryRenderer,
    TextDelta,
    Thread,
    ThreadInfoReader,
    ThreadSummary,
    ThreadTurnPage,
    ThreadTurnQuery,
    ThreadTurnReader,
    ToolSpec,
    Transaction,
    TransactionalLedger,
    TransactionalStore,
    Usage,
    ledger_supports_transactions,
    supports_bounded_read,
    supports_prompt_digests,
    supports_reservations,
    supports_run_executor,
    supports_streaming,
    supports_summaries,
    supports_transactions,
)
from bounded_agents.core.prefix import prefix_reuse
from bounded_agents.core.reads import bounded_page
from bounded_agents.core.report import (
    LedgerRow,
    ModelCallReport,
    RunReport,
    RunResult,
    SummaryReport,
    prompt_cache_report,
)
from bounded_agents.core.summary import (
    CLIP_NOTE,
    DEFAULT_FOLD_MAX_TOKENS,
    clip_summary,
    fold_rejection,
    render_history_summary,
    summary_fits,
    summary_token_cap,
)
from bounded_agents.core.tokens import MESSAGE_ALLOWANCE, estimate_message_tokens
from bounded_agents.errors import (
    AgentError,
    AgentNotFound,
    ConfigError,
    DuplicateMessage,
    JournalMismatch,
    LeaseLost,
    ProviderBadResponse,
    ProviderContextExceeded,
    ProviderError,
    QuotaExceeded,
    RunCompleted,
    RunFailed,
    RunNotFound,
    StoreError,
    ThreadNotFound,
)

log = logging.getLogger(__name__)

SELECTED_HISTORY = "agent:selected-history"
"""The patch marker of the selection-only `load:thread` payload (runs journaled before
`ROLLING_SUMMARY` only)."""
ROLLING_SUMMARY = "agent:rolling-summary"
"""The patch marker of the current path: reads after the thread's summary, folds only what is
new into it and stores each fold. A run journaled without it replays the path it recorded."""
COMPLETION_RESERVE = 1024
"""Tokens held for a model call's answer while it is in flight, on top of its estimated prompt
(see `AgentLoop._reserve`): the quota is then overshot by at most the last call it admitted,
unless calls in flight at that moment answer at greater length than this."""
DEFAULT_FOLD_CALLS_PER_TURN = 2
"""Summarizer calls one run may make (`AGENT_HISTORY_FOLD_CALLS_PER_TURN`): a fold costs at most
this many calls on top of the turn's own, however long the backlog."""
DEFAULT_FOLD_TIMEOUT_SECONDS = 120.0
"""How long one summarizer call may take (`AGENT_HISTORY_FOLD_TIMEOUT_SECONDS`) before the turn
gives the fold up and answers without it."""
_UNBOUNDED_CALLS = 1_000_000
"""The call budget of a run whose journal predates the budget: its replay is not cut short."""
BACKLOG_READ_ROWS = 256
"""Rows one backlog read of a fold fetches: a long backlog is read in pages of this size."""


_READ_FIGURES = (
    "read_bound",
    "read_token_bound",
    "read_run_bound",
    "read_after_seq",
    "rows_read",
    "bytes_read",
)


class ToolBinding(Protocol):
    """A callable tool as the loop sees it: its advertised spec and how to run it."""

    @property
    def spec(self) -> ToolSpec: ...

    async def invoke(self, arguments: dict[str, Any]) -> ToolResult:
        """Run the tool. Bad arguments or a raising tool give an `is_error` result, not an
        exception: the model sees the error and can correct itself."""
        ...


@dataclass(frozen=True)
class AgentDefinition:
    """Everything the loop needs to know about one agent (the module builds it from @agent)."""

    name: str
    system_prompt: str
    policy: HistoryPolicy
    tools: Mapping[str, ToolBinding] = field(default_factory=dict)
    max_steps: int = 8
    """Model calls per run at most; a run still asking for tools after that stops and says so."""
    middleware: Sequence[ChatMiddleware] = ()


class ToolCallEvent(BaseModel):
    model_config = ConfigDict(frozen=True)
    call: ToolCall


class ToolResultEvent(BaseModel):
    model_config = ConfigDict(frozen=True)
    call_id: str
    name: str
    is_error: bool
    content_chars: int


LoopEvent: TypeAlias = TextDelta | ToolCallEvent | ToolResultEvent
EventSink: TypeAlias = Callable[[LoopEvent], Awaitable[None]]


class FoldPreview(BaseModel):
    """The fold the next turn would make: messages `from_seq`..`through_seq` into the summary."""

    from_seq: int
    through_seq: int


class WindowPreview(BaseModel):
    """What the next turn would send (without its new user message): `GET .../window`."""

    thread_id: str
    agent: str
    read_bound: int | None
    """Newest messages the store is asked for; None when no count bounds the read."""
    read_token_bound: int | None = None
    read_run_bound: int | None = None
    kept: list[Message]
    dropped: list[Message]
    summarizes: bool
    """True when the next turn would fold into the summary (folds are made only in turns)."""
    summary: ThreadSummary | None = None
    """The thread's rolling summary, sent before `kept`."""
    next_fold: FoldPreview | None = None
    tokens: list[int]
    """Estimated tokens of each kept message."""
    total_tokens: int


class AgentLoop:
    def __init__(
        self,
        *,
        store: AgentStore,
        runtime: DurableRuntime,
        ledger: Ledger,
        model: ModelProvider,
        agents: Mapping[str, AgentDefinition],
        token_quota: int | None = None,
        fold_calls_per_turn: int = DEFAULT_FOLD_CALLS_PER_TURN,
        fold_timeout: float | None = DEFAULT_FOLD_TIMEOUT_SECONDS,
    ) -> None:
        """`fold_calls_per_turn`: summarizer calls a run may make (a backlog is folded over
        several turns, the prompt bounded meanwhile). `fold_timeout`: seconds one summarizer
        call may take before the fold is given up for this turn (None: no limit)."""
        if fold_calls_per_turn < 1:
            raise ConfigError(f"fold_calls_per_turn must be >= 1, got {fold_calls_per_turn!r}")
        self.fold_calls_per_turn = fold_calls_per_turn
        self.fold_timeout = fold_timeout
        self._chunk_cap: dict[str, int] = {}
        """Per agent, the fold input (estimated tokens) below the smallest chunk its summarizer
        refused as over its context: where later chunks start (see `_fold_chunk`)."""
        self._compress_cap: dict[str, int] = {}
        """Per agent, half the smallest summary its summarizer refused to compress: a longer
        one is compressed by its oldest part within this (see `_FoldCalls.compress`)."""
        for definition in agents.values():
            if _summarizer(definition.policy) is not None and not supports_summaries(store):
                raise ConfigError(
                    f"agent {definition.name!r} summarizes its history, but the store "
                    f"({type(store).__name__}) keeps no summaries (the SummaryStore port): "
                    "every turn would have to summarize the whole thread again"
                )
        self.store = store
        self.runtime = runtime
        self.ledger = ledger
        self.model = model
        # What the store and the ledger can do, probed once: a runtime-checkable protocol's
        # isinstance walks its members on every call (5-13 us each on CPython 3.11), and a turn
        # asked a dozen times of the same two objects.
        tx_store = store if supports_transactions(store) else None
        tx_ledger = ledger if ledger_supports_transactions(ledger) else None
        self._shares_transactions = tx_store is not None and tx_ledger is not None
        """Writes join a step's unit of work only when every writer can: one that wrote on a
        connection of its own while the unit's transaction is open could wait for that very
        transaction (SQLite's single write lock, or a row lock on PostgreSQL)."""
        self._tx_store: TransactionalStore | None = tx_store if self._shares_transactions else None
        self._tx_ledger: TransactionalLedger | None = (
            tx_ledger if self._shares_transactions else None
        )
        self._bounded: ThreadTurnReader | None = store if supports_bounded_read(store) else None
        self._digests: PromptDigestStore | None = store if supports_prompt_digests(store) else None
        self._reserving: QuotaReserver | None = ledger if supports_reservations(ledger) else None
        self.agents = dict(agents)
        self.token_quota = token_quota
        if supports_run_executor(runtime):
            # Its engine's recovery (a DBOS restart) finishes a run by the same path as a sweep.
            runtime.register_resumer(self.resume)

    # --- entry points ----------------------------------------------------------------------

    async def run_turn(
        self,
        *,
        agent: str,
        thread_id: str,
        actor_id: str,
        content: str,
        run_id: str,
        on_event: EventSink | None = None,
        thread: Thread | None = None,
        idempotency: Idempotency | None = None,
    ) -> RunResult:
        """Answer `content` in the thread. Raises `ThreadNotFound` (also for another actor's
        thread), `ThreadBusy`, `QuotaExceeded` before any work; `RunFailed` once it started.

        `thread`, when the caller already loaded it (the HTTP route does), saves the ownership
        read: it is checked against `actor_id` and `agent` in memory instead. `idempotency`
        records the run under its key; a run already under it raises `TurnInProgress` (the
        module answers that run's outcome instead)."""
        definition = self.definition(agent)
        if thread is None or thread.id != thread_id:
            await self.owned_thread(thread_id, actor_id, agent)
        elif thread.actor_id != actor_id or thread.agent != agent:
            raise ThreadNotFound(thread_id)
        if self.token_quota is not None:
            used = await self.ledger.tokens_used(actor_id)
            if used >= self.token_quota:
                raise QuotaExceeded(actor_id, used, self.token_quota)
        request = RunRequest(
            run_id=run_id,
            thread_id=thread_id,
            actor_id=actor_id,
            agent=agent,
            content=content,
            idempotency=idempotency,
        )
        ctx = await self.runtime.begin(request, shared_first_unit=self._shares_transactions)
        report = RunReport(run_id=run_id)
        return await self._drive(request, ctx, definition, on_event, report, fresh=True)

    async def resume(self, run_id: str, on_event: EventSink | None = None) -> RunResult:
        """Finish a failed or interrupted run from its journal. A completed one is refused
        with `RunCompleted` (`JournalPruned` once its journal is gone): its answer is stored,
        and replaying its end would fail as a lost lease (the run is held by no one), which
        read as a takeover."""
        record = await self.runtime.get_run(run_id)
        if record is None:
            raise RunNotFound(run_id)
        definition = self.definition(record.request.agent)  # before the claim: never strand it
        request, ctx = await self.runtime.reopen(run_id)  # a completed run is not claimed
        if record.status == "completed":
            raise RunCompleted(run_id)
        report = RunReport(run_id=run_id)
        if record.report is not None:
            prior = RunReport.model_validate(record.report)
            # The read happened in an earlier attempt; its figures stay true for this run.
            for name in _READ_FIGURES:
                setattr(report, name, getattr(prior, name))
        return await self._drive(request, ctx, definition, on_event, report, fresh=False)

    def definition(self, agent: str) -> AgentDefinition:
        try:
            return self.agents[agent]
        except KeyError:
            raise AgentNotFound(agent) from None

    async def owned_thread(self, thread_id: str, actor_id: str, agent: str | None = None) -> Thread:
        """The thread if `actor_id` owns it; `ThreadNotFound` otherwise, missing or not."""
        if isinstance(self.store, ThreadInfoReader):
            thread = await self.store.get_thread_info(thread_id)
        else:
            thread = await self.store.get_thread(thread_id)
        if thread is None or thread.actor_id != actor_id or (agent and thread.agent != agent):
            raise ThreadNotFound(thread_id)
        return thread

    async def preview(
        self, thread_id: str, actor_id: str, thread: Thread | None = None
    ) -> WindowPreview:
        """What the next turn would send of the existing messages, read the way a turn reads.

        `select` runs over them plus a stand-in for the next user message (which always rides),
        so `kept` is exactly the history the next turn keeps. `dropped` lists what this read saw
        and the next turn will not send; under a read bound older messages are not read at all.
        For a summarizing policy it shows the thread's summary and the fold the next turn would
        make (nothing is summarized here: folds happen only in turns).
        """
        if thread is None or thread.id != thread_id or thread.actor_id != actor_id:
            thread = await self.owned_thread(thread_id, actor_id)
        definition = self.definition(thread.agent)
        policy = definition.policy
        summarizer = _summarizer(policy)
        bound = read_bound(policy)
        report = RunReport(run_id="preview")
        page = await self._read_page(thread_id, bound, summarizer is not None, report)
        ctx = _page_context(
            HistoryPolicyContext(
                thread_id=thread_id, agent=thread.agent, actor_id=actor_id, run_id="preview"
            ),
            page,
        )
        next_message = Message(role="user", content="")
        selection = policy.select([*page.messages, next_message], ctx)
        kept = [m for m in selection.keep if m is not next_message]
        tokens = [estimate_message_tokens(m) for m in kept]
        next_fold = None
        if summarizer is not None:
            boundary, through = _fold_range(page, selection)
            if through > boundary:
                next_fold = FoldPreview(from_seq=boundary + 1, through_seq=through)
        return WindowPreview(
            thread_id=thread_id,
            agent=thread.agent,
            read_bound=report.read_bound,
            read_token_bound=report.read_token_bound,
            read_run_bound=report.read_run_bound,
            kept=kept,
            dropped=selection.drop,
            summarizes=next_fold is not None,
            summary=page.summary,
            next_fold=next_fold,
            tokens=tokens,
            total_tokens=sum(tokens),
        )

    # --- the run ---------------------------------------------------------------------------

    async def _drive(
        self,
        request: RunRequest,
        ctx: DurableContext,
        definition: AgentDefinition,
        on_event: EventSink | None,
        report: RunReport,
        *,
        fresh: bool,
    ) -> RunResult:
        """`fresh`: this attempt is the run's first, so it made every ledger row itself. A
        runtime that executes runs itself (`RunExecutor`, DBOS) runs the attempt as its
        workflow; any other is simply awaited."""
        attempt = functools.partial(
            self._attempt, request, ctx, definition, on_event, report, fresh=fresh
        )
        if supports_run_executor(self.runtime):
            return await self.runtime.execute(request.run_id, attempt)
        return await attempt()

    async def _attempt(
        self,
        request: RunRequest,
        ctx: DurableContext,
        definition: AgentDefinition,
        on_event: EventSink | None,
        report: RunReport,
        *,
        fresh: bool,
    ) -> RunResult:
        try:
            async with self.runtime.keep_alive(request.run_id):
                answer, digest = await self._run(request, ctx, definition, on_event, report)
                message = await self._store_answer(request, ctx, answer, report, fresh, digest)
        except Exception as exc:
            failure = RunFailed(request.run_id, exc)
            report.status = "failed"
            await self._finish_report(ctx, report, fresh)
            try:
                await self.runtime.fail(
                    request.run_id, failure.cause_code, str(exc), report.model_dump(mode="json")
                )
            except Exception:
                log.exception("run %s: could not record its failure", request.run_id)
            if not isinstance(exc, AgentError):
                log.exception("run %s failed", request.run_id)
            raise failure from exc
        return RunResult(run_id=request.run_id, message=message, report=report)

    async def _store_answer(
        self,
        request: RunRequest,
        ctx: DurableContext,
        answer: Message,
        report: RunReport,
        fresh: bool,
        digest: _Digest | None = None,
    ) -> Message:
        """Store the answer and end the run, in one transaction when the writers share one:
        a run is then never `running` beside its stored answer, and a commit that fails stores
        neither. If the database refuses that transaction, the answer is stored on its own (the
        client paid for it) and the runtime records the end when it can: it retries, and a
        `SqlJournal` records it before refusing the next turn on the thread."""
        report.status = "completed"
        persist = functools.partial(self._persist, ctx, request.thread_id, answer, digest)
        ended = False
        try:
            async with ctx.unit_of_work():
                stored = await ctx.step("persist:assistant", persist)
                await self._finish_report(ctx, report, fresh)
                tx = await self._tx(ctx)
                if tx is not None:
                    await self.runtime.complete(
                        request.run_id, report.model_dump(mode="json"), tx=tx
                    )
                    ended = True
        except StoreError:
            if not self._shares_transactions:
                raise
            log.warning("run %s: the answer and the run's end failed to commit", request.run_id)
            async with ctx.unit_of_work():  # the report is finished: only the answer again
                stored = await ctx.step("persist:assistant", persist)
        if not ended:
            try:
                await self.runtime.complete(request.run_id, report.model_dump(mode="json"))
            except AgentError:
                # The answer is stored: the client gets it; the end is recorded later.
                log.warning(
                    "run %s: answered, but its end could not be recorded yet", request.run_id
                )
        return answer.model_copy(update={"seq": stored.get("seq")})

    async def _run(
        self,
        request: RunRequest,
        ctx: DurableContext,
        definition: AgentDefinition,
        on_event: EventSink | None,
        report: RunReport,
    ) -> tuple[Message, _Digest]:
        """The answer, not yet stored, and what it leaves of its prompt (see `_Digest`)."""
        hctx = HistoryPolicyContext(
            thread_id=request.thread_id,
            agent=request.agent,
            actor_id=request.actor_id,
            run_id=request.run_id,
        )
        user = Message(role="user", content=request.content, run_id=request.run_id)
        # The user's message, the version marker and the read commit together (one unit).
        async with ctx.unit_of_work():
            persisted = await ctx.step(
                "persist:user", functools.partial(self._persist, ctx, request.thread_id, user)
            )
            rolling = await ctx.patched(ROLLING_SUMMARY)
            if rolling:
                recorded = await ctx.step(
                    "load:thread",
                    functools.partial(
                        self._load_rolling, ctx, request.thread_id, definition.policy, hctx, report
                    ),
                )
            else:
                legacy = await self._legacy_load(ctx, definition, hctx)
        window: _Window | None = None
        last_prompt: str | None = None
        if rolling:
            prompt, window = await self._rolling_prompt(
                request, ctx, definition, hctx, report, recorded, persisted.get("seq")
            )
            last_prompt = recorded.get("last_prompt")
        else:
            prompt = await self._legacy_prompt(request, ctx, definition, hctx, report, *legacy)
        return await self._answer(
            request, ctx, definition, prompt, on_event, report, window, hctx, last_prompt
        )

    async def _rolling_prompt(
        self,
        request: RunRequest,
        ctx: DurableContext,
        definition: AgentDefinition,
        hctx: HistoryPolicyContext,
        report: RunReport,
        recorded: dict[str, Any],
        user_seq: int | None,
    ) -> tuple[list[ChatMessage], _Window | None]:
        """The system prompt, the thread's summary (folded further first when `load:thread`
        says so) and the kept messages. Everything it uses is journaled: a replay builds the
        same prompt byte for byte without reading the store or calling the summarizer again.

        For a policy that re-checks its threshold between model calls (`refolds_mid_run`), it
        also returns that history with its seqs, so `_refold` can fold it again mid-run."""
        policy = definition.policy
        summarizer = _summarizer(policy)
        keep = [Message.model_validate(m) for m in recorded["keep"]]
        summary = (
            ThreadSummary.model_validate(recorded["summary"]) if "summary" in recorded else None
        )
        folds = 0
        omitted = 0
        if "fold" in recorded and summarizer is not None:
            summary, folds = await self._fold(
                request, ctx, policy, summarizer, hctx, summary, recorded["fold"], report
            )
            covered = summary.covers_through_seq if summary is not None else 0
            if covered < int(recorded["fold"]["through"]):
                # The fold this turn owed is not (all) made: what the summary does not cover
                # rides, up to the cap, so nothing is lost from the prompt that a fold would
                # have kept; past the cap the oldest are left out, and the model is told.
                unfolded, omitted = _degraded_history(recorded["fold"], covered, keep)
                keep = [*unfolded, *keep]
                assert report.summary is not None
                report.summary.omitted = omitted
        elif summary is not None:
            report.summary = SummaryReport(
                made=False, covers_through_seq=summary.covers_through_seq
            )
        prompt = _history_prompt(definition, summary, keep, omitted)
        window = None
        if getattr(policy, "refolds_mid_run", False) and user_seq is not None and keep:
            first = user_seq - len(keep) + 1  # the kept runs are the newest: contiguous to it
            keep = [m.model_copy(update={"seq": first + i}) for i, m in enumerate(keep)]
            window = _Window(summary=summary, keep=keep, head=len(prompt), folds=folds)
        return prompt, window

    async def _refold(
        self,
        request: RunRequest,
        ctx: DurableContext,
        definition: AgentDefinition,
        hctx: HistoryPolicyContext,
        report: RunReport,
        prompt: list[ChatMessage],
        window: _Window,
    ) -> list[ChatMessage]:
        """HasteKit counts the history before EACH model call: a run whose tool steps pushed it
        to the threshold folds its older kept runs now, not on the next turn. The decision is a
        pure function of journaled data, so a replay makes the same one."""
        policy = definition.policy
        summarizer = _summarizer(policy)
        threshold = getattr(policy, "token_threshold", None)
        keep_runs = getattr(policy, "keep_recent_runs", 1)
        if summarizer is None or not isinstance(threshold, int):
            return prompt
        if sum(estimate_message_tokens(m) for m in prompt[1:]) < threshold:
            return prompt
        runs = split_runs(window.keep)
        older = [m for run in runs[: max(0, len(runs) - max(1, keep_runs))] for m in run]
        if not older:
            return prompt
        through = older[-1].seq or 0
        fold = {"through": through, "messages": [m.model_dump(mode="json") for m in older]}
        summary, window.folds = await self._fold(
            request, ctx, policy, summarizer, hctx, window.summary, fold, report, window.folds
        )
        covered = summary.covers_through_seq if summary is not None else 0
        if covered < through:
            # Refused, failed or out of calls: the prompt stays as it was (it is the history
            # the run started with, within the policy's read bound); a later turn folds. A
            # chunk it did store is where the next refold starts: none is summarized twice.
            window.summary = summary
            return prompt
        rest = window.keep[len(older) :]
        head = _history_prompt(definition, summary, rest)
        in_run = prompt[window.head :]
        window.summary, window.keep, window.head = summary, rest, len(head)
        return [*head, *in_run]

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
        summarizer = _summarizer(policy)
        page = await self._read_page(
            thread_id, read_bound(policy), summarizer is not None, report, await self._tx(ctx)
        )
        selection = policy.select(page.messages, _page_context(hctx, page))
        recorded: dict[str, Any] = {"keep": [journal_form(m) for m in selection.keep]}
        if page.last_prompt is not None:
            recorded["last_prompt"] = page.last_prompt
        if summarizer is not None:
            boundary, through = _fold_range(page, selection)
            if page.summary is not None:
                recorded["summary"] = page.summary.model_dump(mode="json", exclude_defaults=True)
            if through > boundary:
                recorded["fold"] = {
                    "through": through,
                    "messages": [
                        m.model_dump(mode="json", exclude_defaults=True)
                        for m in page.messages
                        if (m.seq or 0) <= through
                    ],
                }
        recorded["title"] = page.title
        recorded["has_assistant_message"] = page.has_assistant_message
        return recorded

    async def _fold(
        self,
        request: RunRequest,
        ctx: DurableContext,
        policy: HistoryPolicy,
        summarizer: Summarizer,
        hctx: HistoryPolicyContext,
        summary: ThreadSummary | None,
        fold: dict[str, Any],
        report: RunReport,
        made_before: int = 0,
    ) -> tuple[ThreadSummary | None, int]:
        """Fold the summary forward towards `fold["through"]`, one bounded summarizer chunk per
        step: `history:summarize`, `persist:usage:history` and `persist:summary` each, the later
        chunks' names suffixed `:2`, `:3`... (numbered across the run: `made_before` chunks came
        first). Each chunk's summary is stored as it is made, so a run that dies in a long
        backlog keeps every chunk it finished.

        It stops early, leaving the rest to later turns, when the run has spent its
        `fold_calls_per_turn` summarizer calls (a backlog is folded in bounded work per turn),
        or when a chunk is refused or its call fails (`fold_rejection`): a refused answer is
        never stored, so the boundary and the previous summary stay. The caller then sends what
        the summary does not cover, up to a cap (`_degraded_history`). Returns the summary (None
        if there is still none) and the run's chunk count."""
        through = int(fold["through"])
        known = {m.seq: m for m in (Message.model_validate(x) for x in fold["messages"])}
        budget = getattr(policy, "fold_max_tokens", None) or DEFAULT_FOLD_MAX_TOKENS
        cap = summary_token_cap(budget)  # the policy's; a chunk may be made smaller, not this
        prior = report.summary
        stats = (
            prior.model_copy(deep=True)
            if prior is not None
            else SummaryReport(
                made=False,
                covers_through_seq=summary.covers_through_seq if summary is not None else 0,
            )
        )
        if not stats.made:
            stats.previous_covers_through_seq = (
                summary.covers_through_seq if summary is not None else None
            )
        folds = made_before
        while summary is None or summary.covers_through_seq < through:
            # The budget the run's first fold step journaled, once there is one: a resumed run
            # follows its journal even where this process allows fewer calls.
            call_budget = stats.call_budget or self.fold_calls_per_turn
            calls_left = call_budget - stats.calls
            if calls_left < 1:
                stats.deferred = True
                break
            folds += 1
            suffix = "" if folds == 1 else f":{folds}"
            # The summary commits with its ledger row, as a model step does; the summary row is
            # written after that, idempotently: a process killed in between resumes with the
            # journaled summary, neither losing it nor asking for a second one.
            async with ctx.unit_of_work():
                made = await ctx.step(
                    "history:summarize" + suffix,
                    functools.partial(
                        self._fold_chunk,
                        request,
                        hctx,
                        summarizer,
                        summary,
                        through,
                        known,
                        budget,
                        cap,
                        calls_left,
                        call_budget,
                    ),
                )
                usage = Usage.model_validate(made["usage"]) if "usage" in made else None
                if "fitted_tokens" in made:
                    # The provider refused a larger chunk: the rest of this run's chunks start
                    # at the size it took, instead of being refused (and paid for) again.
                    budget = min(budget, int(made["fitted_tokens"]))
                if usage is not None:
                    await ctx.step(
                        "persist:usage:history" + suffix,
                        functools.partial(
                            self._record_usage,
                            ctx,
                            request,
                            report,
                            "history_summary",
                            made["model"],
                            usage,
                            made.get("reserved", 0),
                        ),
                    )
            if "calls" not in made:
                # Journaled before calls were counted, so before there was a budget: the run's
                # replay follows its journal, however many chunks it holds.
                stats.call_budget = stats.call_budget or _UNBOUNDED_CALLS
            stats.call_budget = stats.call_budget or int(made.get("budget", 0)) or None
            stats.calls += int(made.get("calls", 1))
            stats.folds = folds
            if usage is not None:
                report.model_calls.append(
                    ModelCallReport(
                        purpose="history_summary",
                        prompt_tokens=usage.prompt_tokens,
                        completion_tokens=usage.completion_tokens,
                        messages_sent=made["input_messages"],
                        messages_original=made["input_messages"],
                    )
                )
            if "rejected" in made:
                stats.rejected += 1
                stats.rejected_reasons.append(str(made["rejected"]))
                log.warning(
                    "run %s: fold of messages %d-%d refused (%s); the summary stays at %d",
                    request.run_id,
                    (summary.covers_through_seq if summary is not None else 0) + 1,
                    made.get("last_seq", through),
                    made["rejected"],
                    summary.covers_through_seq if summary is not None else 0,
                )
                break
            assert usage is not None  # an accepted fold always records what it cost
            # What the summary now covers is never needed again: a long backlog is held in
            # memory a read page at a time, not whole.
            for seen in [s for s in known if s is not None and s <= made["covers_through_seq"]]:
                del known[seen]
            summary = ThreadSummary(
                text=made["text"],
                covers_through_seq=made["covers_through_seq"],
                model=made["model"],
                prompt_tokens=usage.prompt_tokens,
                completion_tokens=usage.completion_tokens,
                run_id=request.run_id,
            )
            async with ctx.unit_of_work():
                await ctx.step(
                    "persist:summary" + suffix,
                    functools.partial(self._save_summary, ctx, request.thread_id, summary),
                )
            stats.made = True
            stats.covers_through_seq = summary.covers_through_seq
            stats.input_messages += made["input_messages"]
            stats.input_tokens += made["input_tokens"]
            stats.compressed += int(made.get("compressed", 0))
            stats.messages_cut += int(made.get("messages_cut", 0))
            stats.clipped += 1 if made.get("clipped_chars") else 0
        stats.pending = max(0, through - (summary.covers_through_seq if summary else 0))
        report.summary = stats
        return summary, folds

    async def _fold_chunk(
        self,
        request: RunRequest,
        hctx: HistoryPolicyContext,
        summarizer: Summarizer,
        summary: ThreadSummary | None,
        through: int,
        known: dict[int | None, Message],
        budget: int,
        cap: int,
        calls_left: int,
        call_budget: int,
    ) -> JsonValue:
        """One `history:summarize` step: the messages after the summary's boundary, oldest
        first, while the summary so far and they fit `budget` (at least one message), handed to
        the summarizer with that summary, in at most `calls_left` summarizer calls.

        A chunk the provider refuses as too long (`ProviderContextExceeded`: its tokenizer
        counts more than the estimate's four characters) is halved and sent again, never resent
        as it was. A summary longer than its cap is asked to compress itself
        (`fold_task="compress"`), and only clipped (`clip_summary`, reported) when that fails.
        A refused answer or a failed call is journaled as `rejected`, with its cost if it had
        one: a replay takes the same decision, and the turn goes on without it."""
        seq = (summary.covers_through_seq if summary is not None else 0) + 1
        base = _summary_tokens(summary)
        chunk: list[Message] = []
        tokens = base
        learned = self._chunk_cap.get(request.agent)
        capped = learned is not None and learned < budget
        full = budget if learned is None else max(budget, learned)
        budget = min(budget, learned) if learned is not None else budget
        while seq <= through:
            message = known.get(seq)
            if message is None:
                await self._fetch_backlog(request.thread_id, seq - 1, through, known)
                message = known.get(seq)
                if message is None:
                    raise StoreError(f"fold: message {seq} of thread {request.thread_id} is gone")
            cost = estimate_message_tokens(message)
            if chunk and tokens + cost > budget:
                break
            chunk.append(message)
            tokens += cost
            seq += 1
        fold_ctx = hctx.model_copy(update={"summary": summary, "summary_max_tokens": cap})
        calls = _FoldCalls(self, request, summarizer, call_budget)
        halved = False
        cut_messages = 0
        try:
            while True:
                tokens = base + sum(estimate_message_tokens(m) for m in chunk)
                try:
                    made = await calls.call(chunk, fold_ctx, tokens, cap)
                except ProviderContextExceeded:
                    # Remembered past this run (per agent, per process): the next chunk starts
                    # at half the size refused, so a model that needs more halvings than one
                    # turn's calls still gets its folds through, a turn or two later.
                    self._chunk_cap[request.agent] = min(
                        self._chunk_cap.get(request.agent, tokens), max(1, tokens // 2)
                    )
                    if calls.count >= calls_left:
                        return calls.rejected("too_long", chunk, tokens)
                    if len(chunk) < 2:
                        # One message over the summarizer's context: it is handed the message
                        # halved (its head and its end), so the fold gets past it; counted.
                        halved_one = _halved_message(chunk[0])
                        if halved_one is None:
                            return calls.rejected("too_long", chunk, tokens)
                        chunk, cut_messages = [halved_one], 1
                        continue
                    chunk = chunk[: len(chunk) // 2]
                    halved = True
                    continue
                break
        except (ProviderError, TimeoutError) as exc:
            reason = "timeout" if isinstance(exc, TimeoutError) else exc.code
            return calls.rejected(f"failed:{reason}", chunk, tokens)
        text = storable_text(made.text)
        refused = fold_rejection(made.model_copy(update={"text": text}))
        if refused is not None:
            return calls.rejected(refused, chunk, tokens)
        if capped and not halved and seq <= through:
            # Taken at the learned size with more to fold: try twice that next time (a server
            # back from an outage, or with a larger context, is not held to it for good).
            grown = 2 * (learned or budget)
            if grown >= full:
                self._chunk_cap.pop(request.agent, None)
            else:
                self._chunk_cap[request.agent] = grown
        compressed = 0
        if not summary_fits(text, cap) and calls.count < calls_left:
            shorter = await calls.compress(text, fold_ctx, cap)  # None unless shorter
            if shorter is not None:
                text, compressed = shorter, 1
        kept = clip_summary(text, cap)
        cut = 0
        if not summary_fits(text, cap):
            # Booked as made (the provider billed all of it); only the end is kept, and the
            # summary says so (`CLIP_NOTE`, not counted as kept text).
            cut = max(1, len(text.strip()) - len(kept.removeprefix(CLIP_NOTE).strip()))
            log.warning(
                "run %s: the summary came back at %d characters, over its cap of %d estimated "
                "tokens (compressed: %s); clipped by %d",
                request.run_id,
                len(text),
                cap,
                bool(compressed),
                cut,
            )
        recorded: dict[str, Any] = {
            **calls.cost(),
            "text": kept,
            "covers_through_seq": chunk[-1].seq,
            "input_messages": len(chunk),
            "input_tokens": tokens,
        }
        if compressed:
            recorded["compressed"] = compressed
        if halved:
            recorded["fitted_tokens"] = tokens
        if cut_messages:
            recorded["messages_cut"] = cut_messages
        if cut:
            recorded["clipped_chars"] = cut
        return recorded

    async def _fetch_backlog(
        self, thread_id: str, after_seq: int, through: int, known: dict[int | None, Message]
    ) -> None:
        store = self.store
        if not supports_summaries(store):
            raise ConfigError("a summarizing history needs a store that keeps summaries")
        # Only the gap: up to the next message the fold already holds (the turn read's page).
        held = [s for s in known if s is not None and after_seq < s <= through]
        rows = min(BACKLOG_READ_ROWS, (min(held) if held else through + 1) - after_seq - 1)
        for m in await store.messages_after(thread_id, after_seq, max(1, rows)):
            if m.seq is not None and m.seq <= through:
                known.setdefault(m.seq, m)

    async def _save_summary(
        self, ctx: DurableContext, thread_id: str, summary: ThreadSummary
    ) -> JsonValue:
        store = self.store
        if supports_transactions(store):
            await store.save_summary(thread_id, summary, tx=await self._tx(ctx))
        elif supports_summaries(store):
            await store.save_summary(thread_id, summary)
        else:
            raise ConfigError("a summarizing history needs a store that keeps summaries")
        return {"covers_through_seq": summary.covers_through_seq}

    async def _legacy_load(
        self, ctx: DurableContext, definition: AgentDefinition, hctx: HistoryPolicyContext
    ) -> tuple[list[Message], list[Message]]:
        """A run journaled before rolling summaries: its `load:thread` is always in its journal
        (a journal without one takes the new path), so it is only ever read back."""
        policy = definition.policy
        if await ctx.patched(SELECTED_HISTORY):
            recorded = await ctx.step("load:thread", _legacy_load)
            keep = [Message.model_validate(m) for m in recorded["keep"]]
            return keep, [Message.model_validate(m) for m in recorded.get("drop", [])]
        recorded = await ctx.step("load:thread", _legacy_load)
        messages = [Message.model_validate(m) for m in recorded["messages"]]
        window = getattr(policy, "window", None)
        legacy = window(messages) if callable(window) else policy.select(messages, hctx)
        return legacy.keep, legacy.drop

    async def _legacy_prompt(
        self,
        request: RunRequest,
        ctx: DurableContext,
        definition: AgentDefinition,
        hctx: HistoryPolicyContext,
        report: RunReport,
        keep: list[Message],
        drop: list[Message],
    ) -> list[ChatMessage]:
        """The old path finishes as it began: a summary it had yet to make summarizes its
        recorded dropped messages, whole, and is not stored as a rolling summary."""
        policy = definition.policy
        prompt = [ChatMessage(role="system", content=definition.system_prompt)]
        summarizer = _summarizer(policy)
        if drop and summarizer is not None:
            async with ctx.unit_of_work():
                made = await ctx.step(
                    "history:summarize",
                    functools.partial(
                        self._summarize_reserved, request.actor_id, summarizer, drop, hctx
                    ),
                )
                usage = Usage.model_validate(made["usage"])
                await ctx.step(
                    "persist:usage:history",
                    functools.partial(
                        self._record_usage,
                        ctx,
                        request,
                        report,
                        "history_summary",
                        _booked_model(None, self.model),
                        usage,
                        made.get("reserved", 0),
                    ),
                )
            report.model_calls.append(
                ModelCallReport(
                    purpose="history_summary",
                    prompt_tokens=usage.prompt_tokens,
                    completion_tokens=usage.completion_tokens,
                    messages_sent=len(drop),
                    messages_original=len(drop),
                )
            )
            prompt.append(ChatMessage(role="system", content=_render(policy)(made["text"])))
        prompt.extend(to_chat_messages(keep))
        return prompt

    async def _answer(
        self,
        request: RunRequest,
        ctx: DurableContext,
        definition: AgentDefinition,
        prompt: list[ChatMessage],
        on_event: EventSink | None,
        report: RunReport,
        window: _Window | None = None,
        hctx: HistoryPolicyContext | None = None,
        last_prompt: str | None = None,
    ) -> tuple[Message, _Digest]:
        """The model steps and tool calls, up to the answer (stored by the caller, with the
        run's end). Each model step commits in one unit with its ledger row and with the tool
        calls that fed it: one transaction per step, none held while the model or a tool runs.
        With a `window` (a policy that re-checks between model calls) the tools commit on
        their own first, then the history may be folded before the next call (`_refold`).
        `last_prompt` (the digest of the thread's previous chat prompt) is what the first
        step's prefix reuse is measured against; each step's digest comes back in its journaled
        payload for the next, and the last one is returned, to be stored with the answer.
        """
        specs = [binding.spec for binding in definition.tools.values()]
        reported: int | None = None
        calls: list[ToolCall] = []
        results: list[ToolResult] = []
        content = ""
        pending: list[ToolCall] = []
        step = 0
        for n in range(1, definition.max_steps + 1):
            if window is not None and hctx is not None and pending:
                async with ctx.unit_of_work():
                    await self._tools(
                        ctx, definition, step, pending, prompt, calls, results, on_event
                    )
                pending = []
                prompt = await self._refold(request, ctx, definition, hctx, report, prompt, window)
            async with ctx.unit_of_work():
                await self._tools(ctx, definition, step, pending, prompt, calls, results, on_event)
                recorded = await ctx.step(
                    f"model:{n}",
                    functools.partial(
                        self._model_step,
                        ctx,
                        request,
                        report,
                        definition,
                        prompt,
                        specs,
                        on_event,
                        last_prompt,
                    ),
                )
            step, pending = n, []
            response = ModelResponse.model_validate(recorded["response"])
            last_prompt = recorded.get("prompt_digest")
            usage = response.usage
            reported = None if usage.estimated else usage.prompt_tokens + usage.completion_tokens
            report.model_calls.append(
                ModelCallReport(
                    purpose="chat",
                    prompt_tokens=response.usage.prompt_tokens,
                    completion_tokens=response.usage.completion_tokens,
                    cached_tokens=response.usage.cached_tokens,
                    **recorded["metrics"],
                )
            )
            content = response.content
            if not response.tool_calls:
                break
            prompt.append(
                ChatMessage(
                    role="assistant", content=response.content, tool_calls=response.tool_calls
                )
            )
            pending = list(response.tool_calls)
        else:
            # Out of steps while the model still asked for tools: they run (they were asked
            # for), and the run says it stopped.
            async with ctx.unit_of_work():
                await self._tools(ctx, definition, step, pending, prompt, calls, results, on_event)
            content = content or f"(stopped after {definition.max_steps} model steps)"

        answer = Message(
            role="assistant",
            content=content,
            tool_calls=calls,
            tool_results=results,
            run_id=request.run_id,
        )
        return answer, _Digest(last_prompt, reported)

    async def _tools(
        self,
        ctx: DurableContext,
        definition: AgentDefinition,
        n: int,
        pending: list[ToolCall],
        prompt: list[ChatMessage],
        calls: list[ToolCall],
        results: list[ToolResult],
        on_event: EventSink | None,
    ) -> None:
        """Run model step `n`'s tool calls, each its own checkpoint `tool:<n>:<call id>`."""
        for call in pending:
            if on_event is not None:
                await on_event(ToolCallEvent(call=call))
            result = ToolResult.model_validate(
                await ctx.step(f"tool:{n}:{call.id}", _tool_step(definition, call))
            )
            if on_event is not None:
                await on_event(
                    ToolResultEvent(
                        call_id=call.id,
                        name=call.name,
                        is_error=result.is_error,
                        content_chars=len(result.content),
                    )
                )
            calls.append(call)
            results.append(result)
            prompt.append(ChatMessage(role="tool", content=result.content, tool_call_id=call.id))

    # --- steps -----------------------------------------------------------------------------

    async def _tx(self, ctx: DurableContext) -> Transaction | None:
        """The unit of work's transaction for a write, or None: write on your own."""
        return await ctx.transaction() if self._shares_transactions else None

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
        try:
            if digest is not None and digest.prompt is not None and self._digests is not None:
                stored = await self._digests.append_answer(
                    thread_id, [message], digest.prompt, tx=tx, reported_tokens=digest.reported
                )
            elif tx is not None and self._tx_store is not None:
                stored = await self._tx_store.append_messages(thread_id, [message], tx=tx)
            else:
                stored = await self.store.append_messages(thread_id, [message])
            return {"seq": stored[0].seq}
        except DuplicateMessage:
            return {"seq": None}

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
        if self._bounded is not None:
            if tx is not None and self._tx_store is not None:
                page = await self._tx_store.load_thread_for_turn(query, tx=tx)
            else:
                page = await self._bounded.load_thread_for_turn(query)
            if page is None:
                raise ThreadNotFound(thread_id)
            report.read_bound = query.message_limit
            report.read_token_bound = query.token_limit
            report.read_run_bound = query.run_limit
            if page.summary is not None:
                report.read_after_seq = page.summary.covers_through_seq
            _count_read(report, page.messages)
            return page
        thread = await self.store.get_thread(thread_id)
        if thread is None:
            raise ThreadNotFound(thread_id)
        summary = None
        if after_summary and supports_summaries(self.store):
            summary = await self.store.latest_summary(thread_id)
        last_prompt = reported = None
        if supports_prompt_digests(self.store):
            last_prompt = await self.store.last_prompt(thread_id)
            reported = await self.store.reported_tokens(thread_id)
        _count_read(report, thread.messages)  # no bound reached the store: all of it was read
        if summary is not None:
            report.read_after_seq = summary.covers_through_seq
        page = bounded_page(thread, query, summary, last_prompt)
        return page.model_copy(update={"reported_tokens": reported})

    async def _model_step(
        self,
        ctx: DurableContext,
        request: RunRequest,
        report: RunReport,
        definition: AgentDefinition,
        prompt: list[ChatMessage],
        specs: list[ToolSpec],
        on_event: EventSink | None,
        last_prompt: str | None,
    ) -> JsonValue:
        messages, metrics = _apply_middleware(definition.middleware, list(prompt))
        # One estimate per message serves the metrics, the prefix figures and the reservation.
        costs = [estimate_message_tokens(m) for m in messages]
        reuse, digest = prefix_reuse(last_prompt, messages, costs)
        metrics.update(
            prefix_reused_messages=reuse.messages,
            prefix_reused_tokens=reuse.tokens,
            previous_prompt_messages=reuse.previous_messages,
            extends_previous=reuse.extends,
            prompt_estimated_tokens=sum(costs),
        )
        model_request = ModelRequest(messages=messages, tools=specs, purpose="chat")
        reserved = await self._reserve(request.actor_id, sum(costs) + COMPLETION_RESERVE)
        try:
            async with _provider_boundary("model"):
                response = await self._call_model(model_request, on_event)
        except BaseException:
            await self._release(request.actor_id, reserved)
            raise
        model = _booked_model(response.model, self.model)
        usage = response.usage
        for call in response.tool_calls:
            if nesting_depth(call.arguments) > MAX_TOOL_ARGUMENT_DEPTH:
                # The step fails, and its unit with it: the call's spend is booked on its own.
                await self._record_usage(None, request, report, "chat", model, usage, reserved)
                raise ProviderBadResponse(
                    f"the arguments of tool call {call.name!r} nest deeper than "
                    f"{MAX_TOOL_ARGUMENT_DEPTH} levels"
                )
        await self._record_usage(ctx, request, report, "chat", model, usage, reserved)
        # Made storable before it is journaled: the journal, the stored answer and every later
        # prompt then hold the same text.
        return {
            "response": storable_json(response.model_dump(mode="json")),
            "metrics": metrics,
            "prompt_digest": digest,
        }

    async def _call_model(
        self, model_request: ModelRequest, on_event: EventSink | None
    ) -> ModelResponse:
        if on_event is None or not supports_streaming(self.model):
            response = await self.model.complete(model_request)
            if on_event is not None and response.content:
                # A provider that cannot stream still shows its text as it would have streamed
                # it, in one piece: a client renders every provider the same way.
                await on_event(TextDelta(text=storable_text(response.content)))
            return response
        streamed: ModelResponse | None = None
        async for event in self.model.stream(model_request):
            if isinstance(event, ModelResponse):
                streamed = event
            elif isinstance(event, TextDelta):
                await on_event(TextDelta(text=storable_text(event.text)))
            else:
                raise ProviderBadResponse(
                    f"the provider streamed a {type(event).__name__}, not text or a response"
                )
        if streamed is None:
            raise ProviderBadResponse("the provider's stream ended without a final response")
        return streamed

    async def _reserve(self, actor_id: str, tokens: int) -> int:
        """Hold `tokens` of the actor's quota for a model call about to start, or refuse it
        with `QuotaExceeded`: checked before every model call, so neither concurrent runs nor
        the later calls of one run spend past the quota unchecked. Returns what was held (0
        without a quota, or with a ledger that can only be checked)."""
        quota = self.token_quota
        if quota is None:
            return 0
        if self._reserving is not None:
            if await self._reserving.reserve(actor_id, tokens, quota):
                return tokens
        elif await self.ledger.tokens_used(actor_id) < quota:
            return 0
        raise QuotaExceeded(actor_id, await self.ledger.tokens_used(actor_id), quota)

    async def _release(self, actor_id: str, reserved: int) -> None:
        if not reserved or self._reserving is None:
            return
        try:
            await self._reserving.release(actor_id, reserved)
        except Exception:  # the call's own failure is what the caller must see
            log.exception("could not give back %d reserved tokens of %s", reserved, actor_id)

    async def _summarize_reserved(
        self, actor_id: str, summarizer: Any, drop: list[Message], hctx: HistoryPolicyContext
    ) -> JsonValue:
        """The summary's call, its quota held like a chat call's. What was held rides in the
        journaled payload: `persist:usage:history` gives it back even in a later attempt."""
        reserved = await self._reserve(
            actor_id, sum(estimate_message_tokens(m) for m in drop) + COMPLETION_RESERVE
        )
        try:
            recorded = await _summarize(summarizer, drop, hctx)
        except BaseException:
            await self._release(actor_id, reserved)
            raise
        return {**recorded, "reserved": reserved} if reserved else recorded

    async def _record_usage(
        self,
        ctx: DurableContext | None,
        request: RunRequest,
        report: RunReport,
        purpose: str,
        model: str,
        usage: Usage,
        reserved: int = 0,
    ) -> JsonValue:
        """Book one model call. With `ctx`, in its unit of work, so the row commits with the
        checkpoint it belongs to; if this process lost the run's lease meanwhile, the call was
        still paid for: it is booked on its own before the step fails."""
        entry = LedgerEntry(
            run_id=request.run_id,
            thread_id=request.thread_id,
            actor_id=request.actor_id,
            agent=request.agent,
            purpose=purpose,
            model=model,
            prompt_tokens=usage.prompt_tokens,
            completion_tokens=usage.completion_tokens,
            estimated=usage.estimated,
            cached_tokens=usage.cached_tokens or 0,
        )
        try:
            tx = await self._tx(ctx) if ctx is not None else None
        except LeaseLost:
            await self._book(entry, reserved, None)
            raise
        await self._book(entry, reserved, tx)
        report.ledger.append(_ledger_row(entry))
        return {"recorded": True}

    async def _book(self, entry: LedgerEntry, reserved: int, tx: Transaction | None) -> None:
        if reserved and self._reserving is not None:
            # The reservation becomes the spend in the same write: the total never counts both.
            await self._reserving.record_reserved(entry, reserved, tx=tx)
        elif tx is not None and self._tx_ledger is not None:
            await self._tx_ledger.record(entry, tx=tx)
        else:
            await self.ledger.record(entry)

    async def _finish_report(self, ctx: DurableContext, report: RunReport, fresh: bool) -> None:
        """A fresh run's ledger rows were collected as they were written; a resumed run reads
        them back, since an earlier attempt may have paid for calls this one replayed."""
        report.journal_bytes = dict(getattr(ctx, "journal_bytes", {}))
        report.prompt_cache = prompt_cache_report(report.model_calls)
        if fresh:
            return
        try:
            entries = await self.ledger.entries_for_run(report.run_id)
        except AgentError:
            log.warning("run %s: ledger rows unavailable for its report", report.run_id)
            report.ledger = []  # this attempt's rows alone would pass for the whole run's
            return
        report.ledger = [_ledger_row(e) for e in entries]


@dataclass(frozen=True)
class _Digest:
    """What a run's answer leaves for the next turn, stored with it: the digest of its last
    chat prompt (prefix reuse) and that call's usage as the provider counted it (None when it
    was an estimate), which a token threshold prefers to its own estimate."""

    prompt: str | None
    reported: int | None


@dataclass
class _Window:
    """A run's history as sent, kept for a mid-run fold: the summary (or the one a refold
    stored since, which the next refold extends), the kept messages (with their seqs) and how
    many prompt messages they fill after the system prompt."""

    summary: ThreadSummary | None
    keep: list[Message]
    head: int
    folds: int
    """Summarizer chunks this run made so far (their checkpoints are numbered on from it)."""


class _FoldCalls:
    """The summarizer calls of one `history:summarize` step, and what they cost together.

    Each call holds its quota like a chat call (its input plus the summary's cap) and gives it
    back if it fails; a call that answered is booked whatever becomes of its answer, since the
    provider billed it. The step journals the sum (`cost`) and `persist:usage:history` books it
    as one ledger row."""

    def __init__(
        self, loop: AgentLoop, request: RunRequest, summarizer: Summarizer, budget: int
    ) -> None:
        self.loop = loop
        self.request = request
        self.summarizer = summarizer
        self.budget = budget
        """The run's summarizer call budget, journaled so a resumed run keeps to it."""
        self.count = 0
        self.usage: Usage | None = None
        self.model: str | None = None
        self.reserved = 0

    async def call(
        self, chunk: list[Message], ctx: HistoryPolicyContext, tokens: int, cap: int
    ) -> HistorySummary:
        """One call handed `tokens` estimated tokens, its answer allowed `cap`: both are held
        against the quota, and the input alone is booked when the summarizer reports none."""
        self.count += 1
        reserved = await self.loop._reserve(self.request.actor_id, tokens + cap)
        try:
            # The timeout outside the boundary: a hang is `TimeoutError`, not a provider error.
            async with (
                asyncio.timeout(self.loop.fold_timeout),
                _provider_boundary("history summary"),
            ):
                made = await self.summarizer(chunk, ctx)
        except BaseException:
            await self.loop._release(self.request.actor_id, reserved)
            raise
        self.reserved += reserved
        usage = made.usage or Usage(
            estimated=True,
            prompt_tokens=tokens,
            completion_tokens=estimate_message_tokens(Message(role="assistant", content=made.text)),
        )
        self.usage = usage if self.usage is None else _added(self.usage, usage)
        self.model = self.model or _booked_model(made.model, self.loop.model)
        return made

    async def compress(self, text: str, ctx: HistoryPolicyContext, cap: int) -> str | None:
        """`text` folded into itself by one more call, or None if that call failed or its
        answer is refused or no shorter. Asked for half the cap, so the next folds have room
        before the summary needs compressing again.

        A summary larger than what this agent's summarizer has refused to compress before
        (`_compress_cap`) is compressed by its OLDEST part that fits, the rest kept
        verbatim after it: a model with a small context still shortens the summary, oldest
        facts first, instead of refusing it and leaving only the clip."""
        head, tail = _split_for_context(text, self.loop._compress_cap.get(self.request.agent))
        over = ThreadSummary(text=head, covers_through_seq=0)
        target = max(MESSAGE_ALLOWANCE + 1, cap // 2)
        task = ctx.model_copy(
            update={"summary": over, "summary_max_tokens": target, "fold_task": "compress"}
        )
        try:
            made = await self.call([], task, _summary_tokens(over), target)
        except ProviderContextExceeded:
            tokens = _summary_tokens(over)
            self.loop._compress_cap[self.request.agent] = min(
                self.loop._compress_cap.get(self.request.agent, tokens), max(1, tokens // 2)
            )
            log.warning("run %s: the summary is too long to compress at once", self.request.run_id)
            return None
        except (ProviderError, TimeoutError, QuotaExceeded):
            # The quota too: the fold's own call was made and billed, and must be booked
            # (with its reservation) by the step's `persist:usage:history`, not lost with it.
            log.warning("run %s: compressing the summary failed", self.request.run_id)
            return None
        shorter = storable_text(made.text).strip()
        if fold_rejection(made.model_copy(update={"text": shorter})) is not None:
            return None
        if len(shorter) >= len(head.strip()):
            return None
        return f"{shorter}\n{tail}".strip() if tail else shorter

    def cost(self) -> dict[str, Any]:
        if self.usage is None:
            return {"calls": self.count, "budget": self.budget}
        return {
            "calls": self.count,
            "budget": self.budget,
            "usage": self.usage.model_dump(mode="json"),
            "model": self.model or _booked_model(None, self.loop.model),
            "reserved": self.reserved,
        }

    def rejected(self, reason: str, chunk: list[Message], tokens: int) -> dict[str, Any]:
        return {
            **self.cost(),
            "rejected": reason,
            "last_seq": chunk[-1].seq if chunk else None,
            "input_messages": len(chunk),
            "input_tokens": tokens,
        }


_CUT_MARK = "\n[... {n:,} characters left out: too long for the summarizer ...]\n"


def _halved_message(message: Message) -> Message | None:
    """`message` with its text and each tool result cut to half (their head and end kept),
    for a summarizer that refused it whole; None when nothing in it is long enough to cut."""

    def half(text: str) -> str:
        if len(text) < 200:
            return text
        keep = len(text) // 4
        return text[:keep] + _CUT_MARK.format(n=len(text) - 2 * keep) + text[-keep:]

    results = [r.model_copy(update={"content": half(r.content)}) for r in message.tool_results]
    shorter = message.model_copy(update={"content": half(message.content), "tool_results": results})
    return None if shorter == message else shorter


def _split_for_context(text: str, limit: int | None) -> tuple[str, str]:
    """(the oldest lines of `text` within `limit` estimated tokens, the rest); the whole text
    and "" when it fits or no limit is known. At least one line goes in the head."""
    if limit is None or _summary_tokens(ThreadSummary(text=text, covers_through_seq=0)) <= limit:
        return text, ""
    lines = text.strip().splitlines()
    budget = max(0, (limit - MESSAGE_ALLOWANCE) * 4)
    size, cut = 0, 0
    for cut, line in enumerate(lines, start=1):
        size += len(line) + 1
        if size > budget and cut > 1:
            cut -= 1
            break
    return "\n".join(lines[:cut]), "\n".join(lines[cut:])


def _added(a: Usage, b: Usage) -> Usage:
    return Usage(
        prompt_tokens=a.prompt_tokens + b.prompt_tokens,
        completion_tokens=a.completion_tokens + b.completion_tokens,
        cached_tokens=(a.cached_tokens or 0) + (b.cached_tokens or 0) or None,
        estimated=a.estimated or b.estimated,
    )


def _history_prompt(
    definition: AgentDefinition,
    summary: ThreadSummary | None,
    keep: Sequence[Message],
    omitted: int = 0,
) -> list[ChatMessage]:
    """The system prompt, the summary (when there is one), the note on what is left out (when
    a fold is overdue and the cap left messages out) and the kept messages."""
    prompt = [ChatMessage(role="system", content=definition.system_prompt)]
    if summary is not None:
        prompt.append(ChatMessage(role="system", content=_render(definition.policy)(summary.text)))
    if omitted:
        prompt.append(ChatMessage(role="system", content=omission_note(omitted)))
    prompt.extend(to_chat_messages(keep))
    return prompt


def omission_note(omitted: int) -> str:
    """What the model is told when a fold is overdue (the summarizer failed, refused or ran out
    of calls this turn) and `omitted` older messages are neither summarized nor sent."""
    noun = "message" if omitted == 1 else "messages"
    return (
        f"{omitted:,} earlier {noun} of this thread are not included here and are not in any "
        "summary yet. If the user refers to something you cannot see, say so rather than guess."
    )


DEGRADED_SHARE = 1
"""While a fold is overdue, the unsummarized messages sent besides the kept window may be as
many, and as many estimated tokens, as the kept window itself times this: the prompt holds at
most twice the window, however long the summarizer stays down."""


def _degraded_history(
    fold: Mapping[str, Any], covered: int, keep: Sequence[Message]
) -> tuple[list[Message], int]:
    """(the newest messages the fold owed but did not cover, within the cap; how many it owed
    and leaves out). Only messages the turn read (journaled with the fold) can ride, so a
    replay builds the same prompt; older ones the read skipped are left out and counted."""
    through = int(fold["through"])
    owed = [
        m
        for m in (Message.model_validate(x) for x in fold["messages"])
        if covered < (m.seq or 0) <= through
    ]
    budget_messages = max(1, len(keep)) * DEGRADED_SHARE
    budget_tokens = max(1, sum(estimate_message_tokens(m) for m in keep)) * DEGRADED_SHARE
    taken: list[Message] = []
    tokens = 0
    for message in reversed(owed):
        cost = estimate_message_tokens(message)
        if len(taken) >= budget_messages or tokens + cost > budget_tokens:
            break
        taken.append(message)
        tokens += cost
    taken.reverse()
    return [m.model_copy(update={"seq": None}) for m in taken], through - covered - len(taken)


def _fold_range(page: ThreadTurnPage, selection: HistorySelection) -> tuple[int, int]:
    """(the summary's boundary, the last seq the turn must fold): through the newest message
    `select` dropped, and through every message the read skipped, so none is left both out of
    the prompt and out of the summary. Equal when there is nothing to fold."""
    boundary = page.summary.covers_through_seq if page.summary is not None else 0
    through = max((m.seq or 0 for m in selection.drop), default=boundary)
    if page.skipped:
        through = max(through, boundary + page.skipped)
    return boundary, through


def _page_context(hctx: HistoryPolicyContext, page: ThreadTurnPage) -> HistoryPolicyContext:
    """What `select` learns from the read: the summary, and where its messages start."""
    return hctx.model_copy(
        update={
            "summary": page.summary,
            "skipped": page.skipped,
            "tokens_before": page.tokens_before,
            "reported_tokens": page.reported_tokens,
        }
    )


def read_bound(policy: HistoryPolicy) -> ReadBound | None:
    """What a turn asks the store for: the policy's declared `read_bound`, or the older
    `max_messages` promise as a message count; None reads everything.

    A message count is at least 1: the newest message (the turn's own user message) always
    rides, so a policy declaring 0 still needs that row read.
    """
    bound = getattr(policy, "read_bound", None)
    if isinstance(bound, ReadBound):
        if bound.messages is not None and bound.messages < 1:
            return bound.model_copy(update={"messages": 1})
        return bound
    legacy = getattr(policy, "max_messages", None)
    return ReadBound(messages=max(1, legacy)) if isinstance(legacy, int) else None


def _ledger_row(entry: LedgerEntry) -> LedgerRow:
    return LedgerRow(
        purpose=entry.purpose,
        model=entry.model,
        prompt_tokens=entry.prompt_tokens,
        completion_tokens=entry.completion_tokens,
        estimated=entry.estimated,
        cached_tokens=entry.cached_tokens,
    )


def _summarizer(policy: HistoryPolicy) -> Any:
    return getattr(policy, "summarize", None)


def _count_read(report: RunReport, messages: list[Message]) -> None:
    report.rows_read = len(messages)
    report.bytes_read = sum(payload_bytes(m) for m in messages)


def _render(policy: HistoryPolicy) -> SummaryRenderer:
    render = getattr(policy, "render_summary", None)
    return render if callable(render) else render_history_summary


def _summary_tokens(summary: ThreadSummary | None) -> int:
    if summary is None:
        return 0
    return estimate_message_tokens(Message(role="system", content=summary.text))


async def _legacy_load() -> JsonValue:
    """The step function of a legacy `load:thread`, which is only ever replayed: such a run
    journaled its read before anything else could follow it (see `_legacy_prompt`)."""
    raise JournalMismatch("a legacy load:thread step cannot run again: its journal lacks it")


async def _summarize(summarizer: Any, drop: list[Message], hctx: HistoryPolicyContext) -> JsonValue:
    async with _provider_boundary("history summary"):
        summary = await summarizer(drop, hctx)
    return {"text": storable_text(summary.text), "usage": summary.usage.model_dump(mode="json")}


@asynccontextmanager
async def _provider_boundary(what: str) -> AsyncIterator[None]:
    """Whatever a provider raises is a provider failure (502), never an internal error: a
    custom `ModelProvider` raising a plain exception must not become a 500. Its message may
    hold anything (a URL, a key), so it is logged here and the client reads a fixed one."""
    try:
        yield
    except AgentError:
        raise
    except Exception as exc:
        log.error("the %s call failed: %s", what, type(exc).__name__, exc_info=exc)
        raise ProviderError(f"the {what} call failed (details are in the server log)") from exc


def _tool_step(definition: AgentDefinition, call: ToolCall) -> Callable[[], Awaitable[JsonValue]]:
    return lambda: _run_tool(definition, call)


async def _run_tool(definition: AgentDefinition, call: ToolCall) -> JsonValue:
    binding = definition.tools.get(call.name)
    if binding is None:
        result = ToolResult(call_id=call.id, content=f"unknown tool {call.name!r}", is_error=True)
    else:
        result = await binding.invoke(dict(call.arguments))
        result = result.model_copy(update={"call_id": call.id})
    return storable_json(result.model_dump(mode="json"))


def _apply_middleware(
    middleware: Sequence[ChatMiddleware], messages: list[ChatMessage]
) -> tuple[list[ChatMessage], dict[str, Any]]:
    metrics: dict[str, Any] = {
        "window_trimmed": False,
        "messages_sent": len(messages),
        "messages_original": len(messages),
        "window_orphans_dropped": 0,
    }
    for mw in middleware:
        messages, m = mw(messages)
        metrics["window_trimmed"] = bool(metrics["window_trimmed"] or m.get("window_trimmed"))
        metrics["window_orphans_dropped"] += int(m.get("window_orphans_dropped", 0))
    metrics["messages_sent"] = len(messages)
    return messages, metrics


def _model_name(model: ModelProvider) -> str:
    name = getattr(model, "model", None) or getattr(model, "name", None)
    return name if isinstance(name, str) else type(model).__name__


def _booked_model(reported: str | None, model: ModelProvider) -> str:
    """The model name a call is booked under: the one the provider reported (else the
    provider's own), made storable and cut to `MODEL_NAME_CHARS`. A provider that reports a
    300-character name must not fail every turn on PostgreSQL, whose column refuses it."""
    return storable_text(reported or _model_name(model))[:MODEL_NAME_CHARS]
