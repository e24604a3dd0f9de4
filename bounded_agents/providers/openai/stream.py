"""Folding a streamed chat completion (server-sent `data:` lines) into text deltas and one
final answer.

Kept out of the provider so that how a stream is read (what counts as its end, its error, a
tool call split across chunks) is one class with no HTTP in it.
"""

from __future__ import annotations

import json
from typing import Any

from bounded_agents.core.ports import ModelRequest, ModelResponse, Usage
from bounded_agents.core.tokens import estimate_usage
from bounded_agents.core.turn.constants import MAX_ANSWER_CHARS
from bounded_agents.errors import ProviderBadResponse, ProviderError
from bounded_agents.providers.openai.failures import error_message, excerpt, stream_error
from bounded_agents.providers.openai.response import finish_reason, tool_call, usage


class StreamAssembly:
    """Folds SSE lines of a streamed completion into text deltas and one final response."""

    def __init__(self, default_model: str) -> None:
        self.done = False
        self._model = default_model
        self._content: list[str] = []
        self._calls: dict[int, dict[str, Any]] = {}
        self._argument_chars = 0
        """Tool arguments streamed so far: bounded as the text is (`MAX_ANSWER_CHARS`)."""
        self._usage: Usage | None = None
        self._finish_reason: str | None = None
        self.seen_data = False
        """Whether any `data:` event came: a stream that ends with none said nothing at all."""

    def feed(self, line: str) -> str:
        """Take one line; return the content it adds ("" for none)."""
        if line.startswith("error:"):
            # llama.cpp's server sends a failure after the 200 (a prompt past its context) as an
            # `error: {...}` line of its own, not as a `data:` event.
            raise ProviderError(f"provider failed mid-stream: {stream_error(line[6:].strip())}")
        if not line.startswith("data:"):
            return ""  # blank separators, ": keep-alive" comments, event:/id: fields
        self.seen_data = True
        payload = line[len("data:") :].strip()
        if payload == "[DONE]":
            self.done = True
            return ""
        try:
            chunk = json.loads(payload)
        except (ValueError, RecursionError) as exc:
            raise ProviderBadResponse(f"stream sent invalid JSON: {excerpt(payload)}") from exc
        try:
            return self._apply(chunk)
        except (KeyError, IndexError, TypeError, AttributeError, ValueError, OverflowError) as exc:
            raise ProviderBadResponse(
                f"stream chunk is not a chat completion chunk ({exc!r}): {excerpt(payload)}"
            ) from exc

    def _apply(self, chunk: dict[str, Any]) -> str:
        if "error" in chunk:
            raise ProviderError(f"provider failed mid-stream: {error_message(chunk)}")
        if chunk.get("model"):
            self._model = str(chunk["model"])
        if chunk.get("usage"):
            self._usage = usage(chunk["usage"], chunk.get("timings"))
        text = ""
        for choice in chunk.get("choices") or []:
            self._finish_reason = finish_reason(choice) or self._finish_reason
            delta = choice.get("delta") or {}
            piece = delta.get("content")
            if piece:
                if not isinstance(piece, str):
                    raise TypeError("delta content must be a string")
                text += piece
            for call in delta.get("tool_calls") or []:
                slot = self._calls.setdefault(self._slot(call), {"id": "", "name": "", "args": []})
                function = call.get("function") or {}
                slot["id"] = call.get("id") or slot["id"]
                slot["name"] = function.get("name") or slot["name"]
                arguments = function.get("arguments")
                if isinstance(arguments, dict):  # an object, as unstreamed answers may send
                    arguments = json.dumps(arguments)
                if arguments:
                    if not isinstance(arguments, str):
                        raise TypeError("tool call arguments must be a string or an object")
                    self._argument_chars += len(arguments)
                    if self._argument_chars > MAX_ANSWER_CHARS:
                        raise ProviderBadResponse(
                            f"the streamed tool arguments passed {MAX_ANSWER_CHARS:,} characters"
                        )
                    slot["args"].append(arguments)
        self._content.append(text)
        return text

    def _slot(self, call: dict[str, Any]) -> int:
        """Which tool call a chunk continues: its `index`; a server that sends none (Google's
        OpenAI-compatible endpoint streams each call whole, without one) starts a new call
        with each new id, and continues the last call with a chunk that has no id."""
        if "index" in call:
            return int(call["index"])
        named = call.get("id")
        for index, slot in self._calls.items():
            if named and slot["id"] == named:
                return index
        if not named and self._calls:
            return max(self._calls)
        return max(self._calls, default=-1) + 1

    def result(self, request: ModelRequest) -> ModelResponse:
        """The whole answer; its usage estimated when the server sent none (a server that
        ignores `stream_options.include_usage`)."""
        if not self.done:
            raise ProviderBadResponse("stream ended before its [DONE] marker")
        content = "".join(self._content)
        calls = []
        try:
            for index in sorted(self._calls):
                slot = self._calls[index]
                if not slot["id"] or not slot["name"]:
                    raise ProviderBadResponse(f"streamed tool call {index} has no id or name")
                calls.append(tool_call(slot["id"], slot["name"], "".join(slot["args"])))
        except ProviderBadResponse as exc:  # the answer came whole, and was billed
            paid = self._usage or estimate_usage(request, content, [])
            raise ProviderBadResponse(exc.message, paid=paid) from exc
        counted = self._usage or estimate_usage(request, content, calls)
        return ModelResponse(
            content=content,
            tool_calls=calls,
            usage=counted,
            model=self._model,
            finish_reason=self._finish_reason,
        )
