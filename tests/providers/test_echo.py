"""EchoModel: deterministic answers, tool-call trigger, extractive summaries, estimated usage."""

from __future__ import annotations

import math
import time

from bounded_agents.core.messages import ChatMessage, ToolCall
from bounded_agents.core.ports import (
    ModelProvider,
    ModelRequest,
    ModelResponse,
    TextDelta,
    ToolSpec,
    supports_streaming,
)
from bounded_agents.core.tokens import estimate_message_tokens
from bounded_agents.providers.echo import EchoModel

READ_PAGE = ToolSpec(
    name="read_page",
    description="Read a page.",
    parameters={
        "type": "object",
        "properties": {"url": {"type": "string"}},
        "required": ["url"],
    },
)
READ = ToolSpec(name="read")


def user(text: str) -> ChatMessage:
    return ChatMessage(role="user", content=text)


def conversation() -> list[ChatMessage]:
    return [
        ChatMessage(role="system", content="You help."),
        user("hello there"),
        ChatMessage(role="assistant", content="hi"),
        user("What does the dashboard show about revenue for the last quarter, in detail please?"),
    ]


async def test_is_a_streaming_model_provider() -> None:
    model = EchoModel()
    assert isinstance(model, ModelProvider)
    assert supports_streaming(model)


async def test_answer_quotes_the_last_user_message_and_counts_messages() -> None:
    response = await EchoModel().complete(ModelRequest(messages=conversation()))
    quote = conversation()[-1].content[:60]
    assert response.content == f'Echo (saw 4 messages): "{quote}"'
    assert response.tool_calls == []
    assert response.model == "echo"


async def test_same_request_same_answer() -> None:
    request = ModelRequest(messages=conversation(), tools=[READ_PAGE])
    first = await EchoModel().complete(request)
    second = await EchoModel().complete(request)
    assert first == second


async def test_usage_comes_from_the_token_estimate() -> None:
    messages = conversation()
    response = await EchoModel().complete(ModelRequest(messages=messages))
    assert response.usage.prompt_tokens == sum(estimate_message_tokens(m) for m in messages)
    assert response.usage.completion_tokens == math.ceil(len(response.content) / 4) + 4


async def test_slash_tool_with_json_arguments_calls_the_tool() -> None:
    messages = [*conversation(), user('/read_page {"url": "https://x.test/a"}')]
    response = await EchoModel().complete(ModelRequest(messages=messages, tools=[READ_PAGE]))
    assert response.content == ""
    assert response.tool_calls == [
        ToolCall(id="call_5", name="read_page", arguments={"url": "https://x.test/a"})
    ]
    assert response.usage.completion_tokens == estimate_message_tokens(
        ChatMessage(role="assistant", content="", tool_calls=response.tool_calls)
    )


async def test_slash_tool_with_plain_text_fills_the_single_required_string() -> None:
    request = ModelRequest(messages=[user("/read_page  https://x.test/b ")], tools=[READ_PAGE])
    response = await EchoModel().complete(request)
    assert response.tool_calls[0].arguments == {"url": "https://x.test/b"}


async def test_slash_tool_without_arguments_and_longest_name_wins() -> None:
    tools = [READ, READ_PAGE]
    bare = await EchoModel().complete(ModelRequest(messages=[user("/read")], tools=tools))
    assert bare.tool_calls == [ToolCall(id="call_1", name="read", arguments={})]
    longer = await EchoModel().complete(ModelRequest(messages=[user("/read_page")], tools=tools))
    assert longer.tool_calls[0].name == "read_page"


async def test_slash_text_is_only_a_call_for_an_advertised_tool() -> None:
    unadvertised = await EchoModel().complete(ModelRequest(messages=[user("/read_page x")]))
    assert unadvertised.tool_calls == []
    prefix_only = await EchoModel().complete(
        ModelRequest(messages=[user("/read_pages x")], tools=[READ_PAGE])
    )
    assert prefix_only.tool_calls == []
    assert prefix_only.content.startswith("Echo (saw 1 messages)")


async def test_answer_after_tool_results_names_their_sizes() -> None:
    call = ToolCall(id="call_1", name="read_page", arguments={"url": "u"})
    messages = [
        user("/read_page u"),
        ChatMessage(role="assistant", content="", tool_calls=[call]),
        ChatMessage(role="tool", content="x" * 51200, tool_call_id="call_1"),
    ]
    response = await EchoModel().complete(ModelRequest(messages=messages, tools=[READ_PAGE]))
    assert response.tool_calls == []
    assert response.content == (
        'Echo (saw 3 messages): "/read_page u" Tool read_page returned 51200 characters.'
    )


async def test_history_summary_is_extractive_over_a_rendered_transcript() -> None:
    long_line = "a" * 200
    transcript = f"user: first question\nassistant: first answer\nuser: {long_line}"
    request = ModelRequest(
        messages=[
            ChatMessage(role="system", content="Summarize the conversation."),
            user(transcript),
        ],
        purpose="history_summary",
    )
    response = await EchoModel().complete(request)
    assert response.content == (
        "Summary of 3 earlier messages:\n"
        "- user: first question\n"
        "- assistant: first answer\n"
        f"- user: {'a' * 80}"
    )
    assert response == await EchoModel().complete(request)


async def test_history_summary_over_chat_messages() -> None:
    request = ModelRequest(messages=conversation(), purpose="history_summary")
    response = await EchoModel().complete(request)
    lines = response.content.splitlines()
    assert lines[0] == "Summary of 3 earlier messages:"
    assert lines[1:3] == ["- user: hello there", "- assistant: hi"]
    assert lines[3] == "- user: " + conversation()[-1].content[:80]


async def test_stream_yields_deltas_then_the_full_response() -> None:
    request = ModelRequest(messages=conversation())
    events = [e async for e in EchoModel().stream(request)]
    deltas = [e for e in events[:-1] if isinstance(e, TextDelta)]
    final = events[-1]
    assert len(deltas) == len(events) - 1 > 1
    assert isinstance(final, ModelResponse)
    assert "".join(d.text for d in deltas) == final.content
    assert final == await EchoModel().complete(request)


async def test_stream_of_a_tool_call_has_no_deltas() -> None:
    request = ModelRequest(messages=[user("/read")], tools=[READ])
    events = [e async for e in EchoModel().stream(request)]
    assert len(events) == 1
    assert isinstance(events[0], ModelResponse)
    assert events[0].tool_calls[0].name == "read"


async def test_delay_holds_the_call_open() -> None:
    start = time.monotonic()
    await EchoModel(delay=0.05).complete(ModelRequest(messages=[user("hi")]))
    assert time.monotonic() - start >= 0.05


async def test_summarizes_what_summarize_with_model_sends() -> None:
    from bounded_agents.core.history import HistoryPolicyContext
    from bounded_agents.core.messages import Message
    from bounded_agents.core.summary import summarize_with_model

    dropped = [
        Message(role="user", content="Please open the billing page"),
        Message(role="assistant", content="Opened it.\nIt shows three invoices."),
    ]
    ctx = HistoryPolicyContext(thread_id="t", agent="a", actor_id="u", run_id="r")
    summary = await summarize_with_model(EchoModel())(dropped, ctx)
    assert summary.text == (
        "Summary of 2 earlier messages:\n"
        "- user: Please open the billing page\n"
        "- assistant: Opened it. It shows three invoices."
    )
    assert summary.usage.prompt_tokens > 0


async def test_summary_skips_system_lines_and_tool_notes() -> None:
    transcript = (
        "system: be nice\nuser: look\n  [tool call c1] read_page({})\n"
        "  [tool result c1] <html>\nassistant: Found it\nacross lines"
    )
    request = ModelRequest(messages=[user(transcript)], purpose="history_summary")
    response = await EchoModel().complete(request)
    assert response.content == (
        "Summary of 2 earlier messages:\n- user: look\n- assistant: Found it across lines"
    )
