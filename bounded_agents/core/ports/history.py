"""The history policy SPI: the types a history policy and a summarizer speak.

They live beside the other ports so `core/history/` (the built-in policies) and
`core/summary.py` (the built-in summarizer) both depend on them without depending on each other.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Literal, Protocol, TypeAlias, runtime_checkable

from pydantic import Field

from bounded_agents.core.messages import Message
from bounded_agents.core.ports.frozen import Frozen
from bounded_agents.core.ports.model import Usage
from bounded_agents.core.ports.store import ThreadSummary


class HistorySelection(Frozen):
    """What `select` decided: `keep` is sent (oldest first), `drop` is left out.

    For a summarizing policy, `drop` (with anything older the read skipped) is folded into the
    thread's rolling summary; for any other it is gone from the prompt.
    """

    keep: list[Message]
    drop: list[Message]


class HistorySummary(Frozen):
    """A summarizer's result. `usage` None means the summarizer could not say what it cost: the
    ledger books the token estimate instead, flagged as estimated. `model` names the model that
    wrote it, so the ledger books the summary under the same name as that model's chat calls."""

    text: str
    usage: Usage | None = None
    model: str | None = None
    finish_reason: str | None = None
    """The model's own reason for stopping, when the summarizer used one (`length` means the
    summary was cut off and is refused; `tool_calls` that it acted instead of writing)."""


class HistoryPolicyContext(Frozen):
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
    idle_seconds: float | None = None
    """Seconds the thread sat idle before this turn's user message: from the thread's last
    stored message before it to the loop's clock when the turn read it (inside `load:thread`,
    so a replay keeps the selection made with it). None when unknown (no such message on the
    page, or a store that keeps no message times). A provider's prompt cache outlives an idle
    thread only for `cache_ttl_seconds`: past that, the next prompt is uncached whatever its
    prefix, so a fold that is near anyway costs no extra cache miss now."""
    cache_ttl_seconds: float = Field(default=0.0, ge=0)
    """How long the provider keeps a prompt cache idle (`AGENT_HISTORY_CACHE_TTL_SECONDS`);
    0: unknown or off, no policy should take the cache for lost."""
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

    A policy may also declare optional powers, each a protocol of its own in
    `bounded_agents.core.history.powers` that the loop probes with a `supports_*` check (never
    `getattr`):

    - `read_bound: ReadBound | None`: what the store reads. Declaring it is a PROMISE that
      `select` over only those messages keeps what it would keep over all of them. None reads
      everything (after the summary's boundary, for a summarizing policy). The older
      `max_messages: int` is read as `ReadBound(messages=max_messages)`.
    - `summarize: Summarizer | None`: makes the policy a ROLLING summarizer: `select` is handed
      only what the thread's summary does not cover, and what it drops (plus anything older the
      read skipped) is folded into the next summary, chunk by chunk, with the summary so far.
    - `render_summary: SummaryRenderer | None`: words the summary as the leading system message;
      None means `render_history_summary`.

    (`fold_max_tokens`, `refold_count` and the rest: see `core/history/powers.py`.) They are not
    members of this protocol, so `isinstance(obj, HistoryPolicy)` checks `select` only.
    """

    def select(self, messages: list[Message], ctx: HistoryPolicyContext) -> HistorySelection:
        """Split `messages` (oldest first; the last is the current user message) into keep and
        drop. Must be pure: it runs inside the journaled `load:thread` step."""
        ...


__all__ = [
    "HistoryPolicy",
    "HistoryPolicyContext",
    "HistorySelection",
    "HistorySummary",
    "Summarizer",
    "SummaryRenderer",
]
