"""Reading a Messages answer: stream events assembled, stop reasons and usage in the project's
terms.

Apart from `provider` (the calls, retries and failures) as `providers.openai.response` is from
its provider: what the server sent is checked here, so neither the whole nor the streamed path
hands the loop a half-read answer or an unbookable count (a billed answer that cannot be read
is a `ProviderBadResponse` carrying what it cost).
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
from bounded_agents.providers.openai.response import oversized_answer, tool_call

STOP_REASONS = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "max_tokens": "length",
    "tool_use": "tool_calls",
    "refusal": "content_filter",
    "pause_turn": "stop",
    "model_context_window_exceeded": "length",
}
"""Anthropic's stop reasons in the project's (OpenAI's) words: a fold refuses a `length`
summary and classes `content_filter` as refused (`core.summary`)."""


class StreamAssembly:
    """Folds Messages stream events into text deltas and one final response."""

    def __init__(self, request: ModelRequest, default_model: str) -> None:
        self.done = False
        self._request = request
        self._model = default_model
        self._blocks: dict[int, dict[str, Any]] = {}
        self._argument_chars = 0
        """Tool input streamed so far: bounded as the text is (`MAX_ANSWER_CHARS`)."""
        self._usage: dict[str, Any] = {}
        self._stop_reason: str | None = None

    def feed(self, event: dict[str, Any]) -> str:
        kind = event.get("type")
        if kind == "message_start":
            message = event.get("message") or {}
            self._model = str(message.get("model") or self._model)
            self._usage.update(message.get("usage") or {})
        elif kind == "content_block_start":
            index = int(event["index"])
            if index in self._blocks:  # its streamed text would be lost: say so (found by attack)
                raise ProviderBadResponse(f"stream started content block {index} twice")
            block = dict(event["content_block"])
            block["parts"] = [block.get("text") or ""]
            self._blocks[index] = block
        elif kind == "content_block_delta":
            block = self._blocks[int(event["index"])]
            delta = event["delta"]
            if delta.get("type") == "text_delta":
                text = delta["text"]
                if not isinstance(text, str):
                    raise TypeError(f"text_delta text is {type(text).__name__}, not a string")
                block["parts"].append(text)
                return text
            if delta.get("type") == "input_json_delta":
                piece = delta.get("partial_json") or ""
                self._argument_chars += len(piece)
                if self._argument_chars > MAX_ANSWER_CHARS:
                    raise ProviderBadResponse(
                        f"the streamed tool input passed {MAX_ANSWER_CHARS:,} characters"
                    )
                block["parts"].append(piece)
        elif kind == "message_delta":
            self._stop_reason = (event.get("delta") or {}).get("stop_reason") or self._stop_reason
            self._usage.update({k: v for k, v in (event.get("usage") or {}).items() if v})
        elif kind == "message_stop":
            self.done = True
        return ""

    def result(self) -> ModelResponse:
        if not self.done:
            raise ProviderBadResponse("stream ended before its message_stop event")
        content: list[dict[str, Any]] = []
        for index in sorted(self._blocks):
            block = self._blocks[index]
            joined = "".join(block.pop("parts"))
            if block.get("type") == "text":
                block["text"] = joined
            elif block.get("type") == "tool_use":
                block["input"] = joined
            content.append(block)
        return message_response(self._request, content, self._stop_reason, self._usage, self._model)


def message_response(
    request: ModelRequest,
    content: list[dict[str, Any]],
    stop_reason: Any,
    raw_usage: Any,
    model: str,
) -> ModelResponse:
    text = [str(b.get("text") or "") for b in content if b.get("type") == "text"]
    answer = "".join(text)
    too_long = oversized_answer(
        answer, [b.get("input") for b in content if b.get("type") == "tool_use"]
    )
    if too_long is not None:
        raise ProviderBadResponse(too_long, paid=_counted(request, raw_usage, "", []))
    calls: list[ToolCall] = []
    for block in content:
        if block.get("type") == "tool_use":
            arguments = block.get("input")
            if isinstance(arguments, dict):
                arguments = json.dumps(arguments)
            try:
                calls.append(tool_call(block.get("id"), block.get("name"), arguments))
            except ProviderBadResponse as exc:
                # Billed all the same (Claude stopping at max_tokens mid tool input is the
                # common case): the loop books it (found by attack: booked as nothing).
                paid = _counted(request, raw_usage, answer, [])
                raise ProviderBadResponse(exc.message, paid=paid) from exc
    reason = STOP_REASONS.get(stop_reason, stop_reason) if isinstance(stop_reason, str) else None
    counted = _counted(request, raw_usage, answer, calls)
    return ModelResponse(
        content=answer,
        tool_calls=calls,
        usage=counted,
        model=model,
        finish_reason=reason[:40] if reason else None,
    )


def _counted(request: ModelRequest, raw_usage: Any, answer: str, calls: list[ToolCall]) -> Usage:
    """The call's usage: as reported, or estimated when the server reported none (never as 0
    tokens past the ledger and quota), and half a report completed by the estimate."""
    guess = estimate_usage(request, answer, calls)
    counted = usage(raw_usage) if counts_usage(raw_usage) else guess
    if isinstance(raw_usage, dict) and counts_usage(raw_usage):
        # Half a report (a stream whose message_delta never gave the output count): the
        # missing half is estimated, never booked as 0 (found by review).
        if raw_usage.get("output_tokens") is None:
            counted = counted.model_copy(
                update={"completion_tokens": guess.completion_tokens, "estimated": True}
            )
        if raw_usage.get("input_tokens") is None and counted.prompt_tokens == 0:
            counted = counted.model_copy(
                update={"prompt_tokens": guess.prompt_tokens, "estimated": True}
            )
    return counted


def counts_usage(raw: Any) -> bool:
    """Whether the server reported usage at all: no usage, or one with neither an input nor an
    output count, is not a report of 0 tokens."""
    if raw is None:
        return False
    if not isinstance(raw, dict):
        return True  # `usage` refuses it, naming it
    return raw.get("input_tokens") is not None or raw.get("output_tokens") is not None


def usage(raw: Any) -> Usage:
    """Anthropic's usage in the project's terms: `input_tokens` counts only the uncached part,
    so `prompt_tokens` is input + cache read + cache creation; `cached_tokens` is the read and
    `cache_write_tokens` the creation."""
    if not isinstance(raw, dict):
        raise ProviderBadResponse(f"provider response has no usage: {excerpt(raw)}")
    fresh = _count("input_tokens", raw.get("input_tokens"))
    read = _count("cache_read_input_tokens", raw.get("cache_read_input_tokens"))
    written = _count("cache_creation_input_tokens", raw.get("cache_creation_input_tokens"))
    prompt = fresh + read + written
    if prompt > MAX_CALL_TOKENS:
        raise ProviderBadResponse(
            f"usage prompt tokens {prompt} over {MAX_CALL_TOKENS}: not booked"
        )
    return Usage(
        prompt_tokens=prompt,
        completion_tokens=_count("output_tokens", raw.get("output_tokens")),
        cached_tokens=read,
        cache_write_tokens=written,
    )


def _count(name: str, value: Any) -> int:
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_CALL_TOKENS:
        raise ProviderBadResponse(f"usage {name} is not a count: {excerpt(value)}")
    return value


__all__ = ["STOP_REASONS", "StreamAssembly", "counts_usage", "message_response", "usage"]
