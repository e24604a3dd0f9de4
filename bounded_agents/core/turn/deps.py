"""The loop's dependencies, as every turn phase sees them."""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime

from bounded_agents.core.ports import (
    AgentStore,
    DurableContext,
    DurableRuntime,
    Ledger,
    ModelProvider,
    Thread,
    Transaction,
)
from bounded_agents.core.tool_budget import ToolBudget
from bounded_agents.core.turn.ledger import TurnLedger
from bounded_agents.core.turn.public import (
    AgentDefinition,
)
from bounded_agents.core.turn.store import TurnStore
from bounded_agents.errors import (
    AgentNotFound,
    ThreadNotFound,
)

log = logging.getLogger("bounded_agents.core.loop")
"""The loop's one logger, whichever turn module logs: log configuration keeps working."""


class TurnDeps:
    """What every phase of a turn may use: the loop's collaborators, and the store and the
    ledger as a turn uses them (`turn_store`, `turn_ledger`: every read and write of a phase
    goes through those, which probed the powers once)."""

    store: AgentStore
    runtime: DurableRuntime
    ledger: Ledger
    model: ModelProvider
    agents: dict[str, AgentDefinition]
    token_quota: int | None
    fold_calls_per_turn: int
    fold_timeout: float | None
    tool_budget: ToolBudget
    """Caps on a turn's search calls and tool-output bytes (`bounded_agents.core.tool_budget`)."""
    cache_ttl_seconds: float
    """How long the provider keeps a prompt cache idle; handed to `select` with the thread's
    idle time (`HistoryPolicyContext`). 0: off."""
    clock: Callable[[], datetime]
    """The time now, timezone-aware: what the thread's idle time is measured to. A parameter
    so a test or a benchmark can script idle gaps."""
    _chunk_cap: dict[str, int]
    _compress_cap: dict[str, int]
    turn_store: TurnStore
    turn_ledger: TurnLedger
    _shares_transactions: bool

    def definition(self, agent: str) -> AgentDefinition:
        try:
            return self.agents[agent]
        except KeyError:
            raise AgentNotFound(agent) from None

    async def owned_thread(self, thread_id: str, actor_id: str, agent: str | None = None) -> Thread:
        """The thread if `actor_id` owns it; `ThreadNotFound` otherwise, missing or not."""
        thread = await self.turn_store.thread_info(thread_id)
        if thread is None or thread.actor_id != actor_id or (agent and thread.agent != agent):
            raise ThreadNotFound(thread_id)
        return thread

    def idle_seconds(self, previous_at: datetime | None) -> float | None:
        """Seconds from the thread's last activity (`ThreadTurnPage.previous_at`, the store's
        time) to the loop's clock, never negative; None when the store gave no such time."""
        if previous_at is None:
            return None
        return max(0.0, (self.clock() - previous_at).total_seconds())

    async def _tx(self, ctx: DurableContext) -> Transaction | None:
        """The unit of work's transaction for a write, or None: write on your own."""
        return await ctx.transaction() if self._shares_transactions else None
