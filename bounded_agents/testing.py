"""Test doubles that users of the module share with our own tests.

`ScriptedProvider` answers from a script and counts what it was asked, so a test can assert on
exactly which calls a turn made (and that a replay made none).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from typing import Any

from bounded_agents.core.messages import ToolCall, ToolResult
from bounded_agents.core.ports import ModelRequest, ModelResponse, TextDelta, ToolSpec, Usage

Reply = ModelResponse | Exception | Callable[[ModelRequest], Awaitable[ModelResponse]]


def reply(
    content: str = "",
    *,
    tool_calls: Iterable[ToolCall] = (),
    prompt_tokens: int = 10,
    completion_tokens: int = 5,
) -> ModelResponse:
    return ModelResponse(
        content=content,
        tool_calls=list(tool_calls),
        model="scripted",
        usage=Usage(prompt_tokens=prompt_tokens, completion_tokens=completion_tokens),
    )


class Gate:
    """A scripted reply that holds its turn in flight until released: for tests that need a
    run still going (a busy thread, a report of a running run, a disconnect mid-turn).

        gate = Gate(reply("done")); provider = ScriptedProvider([gate])
        ...start the turn...; await gate.reached(); ...; gate.release.set()
    """

    def __init__(self, response: ModelResponse) -> None:
        self.response = response
        self.entered = asyncio.Event()
        self.release = asyncio.Event()

    async def __call__(self, _request: ModelRequest) -> ModelResponse:
        self.entered.set()
        await self.release.wait()
        return self.response

    async def reached(self) -> None:
        """Wait (10 s at most) until the model call is in flight: `load:thread` is journaled."""
        async with asyncio.timeout(10):
            await self.entered.wait()


class UnconsumedReplies(AssertionError):
    pass


class ScriptedProvider:
    """A `ModelProvider` that returns (or raises) its script's entries in order.

    An entry may be a coroutine function of the request, for a model that must block or look at
    what it was sent. With `streaming=True` it also offers `stream()`, in two-character deltas.
    """

    model = "scripted"

    def __init__(
        self, script: Iterable[Reply] = (), *, default: ModelResponse | None = None
    ) -> None:
        self.script = list(script)
        self.default = default
        self.calls: list[ModelRequest] = []

    async def complete(self, request: ModelRequest) -> ModelResponse:
        self.calls.append(request)
        if not self.script:
            if self.default is not None:
                return self.default
            raise AssertionError(f"ScriptedProvider: no reply left for call {len(self.calls)}")
        entry = self.script.pop(0)
        if isinstance(entry, Exception):
            raise entry
        if isinstance(entry, ModelResponse):
            return entry
        return await entry(request)

    def assert_consumed(self) -> None:
        if self.script:
            raise UnconsumedReplies(f"{len(self.script)} scripted replies were never asked for")


class StreamingScriptedProvider(ScriptedProvider):
    async def stream(self, request: ModelRequest) -> AsyncIterator[TextDelta | ModelResponse]:
        response = await self.complete(request)
        for i in range(0, len(response.content), 2):
            yield TextDelta(text=response.content[i : i + 2])
        yield response


class FunctionTool:
    """A `ToolBinding` over a plain async function taking the arguments as keywords."""

    def __init__(self, name: str, fn: Callable[..., Awaitable[str]], description: str = "") -> None:
        self._spec = ToolSpec(name=name, description=description)
        self._fn = fn
        self.calls: list[dict[str, Any]] = []

    @property
    def spec(self) -> ToolSpec:
        return self._spec

    async def invoke(self, arguments: dict[str, Any]) -> ToolResult:
        self.calls.append(arguments)
        try:
            return ToolResult(call_id="", content=await self._fn(**arguments))
        except Exception as exc:
            return ToolResult(call_id="", content=f"{type(exc).__name__}: {exc}", is_error=True)
