"""The loop's public face: the agent it runs, the events it streams, the window preview."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Protocol, TypeAlias, TypeGuard, runtime_checkable

from pydantic import BaseModel, ConfigDict

from bounded_agents.core.context_window import ChatMiddleware
from bounded_agents.core.history.clearing import ToolResultClearing
from bounded_agents.core.history.powers import (
    policy_summarizer,
    read_bound,
    result_clearing,
    supports_refolding,
)
from bounded_agents.core.messages import (
    ChatMessage,
    Message,
    ToolCall,
    ToolResult,
)
from bounded_agents.core.ports import (
    HistoryPolicy,
    ReadBound,
    Summarizer,
    TextDelta,
    ThreadSummary,
    ToolSpec,
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
class ToolContext:
    """What a turn-aware tool is told about the turn calling it: the thread (the only one it
    may read) and the prompt the model saw when it asked, tool results so far included. Kept
    this small on purpose: a tool that needs the run's request or journal is a loop feature."""

    thread_id: str
    prompt: tuple[ChatMessage, ...]
    sent_as_is: bool = False
    """Whether the run's own messages in `prompt` (the asking step's assistant message and the
    results after it) reach the model's next call unchanged: False when the agent's middleware
    may trim, cut or truncate them first. The history before them may be refolded either way.
    `search_history` leaves out a row's text a sibling call already sent (`shown_above`) only
    when this is True."""


@runtime_checkable
class TurnAwareTool(ToolBinding, Protocol):
    """A tool that needs its turn (the history search tool): the loop calls `invoke_in_turn`
    instead of `invoke`. Its result is journaled like any tool's, so a replay never calls it."""

    async def invoke_in_turn(self, arguments: dict[str, Any], context: ToolContext) -> ToolResult:
        """`invoke`, for the turn `context` describes."""
        ...


def takes_turn_context(binding: ToolBinding) -> TypeGuard[TurnAwareTool]:
    return isinstance(binding, TurnAwareTool)


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

    # The policy's powers, probed once per agent rather than once per turn (each probe is a
    # runtime-checkable isinstance: issue 37 counted four a turn).
    @cached_property
    def summarizer(self) -> Summarizer | None:
        """The policy's summarizer (`policy_summarizer`), or None."""
        return policy_summarizer(self.policy)

    @cached_property
    def bound(self) -> ReadBound | None:
        """What a turn asks the store for (`read_bound`)."""
        return read_bound(self.policy)

    @cached_property
    def refolds(self) -> bool:
        """Whether the policy folds between model calls (`supports_refolding`)."""
        return supports_refolding(self.policy)

    @cached_property
    def clearing(self) -> ToolResultClearing | None:
        """The policy's tool-result clearing (`result_clearing`), or None."""
        return result_clearing(self.policy)


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
StartSink: TypeAlias = Callable[[], Awaitable[None]]
"""Called once a run has begun: its row and the user's message committed, so from then on the
turn can only end in an answer or a `RunFailed` (a refusal, busy or over quota, came before)."""


class FoldPreview(BaseModel):
    """The fold the next turn would make: messages `from_seq`..`through_seq` into the summary."""

    from_seq: int
    through_seq: int
    messages: int | None = None
    """How many messages that span holds: fewer than its seqs after an erasure (an erased
    message leaves its seq). None from a caller that did not count."""


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
