"""The body of an Anthropic Messages request: system apart, tool_use / tool_result blocks, and
where the prompt-cache breakpoints go.

Pure functions of the request, so the body (and its breakpoints) can be checked without a
server. Anthropic caches only up to an explicit `cache_control` breakpoint (at most 4 per
request; a breakpoint finds an earlier cache entry only within the 20 blocks before it), so the
breakpoints are placed where the history keeps the prompt stable:

1. the last system block: the instructions and the rolling summary (the second system message
   the loop sends) change only on a fold;
2. the stable end of the previous prompt: the last message before the newest input (the user's
   message, or the tool results just run). The hysteresis window extends the previous prompt
   byte for byte, so that prefix was the previous call's whole prompt but its newest part;
3. the last block of the request, so the next call (which extends this prompt) finds this
   whole prompt written within its own breakpoint's lookback.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

from bounded_agents.core.messages import ChatMessage
from bounded_agents.core.ports import ModelRequest, ToolSpec

MAX_BREAKPOINTS = 4
"""Anthropic refuses a request with more `cache_control` breakpoints than this."""

LOOKBACK_BLOCKS = 20
"""How many blocks before a breakpoint Anthropic checks for an earlier cache entry."""

EPHEMERAL: dict[str, str] = {"type": "ephemeral"}

DEFAULT_MAX_TOKENS = 4096
"""The answer cap sent when none is configured: the Messages API requires one."""

EMPTY_TEXT = "(empty)"
"""Stands in for an empty message: the Messages API refuses an empty text block."""

_MIN_CACHEABLE = (
    ("claude-opus-4-5", 4096),
    ("claude-haiku-4-5", 4096),
    ("claude-3-haiku", 2048),
    ("claude-3-5-haiku", 2048),
    ("claude-haiku", 2048),
)
DEFAULT_MIN_CACHEABLE = 1024
"""The shortest prefix (tokens) most Claude models cache; some need more (`_MIN_CACHEABLE`)."""


def min_cacheable_tokens(model: str) -> int:
    """The model's minimum cacheable prefix in tokens (Anthropic's prompt-caching docs): a
    shorter prefix is processed uncached whatever its breakpoint says."""
    for prefix, tokens in _MIN_CACHEABLE:
        if model.startswith(prefix):
            return tokens
    return DEFAULT_MIN_CACHEABLE


@dataclass(frozen=True)
class CachePlan:
    """Where the breakpoints went, and whether the cached prefix is long enough to be cached."""

    breakpoints: int
    prefix_tokens: int
    """The estimated tokens up to the last breakpoint (tools, system, messages)."""
    min_tokens: int

    @property
    def cacheable(self) -> bool:
        return self.breakpoints > 0 and self.prefix_tokens >= self.min_tokens


def messages_body(
    request: ModelRequest,
    *,
    model: str,
    stream: bool,
    max_tokens: int | None,
    cache: bool = True,
) -> tuple[dict[str, Any], CachePlan]:
    """The Messages API body of `request`, and its cache plan."""
    system, turns = split_system(request.messages)
    body: dict[str, Any] = {
        "model": model,
        "max_tokens": request.max_tokens or max_tokens or DEFAULT_MAX_TOKENS,
        "messages": turns,
    }
    if system:
        body["system"] = system
    if request.tools:
        body["tools"] = [wire_tool(t) for t in request.tools]
    if stream:
        body["stream"] = True
    plan = place_breakpoints(body, model) if cache else CachePlan(0, 0, 0)
    return body, plan


def split_system(messages: list[ChatMessage]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The leading system messages as system blocks; the rest as alternating user/assistant
    messages (consecutive same-role messages merged: tool results and the user's next message
    go in one user turn). A system message after the first turn has no place in the Messages
    API: it goes in as user text, marked, so its words are not lost."""
    system: list[dict[str, Any]] = []
    turns: list[dict[str, Any]] = []
    leading = True
    for message in messages:
        if message.role == "system" and leading:
            # Blank text is refused by the API ("text content blocks must contain
            # non-whitespace text"), and would carry the cache breakpoint (found by attack).
            text = message.content if message.content.strip() else EMPTY_TEXT
            system.append({"type": "text", "text": text})
            continue
        leading = False
        role, blocks = wire_blocks(message)
        if turns and turns[-1]["role"] == role:
            turns[-1]["content"].extend(blocks)
        else:
            turns.append({"role": role, "content": blocks})
    return system, turns


def wire_blocks(message: ChatMessage) -> tuple[str, list[dict[str, Any]]]:
    if message.role == "tool":
        return "user", [
            {
                "type": "tool_result",
                "tool_use_id": message.tool_call_id or "",
                "content": message.content if message.content.strip() else EMPTY_TEXT,
            }
        ]
    if message.role == "assistant":
        blocks: list[dict[str, Any]] = []
        if message.content.strip():
            blocks.append({"type": "text", "text": message.content})
        blocks.extend(
            {"type": "tool_use", "id": c.id, "name": c.name, "input": c.arguments}
            for c in message.tool_calls
        )
        return "assistant", blocks or [{"type": "text", "text": EMPTY_TEXT}]
    text = message.content if message.content.strip() else EMPTY_TEXT
    if message.role == "system":
        text = f"[system] {text}"
    return "user", [{"type": "text", "text": text}]


def wire_tool(tool: ToolSpec) -> dict[str, Any]:
    return {"name": tool.name, "description": tool.description, "input_schema": tool.parameters}


def place_breakpoints(body: dict[str, Any], model: str) -> CachePlan:
    """Mark the body's breakpoints in place (see the module's docstring) and say what the
    longest cached prefix is worth."""
    system: list[dict[str, Any]] = body.get("system") or []
    turns: list[dict[str, Any]] = body["messages"]
    marked: list[tuple[int, dict[str, Any]]] = []  # (flat block index, block)
    flat = [block for turn in turns for block in turn["content"]]
    if system:
        marked.append((-1, system[-1]))
    if turns:
        last = len(turns) - 1
        # The newest input is the last user turn (its text or its tool results); the stable end
        # of the previous prompt is the last block of the turn before it.
        newest = last if turns[last]["role"] == "user" else None
        if newest is not None and newest > 0:
            before = sum(len(t["content"]) for t in turns[:newest]) - 1
            marked.append((before, flat[before]))
        if not marked or marked[-1][0] != len(flat) - 1:
            marked.append((len(flat) - 1, flat[-1]))
    marked = marked[:MAX_BREAKPOINTS]
    for _, block in marked:
        block["cache_control"] = dict(EPHEMERAL)
    if not marked:
        return CachePlan(0, 0, min_cacheable_tokens(model))
    end = marked[-1][0]
    chars = len(_compact(body.get("tools") or [])) + len(_compact(system))
    chars += len(_compact(flat[: end + 1]))
    return CachePlan(len(marked), math.ceil(chars / 4), min_cacheable_tokens(model))


def _compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False) if value else ""


__all__ = [
    "DEFAULT_MAX_TOKENS",
    "DEFAULT_MIN_CACHEABLE",
    "EPHEMERAL",
    "LOOKBACK_BLOCKS",
    "MAX_BREAKPOINTS",
    "CachePlan",
    "messages_body",
    "min_cacheable_tokens",
    "place_breakpoints",
    "split_system",
    "wire_blocks",
    "wire_tool",
]
