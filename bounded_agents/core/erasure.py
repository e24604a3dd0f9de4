"""What an erasure does to the copies of a message that other messages hold.

The one copy the project itself makes of a message inside another is a `search_history` result
(`bounded_agents.core.search`): a later answer's tool result quotes the messages it found, each
row naming the `seq` it quotes (or, for a summary row, the `from_seq`..`to_seq` span it covers).
Erasing message N therefore rewrites every such result of the thread: each row quoting N keeps
its position and role, so the answer still reads as the model saw its shape, and its text
becomes `ERASED`. Every other key of that row holding text is dropped (a snippet, say): only
numbers, booleans and the role are known to carry none of the message.

Pure functions over the stored JSON: the store runs them on the rows it selected
(`bounded_agents.store.erase`), any other store may do the same.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from bounded_agents.core.messages import ToolCall, ToolResult
from bounded_agents.core.search import SEARCH_TOOL_NAME
from bounded_agents.core.search_results import result_rows

ERASED = "[erased]"
"""What a quoted message's text becomes once the message is erased."""

_KEPT_TEXT_KEYS = frozenset({"role"})
"""Text-valued keys a quoting row keeps: the role is one of three words, never content."""


def quotes(row: dict[str, Any], seq: int) -> bool:
    """Whether a search result's row quotes message `seq`: its own `seq`, or a summary's span
    (`from_seq`..`to_seq`) that covers it."""
    if row.get("seq") == seq:
        return True
    low, high = row.get("from_seq"), row.get("to_seq")
    return isinstance(low, int) and isinstance(high, int) and low <= seq <= high


def redact_search_result(content: str, seq: int) -> str | None:
    """`content` (a `search_history` result) with every row quoting `seq` erased, or None when
    no row quotes it (or it is not a result at all: an error text, say)."""
    parsed = result_rows(content)
    if parsed is None:
        return None
    data, rows = parsed
    changed = False
    out: list[Any] = []
    for row in rows:
        if isinstance(row, dict) and quotes(row, seq) and row.get("content") != ERASED:
            row = {
                key: value
                for key, value in row.items()
                if key in _KEPT_TEXT_KEYS or not isinstance(value, (str, list, dict))
            }
            row["content"] = ERASED
            changed = True
        out.append(row)
    if not changed:
        return None
    return json.dumps({**data, "results": out}, ensure_ascii=False)


def redact_search_results(
    calls: Sequence[ToolCall], results: Sequence[ToolResult], seq: int
) -> list[ToolResult] | None:
    """A message's tool results with every `search_history` result's quote of `seq` erased, or
    None when none quoted it. A result is a search's when the call it answers (same id) is."""
    searches = {call.id for call in calls if call.name == SEARCH_TOOL_NAME}
    changed = False
    out: list[ToolResult] = []
    for result in results:
        redacted = redact_search_result(result.content, seq) if result.call_id in searches else None
        if redacted is not None:
            result = result.model_copy(update={"content": redacted})
            changed = True
        out.append(result)
    return out if changed else None


ERROR_REDACTED = "(its text was removed when a message of the thread was erased)"
"""What is left of a failed run's error text once a message of its thread is erased."""

FIXED_TEXT_ERRORS = frozenset({"journal_erased", "lease_expired"})
"""Error codes whose message is a fixed text of the project's own: nothing to redact."""

_CONTENT_FREE_PREFIX = re.compile(
    r"^(provider returned HTTP \d{3}|provider returned invalid JSON|provider failed mid-stream|"
    r"the [a-z ]+ call failed \(details are in the server log\)|"
    r"the [a-z ]+ timed out after [0-9.]+ ?s)"
)
"""How the project's provider errors begin before they quote the provider's own text (which a
validating server fills with the input it refused): that part names no content."""


def redact_error(code: str, message: str) -> str | None:
    """A failed run's error text without anything a provider or a tool may have echoed of the
    thread, or None when it is a fixed text already (or redacted already). The code stays,
    and so does a provider error's HTTP status: the prefix the project wrote itself."""
    if code in FIXED_TEXT_ERRORS or message.endswith(ERROR_REDACTED):
        return None
    found = _CONTENT_FREE_PREFIX.match(message)
    return f"{found.group(1)}: {ERROR_REDACTED}" if found else ERROR_REDACTED


__all__ = [
    "ERASED",
    "ERROR_REDACTED",
    "FIXED_TEXT_ERRORS",
    "quotes",
    "redact_error",
    "redact_search_result",
    "redact_search_results",
]
