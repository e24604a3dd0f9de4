"""`bounded_agents.core.tool_budget`: which calls are refused, which results fit."""

from __future__ import annotations

import pytest

from bounded_agents.core.messages import ToolCall, ToolResult
from bounded_agents.core.ports import JsonValue
from bounded_agents.core.search import SEARCH_TOOL_NAME
from bounded_agents.core.tool_budget import (
    REFUSED,
    ToolBudget,
    ToolUse,
    budgeted_tool,
    fit_result,
    is_refusal,
    refusal,
)
from bounded_agents.errors import ConfigError

BUDGET = ToolBudget(
    search_calls_per_step=2,
    search_calls_per_turn=3,
    result_bytes_per_step=100,
    result_bytes_per_turn=150,
)


def _search(i: int) -> ToolCall:
    return ToolCall(id=f"s{i}", name=SEARCH_TOOL_NAME, arguments={"query": "x"})


def _other(i: int) -> ToolCall:
    return ToolCall(id=f"o{i}", name="read", arguments={})


def _ok(call: ToolCall, size: int = 10) -> ToolResult:
    return ToolResult(call_id=call.id, content="r" * size)


def test_searches_are_refused_past_the_step_s_count_then_the_turn_s() -> None:
    earlier = [_search(0), _search(1)]  # a previous step's two searches
    step = [_search(2), _search(3)]
    calls = [*earlier, *step[:1]]
    results = [_ok(c) for c in calls]
    used = ToolUse(calls, results, step_start=2)
    assert refusal(BUDGET, step[1], used) is not None  # 3 answered: the turn's cap
    assert "a turn" in (refusal(BUDGET, step[1], used) or "")
    used = ToolUse(step[:2], [_ok(c) for c in step[:2]], step_start=0)
    assert "a step" in (refusal(BUDGET, _search(9), used) or "")
    assert refusal(BUDGET, _other(1), used) is None  # only searches are counted


def test_a_refused_search_does_not_count_as_one() -> None:
    calls = [_search(0), _search(1)]
    results = [_ok(calls[0]), ToolResult(call_id="s1", content=REFUSED + "no", is_error=True)]
    assert refusal(BUDGET, _search(2), ToolUse(calls, results, step_start=0)) is None


def test_a_result_past_the_bytes_left_becomes_a_refusal_cut_to_what_is_left() -> None:
    calls = [_other(0)]
    used = ToolUse(calls, [_ok(calls[0], 60)], step_start=0)
    assert fit_result(BUDGET, _ok(_other(1), 40), used).content == "r" * 40  # 100 exactly
    refused = fit_result(BUDGET, _ok(_other(1), 41), used)
    assert is_refusal(refused) and refused.call_id == "o1"
    assert len(refused.content.encode()) <= 40
    full = [_ok(_other(0), 100)]
    assert fit_result(BUDGET, _ok(_other(1), 1), ToolUse(calls, full, 0)).content == ""


def test_the_turn_s_bytes_count_every_step() -> None:
    calls = [_other(0), _other(1)]
    results = [_ok(calls[0], 90), _ok(calls[1], 50)]  # 140 of the turn's 150, 50 of this step
    fitted = fit_result(BUDGET, _ok(_other(2), 20), ToolUse(calls, results, step_start=1))
    assert is_refusal(fitted)
    assert len(fitted.content.encode()) <= 10


async def test_the_step_function_refuses_before_running_a_search_past_its_count() -> None:
    ran: list[str] = []

    async def run() -> JsonValue:
        ran.append("ran")
        return {"call_id": "s9", "content": "found", "is_error": False}

    used = ToolUse([_search(0), _search(1)], [_ok(_search(0)), _ok(_search(1))], step_start=0)
    payload = await budgeted_tool(BUDGET, _search(9), run, used)()
    assert ran == []
    assert isinstance(payload, dict) and str(payload["content"]).startswith(REFUSED)
    assert payload["is_error"] is True and payload["call_id"] == "s9"
    fresh = ToolUse([], [], step_start=0)
    assert await budgeted_tool(BUDGET, _search(9), run, fresh)() == await run()


@pytest.mark.parametrize("bad", [0, -1, True, 1.5])
def test_a_cap_below_one_is_a_config_error(bad: object) -> None:
    with pytest.raises(ConfigError, match="search_calls_per_step"):
        ToolBudget(search_calls_per_step=bad)  # type: ignore[arg-type]
