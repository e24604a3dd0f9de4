"""`run_tool`'s limit (`AGENT_TOOL_TIMEOUT_SECONDS`): its expiry is an error result naming the
limit; a `TimeoutError` a tool lets out itself (its backend's) is the tool's own, as any
exception it lets out, and is never taken for the limit's (found by review)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from bounded_agents.core.history import window_history
from bounded_agents.core.messages import ToolCall, ToolResult
from bounded_agents.core.ports import ToolSpec
from bounded_agents.core.turn.calls import run_tool
from bounded_agents.core.turn.public import AgentDefinition, ToolContext


class RawTool:
    """A binding that lets its exception out (a `FunctionTool` would catch it)."""

    def __init__(self, name: str, behaviour: Any) -> None:
        self.spec = ToolSpec(name=name, description="d", parameters={"type": "object"})
        self._behaviour = behaviour

    async def invoke(self, arguments: dict[str, Any]) -> ToolResult:
        return await self._behaviour()


async def _raises() -> ToolResult:
    raise TimeoutError("the backend's own")


async def _hangs() -> ToolResult:
    await asyncio.sleep(5)
    return ToolResult(call_id="", content="late")


DEFINITION = AgentDefinition(
    name="a",
    system_prompt="s",
    policy=window_history(max_messages=4),
    tools={"own": RawTool("own", _raises), "slow": RawTool("slow", _hangs)},
)
CONTEXT = ToolContext(thread_id="t", prompt=())


async def test_the_limits_expiry_is_an_error_result_naming_it() -> None:
    late = await run_tool(DEFINITION, ToolCall(id="c", name="slow", arguments={}), CONTEXT, 0.05)
    assert isinstance(late, dict)
    assert late["is_error"] and late["content"] == "tool 'slow' did not answer within 0.05 s"


@pytest.mark.parametrize("seconds", [10.0, None])
async def test_a_tools_own_timeout_error_is_its_own(seconds: float | None) -> None:
    with pytest.raises(TimeoutError, match="the backend's own"):
        await run_tool(DEFINITION, ToolCall(id="c", name="own", arguments={}), CONTEXT, seconds)
