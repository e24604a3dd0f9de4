"""What the loop sends a model and what comes back: requests, responses, usage, tools."""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from pydantic import Field, SerializerFunctionWrapHandler, model_serializer

from bounded_agents.core.messages import ChatMessage, ToolCall
from bounded_agents.core.ports.frozen import Frozen

MAX_CALL_TOKENS = 1_000_000_000
"""The most tokens one model call may report per field. No model reads or writes a billion
tokens in one call, so a larger (or negative) figure is a broken or hostile provider: it is
refused as a bad response rather than booked, where it would skew the ledger and any quota."""


class Usage(Frozen):
    """Tokens one model call spent, as the provider reported them (or as estimated)."""

    prompt_tokens: int = Field(default=0, ge=0, le=MAX_CALL_TOKENS)
    completion_tokens: int = Field(default=0, ge=0, le=MAX_CALL_TOKENS)
    estimated: bool = False
    """True when the figures are the project's token estimate, not the provider's count (a
    server that reports none, `EchoModel`, a summarizer that returns no usage)."""
    cached_tokens: int | None = Field(default=None, ge=0, le=MAX_CALL_TOKENS)
    """Of `prompt_tokens`, those the provider served from its prompt cache (OpenAI's
    `usage.prompt_tokens_details.cached_tokens`); None when it did not say. Included in
    `prompt_tokens`, not added to it: a quota counts them, a price list may discount them."""
    cache_write_tokens: int | None = Field(default=None, ge=0, le=MAX_CALL_TOKENS)
    """Of `prompt_tokens`, those the provider wrote to its prompt cache on this call
    (Anthropic's `cache_creation_input_tokens`, billed above the plain input price); None when
    it did not say. Included in `prompt_tokens`, like `cached_tokens`."""

    @model_serializer(mode="wrap")
    def _unsaid_cache_writes_left_out(
        self, handler: SerializerFunctionWrapHandler
    ) -> dict[str, int | bool | None]:
        """`cache_write_tokens` is left out of the dump while None: a usage journaled before
        the field existed (or by a provider that does not say) keeps its exact bytes, so a
        journal replays the same and the golden journals stay as recorded."""
        data: dict[str, int | bool | None] = handler(self)
        if data.get("cache_write_tokens") is None:
            data.pop("cache_write_tokens", None)
        return data


class ToolSpec(Frozen):
    """A tool as advertised to the model: a name, what it is for, and a JSON schema."""

    name: str
    description: str = ""
    parameters: dict[str, Any] = Field(default_factory=lambda: {"type": "object", "properties": {}})


class ModelRequest(Frozen):
    messages: list[ChatMessage]
    tools: list[ToolSpec] = Field(default_factory=list)
    purpose: str = "chat"
    """`chat` for agent steps, `history_summary` for the summarizer (kept in the ledger)."""
    max_tokens: int | None = Field(default=None, ge=1)
    """At most this many tokens of answer, when the caller needs a bound (the summarizer's
    call: a summary rides in every later prompt). A provider may pass it on
    (`OpenAICompatibleProvider` sends it in place of its own configured cap); the caller
    enforces its bound on what comes back anyway, so a provider that ignores it cannot grow
    the prompt."""
    thread_id: str | None = Field(default=None, exclude=True)
    """The thread the call is for, when the caller knows it: a provider may derive a stable
    cache-routing key from it (`OpenAICompatibleProvider`'s hashed `prompt_cache_key`), never
    send it raw. None: no per-thread routing. Never in a dump: it is routing, not the prompt
    (a recorded prompt, the golden journals' included, is the same for every thread)."""


class ModelResponse(Frozen):
    content: str
    tool_calls: list[ToolCall] = Field(default_factory=list)
    usage: Usage = Usage()
    model: str = ""
    finish_reason: str | None = None
    """Why the model stopped, as the provider said (`stop`, `length`, `tool_calls`,
    `content_filter`), or None when it did not say. A fold refuses a `length` summary: it was
    cut off, and would be stored as if it were whole."""


class TextDelta(Frozen):
    """A piece of streamed answer text."""

    text: str


@runtime_checkable
class ModelProvider(Protocol):
    async def complete(self, request: ModelRequest) -> ModelResponse: ...


__all__ = [
    "MAX_CALL_TOKENS",
    "ModelProvider",
    "ModelRequest",
    "ModelResponse",
    "TextDelta",
    "ToolSpec",
    "Usage",
]
