"""AgentLoop: one run answers one user message, every outside effect behind a checkpoint.

Checkpoints, in order (docs/reliability.md has the whole table):

    persist:user                  the user's message, so `select` sees it as the newest
    patch:agent:rolling-summary   (marker; a run journaled before it replays its old path)
    load:thread                   the bounded read + `select`; records the SELECTION, the
                                  thread's summary and the fold this turn owes
    history:summarize[:n]         one per fold chunk: the summary so far + only new messages
    persist:usage:history[:n]     that chunk's ledger row
    persist:summary[:n]           that chunk's summary row (idempotent: thread + boundary)
    model:<n>                     one per model step (its ledger row is written with it, in
                                  the next commit: its tool round's or the answer's; its
                                  prompt's digest is journaled for the next step's prefix
                                  figures)
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
from bounded_agents.core.history.powers import policy_summarizer, read_bound
from bounded_agents.core.messages import ChatMessage, Message, unstorable_text
from bounded_agents.core.ports import (
    AgentStore,
    DurableRuntime,
    HistoryPolicyContext,
    Idempotency,
    JsonValue,
    Ledger,
    ModelProvider,
    RunRequest,
    Thread,
    Transaction,
    supports_owner_check,
    supports_run_executor,
)
from bounded_agents.core.report import RunReport, RunResult
from bounded_agents.core.tool_budget import ToolBudget
from bounded_agents.core.turn.answer import answer
from bounded_agents.core.turn.constants import (
    BACKLOG_READ_ROWS,
    COMPLETION_RESERVE,
    DEFAULT_CACHE_TTL_SECONDS,
    DEFAULT_FOLD_CALLS_PER_TURN,
    DEFAULT_FOLD_TIMEOUT_SECONDS,
    DEFAULT_MODEL_CALL_TIMEOUT_SECONDS,
    DEFAULT_TOOL_TIMEOUT_SECONDS,
    READ_FIGURES,
)
from bounded_agents.core.turn.deps import TurnDeps, TurnLimits
from bounded_agents.core.turn.finish import finish_report, store_answer
from bounded_agents.core.turn.fold import rolling_prompt
from bounded_agents.core.turn.ledger import TurnLedger
from bounded_agents.core.turn.load import load_thread, persist
from bounded_agents.core.turn.preview import preview
from bounded_agents.core.turn.prompt import omission_note
from bounded_agents.core.turn.public import (
    AgentDefinition,
    EventSink,
    FoldPreview,
    LoopEvent,
    StartSink,
    ToolBinding,
    ToolCallEvent,
    ToolResultEvent,
    WindowPreview,
)
from bounded_agents.core.turn.replay import legacy_load, legacy_prompt
from bounded_agents.core.turn.spend import keep_learned_ratios
from bounded_agents.core.turn.state import Digest, Turn
from bounded_agents.core.turn.store import TurnStore
from bounded_agents.errors import (
    AgentError,
    ConfigError,
    InvalidContent,
    QuotaExceeded,
    RunCompleted,
    RunFailed,
    RunNotFound,
    ThreadNotFound,
)

log = logging.getLogger("bounded_agents.core.loop")

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
    "StartSink",
    "ToolBinding",
    "ToolCallEvent",
    "ToolResultEvent",
    "WindowPreview",
    "omission_note",
    "read_bound",
]


class AgentLoop:
    """One run answers one user message. The loop holds the turn's dependencies (`deps`, one
    frozen value) and composes the phases, each a function of `core/turn/` taking the deps and
    the run's state (`Turn`): load, fold, answer, finish. It keeps the entry points."""

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
        tool_budget: ToolBudget | None = None,
        model_call_timeout: float | None = DEFAULT_MODEL_CALL_TIMEOUT_SECONDS,
        tool_timeout: float | None = DEFAULT_TOOL_TIMEOUT_SECONDS,
    ) -> None:
        """`fold_calls_per_turn`: summarizer calls a run may make (a backlog is folded over
        several turns, the prompt bounded meanwhile). `fold_timeout`: seconds one summarizer
        call may take before the fold is given up for this turn (None: no limit). `clock`
        (aware) times a thread's idle gap for `cache_ttl_seconds` (`WindowHistory.cold`).
        `tool_budget`: caps on each turn's search calls and tool output (default caps when
        None; `bounded_agents.core.tool_budget`). `model_call_timeout`: seconds one chat call
        may take in all, streaming included (None: no limit); `tool_timeout`: seconds one tool
        call may take before the model reads an error result instead (None: no limit)."""
        limits = _checked(
            TurnLimits(
                token_quota,
                fold_calls_per_turn,
                fold_timeout,
                cache_ttl_seconds,
                tool_budget=tool_budget or ToolBudget(),
                model_call_timeout=model_call_timeout,
                tool_timeout=tool_timeout,
            )
        )
        turn_store = TurnStore(store)
        for definition in agents.values():
            if policy_summarizer(definition.policy) is not None and not turn_store.keeps_summaries:
                raise ConfigError(
                    f"agent {definition.name!r} summarizes its history, but the store "
                    f"({type(store).__name__}) keeps no summaries (the SummaryStore port): "
                    "every turn would have to summarize the whole thread again"
                )
        # What the store and the ledger can do is probed once, each in its adapter: every
        # phase reads and writes through these two and has no fallback branch of its own.
        turn_ledger = TurnLedger(ledger)
        self.deps = TurnDeps(
            store=turn_store,
            ledger=turn_ledger,
            runtime=runtime,
            model=model,
            agents=dict(agents),
            limits=limits,
            clock=clock or _utc_now,
            shares_transactions=turn_store.joins_transactions and turn_ledger.joins_transactions,
        )
        self._executor = runtime if supports_run_executor(runtime) else None
        """The runtime when it executes runs itself (DBOS), probed once here, not per turn."""
        self._owner_check = runtime if supports_owner_check(runtime) else None
        """The runtime when its `begin` checks the thread's owner in the run's insert
        (`SqlJournal`): a turn handed no thread then sends no ownership read of its own
        (issue 37)."""
        if self._executor is not None:
            # Its engine's recovery (a DBOS restart) finishes a run by the same path as a sweep.
            self._executor.register_resumer(self.resume)

    # --- what the module and the routes read ---------------------------------------------

    @property
    def store(self) -> AgentStore:
        return self.deps.store.store

    @property
    def runtime(self) -> DurableRuntime:
        return self.deps.runtime

    @property
    def ledger(self) -> Ledger:
        return self.deps.raw_ledger

    @property
    def model(self) -> ModelProvider:
        return self.deps.model

    @property
    def agents(self) -> Mapping[str, AgentDefinition]:
        return self.deps.agents

    def definition(self, agent: str) -> AgentDefinition:
        return self.deps.definition(agent)

    async def owned_thread(self, thread_id: str, actor_id: str, agent: str | None = None) -> Thread:
        """The thread if `actor_id` owns it; `ThreadNotFound` otherwise, missing or not."""
        return await self.deps.owned_thread(thread_id, actor_id, agent)

    async def preview(
        self, thread_id: str, actor_id: str, thread: Thread | None = None
    ) -> WindowPreview:
        """What the next turn would send (`bounded_agents.core.turn.preview.preview`)."""
        return await preview(self.deps, thread_id, actor_id, thread)

    # --- entry points ----------------------------------------------------------------------

    async def check_quota(self, actor_id: str) -> None:
        """`QuotaExceeded` when the actor has spent its token quota (one ledger read; nothing
        when no quota is set). Every turn asks before it begins; a caller about to make
        something for a turn (a `/v1` request's new conversation) asks first, so a refused
        turn leaves nothing behind."""
        quota = self.deps.limits.token_quota
        if quota is not None:
            used = await self.deps.raw_ledger.tokens_used(actor_id)
            if used >= quota:
                raise QuotaExceeded(actor_id, used, quota)

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
        on_started: StartSink | None = None,
        follows_run: str | None = None,
    ) -> RunResult:
        """Answer `content` in the thread. Raises `ThreadNotFound` (also for another actor's
        thread), `ThreadBusy`, `QuotaExceeded` before any work; `RunFailed` once it started.
        `on_started` is awaited at that point, when the run's first unit has committed (before
        any fold or model call): a streaming route sends its headers then, not at the first
        token, which a slow model or a fold may hold back past a proxy's idle timeout.

        `thread`, when the caller already loaded it (the HTTP route does), saves the ownership
        read: it is checked against `actor_id` and `agent` in memory instead. Without it, a
        runtime that checks the owner in the run's insert (`SqlJournal`) is left to: no read
        either, and `QuotaExceeded` may then come before `ThreadNotFound`. `idempotency`
        records the run under its key; a run already under it raises `TurnInProgress` (the
        module answers that run's outcome instead). `follows_run` is kept with the run
        (`RunRequest.follows_run`). Text no store can hold (a NUL, a lone surrogate) is
        `InvalidContent` before any run begins: begun, the run failed with the refused text
        kept in its request, out of reach of message erasure (found by attack)."""
        reason = unstorable_text(Message(role="user", content=content))
        if reason is not None:
            raise InvalidContent(reason)
        deps = self.deps
        definition = deps.definition(agent)
        checked = thread is not None and thread.id == thread_id
        if thread is not None and checked:
            if thread.actor_id != actor_id or thread.agent != agent:
                raise ThreadNotFound(thread_id)
        elif self._owner_check is None:
            await deps.owned_thread(thread_id, actor_id, agent)
        await self.check_quota(actor_id)
        request = RunRequest(
            run_id=run_id,
            thread_id=thread_id,
            actor_id=actor_id,
            agent=agent,
            content=content,
            idempotency=idempotency,
            follows_run=follows_run,
        )
        if checked and self._owner_check is not None:
            # Checked in memory above: a runtime whose own check is a read (on Citus) skips it.
            self._owner_check.owner_checked(run_id)
        ctx = await deps.runtime.begin(request, shared_first_unit=deps.shares_transactions)
        turn = Turn(
            request=request,
            definition=definition,
            ctx=ctx,
            report=RunReport(run_id=run_id),
            hctx=_policy_context(deps, request),
            on_event=on_event,
            on_started=on_started,
        )
        result = await self._drive(turn)
        await keep_learned_ratios(deps)
        return result

    async def resume(self, run_id: str, on_event: EventSink | None = None) -> RunResult:
        """Finish a failed or interrupted run from its journal. A completed one is refused
        with `RunCompleted` (`JournalPruned` once its journal is gone): its answer is stored,
        and replaying its end would fail as a lost lease (the run is held by no one), which
        read as a takeover."""
        deps = self.deps
        record = await deps.runtime.get_run(run_id)
        if record is None:
            raise RunNotFound(run_id)
        definition = deps.definition(record.request.agent)  # before the claim: never strand it
        request, ctx = await deps.runtime.reopen(run_id)  # a completed run is not claimed
        if record.status == "completed":
            raise RunCompleted(run_id)
        report = RunReport(run_id=run_id)
        if record.report is not None:
            prior = RunReport.model_validate(record.report)
            # The read happened in an earlier attempt; its figures stay true for this run.
            for name in READ_FIGURES:
                setattr(report, name, getattr(prior, name))
        turn = Turn(
            request=request,
            definition=definition,
            ctx=ctx,
            report=report,
            hctx=_policy_context(deps, request),
            on_event=on_event,
            fresh=False,
        )
        result = await self._drive(turn)
        await keep_learned_ratios(deps)
        return result

    async def restore_learned(self) -> None:
        """The token ratios an earlier process learned and saved (`RatioBook`), so windows and
        fold chunks are sized by them from the first turn; the module's lifespan calls it. An
        optimization, not a condition of serving: a database that cannot be read now (the
        health check says so) only means the ratios are relearned from the first report."""
        try:
            saved = await self.deps.ledger.saved_ratios()
        except Exception as exc:
            log.warning("the saved token ratios could not be read (%s): relearning them", exc)
            return
        self.deps.learned.tokens.restore(saved)

    # --- the run ---------------------------------------------------------------------------

    async def _drive(self, turn: Turn) -> RunResult:
        """A runtime that executes runs itself (`RunExecutor`, DBOS) runs the attempt as its
        workflow; any other is simply awaited."""
        attempt = functools.partial(_attempt, self.deps, turn)
        if self._executor is not None:
            return await self._executor.execute(turn.request.run_id, attempt)
        return await attempt()


async def _attempt(deps: TurnDeps, turn: Turn) -> RunResult:
    """One attempt at the run: its answer stored, or its failure recorded and raised."""
    request = turn.request
    try:
        async with deps.runtime.keep_alive(request.run_id):
            reply, digest = await run(deps, turn)
            message = await store_answer(deps, turn, reply, digest=digest)
    except Exception as exc:
        failure = RunFailed(request.run_id, exc)
        turn.report.status = "failed"
        await finish_report(deps, turn)
        try:
            await deps.runtime.fail(
                request.run_id, failure.cause_code, str(exc), turn.report.model_dump(mode="json")
            )
        except Exception:
            log.exception("run %s: could not record its failure", request.run_id)
        if not isinstance(exc, AgentError):
            log.exception("run %s failed", request.run_id)
        raise failure from exc
    return RunResult(run_id=request.run_id, message=message, report=turn.report)


async def run(deps: TurnDeps, turn: Turn) -> tuple[Message, Digest]:
    """The phases of one turn, up to the answer (not yet stored) and what it leaves of its
    prompt: the user's message, the version marker and the read commit together (one unit);
    then the prompt (a fold first when the read says one is owed), then the model steps."""
    ctx, request = turn.ctx, turn.request
    user = Message(role="user", content=request.content, run_id=request.run_id)
    writes = deps.shares_transactions

    async def persist_user(tx: Transaction | None) -> JsonValue:
        return await persist(deps, turn, user, tx=tx)

    async def load(tx: Transaction | None) -> JsonValue:
        return await load_thread(deps, turn, tx)

    async with ctx.unit_of_work():
        persisted = await ctx.step(PERSIST_USER, persist_user, writes=writes)
        rolling = await ctx.patched(ROLLING_SUMMARY)
        if rolling:
            recorded = await ctx.step(LOAD_THREAD, load, writes=writes)
        else:
            legacy = await legacy_load(turn)
    if turn.on_started is not None:
        await turn.on_started()
    last_prompt: str | None = None
    prompt: list[ChatMessage]
    if rolling:
        user_seq = parse_seq(persisted)["seq"]
        prompt = await rolling_prompt(deps, turn, recorded, user_seq=user_seq)
        last_prompt = parse_load_thread(recorded).get("last_prompt")
    else:
        prompt = await legacy_prompt(deps, turn, *legacy)
    return await answer(deps, turn, prompt, last_prompt=last_prompt)


def _policy_context(deps: TurnDeps, request: RunRequest) -> HistoryPolicyContext:
    return HistoryPolicyContext(
        thread_id=request.thread_id,
        agent=request.agent,
        actor_id=request.actor_id,
        run_id=request.run_id,
        cache_ttl_seconds=deps.limits.cache_ttl_seconds,
    )


def _checked(limits: TurnLimits) -> TurnLimits:
    """The loop's turn limits, refused when they make no sense."""
    if limits.fold_calls_per_turn < 1:
        raise ConfigError(f"fold_calls_per_turn must be >= 1, got {limits.fold_calls_per_turn!r}")
    if not limits.cache_ttl_seconds >= 0:
        raise ConfigError(f"cache_ttl_seconds must be >= 0, got {limits.cache_ttl_seconds!r}")
    for name in ("fold_timeout", "model_call_timeout", "tool_timeout"):
        seconds = getattr(limits, name)
        if seconds is not None and not seconds > 0:
            raise ConfigError(f"{name} must be > 0 seconds or None, got {seconds!r}")
    return limits


def _utc_now() -> datetime:
    return datetime.now(UTC)
