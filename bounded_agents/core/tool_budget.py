"""Caps on what tools may put into one turn's prompts: search calls, and tool-output bytes.

A window and a summary bound the history a prompt carries, and each `search_history` result is
bounded (`MAX_RESULT_BYTES`), but a model step may ask for any number of tool calls: a step
that called `search_history` 1,000 times made a 7 MB prompt, stored as one answer that every
later window then carried. So a turn's tool calls share a budget:

- `search_calls_per_step` / `search_calls_per_turn`: `search_history` calls answered per model
  step and per turn; the next ones are refused before they run (no query reaches the store).
- `result_bytes_per_step` / `result_bytes_per_turn`: UTF-8 bytes of tool output (every tool's,
  the user's own `@tool`s and the search alike) entering the prompt per model step and per
  turn. A result that would pass either is replaced by a refusal.

A refusal is a tool result like any other (`is_error`), short, saying which cap it met, so the
model sees why and can answer with what it has: never an exception, never a failed turn.
Refusals count against the byte caps too, and one is cut to the bytes left (to nothing once
none are): the tool output of a step and of a turn stays within its cap however many calls the
model makes. (The calls themselves are the model's own output, bounded by its completion.)

Every figure is computed from the results the run already holds, and the decision is made
inside the tool's step: a replay reads the journaled result (the refusal included) back, and
the tally it then sees is the one the first attempt saw.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from bounded_agents.core.checkpoints import parse_tool
from bounded_agents.core.messages import ToolCall, ToolResult, storable_json
from bounded_agents.core.ports import JsonValue
from bounded_agents.core.search import SEARCH_TOOL_NAME
from bounded_agents.errors import ConfigError

DEFAULT_SEARCH_CALLS_PER_STEP = 4
"""Searches a model step may make: a fact, its correction and two rephrasings."""
DEFAULT_SEARCH_CALLS_PER_TURN = 12
DEFAULT_RESULT_BYTES_PER_STEP = 64 * 1024
"""Tool output per step: a few pages or eight full search results (8 KB each)."""
DEFAULT_RESULT_BYTES_PER_TURN = 256 * 1024
"""Tool output per turn: about 64,000 tokens, half of a 128K-token context."""

REFUSED = "refused by the tool budget: "
"""How every refusal begins: what tells a refusal from a tool's own error."""


@dataclass(frozen=True)
class ToolBudget:
    """The caps of one turn (see the module docstring); each at least 1."""

    search_calls_per_step: int = DEFAULT_SEARCH_CALLS_PER_STEP
    search_calls_per_turn: int = DEFAULT_SEARCH_CALLS_PER_TURN
    result_bytes_per_step: int = DEFAULT_RESULT_BYTES_PER_STEP
    result_bytes_per_turn: int = DEFAULT_RESULT_BYTES_PER_TURN

    def __post_init__(self) -> None:
        for name in (
            "search_calls_per_step",
            "search_calls_per_turn",
            "result_bytes_per_step",
            "result_bytes_per_turn",
        ):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"tool budget: {name} must be a positive integer, not {value!r}")


@dataclass(frozen=True)
class ToolUse:
    """What the run's tool calls used so far: its calls and results in order, and where the
    current model step's begin in them."""

    calls: Sequence[ToolCall]
    results: Sequence[ToolResult]
    step_start: int


def refusal(budget: ToolBudget, call: ToolCall, used: ToolUse) -> str | None:
    """Why `call` may not run, before it runs (a search past its count), or None."""
    if call.name != SEARCH_TOOL_NAME:
        return None
    searches = [_answered_search(c, r) for c, r in zip(used.calls, used.results, strict=True)]
    if sum(searches[used.step_start :]) >= budget.search_calls_per_step:
        return (
            f"{REFUSED}at most {budget.search_calls_per_step} {SEARCH_TOOL_NAME} calls a step; "
            "answer from what the searches found"
        )
    if sum(searches) >= budget.search_calls_per_turn:
        return (
            f"{REFUSED}at most {budget.search_calls_per_turn} {SEARCH_TOOL_NAME} calls a turn; "
            "answer from what the searches found"
        )
    return None


def fit_result(budget: ToolBudget, result: ToolResult, used: ToolUse) -> ToolResult:
    """`result` if its bytes fit what is left of the step's and the turn's tool output, else a
    refusal saying so, itself cut to what is left (empty once nothing is)."""
    step_left = budget.result_bytes_per_step - _bytes(used.results[used.step_start :])
    turn_left = budget.result_bytes_per_turn - _bytes(used.results)
    left = max(0, min(step_left, turn_left))
    size = len(result.content.encode())
    if size <= left:
        return result
    scope = "step" if step_left <= turn_left else "turn"
    cap = budget.result_bytes_per_step if scope == "step" else budget.result_bytes_per_turn
    text = (
        f"{REFUSED}this result ({size} bytes) is over the tool output left for this {scope} "
        f"({left} of {cap} bytes); answer with what you have"
    )
    return _refused(result.call_id, text, left)


def budgeted_tool(
    budget: ToolBudget,
    call: ToolCall,
    run: Callable[..., Awaitable[JsonValue]],
    used: ToolUse,
) -> Callable[..., Awaitable[JsonValue]]:
    """The step function of `call` (`run`, which returns a journaled tool payload) within the
    budget: refused before it runs (a search past its count), or its result refused after
    (past the bytes left). What it returns is journaled like `run`'s own payload; whatever
    the step passes its function (a transaction, say) is passed on to `run`."""

    async def step(*args: Any, **kwargs: Any) -> JsonValue:
        why = refusal(budget, call, used)
        if why is not None:
            return _payload(fit_result(budget, _refused(call.id, why), used))
        payload = await run(*args, **kwargs)
        result = ToolResult.model_validate(parse_tool(payload))
        fitted = fit_result(budget, result, used)
        return payload if fitted is result else _payload(fitted)

    return step


def is_refusal(result: ToolResult) -> bool:
    """Whether the budget answered this result (a refusal cut short, to nothing even,
    included: what is left of it is a prefix of `REFUSED`)."""
    text = result.content
    return result.is_error and (text.startswith(REFUSED) or REFUSED.startswith(text))


def _answered_search(call: ToolCall, result: ToolResult) -> bool:
    return call.name == SEARCH_TOOL_NAME and not is_refusal(result)


def _bytes(results: Sequence[ToolResult]) -> int:
    return sum(len(r.content.encode()) for r in results)


def _refused(call_id: str, text: str, room: int | None = None) -> ToolResult:
    if room is not None:
        text = text.encode()[:room].decode(errors="ignore")
    return ToolResult(call_id=call_id, content=text, is_error=True)


def _payload(result: ToolResult) -> JsonValue:
    return storable_json(result.model_dump(mode="json"))


__all__ = [
    "DEFAULT_RESULT_BYTES_PER_STEP",
    "DEFAULT_RESULT_BYTES_PER_TURN",
    "DEFAULT_SEARCH_CALLS_PER_STEP",
    "DEFAULT_SEARCH_CALLS_PER_TURN",
    "REFUSED",
    "ToolBudget",
    "ToolUse",
    "budgeted_tool",
    "fit_result",
    "is_refusal",
    "refusal",
]
