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

import functools
import logging
from collections.abc import Callable, Mapping
from datetime import UTC, datetime

from bounded_agents.core.checkpoints import (
    LOAD_THREAD,
    PERSIST_USER,
    ROLLING_SUMMARY,
    SELECTED_HISTORY,
    parse_load_thread,
    parse_seq,
)
from bounded_agents.core.history.powers import (
    policy_summarizer,
    read_bound,
)
from bounded_agents.core.messages import (
    Message,
)
from bounded_agents.core.ports import (
    AgentStore,
    DurableContext,
    DurableRuntime,
    HistoryPolicyContext,
    Idempotency,
    Ledger,
    ModelProvider,
    RunRequest,
    Thread,
    supports_run_executor,
)
from bounded_agents.core.report import (
    RunReport,
    RunResult,
)
from bounded_agents.core.turn.constants import (
    _READ_FIGURES,
    BACKLOG_READ_ROWS,
    COMPLETION_RESERVE,
    DEFAULT_CACHE_TTL_SECONDS,
    DEFAULT_FOLD_CALLS_PER_TURN,
    DEFAULT_FOLD_TIMEOUT_SECONDS,
)
from bounded_agents.core.turn.ledger import TurnLedger
from bounded_agents.core.turn.preview import PreviewPhase
from bounded_agents.core.turn.prompts import (
    omission_note,
)
from bounded_agents.core.turn.public import (
    AgentDefinition,
    EventSink,
    FoldPreview,
    LoopEvent,
    ToolBinding,
    ToolCallEvent,
    ToolResultEvent,
    WindowPreview,
)
from bounded_agents.core.turn.state import (
    _Digest,
    _Window,
)
from bounded_agents.core.turn.store import TurnStore
from bounded_agents.errors import (
    AgentError,
    ConfigError,
    QuotaExceeded,
    RunCompleted,
    RunFailed,
    RunNotFound,
    ThreadNotFound,
)

log = logging.getLogger("bounded_agents.core.loop")
"""The loop's one logger, whichever turn module logs: log configuration keeps working."""

__all__ = [
    "BACKLOG_READ_ROWS",
    "COMPLETION_RESERVE",
    "DEFAULT_FOLD_CALLS_PER_TURN",
    "DEFAULT_FOLD_TIMEOUT_SECONDS",
    "ROLLING_SUMMARY",
    "SELECTED_HISTORY",
    "AgentDefinition",
    "AgentLoop",
    "EventSink",
    "FoldPreview",
    "LoopEvent",
    "ToolBinding",
    "ToolCallEvent",
    "ToolResultEvent",
    "WindowPreview",
    "omission_note",
    "read_bound",
]


class AgentLoop(PreviewPhase):
    """One run answers one user message; its phases live in `bounded_agents.core.turn`."""

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
        cache_ttl_seconds: float = DEFAULT_CACHE_TTL_SECONDS,
        clock: Callable[[], datetime] | None = None,
    ) -> None:
        """`fold_calls_per_turn`: summarizer calls a run may make (a backlog is folded over
        several turns, the prompt bounded meanwhile). `fold_timeout`: seconds one summarizer
        call may take before the fold is given up for this turn (None: no limit). `clock`
        (aware) times a thread's idle gap for `cache_ttl_seconds` (`WindowHistory.cold`)."""
        self.fold_calls_per_turn, self.cache_ttl_seconds, self.clock = _checked(
            fold_calls_per_turn, cache_ttl_seconds, clock
        )
        self.fold_timeout = fold_timeout
        self._chunk_cap: dict[str, int] = {}
        """Per agent, the fold input (estimated tokens) below the smallest chunk its summarizer
        refused as over its context: where later chunks start (see `_fold_chunk`)."""
        self._compress_cap: dict[str, int] = {}
        """Per agent, half the smallest summary its summarizer refused to compress: a longer
        one is compressed by its oldest part within this (see `_FoldCalls.compress`)."""
        turn_store = TurnStore(store)
        for definition in agents.values():
            if policy_summarizer(definition.policy) is not None and not turn_store.keeps_summaries:
                raise ConfigError(
                    f"agent {definition.name!r} summarizes its history, but the store "
                    f"({type(store).__name__}) keeps no summaries (the SummaryStore port): "
                    "every turn would have to summarize the whole thread again"
                )
        self.store = store
        self.runtime = runtime
        self.ledger = ledger
        self.model = model
        # What the store and the ledger can do, probed once, each in its adapter: every phase
        # reads and writes through these two and has no fallback branch of its own.
        self.turn_store = turn_store
        self.turn_ledger = TurnLedger(ledger)
        self._shares_transactions = (
            turn_store.joins_transactions and self.turn_ledger.joins_transactions
        )
        """Writes join a step's unit of work only when every writer can: one that wrote on a
        connection of its own while the unit's transaction is open could wait for that very
        transaction (SQLite's single write lock, or a row lock on PostgreSQL)."""
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
            cache_ttl_seconds=self.cache_ttl_seconds,
        )
        user = Message(role="user", content=request.content, run_id=request.run_id)
        # The user's message, the version marker and the read commit together (one unit).
        async with ctx.unit_of_work():
            persisted = await ctx.step(
                PERSIST_USER, functools.partial(self._persist, ctx, request.thread_id, user)
            )
            rolling = await ctx.patched(ROLLING_SUMMARY)
            if rolling:
                recorded = await ctx.step(
                    LOAD_THREAD,
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
                request, ctx, definition, hctx, report, recorded, parse_seq(persisted)["seq"]
            )
            last_prompt = parse_load_thread(recorded).get("last_prompt")
        else:
            prompt = await self._legacy_prompt(request, ctx, definition, hctx, report, *legacy)
        return await self._answer(
            request, ctx, definition, prompt, on_event, report, window, hctx, last_prompt
        )


def _checked(
    fold_calls_per_turn: int, cache_ttl_seconds: float, clock: Callable[[], datetime] | None
) -> tuple[int, float, Callable[[], datetime]]:
    """The loop's turn limits, refused when they make no sense; the clock defaults to UTC."""
    if fold_calls_per_turn < 1:
        raise ConfigError(f"fold_calls_per_turn must be >= 1, got {fold_calls_per_turn!r}")
    if not cache_ttl_seconds >= 0:
        raise ConfigError(f"cache_ttl_seconds must be >= 0, got {cache_ttl_seconds!r}")
    return fold_calls_per_turn, cache_ttl_seconds, clock or _utc_now


def _utc_now() -> datetime:
    return datetime.now(UTC)
