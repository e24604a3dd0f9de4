"""Replies in Anthropic's Messages wire format for the scripted loopback server of
`fake_openai` (which serves any path): a message body, an error body, and a stream of
named SSE events. The real `anthropic` SDK talks to it."""

from __future__ import annotations

import json
from typing import Any

from tests.providers.fake_openai import FakeOpenAI, Reply


def usage(
    input_tokens: int = 11, output_tokens: int = 7, read: int = 0, written: int = 0
) -> dict[str, Any]:
    return {
        "input_tokens": input_tokens,
        "output_tokens": output_tokens,
        "cache_read_input_tokens": read,
        "cache_creation_input_tokens": written,
    }


def message(
    content: list[dict[str, Any]] | str = "hello",
    *,
    stop_reason: str = "end_turn",
    model: str = "claude-test",
    **counts: int,
) -> Reply:
    blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
    return Reply.json(
        {
            "id": "msg_fake",
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": blocks,
            "stop_reason": stop_reason,
            "stop_sequence": None,
            "usage": usage(**counts),
        }
    )


def error(status: int, kind: str, text: str, headers: dict[str, str] | None = None) -> Reply:
    """An error in Anthropic's shape: ``{"type": "error", "error": {"type", "message"}}``."""
    body = {"type": "error", "error": {"type": kind, "message": text}}
    return Reply.json(body, status=status, headers=headers)


def stream(
    texts: list[str],
    *,
    tool: tuple[str, str, list[str]] | None = None,
    stop_reason: str = "end_turn",
    cut_after: int | None = None,
    **counts: int,
) -> Reply:
    """A streamed message: `texts` as text deltas, then an optional tool_use block whose input
    arrives as `partial_json` pieces; `cut_after` closes the connection after that many events."""
    start_usage = usage(**counts)
    start_usage["output_tokens"] = 1
    events: list[tuple[str, dict[str, Any]]] = [
        (
            "message_start",
            {
                "type": "message_start",
                "message": {
                    "id": "msg_fake",
                    "type": "message",
                    "role": "assistant",
                    "model": "claude-test",
                    "content": [],
                    "stop_reason": None,
                    "stop_sequence": None,
                    "usage": start_usage,
                },
            },
        ),
        (
            "content_block_start",
            {
                "type": "content_block_start",
                "index": 0,
                "content_block": {"type": "text", "text": ""},
            },
        ),
    ]
    for text in texts:
        events.append(
            (
                "content_block_delta",
                {
                    "type": "content_block_delta",
                    "index": 0,
                    "delta": {"type": "text_delta", "text": text},
                },
            )
        )
    events.append(("content_block_stop", {"type": "content_block_stop", "index": 0}))
    if tool is not None:
        call_id, name, pieces = tool
        events.append(
            (
                "content_block_start",
                {
                    "type": "content_block_start",
                    "index": 1,
                    "content_block": {"type": "tool_use", "id": call_id, "name": name, "input": {}},
                },
            )
        )
        for piece in pieces:
            events.append(
                (
                    "content_block_delta",
                    {
                        "type": "content_block_delta",
                        "index": 1,
                        "delta": {"type": "input_json_delta", "partial_json": piece},
                    },
                )
            )
        events.append(("content_block_stop", {"type": "content_block_stop", "index": 1}))
    events.append(
        (
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": stop_reason, "stop_sequence": None},
                "usage": {"output_tokens": counts.get("output_tokens", 7)},
            },
        )
    )
    events.append(("message_stop", {"type": "message_stop"}))
    cut = cut_after is not None
    if cut:
        events = events[:cut_after]
    frames = tuple(f"event: {name}\ndata: {json.dumps(data)}\n\n".encode() for name, data in events)
    return Reply(
        headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"},
        chunks=frames,
        complete=not cut,
    )


class FakeAnthropic(FakeOpenAI):
    """The scripted loopback server, serving the Messages API's path."""

    PATH = "/v1/messages"
    OTHER_PATHS = frozenset({"/v1/messages/count_tokens"})
