"""How a failed call to an OpenAI-compatible server becomes a `ProviderError`: which failures
are worth a retry, what an error body says, and how long a 429 asks to wait.

Kept apart from the provider so the classification can be read (and changed) in one place; the
provider only decides when to call it.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any

from bounded_agents.errors import (
    ProviderContextExceeded,
    ProviderError,
    ProviderRateLimited,
)

ERROR_TEXT_LIMIT = 500
"""How much of an unparseable error body goes into an error message."""


class Transient(Exception):
    """An attempt failed in a way worth retrying; carries the error to raise if retries run out."""

    def __init__(self, final: ProviderError, retry_after: float | None = None) -> None:
        super().__init__(final.message)
        self.final = final
        self.retry_after = retry_after


CONTEXT_EXCEEDED = re.compile(
    r"context[_ ](length|window)|maximum context|too many tokens|prompt is too long|"
    r"exceeds? (the )?(available )?context",
    re.IGNORECASE,
)
"""How servers word "the prompt is longer than the model's context": OpenAI's code
`context_length_exceeded`, llama.cpp's "exceed context window of 2048", vLLM's "maximum context
length", Anthropic's "prompt is too long"."""


def status_failure(status: int, headers: Mapping[str, str], content: bytes) -> Exception:
    """Classify a non-2xx answer: 429 and 5xx are transient, any other status is final; a
    400/413 that says the context was exceeded is `ProviderContextExceeded` (a fold splits its
    chunk on it)."""
    message = error_message_from_body(content)
    text = f"provider returned HTTP {status}: {message}"
    if status == 429:
        return Transient(ProviderRateLimited(text), retry_after=retry_after(headers))
    if status >= 500:
        return Transient(ProviderError(text))
    if status in (400, 413, 422) and (
        CONTEXT_EXCEEDED.search(message) or b"context_length_exceeded" in content[:4096]
    ):
        return ProviderContextExceeded(text)
    return ProviderError(text)


def error_message_from_body(content: bytes) -> str:
    try:
        data = json.loads(content)
    except (ValueError, RecursionError):
        return excerpt(content.decode("utf-8", "replace")) or "(empty body)"
    return error_message(data)


def error_message(data: Any) -> str:
    """OpenAI nests ``{"error": {"message"}}``; Ollama and others send ``{"error": "..."}``."""
    if isinstance(data, dict):
        error = data.get("error")
        message = error.get("message") if isinstance(error, dict) else None
        if isinstance(message, str):
            return message
        if isinstance(error, str):
            return error
    return excerpt(data)


def stream_error(payload: str) -> str:
    """The message of llama.cpp's `error:` line: ``{"code", "message", "type"}``."""
    try:
        data = json.loads(payload)
    except (ValueError, RecursionError):
        return excerpt(payload)
    message = data.get("message") if isinstance(data, dict) else None
    return message if isinstance(message, str) else error_message(data)


def retry_after(headers: Mapping[str, str]) -> float | None:
    """Retry-After as seconds (delta-seconds or an HTTP date); None when absent or unreadable."""
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        seconds = (when - datetime.now(UTC)).total_seconds()
    if math.isnan(seconds) or math.isinf(seconds):
        return None
    return max(seconds, 0.0)


def excerpt(value: Any) -> str:
    text = (
        value
        if isinstance(value, str)
        else (value.decode("utf-8", "replace") if isinstance(value, bytes) else repr(value))
    )
    return text[:ERROR_TEXT_LIMIT] + ("…" if len(text) > ERROR_TEXT_LIMIT else "")
