"""AgentModule: the composition root. `for_root(...)` wires store, journal, ledger, model and
agents once; the routes, the lifespan and `run_turn` all use what it built.

    module = AgentModule.for_root(model=..., actor_resolver=..., history={"max_messages": 40},
                                  agents=[PageHelperAgent])
    app = FastAPI(lifespan=module.lifespan)
    app.include_router(build_router(module))      # from bounded_agents.http import build_router

The module imports nothing of `bounded_agents.http`, at any depth: the application builds the
routes from the module, so the HTTP layer depends on the module and never the other way round
(tests/test_layers.py). `module.router`, which built them here before, is kept one release as a
deprecated property served through `register_router_factory` (see there).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import uuid
import warnings
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager, nullcontext
from datetime import UTC, datetime
from typing import Any

from fastapi import APIRouter, FastAPI
from opentelemetry.trace import TracerProvider

from bounded_agents.actors import LOCAL_ACTOR, ActorResolver
from bounded_agents.core.context_window import ChatMiddleware
from bounded_agents.core.history import (
    HistoryConfig,
    HistoryPolicy,
    validate_module_history,
)
from bounded_agents.core.loop import AgentLoop, EventSink, StartSink
from bounded_agents.core.ports import (
    AgentStore,
    DurableRuntime,
    Idempotency,
    Ledger,
    ModelProvider,
    PrunedStatus,
    Thread,
    supports_closing,
    supports_erased_pruning,
    supports_erased_run_sweep,
    supports_keyed_runs,
    supports_pruning,
    supports_run_erasure,
    supports_run_forgetting,
    supports_thread_holding,
)
from bounded_agents.core.report import RunResult
from bounded_agents.errors import (
    AgentNotFound,
    ConfigError,
    IdempotencyKeyReused,
    LeaseLost,
    MessageNotFound,
    QuotaExceeded,
    RunFailed,
    ThreadBusy,
    TurnInProgress,
)
from bounded_agents.observability import TurnMetrics
from bounded_agents.outcome import await_outcome
from bounded_agents.persistence import Persistence, build_persistence
from bounded_agents.registry import AgentSpec, agent, tool
from bounded_agents.settings import Settings, get_settings
from bounded_agents.startup import startup_errors_in_one_line
from bounded_agents.wiring import (
    agent_definitions,
    model_from_settings,
    observed_runtime,
    pick_resolver,
)

log = logging.getLogger("bounded_agents")

__all__ = [
    "LOCAL_ACTOR_ID",
    "PRUNE_BATCH",
    "PRUNE_BATCHES",
    "AgentModule",
    "AgentSpec",
    "RouterFactory",
    "agent",
    "model_from_settings",
    "register_router_factory",
    "tool",
]


LOCAL_ACTOR_ID = LOCAL_ACTOR
"""The actor of local development mode (`bounded_agents.actors.LOCAL_ACTOR`): what
`create_thread` defaults to, so a thread made without HTTP is the local HTTP caller's."""

RouterFactory = Callable[["AgentModule"], APIRouter]
"""What builds a module's routes: `bounded_agents.http.build_router`."""

_router_factory: list[RouterFactory] = []


def register_router_factory(factory: RouterFactory) -> None:
    """Called once by `bounded_agents.http.router` on import, so the deprecated
    `AgentModule.router` can build the routes without this module importing `http` (the
    dependency points up by a value handed down, not by an import). Goes with `router`."""
    _router_factory[:] = [factory]


PRUNE_BATCH = 500
"""Runs whose journals one prune statement deletes: a short transaction even on a busy table."""
PRUNE_BATCHES = 50
"""Batches per sweep at most, so one sweep never turns into a long job."""


class AgentModule:
    def __init__(
        self,
        *,
        settings: Settings,
        loop: AgentLoop,
        actor_resolver: ActorResolver,
        local_mode: bool,
        persistence: Persistence,
        metrics: TurnMetrics | None = None,
    ) -> None:
        self.settings = settings
        self.metrics = metrics
        """The Prometheus collectors (`/metrics` serves their registry); None when
        `settings.metrics` is off."""
        self.loop = loop
        self.actor_resolver = actor_resolver
        self.local_mode = local_mode
        self.persistence = persistence
        """The store, journal and ledger `for_root` chose; the lifespan starts and stops them."""
        self._tasks: set[asyncio.Task[Any]] = set()
        self._resuming: set[str] = set()
        """Runs this process's sweep claimed and is resuming now."""
        self._router: APIRouter | None = None

    @property
    def router(self) -> APIRouter:
        """Deprecated (goes in the next release): the module's routes, built on first use.
        Build them where the app is made instead, `bounded_agents.http.build_router(module)`;
        the module no longer depends on its HTTP layer."""
        warnings.warn(
            "AgentModule.router is deprecated: build the routes with "
            "bounded_agents.http.build_router(module)",
            DeprecationWarning,
            stacklevel=2,
        )
        if self._router is None:
            if not _router_factory:
                raise ConfigError(
                    "module.router needs bounded_agents.http imported: use "
                    "bounded_agents.http.build_router(module)"
                )
            self._router = _router_factory[0](self)
        return self._router

    @property
    def store(self) -> AgentStore:
        return self.loop.store

    async def create_thread(
        self, agent: str, *, actor_id: str = LOCAL_ACTOR_ID, title: str | None = None
    ) -> Thread:
        """Start a thread of `agent` owned by `actor_id`, without HTTP (what
        `POST /agents/{agent}/threads` does). `actor_id` defaults to the actor every request is
        in local development mode (no `AGENT_API_KEYS`), so a thread made here is the HTTP
        caller's there. An agent the module does not serve is `AgentNotFound`."""
        if agent not in self.loop.agents:
            raise AgentNotFound(agent)
        return await self.store.create_thread(actor_id=actor_id, agent=agent, title=title)

    async def erase_thread(
        self, thread_id: str, *, actor_id: str = LOCAL_ACTOR_ID, thread: Thread | None = None
    ) -> None:
        """Erase a thread of `actor_id` for good, without HTTP (what `DELETE /threads/{id}` and
        the `/v1` conversation delete do): its messages, summaries and run journals, and the
        records a runtime keeps of its runs outside the store (DBOS's workflows); its ledger rows
        stay. What exactly is erased, and why, is `bounded_agents.store.erase`'s docstring.

        `ThreadNotFound` for a thread that is not `actor_id`'s (or none), `ThreadBusy` while a
        turn runs on it (retry when it ends). A route passes the `thread` its ownership check
        already loaded, so it is not read again. A thread gone between that check and the
        erasure was erased by a concurrent call: the outcome asked for, so no error."""
        owned = await self._owned(thread_id, actor_id, thread)
        async with self._holding(owned.id):
            first_read = datetime.now(UTC)
            held = await self._runs_held_elsewhere(owned.id)
            await self.store.delete_thread(owned.id)
            await self._erase_runs(held)
            runtime = self.loop.runtime
            if held and supports_run_forgetting(runtime):
                await runtime.forget_runs(held)
            if supports_erased_run_sweep(runtime):
                # A run begun after `held` was read and ended before the store's erasure was
                # never live to refuse it, and its `runs` row is gone with the thread, so no
                # second read finds it (as `_runs_ended_since` does for a message): its records
                # began since the first read, with no row. A later sweep pays what this misses.
                await runtime.sweep_erased(since=first_read)

    async def erase_message(
        self,
        thread_id: str,
        seq: int,
        *,
        actor_id: str = LOCAL_ACTOR_ID,
        thread: Thread | None = None,
    ) -> None:
        """Erase the message at `seq` of a thread of `actor_id`, and every summary made of it
        (what `DELETE /threads/{id}/messages/{seq}` does). `MessageNotFound` when the thread has
        no message there (never stored, or erased already); otherwise as `erase_thread`."""
        owned = await self._owned(thread_id, actor_id, thread)
        async with self._holding(owned.id):
            held = await self._runs_held_elsewhere(owned.id)
            if not await self.store.delete_message(owned.id, seq):
                raise MessageNotFound(owned.id, seq)
            await self._erase_runs(held + await self._runs_ended_since(owned.id, held))

    async def _owned(self, thread_id: str, actor_id: str, thread: Thread | None) -> Thread:
        """`thread` when it is the caller's check of this thread for this actor, else read."""
        if thread is not None and thread.id == thread_id and thread.actor_id == actor_id:
            return thread
        return await self.loop.owned_thread(thread_id, actor_id)

    def _holding(self, thread_id: str) -> AbstractAsyncContextManager[None]:
        """The thread held from turns for the erasure by a runtime that keeps its live runs in
        memory (`ThreadHolder`: refused with `ThreadBusy` while one runs); a journaled run is a
        row the store's erasure checks itself."""
        runtime = self.loop.runtime
        return runtime.hold(thread_id) if supports_thread_holding(runtime) else nullcontext()

    async def _runs_held_elsewhere(self, thread_id: str) -> list[str]:
        """The thread's runs a runtime keeps records of outside the store (DBOS's workflows),
        read before the store's erasure deletes the `runs` rows that name them. The store erases
        every run's journal of the thread (`bounded_agents.store.erase`), so all of them go there
        too; a run begun in between and still live makes the store refuse the erasure, and one
        already ended is the runtime's sweep's (`ErasedRunSweeper`, in `erase_thread`)."""
        runtime = self.loop.runtime
        return await runtime.thread_run_ids(thread_id) if supports_run_erasure(runtime) else []

    async def _runs_ended_since(self, thread_id: str, held: list[str]) -> list[str]:
        """After a message's erasure committed (its thread's `runs` rows stay): the runs read
        now that were not read before it and have ended. One that began after that first read
        and ended before the erasure took the thread was never live to refuse it, and its
        records hold the message (found by attack: its DBOS workflow kept it). One running
        now began after the erasure committed: it never saw the message, and is left be."""
        runtime = self.loop.runtime
        if not supports_run_erasure(runtime):
            return []
        known = set(held)
        ended = []
        for run_id in await runtime.thread_run_ids(thread_id):
            if run_id in known:
                continue
            record = await self.loop.runtime.get_run(run_id)
            if record is not None and record.status != "running":
                ended.append(run_id)
        return ended

    async def _erase_runs(self, run_ids: list[str]) -> None:
        """After the store's erasure committed (a refused one, `ThreadBusy`, reaches no
        runtime)."""
        runtime = self.loop.runtime
        if run_ids and supports_run_erasure(runtime):
            await runtime.erase_runs(run_ids)

    @classmethod
    def for_root(
        cls,
        *,
        model: ModelProvider | None = None,
        actor_resolver: ActorResolver | None = None,
        history: HistoryConfig | Mapping[str, Any] | None = None,
        history_policy: HistoryPolicy | None = None,
        store: AgentStore | None = None,
        agents: Sequence[type] = (),
        journal: DurableRuntime | None = None,
        ledger: Ledger | None = None,
        quota: int | None = None,
        chat_middleware: Sequence[ChatMiddleware] = (),
        settings: Settings | None = None,
        tracer_provider: TracerProvider | None = None,
    ) -> AgentModule:
        """Build the module. Anything not given comes from `settings` (default: the
        environment, `AGENT_*`): the SQL store on `database_url`, its journal and ledger, the
        configured model, the API-key actor resolver, the module-wide history.

        Without `journal=`/`ledger=`, they go in the store's database when the store can host
        them, else in process (`bounded_agents.persistence.build_persistence`, the one rule);
        the lifespan logs which.

        Spans go to `tracer_provider`, or to OpenTelemetry's global one (a no-op until the host
        installs an SDK); `settings.tracing` and `settings.metrics` switch them off."""
        settings = settings or get_settings()
        if model is None:
            model = model_from_settings(settings)
        persistence = build_persistence(
            store=store, journal=journal, ledger=ledger, settings=settings
        )
        metrics = TurnMetrics() if settings.metrics else None
        runtime = observed_runtime(persistence.journal, model, settings, metrics, tracer_provider)
        if history is None and history_policy is None:
            history = settings.history_config()
        validate_module_history(history_policy, history, model)
        definitions = agent_definitions(
            agents, history_policy, history, model, chat_middleware, persistence.store
        )
        actor_resolver, local_mode = pick_resolver(actor_resolver, settings)
        loop = AgentLoop(
            store=persistence.store,
            runtime=runtime,
            ledger=persistence.ledger,
            model=model,
            agents=definitions,
            token_quota=quota if quota is not None else settings.token_quota,
            fold_calls_per_turn=settings.history_fold_calls_per_turn,
            fold_timeout=settings.history_fold_timeout_seconds,
            cache_ttl_seconds=settings.history_cache_ttl_seconds,
            tool_budget=settings.tool_budget(),
            model_call_timeout=settings.model_call_timeout_seconds,
            tool_timeout=settings.tool_timeout_seconds,
        )
        return cls(
            settings=settings,
            loop=loop,
            actor_resolver=actor_resolver,
            local_mode=local_mode,
            persistence=persistence,
            metrics=metrics,
        )

    async def run_turn(
        self,
        *,
        agent: str,
        thread_id: str,
        actor_id: str,
        content: str,
        on_event: EventSink | None = None,
        run_id: str | None = None,
        thread: Thread | None = None,
        idempotency: Idempotency | None = None,
        on_started: StartSink | None = None,
        follows_run: str | None = None,
    ) -> RunResult:
        """Run one turn without HTTP; the chat route calls exactly this (passing the `thread`
        its ownership check already loaded, so the turn does not read it again).

        With `idempotency`, a turn already made under its key (same actor and thread) is
        answered instead: its stored answer (`run_id` is then that run's), its failure, or,
        while it still runs past `AGENT_IDEMPOTENCY_WAIT_SECONDS`, `TurnInProgress`; another
        request under the key is `IdempotencyKeyReused`. No model is called for any of them.
        A run this process lost to another (its lease lapsed while it stalled) answers what
        that process stored, not `LeaseLost`. `on_started` is awaited once the run has begun
        (`AgentLoop.run_turn`); never for a refused turn or a key's earlier one."""
        run_id = run_id or str(uuid.uuid4())
        try:
            return await self.loop.run_turn(
                agent=agent,
                thread_id=thread_id,
                actor_id=actor_id,
                content=content,
                run_id=run_id,
                on_event=on_event,
                thread=thread,
                idempotency=idempotency,
                on_started=on_started,
                follows_run=follows_run,
            )
        except TurnInProgress as first:
            assert idempotency is not None  # raised only for a keyed run
            return await self._answer_repeat(first, idempotency)
        except QuotaExceeded:
            # Refused before the run began; but a repeat of a turn that spent the last of the
            # quota is owed that turn's answer, which costs nothing more.
            runtime = self.loop.runtime
            if idempotency is None or not supports_keyed_runs(runtime):
                raise
            found = await runtime.find_keyed_run(thread_id, actor_id, idempotency.key)
            if found is None:
                raise
            return await self._answer_repeat(TurnInProgress(*found), idempotency)
        except RunFailed as failed:
            if not isinstance(failed.cause, LeaseLost):
                raise
            # Another process took the run over: its answer is this client's answer.
            taken = await await_outcome(self.loop, run_id, self.settings.idempotency_wait_seconds)
            if taken is None:
                raise
            log.info("run %s: answered with what the process that took it over stored", run_id)
            return taken

    async def _answer_repeat(self, first: TurnInProgress, idempotency: Idempotency) -> RunResult:
        if first.fingerprint != idempotency.fingerprint:
            raise IdempotencyKeyReused(first.run_id)
        outcome = await await_outcome(
            self.loop, first.run_id, self.settings.idempotency_wait_seconds
        )
        if outcome is None:
            raise TurnInProgress(first.run_id, first.fingerprint)
        return outcome

    def spawn(self, coro: Awaitable[Any]) -> asyncio.Task[Any]:
        """Run `coro` to the end even if whoever started it goes away (a client that
        disconnects mid-stream); the lifespan waits for these tasks at shutdown."""
        task: asyncio.Task[Any] = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def resume_expired_runs(self) -> list[str]:
        """Claim runs whose lease expired (their process died) and resume them, at most
        `AGENT_SWEEP_MAX_RESUMES` at a time in this process. Returns the ids claimed now."""
        room = self.settings.sweep_max_resumes - len(self._resuming)
        if room <= 0:
            return []
        run_ids = await self.loop.runtime.claim_expired(room)
        for run_id in run_ids:
            log.info("resuming run %s whose lease expired", run_id)
            self._resuming.add(run_id)
            self.spawn(self._resume_quietly(run_id))
        return run_ids

    async def _resume_quietly(self, run_id: str) -> None:
        try:
            await self.loop.resume(run_id)
        except ThreadBusy:
            # Taken by another process between our claim and our resume (its lease lapsed
            # again meanwhile): the run is in good hands, not an error.
            log.info("run %s was resumed by another process first", run_id)
        except Exception:
            log.exception("run %s could not be resumed", run_id)
        finally:
            self._resuming.discard(run_id)

    async def prune_journal(self) -> int:
        """Delete the journals of runs completed more than AGENT_JOURNAL_RETENTION_SECONDS ago
        and of runs failed more than AGENT_FAILED_RUN_RETENTION_SECONDS ago, in batches, at most
        `PRUNE_BATCHES` of them per call and status; returns the runs pruned."""
        runtime = self.loop.runtime
        if not supports_pruning(runtime):
            return 0
        total = 0
        retention: dict[PrunedStatus, float] = {
            "completed": self.settings.journal_retention_seconds,
            "failed": self.settings.failed_run_retention_seconds,
        }
        for status, seconds in retention.items():
            pruned = await _in_batches(
                functools.partial(runtime.prune_steps, seconds, PRUNE_BATCH, status=status)
            )
            if pruned:
                log.info("pruned the journals of %d %s runs", pruned, status)
            total += pruned
        return total

    async def prune_erased(self) -> int:
        """Forget the ids of threads erased more than AGENT_ERASED_THREAD_RETENTION_SECONDS ago
        (`ErasedThreadPruner`), at most `PRUNE_BATCHES` batches per call; returns how many."""
        store = self.store
        if not supports_erased_pruning(store):
            return 0
        seconds = self.settings.erased_thread_retention_seconds
        pruned = await _in_batches(functools.partial(store.prune_erased, seconds, PRUNE_BATCH))
        if pruned:
            log.info("forgot the ids of %d erased threads (retention ended)", pruned)
        return pruned

    async def sweep_erased_runs(self) -> int:
        """One bounded pass of the runtime's sweep for records of runs whose `runs` row is gone
        (`ErasedRunSweeper`: DBOS's workflows an erasure owed and could not delete); how many
        it deleted. The runtime logs its own failures; this never raises for one."""
        runtime = self.loop.runtime
        return await runtime.sweep_erased() if supports_erased_run_sweep(runtime) else 0

    async def _sweep_forever(self) -> None:
        """Resume runs whose lease expires while this process is up (another replica died),
        prune finished runs' journals, forget erased threads' ids past their retention, and
        delete what a runtime keeps of erased threads' runs that an erasure could not."""
        while True:
            await asyncio.sleep(self.settings.sweep_seconds or self.settings.run_lease_seconds)
            try:
                await self.resume_expired_runs()
            except Exception:
                log.exception("the sweep for expired runs failed; retrying next period")
            try:
                await self.prune_journal()
            except Exception:
                log.exception("pruning the run journal failed; retrying next period")
            try:
                await self.prune_erased()
            except Exception:
                log.exception("pruning erased threads' ids failed; retrying next period")
            await self.sweep_erased_runs()

    @asynccontextmanager
    async def lifespan(self, _app: FastAPI | None = None) -> AsyncIterator[None]:
        """Migrate (when configured), say which run journal and ledger are in use, resume runs
        whose process died (now and periodically), and on the way out let running turns finish
        before the engine is disposed. Nest it in your own lifespan with
        `async with module.lifespan(app): ...` to compose."""
        persistence = self.persistence
        async with startup_errors_in_one_line(self.settings.database_url):
            if self.settings.migrate_on_start:
                await persistence.migrate()
            await persistence.index_search(self.loop.agents)
            await self.loop.restore_learned()  # token ratios an earlier process learned
            if self.local_mode:
                log.warning(
                    "no AGENT_API_KEYS configured: local development mode, every request "
                    "is actor 'local'"
                )
            level, note = persistence.note
            log.log(level, "%s", note)
            await persistence.launch(self.settings)
            await self.resume_expired_runs()
        sweeper = asyncio.create_task(self._sweep_forever())
        try:
            yield
        finally:
            sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await sweeper
            if self._tasks:
                await asyncio.wait(set(self._tasks), timeout=30)
            await persistence.shutdown()  # before the model closes: a DBOS step may still call it
            if supports_closing(self.loop.model):
                await self.loop.model.aclose()
            await persistence.dispose()


async def _in_batches(prune: Callable[[], Awaitable[int]]) -> int:
    """Call `prune` (one batch of at most `PRUNE_BATCH`) until a batch comes back short, at most
    `PRUNE_BATCHES` times: a sweep's deletions stay bounded however much is owed. The total."""
    total = 0
    for _ in range(PRUNE_BATCHES):
        batch = await prune()
        total += batch
        if batch < PRUNE_BATCH:
            break
    return total
