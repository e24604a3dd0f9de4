"""Reading a chat completion's answer: its content, tool calls, usage and finish reason.

Anything that does not have the documented shape is a `ProviderBadResponse` here, so neither
the unstreamed nor the streamed path hands the loop a half-read answer or an unbookable count.
"""

from __future__ import annotations

import json
from typing import Any

from bounded_agents.core.messages import ToolCall
from bounded_agents.core.ports import MAX_CALL_TOKENS, ModelRequest, ModelResponse, Usage
from bounded_agents.core.tokens import estimate_usage
from bounded_agents.core.turn.constants import MAX_ANSWER_CHARS
from bounded_agents.errors import ProviderBadResponse
from bounded_agents.providers.openai.failures import excerpt


def parse_completion(data: Any, request: ModelRequest, default_model: str) -> ModelResponse:
    try:
        message = data["choices"][0]["message"]
        content = message.get("content") or ""
        raw_calls = message.get("tool_calls") or []
        if not isinstance(content, str) or not isinstance(raw_calls, list):
            raise TypeError("content must be a string and tool_calls a list")
        counted = usage(data.get("usage"), data.get("timings"))
        too_long = oversized_answer(
            content, [(c.get("function") or {}).get("arguments") for c in raw_calls]
        )
        if too_long is not None:
            raise ProviderBadResponse(too_long, paid=counted or estimate_usage(request, "", []))
        try:
            calls = [
                tool_call(c["id"], c["function"]["name"], c["function"].get("arguments"))
                for c in raw_calls
            ]
        except ProviderBadResponse as exc:
            paid = counted or estimate_usage(request, content, [])
            raise ProviderBadResponse(exc.message, paid=paid) from exc
        model = data.get("model") or default_model
    except (KeyError, IndexError, TypeError, AttributeError, ValueError, OverflowError) as exc:
        raise ProviderBadResponse(
            f"provider response is not a chat completion ({exc!r}): {excerpt(data)}"
        ) from exc
    if counted is None:
        counted = estimate_usage(request, content, calls)
    return ModelResponse(
        content=content,
        tool_calls=calls,
        usage=counted,
        model=str(model),
        finish_reason=finish_reason(data["choices"][0]),
    )


def oversized_answer(content: str, arguments: list[Any]) -> str | None:
    """Why an answer read whole is larger than a streamed one may be (`MAX_ANSWER_CHARS` of
    text, and as many of tool arguments), else None. The streamed paths refuse past it as
    they read; an unstreamed answer is bounded only by its body's bytes, so the same answer
    unstreamed was stored and resent with every later prompt (found by attack: 5 MB of
    arguments to one call, a 5 MB prompt on each turn after)."""
    if len(content) > MAX_ANSWER_CHARS:
        return f"the answer passed {MAX_ANSWER_CHARS:,} characters"
    chars = sum(  # an object (Claude's input) as characters, not ASCII escapes (by review)
        len(a) if isinstance(a, str) else len(json.dumps(a, ensure_ascii=False))
        for a in arguments
        if a
    )
    if chars > MAX_ANSWER_CHARS:
        return f"the tool arguments passed {MAX_ANSWER_CHARS:,} characters"
    return None


def tool_call(call_id: Any, name: Any, arguments: Any) -> ToolCall:
    """Arguments arrive as a JSON string (some servers send an object); a call needs an object.

    An empty string means no arguments: some servers send it for parameterless tools.
    """
    if not isinstance(call_id, str) or not isinstance(name, str) or not call_id or not name:
        raise ProviderBadResponse(f"tool call has no usable id or name: {call_id!r}, {name!r}")
    parsed: Any = arguments
    if arguments is None or (isinstance(arguments, str) and not arguments.strip()):
        parsed = {}
    elif isinstance(arguments, str):
        try:
            parsed = json.loads(arguments)
        except (ValueError, RecursionError) as exc:
            raise ProviderBadResponse(
                f"arguments of tool call {name!r} are not valid JSON: {excerpt(arguments)}"
            ) from exc
    if not isinstance(parsed, dict):
        raise ProviderBadResponse(
            f"arguments of tool call {name!r} are not a JSON object: {excerpt(arguments)}"
        )
    return ToolCall(id=call_id, name=name, arguments=parsed)


def usage(raw: Any, timings: Any = None) -> Usage | None:
    """The server's own count, or None when it sent none (some local servers never do).

    A count that is negative, fractional or over `MAX_CALL_TOKENS` is a bad response: booking
    it would hand the actor unlimited quota (negative) or a bill no call can run up.
    Cached prompt tokens come from OpenAI's `usage.prompt_tokens_details.cached_tokens` (also
    what vLLM, newer llama.cpp `llama-server` builds and Google's OpenAI-compatible Gemini
    endpoint send, the latter only on a cache hit), else from llama-server's `timings.cache_n`;
    a server sending neither (llama-cpp-python's) leaves them unknown.

    Gemini's endpoint (and xAI's) leave the model's thinking out of `completion_tokens` but
    count it in `total_tokens`, and bill it as output: a `total_tokens` above prompt plus
    completion books the difference as completion, so the ledger and the quota see it. (OpenAI
    counts reasoning inside `completion_tokens`: its total is the sum, nothing changes.)
    """
    if raw is None or (
        isinstance(raw, dict)
        and raw.get("prompt_tokens") is None
        and raw.get("completion_tokens") is None
    ):
        return None
    counts: dict[str, int] = {}
    for name in ("prompt_tokens", "completion_tokens"):
        counts[name] = _count(name, raw.get(name) or 0)
    total = raw.get("total_tokens")
    if total is not None:
        unreported = _count("total_tokens", total) - counts["prompt_tokens"]
        counts["completion_tokens"] = max(counts["completion_tokens"], unreported)
    details = raw.get("prompt_tokens_details")
    cached = details.get("cached_tokens") if isinstance(details, dict) else None
    if cached is None and isinstance(timings, dict):
        cached = timings.get("cache_n")
    return Usage(
        **counts, cached_tokens=None if cached is None else _count("cached_tokens", cached)
    )


def _count(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int | float) or value != int(value):
        raise ProviderBadResponse(f"usage {name} is not a whole number: {excerpt(value)}")
    if not 0 <= value <= MAX_CALL_TOKENS:
        raise ProviderBadResponse(
            f"usage {name} is {int(value)}, outside 0..{MAX_CALL_TOKENS}: not booked"
        )
    return int(value)


def finish_reason(choice: Any) -> str | None:
    reason = choice.get("finish_reason") if isinstance(choice, dict) else None
    return reason[:40] if isinstance(reason, str) and reason else None
