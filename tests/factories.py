"""Builders for test data, shared by the store, loop and benchmark tests."""

from __future__ import annotations

from app.core.messages import Message, ToolCall, ToolResult


def user(text: str, run_id: str | None = None) -> Message:
    return Message(role="user", content=text, run_id=run_id)


def assistant(text: str, run_id: str | None = None) -> Message:
    return Message(role="assistant", content=text, run_id=run_id)


def tool_answer(n: int, tool_bytes: int, run_id: str | None = None) -> Message:
    """An assistant answer that ran one tool returning `tool_bytes` characters."""
    call = ToolCall(id=f"call_{n}", name="read_page", arguments={"url": f"https://example.com/{n}"})
    result = ToolResult(call_id=call.id, content="x" * tool_bytes)
    return Message(
        role="assistant",
        content=f"answer {n}",
        tool_calls=[call],
        tool_results=[result],
        run_id=run_id,
    )


def tool_turns(turns: int, tool_bytes: int) -> list[Message]:
    """`turns` runs of (user question, assistant answer carrying a `tool_bytes` tool result)."""
    out: list[Message] = []
    for n in range(turns):
        run = f"run-{n}"
        out.append(user(f"question {n}", run_id=run))
        out.append(tool_answer(n, tool_bytes, run_id=run))
    return out
