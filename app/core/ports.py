"""The SPI: what the loop needs from a model, a store, a durable runtime and a ledger.

Ports are `typing.Protocol`s so third parties implement them without inheriting from us.
Optional powers are protocols of their own, probed at run time (`supports_bounded_read`,
`supports_streaming`), never by `isinstance` of a concrete class.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager
from datetime import datetime
from typing import Any, Protocol, TypeAlias, TypeGuard, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

from app.core.messages import ChatMessage, Message, ToolCall


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


# --- model ---------------------------------------------------------------------------------


class Usage(_Frozen):
    prompt_tokens: int = 0
    completion_tokens: int = 0


class ToolSpec(_Frozen):
    """A tool as advertised to the model: a name, what it is for, and a JSON schema."""

    name: str
    description: str = ""
    parameters: dict[str, Any] = Field(default_factory=lambda: {"type": "object", "properties": {}})


class ModelRequest(_Frozen):
    messages: list[ChatMessage]
    tools: list[ToolSpec] = []
    purpose: str = "chat"
    """`chat` for agent steps, `history_summary` for the summarizer (kept in the ledger)."""


class ModelResponse(_Frozen):
    content: str
    tool_calls: list[ToolCall] = []
    usage: Usage = Usage()
    model: str = ""


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
    messages: list[Message] = []
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


class ThreadTurnQuery(_Frozen):
    thread_id: str
    message_limit: int | None = Field(default=None, ge=0)
    """Newest rows to return; None reads the whole thread. 0 returns no messages."""


class ThreadTurnPage(_Frozen):
    messages: list[Message]
    """The newest `message_limit` messages, oldest first."""
    title: str | None
    has_assistant_message: bool
    """Whether the thread was EVER answered: asked of the whole thread, never of the page."""


@runtime_checkable
class ThreadTurnReader(Protocol):
    """Optional: a store that can read just what a turn needs."""

    async def load_thread_for_turn(self, query: ThreadTurnQuery) -> ThreadTurnPage | None: ...


def supports_bounded_read(store: object) -> TypeGuard[ThreadTurnReader]:
    """runtime_checkable looks for the method name only, which is all a probe needs."""
    return isinstance(store, ThreadTurnReader)


@runtime_checkable
class RunMessagesReader(Protocol):
    """Optional: a store that can read the messages one run wrote without reading the thread."""

    async def run_messages(self, thread_id: str, run_id: str) -> list[Message]:
        """The run's user message and answer (whichever are stored), in seq order."""
        ...


def supports_run_messages(store: object) -> TypeGuard[RunMessagesReader]:
    return isinstance(store, RunMessagesReader)


# --- durable runtime -----------------------------------------------------------------------

JsonValue: TypeAlias = Any
"""A value `json.dumps` accepts; what a durable step returns and its journal stores."""


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


class RunRequest(_Frozen):
    """What a run was asked to do: enough to resume it in another process."""

    run_id: str
    thread_id: str
    actor_id: str
    agent: str
    content: str


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

    async def begin(self, request: RunRequest) -> DurableContext:
        """Start a new run; `ThreadBusy` while another run holds the thread."""
        ...

    async def reopen(self, run_id: str) -> tuple[RunRequest, DurableContext]:
        """Take an unfinished run back (its journal replays); `RunNotFound` if there is none."""
        ...

    def keep_alive(self, run_id: str) -> AbstractAsyncContextManager[None]:
        """Hold the run's lease while the block runs (the loop wraps each run in it)."""
        ...

    async def complete(self, run_id: str, report: dict[str, Any]) -> None: ...

    async def fail(
        self, run_id: str, error_code: str, error_message: str, report: dict[str, Any]
    ) -> None: ...

    async def get_run(self, run_id: str) -> RunRecord | None: ...

    async def expired_runs(self) -> list[str]:
        """Runs still marked running whose lease ran out: their process died."""
        ...


# --- ledger --------------------------------------------------------------------------------


class LedgerEntry(_Frozen):
    run_id: str
    thread_id: str
    actor_id: str
    agent: str
    purpose: str
    model: str
    prompt_tokens: int
    completion_tokens: int


@runtime_checkable
class Ledger(Protocol):
    """Where every model call's tokens are written, so no spend goes unaccounted."""

    async def record(self, entry: LedgerEntry) -> None: ...

    async def tokens_used(self, actor_id: str) -> int:
        """All tokens (prompt + completion) the actor has spent, for quotas."""
        ...

    async def entries_for_run(self, run_id: str) -> list[LedgerEntry]: ...


__all__ = [
    "AgentStore",
    "DurableContext",
    "DurableRuntime",
    "JsonValue",
    "Ledger",
    "LedgerEntry",
    "ModelProvider",
    "ModelRequest",
    "ModelResponse",
    "RunMessagesReader",
    "RunRecord",
    "RunRequest",
    "StreamingModelProvider",
    "TextDelta",
    "Thread",
    "ThreadInfoReader",
    "ThreadTurnPage",
    "ThreadTurnQuery",
    "ThreadTurnReader",
    "ToolSpec",
    "Usage",
    "supports_bounded_read",
    "supports_run_messages",
    "supports_streaming",
]
