"""The request body of a chat completion: messages and tools in OpenAI's wire shapes, and the
answer's token cap in the field the server takes.

Pure functions of the request and the provider's settings, so the body can be checked without a
server and the provider class holds only the HTTP and retry logic.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from bounded_agents.core.messages import ChatMessage
from bounded_agents.core.ports import ModelRequest, ToolSpec

MAX_TOKENS_FIELDS = ("max_tokens", "max_completion_tokens")
"""Where a server takes the answer's token cap: most take `max_tokens`; OpenAI's reasoning
models refuse it and want `max_completion_tokens`."""


def chat_body(
    request: ModelRequest,
    *,
    model: str,
    stream: bool,
    max_tokens: int | None,
    max_tokens_field: str,
    prompt_cache_key: bool = False,
    prompt_cache_retention: str | None = None,
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": model,
        "messages": [wire_message(m) for m in request.messages],
        "stream": stream,
    }
    if prompt_cache_key and request.thread_id:
        # OpenAI routes calls with one key to the same cache machine: a thread's calls share
        # their prefix, so they share a key. Hashed, so no thread id leaves the service.
        body["prompt_cache_key"] = cache_key(request.thread_id)
    if prompt_cache_retention:
        body["prompt_cache_retention"] = prompt_cache_retention
    if request.tools:
        body["tools"] = [wire_tool(t) for t in request.tools]
    if max_tokens is not None:
        # Sent only where the deployment set a cap: some servers refuse `max_tokens`
        # (OpenAI's reasoning models want `max_completion_tokens`). A request's own cap
        # (the summarizer's) is its own budget, not lowered by the chat answer's: a summary
        # allowed 3,000 words must not be cut at the chat's 256 tokens.
        body[max_tokens_field] = request.max_tokens or max_tokens
    if stream:
        body["stream_options"] = {"include_usage": True}
    return body


CACHE_KEY_DOMAIN = b"bounded-agents prompt_cache_key v1\0"
"""Prefixed to the thread id before hashing, so the key is this project's and no other
hash of the same id matches it."""


def cache_key(thread_id: str) -> str:
    """A thread's stable `prompt_cache_key`: 32 hex digits of SHA-256 over the domain and the
    thread id. The same thread always gets the same key, and the key does not give back the
    id (thread ids are random UUIDs, so the hash cannot be reversed by trying ids)."""
    return "t-" + hashlib.sha256(CACHE_KEY_DOMAIN + thread_id.encode()).hexdigest()[:32]


def wire_message(message: ChatMessage) -> dict[str, Any]:
    out: dict[str, Any] = {"role": message.role, "content": message.content}
    if message.tool_calls:
        # OpenAI's documented shape for a pure tool-call turn is content null, not "".
        out["content"] = message.content or None
        out["tool_calls"] = [
            {
                "id": c.id,
                "type": "function",
                "function": {"name": c.name, "arguments": json.dumps(c.arguments)},
            }
            for c in message.tool_calls
        ]
    if message.role == "tool":
        out["tool_call_id"] = message.tool_call_id
    return out


def wire_tool(tool: ToolSpec) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": tool.name,
            "description": tool.description,
            "parameters": tool.parameters,
        },
    }
