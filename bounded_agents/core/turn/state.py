"""What one run carries between its phases: the turn's state, as a value.

`Turn` is built once per attempt by `AgentLoop` and handed to every phase function with the
loop's `TurnDeps`; a phase reads the request and the definition from it, writes its figures into
its report, and (for a policy that folds between model calls) moves its `window`. Nothing of a
run lives on the loop itself, so two runs in one process share nothing but their deps.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from bounded_agents.core.history.clearing import Cleared
from bounded_agents.core.messages import Message
from bounded_agents.core.ports import (
    DurableContext,
    HistoryPolicyContext,
    RunRequest,
    ThreadSummary,
)
from bounded_agents.core.report import RunReport
from bounded_agents.core.turn.public import AgentDefinition, EventSink, StartSink


@dataclass(frozen=True)
class Digest:
    """What a run's answer leaves for the next turn, stored with it: the digest of its last
    chat prompt (prefix reuse) and that call's usage as the provider counted it (None when it
    was an estimate), which a token threshold prefers to its own estimate."""

    prompt: str | None
    reported: int | None


@dataclass
class Window:
    """A run's history as sent, kept for a mid-run fold: the summary (or the one a refold
    stored since, which the next refold extends), the kept messages (with their seqs) and how
    many prompt messages they fill after the system prompt."""

    summary: ThreadSummary | None
    keep: list[Message]
    head: int
    folds: int = 0
    """Summarizer chunks this run made so far (their checkpoints are numbered on from it)."""
    cleared: Cleared = field(default_factory=Cleared)
    """The tool results cleared from the kept history as last sent."""
    clearing: dict[str, Any] | None = None
    """The tool-result clearing `load:thread` journaled (None: none), for a refold's head."""


@dataclass
class Turn:
    """One attempt of one run: what it answers, for which agent, in which journal, and the
    report it fills. `fresh`: the attempt is the run's first, so every ledger row of the run
    was written by it (a resumed run reads them back instead)."""

    request: RunRequest
    definition: AgentDefinition
    ctx: DurableContext
    report: RunReport
    hctx: HistoryPolicyContext
    on_event: EventSink | None = None
    on_started: StartSink | None = None
    """Told once the run's first unit (its row, the user's message, the read) committed."""
    fresh: bool = True
    window: Window | None = None
    """Set by the load when the policy refolds between model calls (`RefoldingPolicy`)."""
    kept: list[Message] | None = None
    """The messages `load:thread` kept, as this attempt read them (None: the step was replayed,
    and its `keep_refs` are read back from the store: `core/turn/kept.py`)."""


__all__ = ["Digest", "Turn", "Window"]
