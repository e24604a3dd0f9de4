"""`context_window`: a chat middleware that trims the provider-shaped messages of one model call.

A history policy bounds what a TURN starts from; inside a turn the tool loop keeps growing the
messages every model step resends. This middleware trims them just before each call. It works on
`ChatMessage`s, where a tool exchange is already an assistant message plus separate `tool`
messages, so unlike a history policy it can land between a call and its answer: it walks forward
past such orphans, because providers reject a split pair with a 400 that no retry fixes.

A chat middleware takes the messages of one call and returns the messages to send plus metrics;
the loop puts the metrics on that call's entry in the run report.

It follows ThenaJS's `contextWindow` (options, order, metrics, notice, no defaults) except in two
places, both chosen for what the model ends up seeing:

- `max_chars` counts an assistant's tool-call JSON as well as every message's content. Counting
  content only leaves a call's arguments (a file being written, say) outside the ceiling.
- The newest message is never dropped for `max_chars`, nor a trailing tool answer's assistant.
  A budget too small for anything would otherwise send the system messages alone, and the model
  would answer a question, or a tool result, it was never shown.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Callable
from typing import Literal, TypeAlias

from pydantic import BaseModel, ConfigDict

from bounded_agents.core.messages import ChatMessage
from bounded_agents.errors import ConfigError

ChatMiddleware: TypeAlias = Callable[
    [list[ChatMessage]], tuple[list[ChatMessage], dict[str, int | bool]]
]
"""Takes one model call's provider-shaped messages; returns the messages to send and metrics
(flat names to ints/bools) for that call's report entry. Must not mutate its input."""

DEFAULT_WINDOW_NOTICE = "[…previous history omitted to fit the window…]"
"""The system note `context_window` leaves in place of what it cut, unless told otherwise."""

TRUNCATION_MARKER = "\n… [truncated]"
"""Appended to a tool output cut to `max_chars_per_tool`."""


class WindowMetrics(BaseModel):
    """What one `context_window` pass did, as reported on the model call's entry."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    window_trimmed: bool
    """True if messages were cut. A tool output shortened to `max_chars_per_tool` alone does not
    count: the message is still sent."""
    messages_sent: int
    """Messages actually sent (the notice included)."""
    messages_original: int
    """Messages the middleware was given."""
    window_orphans_dropped: int
    """`tool` messages dropped only because the cut had removed the assistant that called them.

    Kept apart from the rest on purpose: "cut to fit the ceiling" and "cut one more to keep a tool
    pair whole" are different causes, and a count that is never zero means the window is tight
    enough to land inside tool turns."""


def _chars(message: ChatMessage) -> int:
    """Characters a message puts in the history: its content plus its tool calls' JSON. The
    calls are counted (ThenaJS counts content only) because they are sent too and can outweigh
    the content: an assistant writing a file carries the file in its arguments."""
    n = len(message.content)
    if message.tool_calls:
        n += len(json.dumps([c.model_dump(mode="json") for c in message.tool_calls]))
    return n


class ContextWindow:
    """A configured `context_window`; call it with a call's messages. See `context_window`."""

    def __init__(
        self,
        *,
        max_turns: int | None,
        max_chars: int | None,
        max_chars_per_tool: int | None,
        notice: str | Literal[False],
    ) -> None:
        self.max_turns = max_turns
        self.max_chars = max_chars
        self.max_chars_per_tool = max_chars_per_tool
        self.notice = notice

    def trim(self, messages: list[ChatMessage]) -> tuple[list[ChatMessage], WindowMetrics]:
        """The trimmed messages and typed metrics (`__call__` returns the metrics as a dict)."""
        head_len = 0
        while head_len < len(messages) and messages[head_len].role == "system":
            head_len += 1
        head = messages[:head_len]
        rest = list(messages[head_len:])

        if self.max_chars_per_tool is not None:
            limit = self.max_chars_per_tool
            for i, m in enumerate(rest):
                if m.role == "tool" and len(m.content) > limit:
                    content = m.content[:limit] + TRUNCATION_MARKER
                    rest[i] = m.model_copy(update={"content": content})

        cut = 0
        if self.max_turns is not None:
            cut = max(cut, len(rest) - self.max_turns)
        if self.max_chars is not None:
            total = sum(_chars(m) for m in rest[cut:])
            # Trim from the front until it fits, but never the newest message (ThenaJS would):
            # a call with nothing to answer is worse than one over budget.
            while total > self.max_chars and cut < len(rest) - 1:
                total -= _chars(rest[cut])
                cut += 1

        orphans = 0
        if cut > 0:
            # A tool message at the front of what is left answers an assistant that was cut.
            walked = cut
            while walked < len(rest) and rest[walked].role == "tool":
                walked += 1
            if walked < len(rest):
                orphans, cut = walked - cut, walked
            else:
                # Only tool answers would be left (the step right after a tool call): walking
                # past them would send nothing to answer (ThenaJS does, and sends the system
                # messages alone), so keep their assistant instead, over budget if need be.
                while cut > 0 and rest[cut].role == "tool":
                    cut -= 1

        kept = rest[cut:]
        out = list(head)
        if cut > 0 and self.notice is not False:
            out.append(ChatMessage(role="system", content=self.notice))
        out.extend(kept)
        metrics = WindowMetrics(
            window_trimmed=cut > 0,
            messages_sent=len(out),
            messages_original=len(messages),
            window_orphans_dropped=orphans,
        )
        return out, metrics

    def __call__(
        self, messages: list[ChatMessage]
    ) -> tuple[list[ChatMessage], dict[str, int | bool]]:
        out, metrics = self.trim(messages)
        return out, metrics.model_dump()

    def __repr__(self) -> str:
        return (
            f"context_window(max_turns={self.max_turns!r}, max_chars={self.max_chars!r}, "
            f"max_chars_per_tool={self.max_chars_per_tool!r}, notice={self.notice!r})"
        )


def _check_limit(name: str, value: int | None) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"context_window {name} must be a positive int, got {value!r}")


def _resolved_notice(
    notice: str | Literal[False] | None, warn_index_failure: str | Literal[False] | None
) -> str | Literal[False]:
    """The notice to leave, the deprecated `warn_index_failure` honoured (and warned about,
    at the caller of `context_window`) only where `notice` is not given."""
    if warn_index_failure is not None:
        warnings.warn(
            "context_window(warn_index_failure=...) is deprecated; use notice=...",
            DeprecationWarning,
            stacklevel=3,
        )
        if notice is None:
            notice = warn_index_failure
    if notice is None:
        notice = DEFAULT_WINDOW_NOTICE
    if notice is not False and not isinstance(notice, str):
        raise ConfigError(f"context_window notice must be a str or False, got {notice!r}")
    return notice


def context_window(
    max_turns: int | None = None,
    max_chars: int | None = None,
    max_chars_per_tool: int | None = None,
    notice: str | Literal[False] | None = None,
    warn_index_failure: str | Literal[False] | None = None,
) -> ContextWindow:
    """A chat middleware (`ChatMiddleware`) that trims one model call's messages to a window.

    It has NO defaults, on purpose: trimming changes what the agent remembers, and a default would
    trade a loud, expensive failure for a silent degradation. With no limit at all it trims
    nothing, as ThenaJS's `contextWindow` does, and warns (`UserWarning`): a window that trims
    nothing is almost surely a forgotten limit. A limit below 1 raises `ConfigError`. Measure
    first: trim when a call's `prompt_tokens` keep growing toward the model's window.

    In order, on the messages after the leading system messages (the agent's prompt: never cut,
    never counted, and kept stable for the provider's prompt cache):

    1. `max_chars_per_tool`: a `tool` message longer than this keeps its first
       `max_chars_per_tool` characters plus "\\n… [truncated]".
    2. `max_turns`: keep the last `max_turns` messages. It counts messages, not round trips: a
       tool exchange is at least two.
    3. `max_chars`: drop from the front while the kept messages' characters (content plus tool
       call JSON; ThenaJS counts content only) are over the budget; the newest message is never
       dropped for it.
    4. Leading `tool` messages whose assistant was cut are dropped too (counted in
       `window_orphans_dropped`), so the window may send fewer than `max_turns`. One exception:
       when only `tool` messages would remain, their assistant message is kept instead, so the
       model still sees the step it is answering; that window exceeds `max_turns` (or
       `max_chars`) by the assistant message. (ThenaJS walks past them and sends the system
       messages alone.) No orphan `tool` message ever leaves the middleware.
    5. If messages were dropped, `notice` (default `DEFAULT_WINDOW_NOTICE`) goes in as a system
       message right after the leading system messages; `notice=False` cuts silently.

    The metrics are `window_trimmed` (messages were cut; shortening a tool output alone is not a
    cut), `messages_sent` (len of the output), `messages_original` (len of the input) and
    `window_orphans_dropped` (see `WindowMetrics`).

    `warn_index_failure` is the deprecated old name of `notice`: it still works, emits a
    `DeprecationWarning`, and loses to `notice` when both are given.
    """
    resolved = _resolved_notice(notice, warn_index_failure)
    if max_turns is None and max_chars is None and max_chars_per_tool is None:
        warnings.warn(
            "context_window() was given no limit, so it trims nothing (it has no defaults on "
            "purpose): set max_turns, max_chars or max_chars_per_tool",
            UserWarning,
            stacklevel=2,
        )
    _check_limit("max_turns", max_turns)
    _check_limit("max_chars", max_chars)
    _check_limit("max_chars_per_tool", max_chars_per_tool)
    return ContextWindow(
        max_turns=max_turns,
        max_chars=max_chars,
        max_chars_per_tool=max_chars_per_tool,
        notice=resolved,
    )


__all__ = [
    "DEFAULT_WINDOW_NOTICE",
    "TRUNCATION_MARKER",
    "ChatMiddleware",
    "ContextWindow",
    "WindowMetrics",
    "context_window",
]
