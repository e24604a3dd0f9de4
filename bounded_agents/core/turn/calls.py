"""The turn's calls out: the provider boundary, tools, middleware, booked model names."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

from bounded_agents.core.checkpoints import legacy_summarize_payload
from bounded_agents.core.context_window import ChatMiddleware
from bounded_agents.core.messages import (
    ChatMessage,
    Message,
    ToolCall,
    ToolResult,
    storable_json,
    storable_text,
)
from bounded_agents.core.ports import (
    MODEL_NAME_CHARS,
    HistoryPolicyContext,
    JsonValue,
    ModelProvider,
    Transaction,
)
from bounded_agents.core.turn.public import (
    AgentDefinition,
    ToolContext,
    takes_turn_context,
)
from bounded_agents.errors import (
    AgentError,
    JournalMismatch,
    ProviderError,
)

log = logging.getLogger("bounded_agents.core.loop")
"""The loop's one logger, whichever turn module logs: log configuration keeps working."""


async def legacy_load_step(tx: Transaction | None) -> JsonValue:
    """The step function of a legacy `load:thread`, which is only ever replayed: such a run
    journaled its read before anything else could follow it (see `_legacy_prompt`)."""
    raise JournalMismatch("a legacy load:thread step cannot run again: its journal lacks it")


async def legacy_summarize(
    summarizer: Any, drop: list[Message], hctx: HistoryPolicyContext
) -> JsonValue:
    """The old path's summary of a run's whole dropped list, as its journal recorded it."""
    async with provider_boundary("history summary"):
        summary = await summarizer(drop, hctx)
    return legacy_summarize_payload(
        storable_text(summary.text), summary.usage.model_dump(mode="json")
    )


@asynccontextmanager
async def provider_boundary(what: str) -> AsyncIterator[None]:
    """Whatever a provider raises is a provider failure (502), never an internal error: a
    custom `ModelProvider` raising a plain exception must not become a 500. Its message may
    hold anything (a URL, a key), so it is logged here and the client reads a fixed one."""
    try:
        yield
    except AgentError:
        raise
    except Exception as exc:
        log.error("the %s call failed: %s", what, type(exc).__name__, exc_info=exc)
        raise ProviderError(f"the {what} call failed (details are in the server log)") from exc


async def run_tool(
    definition: AgentDefinition,
    call: ToolCall,
    context: ToolContext,
    seconds: float | None = None,
) -> JsonValue:
    """One tool call's result, journal-ready; an unknown tool, or one that takes longer than
    `seconds`, is an error result the model reads, not an exception (a hung tool held
    its turn and its thread for good: found by attack)."""
    binding = definition.tools.get(call.name)
    if binding is None:
        result = ToolResult(call_id=call.id, content=f"unknown tool {call.name!r}", is_error=True)
    else:
        limit = asyncio.timeout(seconds)
        try:
            async with limit:
                if takes_turn_context(binding):
                    result = await binding.invoke_in_turn(dict(call.arguments), context)
                else:
                    result = await binding.invoke(dict(call.arguments))
        except TimeoutError:
            if not limit.expired():
                raise  # the tool's own, not the limit's: as any exception a tool lets out
            text = f"tool {call.name!r} did not answer within {seconds:g} s"
            result = ToolResult(call_id=call.id, content=text, is_error=True)
        result = result.model_copy(update={"call_id": call.id})
    return storable_json(result.model_dump(mode="json"))


def apply_middleware(
    middleware: Sequence[ChatMiddleware], messages: list[ChatMessage]
) -> tuple[list[ChatMessage], dict[str, Any]]:
    """The agent's chat middleware over the prompt, and what it did (the step's metrics)."""
    metrics: dict[str, Any] = {
        "window_trimmed": False,
        "messages_sent": len(messages),
        "messages_original": len(messages),
        "window_orphans_dropped": 0,
    }
    for mw in middleware:
        messages, m = mw(messages)
        metrics["window_trimmed"] = bool(metrics["window_trimmed"] or m.get("window_trimmed"))
        metrics["window_orphans_dropped"] += int(m.get("window_orphans_dropped", 0))
    metrics["messages_sent"] = len(messages)
    return messages, metrics


def _model_name(model: ModelProvider) -> str:
    name = getattr(model, "model", None) or getattr(model, "name", None)
    return name if isinstance(name, str) else type(model).__name__


def booked_model(reported: str | None, model: ModelProvider) -> str:
    """The model name a call is booked under: the one the provider reported (else the
    provider's own), made storable and cut to `MODEL_NAME_CHARS`. A provider that reports a
    300-character name must not fail every turn on PostgreSQL, whose column refuses it."""
    return storable_text(reported or _model_name(model))[:MODEL_NAME_CHARS]


__all__ = [
    "apply_middleware",
    "booked_model",
    "legacy_load_step",
    "legacy_summarize",
    "provider_boundary",
    "run_tool",
]
