"""What every phase of a turn may use: the loop's collaborators, as one frozen value.

pydantic-ai hands its graph nodes a `GraphAgentDeps`; a turn's phases get `TurnDeps` the same
way, built once by `AgentLoop` and shared by every run. The store and the ledger are the
turn's views of them (`TurnStore`, `TurnLedger`), which probed their optional powers once, so
no phase has a fallback branch of its own. The only thing that changes after it is built is
`learned`: sizes a summarizer refused, remembered per agent for the process's later folds.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime

from bounded_agents.core.calibration import CalibratedCounter
from bounded_agents.core.ports import DurableRuntime, Ledger, ModelProvider, Thread
from bounded_agents.core.tool_budget import ToolBudget
from bounded_agents.core.turn.constants import (
    DEFAULT_MODEL_CALL_TIMEOUT_SECONDS,
    DEFAULT_TOOL_TIMEOUT_SECONDS,
)
from bounded_agents.core.turn.ledger import TurnLedger
from bounded_agents.core.turn.public import AgentDefinition
from bounded_agents.core.turn.store import TurnStore
from bounded_agents.errors import AgentNotFound, ThreadNotFound

log = logging.getLogger("bounded_agents.core.loop")
"""The loop's one logger, whichever turn module logs: log configuration keeps working."""


@dataclass(frozen=True)
class TurnLimits:
    """The turn's configured bounds (see `AgentLoop.__init__`)."""

    token_quota: int | None
    fold_calls_per_turn: int
    fold_timeout: float | None
    """Seconds one summarizer call may take (None: no limit)."""
    cache_ttl_seconds: float
    """How long the provider keeps a prompt cache idle; handed to `select` with the thread's
    idle time (`HistoryPolicyContext`). 0: off."""
    tool_budget: ToolBudget = field(default_factory=ToolBudget)
    """Caps on a turn's search calls and tool-output bytes (`bounded_agents.core.tool_budget`)."""
    model_call_timeout: float | None = DEFAULT_MODEL_CALL_TIMEOUT_SECONDS
    """Seconds one chat model call may take in all (None: no limit)."""
    tool_timeout: float | None = DEFAULT_TOOL_TIMEOUT_SECONDS
    """Seconds one tool call may take before its result is an error (None: no limit)."""


@dataclass
class LearnedSizes:
    """What summarizers refused, per agent, for this process's later folds."""

    chunk_cap: dict[str, int] = field(default_factory=dict)
    """The fold input (estimated tokens) below the smallest chunk the agent's summarizer refused
    as over its context: where later chunks start (`fold_chunk`)."""
    compress_cap: dict[str, int] = field(default_factory=dict)
    """Half the smallest summary the agent's summarizer refused to compress: a longer one is
    compressed by its oldest part within this (`FoldCalls.compress`)."""
    tokens: CalibratedCounter = field(default_factory=lambda: CalibratedCounter(floor=1.0))
    """Per model name, the ratio of the prompt tokens providers reported to the estimate
    (`bounded_agents.core.calibration`): learned from every chat call that reports usage,
    applied where the loop sizes by the estimate (fold chunks, quota holds). 1.0 until a
    provider reports, and never below it: the estimate stays the default offline, and a model
    that counts fewer tokens than the estimate is sized as before."""
    counted: set[str] = field(default_factory=set)
    """Models already asked for an exact count (`count_before_learning`): once per process."""


@dataclass(frozen=True)
class TurnDeps:
    """The loop's collaborators as every phase sees them."""

    store: TurnStore
    ledger: TurnLedger
    runtime: DurableRuntime
    model: ModelProvider
    agents: Mapping[str, AgentDefinition]
    limits: TurnLimits
    clock: Callable[[], datetime]
    """The time now, timezone-aware: what the thread's idle time is measured to. A parameter
    so a test or a benchmark can script idle gaps."""
    learned: LearnedSizes = field(default_factory=LearnedSizes)
    shares_transactions: bool = False
    """Writes join a step's unit of work only when every writer can: one that wrote on a
    connection of its own while the unit's transaction is open could wait for that very
    transaction (SQLite's single write lock, or a row lock on PostgreSQL)."""

    @property
    def model_name(self) -> str:
        """The configured model's name: what its token ratio is learned and applied under."""
        name = getattr(self.model, "model", None) or getattr(self.model, "name", None)
        return name if isinstance(name, str) else type(self.model).__name__

    @property
    def raw_ledger(self) -> Ledger:
        return self.ledger.ledger

    def definition(self, agent: str) -> AgentDefinition:
        try:
            return self.agents[agent]
        except KeyError:
            raise AgentNotFound(agent) from None

    async def owned_thread(self, thread_id: str, actor_id: str, agent: str | None = None) -> Thread:
        """The thread if `actor_id` owns it; `ThreadNotFound` otherwise, missing or not."""
        thread = await self.store.thread_info(thread_id)
        if thread is None or thread.actor_id != actor_id or (agent and thread.agent != agent):
            raise ThreadNotFound(thread_id)
        return thread

    def idle_seconds(self, previous_at: datetime | None) -> float | None:
        """Seconds from the thread's last activity (`ThreadTurnPage.previous_at`, the store's
        time) to the loop's clock, never negative; None when the store gave no such time."""
        if previous_at is None:
            return None
        return max(0.0, (self.clock() - previous_at).total_seconds())


__all__ = ["LearnedSizes", "TurnDeps", "TurnLimits"]
