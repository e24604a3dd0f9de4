"""EchoModel: the deterministic, offline model of the embedded default.

It exists so the whole module (loop, journal, windowing, summaries, tools, streaming) runs and
can be tested without a network or an API key. Every answer is a pure function of the request,
so a replayed run gets byte-identical answers, and its usage comes from the same token estimate
the history window uses, so the run report's figures add up.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator, Sequence
from typing import Any

from bounded_agents.core.messages import ChatMessage, ToolCall
from bounded_agents.core.ports import ModelRequest, ModelResponse, TextDelta, ToolSpec
from bounded_agents.core.summary import NEW_MESSAGES_HEADING, PREVIOUS_SUMMARY_HEADING
from bounded_agents.core.tokens import estimate_usage

MODEL_NAME = "echo"
QUOTE_CHARS = 60
"""How much of the last user message an answer quotes."""
SUMMARY_LINE_CHARS = 80
"""How much of each transcript line an extractive summary keeps."""
SUMMARY_MAX_LINES = 12
"""Lines a summary keeps at most: folding the summary so far with new lines keeps the newest, so
a rolling summary stays bounded however long the thread grows, as a real model's would."""
STREAM_CHUNK_CHARS = 16
"""Size of the TextDelta pieces `stream` yields; small enough that any answer streams in parts."""

_TRANSCRIPT_LINE = re.compile(r"^\s*\[?(system|user|assistant)\]?\s*:\s*(.*)$", re.IGNORECASE)
_WHITESPACE = re.compile(r"\s+")
_SUMMARY_COUNT = re.compile(r"^Summary of (\d+) earlier messages:$")


def _flatten(text: str) -> str:
    """One line, single spaces: quotes and summary lines stay readable on one line."""
    return _WHITESPACE.sub(" ", text).strip()


class EchoModel:
    """A model that answers from what it was sent, identically every time.

    - ``purpose="history_summary"``: an extractive summary, one line per user/assistant line of
      the transcript it was given (the first ``SUMMARY_LINE_CHARS`` characters of each); handed
      a summary so far, it extends that one's lines and keeps the newest ``SUMMARY_MAX_LINES``.
    - A last user message ``/<tool> [json]`` naming an advertised tool: one call to that tool.
    - Anything else: ``Echo (saw N messages): "<quote of the last user message>"``, plus one
      sentence per trailing tool result giving its size, so tool output is visibly "read".
    """

    model = MODEL_NAME
    """The name the ledger books every call under, chat and summary alike."""

    def __init__(self, delay: float = 0.0) -> None:
        self.delay = delay
        """Seconds each call sleeps before answering; lets tests hold a turn open."""

    async def complete(self, request: ModelRequest) -> ModelResponse:
        if self.delay:
            await asyncio.sleep(self.delay)
        return self._respond(request)

    async def stream(self, request: ModelRequest) -> AsyncIterator[TextDelta | ModelResponse]:
        """The answer in ``STREAM_CHUNK_CHARS`` pieces, then the full response."""
        if self.delay:
            await asyncio.sleep(self.delay)
        response = self._respond(request)
        text = response.content
        for start in range(0, len(text), STREAM_CHUNK_CHARS):
            yield TextDelta(text=text[start : start + STREAM_CHUNK_CHARS])
        yield response

    # --- the answer ---------------------------------------------------------------------------

    def _respond(self, request: ModelRequest) -> ModelResponse:
        tool_calls: list[ToolCall] = []
        if request.purpose == "history_summary":
            content = _summarize(request.messages)
        else:
            call = _requested_tool_call(request.messages, request.tools)
            if call is not None:
                content, tool_calls = "", [call]
            else:
                content = _answer(request.messages)
        usage = estimate_usage(request, content, tool_calls)
        return ModelResponse(content=content, tool_calls=tool_calls, usage=usage, model=MODEL_NAME)


def _summarize(messages: Sequence[ChatMessage]) -> str:
    """A rolling fold: the summary so far (when the input carries one) extended by the new
    messages' lines, newest `SUMMARY_MAX_LINES` kept, the count of messages covered carried."""
    carried: list[str] = []
    covered = 0
    rest: list[ChatMessage] = []
    for m in messages:
        if m.role == "user" and m.content.startswith(PREVIOUS_SUMMARY_HEADING):
            previous, _, new = m.content.partition(f"\n\n{NEW_MESSAGES_HEADING}\n")
            for line in previous.splitlines()[1:]:
                found = _SUMMARY_COUNT.match(line)
                if found:
                    covered = int(found.group(1))
                elif line.startswith("- "):
                    carried.append(line)
            rest.append(m.model_copy(update={"content": new}))
        else:
            rest.append(m)
    count, lines = _extract(rest)
    body = [*carried, *lines][-SUMMARY_MAX_LINES:]
    return "\n".join([f"Summary of {covered + count} earlier messages:", *body])


def _extract(messages: Sequence[ChatMessage]) -> tuple[int, list[str]]:
    """Extractive: keep the start of every user/assistant line of the transcript.

    A summarizer may send the transcript rendered as text (``user: ...`` lines, as
    `summarize_with_model` does) or as the chat messages themselves; rendered lines are used
    when there are any, else the messages. A multi-line message's later lines join its entry.
    """
    entries: list[tuple[str, list[str]]] = []
    for m in messages:
        if m.role == "tool":
            continue
        in_entry = False
        for raw in m.content.splitlines():
            match = _TRANSCRIPT_LINE.match(raw)
            if match:
                entries.append((match.group(1).lower(), [match.group(2)]))
                in_entry = True
            elif raw.lstrip().startswith("["):
                in_entry = False  # a tool call, tool result or attachment note: not said text
            elif in_entry:
                entries[-1][1].append(raw)  # a multi-line message continues
    lines = [(role, " ".join(parts)) for role, parts in entries if role != "system"]
    if not lines:
        lines = [(m.role, m.content) for m in messages if m.role in ("user", "assistant")]
    body = [f"- {role}: {_flatten(text)[:SUMMARY_LINE_CHARS]}" for role, text in lines]
    return len(lines), body


def _requested_tool_call(
    messages: Sequence[ChatMessage], tools: Sequence[ToolSpec]
) -> ToolCall | None:
    """``/<tool> {json}`` in the last user message becomes a call; the only way Echo calls tools.

    The longest matching name wins, so ``/read_page`` is never taken for a tool named ``read``.
    """
    if not tools or not messages or messages[-1].role != "user":
        return None
    text = messages[-1].content.strip()
    for spec in sorted(tools, key=lambda t: len(t.name), reverse=True):
        prefix = "/" + spec.name
        if text == prefix or (text.startswith(prefix) and text[len(prefix)].isspace()):
            arguments = _tool_arguments(text[len(prefix) :].strip(), spec)
            return ToolCall(id=f"call_{len(messages)}", name=spec.name, arguments=arguments)
    return None


def _tool_arguments(rest: str, spec: ToolSpec) -> dict[str, Any]:
    """A JSON object is used as is; plain text fills a tool's single required string parameter."""
    if not rest:
        return {}
    try:
        parsed = json.loads(rest)
    except (ValueError, RecursionError):  # RecursionError: "[[[[..." nested past the limit
        parsed = None
    if isinstance(parsed, dict):
        return parsed
    required = spec.parameters.get("required") or []
    properties = spec.parameters.get("properties") or {}
    if len(required) == 1:
        name = required[0]
        if isinstance(properties.get(name), dict) and properties[name].get("type") == "string":
            return {name: rest}
    return {}


def _answer(messages: Sequence[ChatMessage]) -> str:
    last_user = next((m.content for m in reversed(messages) if m.role == "user"), "")
    parts = [f'Echo (saw {len(messages)} messages): "{_flatten(last_user)[:QUOTE_CHARS]}"']
    trailing: list[ChatMessage] = []
    for m in reversed(messages):
        if m.role != "tool":
            break
        trailing.append(m)
    if trailing:
        names = {c.id: c.name for m in messages for c in m.tool_calls}
        for m in reversed(trailing):
            name = names.get(m.tool_call_id or "", m.tool_call_id or "?")
            parts.append(f"Tool {name} returned {len(m.content)} characters.")
    return " ".join(parts)
