"""The events a turn sends its `on_event` sink: the same for a provider that streams and one that
does not, so a client renders every provider's answer the same way."""

from __future__ import annotations

import uuid

from bounded_agents.core.history import window_history
from bounded_agents.core.loop import LoopEvent, ToolCallEvent, ToolResultEvent
from bounded_agents.core.messages import ToolCall
from bounded_agents.core.ports import ModelResponse, TextDelta
from bounded_agents.testing import FunctionTool, ScriptedProvider, StreamingScriptedProvider, reply
from tests.loop.conftest import LoopEnv


async def _events(env: LoopEnv, model: ScriptedProvider) -> tuple[list[LoopEvent], str]:
    async def look(q: str) -> str:
        return f"found {q}"

    events: list[LoopEvent] = []

    async def sink(event: LoopEvent) -> None:
        events.append(event)

    tools = {"look": FunctionTool("look", look)}
    loop = env.loop(model, window_history(max_messages=10), tools=tools)
    result = await loop.run_turn(
        agent="helper",
        thread_id=await env.thread(),
        actor_id="alice",
        content="hi",
        run_id=str(uuid.uuid4()),
        on_event=sink,
    )
    return events, result.message.content


async def test_a_provider_that_does_not_stream_sends_each_answer_as_one_delta(
    env: LoopEnv,
) -> None:
    call = ToolCall(id="c1", name="look", arguments={"q": "x"})
    model = ScriptedProvider([reply("Let me look.", tool_calls=[call]), reply("The answer.")])
    events, content = await _events(env, model)
    assert events == [
        TextDelta(text="Let me look."),
        ToolCallEvent(call=call),
        ToolResultEvent(call_id="c1", name="look", is_error=False, content_chars=7),
        TextDelta(text="The answer."),
    ]
    assert content == "Let me look.The answer."  # what the deltas showed, all of it


async def test_an_empty_answer_sends_no_delta(env: LoopEnv) -> None:
    events, _ = await _events(env, ScriptedProvider([reply("")]))
    assert events == []


async def test_streaming_and_non_streaming_providers_send_the_same_text(env: LoopEnv) -> None:
    call = ToolCall(id="c1", name="look", arguments={"q": "x"})

    def script() -> list[ModelResponse]:
        return [reply("Let me look.", tool_calls=[call]), reply("The answer.")]

    plain, _ = await _events(env, ScriptedProvider(script()))
    streamed, _ = await _events(env, StreamingScriptedProvider(script()))

    def text(events: list[LoopEvent]) -> str:
        return "".join(e.text for e in events if isinstance(e, TextDelta))

    def others(events: list[LoopEvent]) -> list[LoopEvent]:
        return [e for e in events if not isinstance(e, TextDelta)]

    assert text(plain) == text(streamed) == "Let me look.The answer."
    assert others(plain) == others(streamed)
