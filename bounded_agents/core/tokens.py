"""A token ESTIMATE: about four characters per token, plus a small allowance per message.

A real tokenizer is model-specific and would pull a provider dependency into the core, while a
budget only has to keep a thread clear of the provider's hard limit. The estimator must be pure:
it runs inside `select`, whose result a replay must reproduce exactly. Pass an exact estimator to
`window_history(estimate=...)` when you need one.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable

from bounded_agents.core.messages import ChatMessage, Message, ToolCall
from bounded_agents.core.ports import MAX_CALL_TOKENS, ModelRequest, Usage

MESSAGE_ALLOWANCE = 4
"""Tokens charged per message for the role and framing every provider adds around it."""

TokenEstimator = Callable[[Message], int]


_COMPACT = json.JSONEncoder(separators=(",", ":"))
"""`json.dumps(..., separators=(",", ":"))`, built once rather than on every call."""


def _json_len(items: list[object]) -> int:
    if not items:
        return 0
    return len(_COMPACT.encode([i.model_dump(mode="json") for i in items]))  # type: ignore[attr-defined]


def estimate_message_tokens(message: Message | ChatMessage) -> int:
    """ceil((len(content) + len(JSON of tool calls) + len(JSON of tool results)) / 4) + 4.

    A 40-character message with no tools costs 10 + 4 = 14 tokens. Empty tool lists add nothing.
    Works on stored and provider-shaped messages alike.
    """
    chars = len(message.content) + _json_len(list(message.tool_calls))
    if isinstance(message, Message):
        chars += _json_len(list(message.tool_results))
    return math.ceil(chars / 4) + MESSAGE_ALLOWANCE


def estimate_usage(request: ModelRequest, content: str, tool_calls: list[ToolCall]) -> Usage:
    """Usage of one model call by the same estimate: the request's messages in, the answer
    (`content` and `tool_calls`) out.

    For models that report none: `EchoModel`, and OpenAI-compatible servers that leave `usage`
    out. Booking such a call as 0 tokens would let it slip past the ledger and any quota.
    """
    prompt = sum(estimate_message_tokens(m) for m in request.messages)
    completion = estimate_message_tokens(
        ChatMessage(role="assistant", content=content, tool_calls=tool_calls)
    )
    return Usage(
        estimated=True,
        prompt_tokens=min(prompt, MAX_CALL_TOKENS),
        completion_tokens=min(completion, MAX_CALL_TOKENS),
    )
