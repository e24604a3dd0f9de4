"""A LangChain chat message history whose messages are the project's bounded SQL thread.

    chain = RunnableWithMessageHistory(
        runnable, lambda session_id: BoundedChatMessageHistory(session_id, store)
    )
    config = {"configurable": {"session_id": "u42"}}
    await chain.ainvoke({"question": "What changed?"}, config=config)

`aget_messages` gives the BOUNDED history (the thread's summary first, as a system message,
then its newest `keep_runs` runs whole, read in one range scan), so a chain's prompt costs the
same at message 100 and 100,000 and an AI message's tool calls never lose their tool messages.
Messages are stored with LangChain's own `message_to_dict` and come back as they were.
`aclear` goes through the store's erasure. The store is async: use the chain's async methods
(`ainvoke`, `astream`); the sync ones raise a clear error instead of blocking an event loop.

Importing this module imports `langchain_core` (`pip install "bounded-agents[langchain]"`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from langchain_core.chat_history import BaseChatMessageHistory
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
    message_to_dict,
    messages_from_dict,
)

from bounded_agents.core.ports import AgentStore, Summarizer
from bounded_agents.errors import InvalidInput
from bounded_agents.integrations.thread import (
    DEFAULT_FOLD_ITEMS,
    DEFAULT_KEEP_RUNS,
    Entry,
    FoldOutcome,
    Projection,
    ThreadHistory,
    item_json,
    label,
)


def _text(message: BaseMessage) -> str:
    content = message.content
    if isinstance(content, str):
        return content
    return "\n".join(
        c if isinstance(c, str) else str(c.get("text", "")) for c in content if c is not None
    )


def project_message(message: Any, index: int) -> Projection:
    """What the store indexes of one message. A human message starts a run; an AI message's
    tool calls and the tool messages answering them stay in its run."""
    if not isinstance(message, BaseMessage):
        raise InvalidInput(f"{label(message, index)} is not a LangChain message")
    if isinstance(message, HumanMessage):
        return Projection("user", _text(message))
    if isinstance(message, SystemMessage):
        return Projection("system", _text(message))
    if isinstance(message, ToolMessage):
        return Projection("assistant", f"[tool output {message.name or ''}] {_text(message)}")
    if isinstance(message, AIMessage):
        calls = "".join(f"\n[tool call {c['name']}] {c['args']}" for c in message.tool_calls)
        return Projection("assistant", _text(message) + calls)
    return Projection("assistant", _text(message))  # chat, function, a custom type: verbatim


def _loaded(entries: Sequence[Entry]) -> list[BaseMessage]:
    out: list[BaseMessage] = []
    for e in entries:
        if e.item is not None:
            out.extend(messages_from_dict([e.item]))
        elif e.message.role == "user":
            out.append(HumanMessage(e.message.content))
        elif e.message.role == "system":
            out.append(SystemMessage(e.message.content))
        else:
            out.append(AIMessage(e.message.content))
    return out


class BoundedChatMessageHistory(BaseChatMessageHistory):
    """`BaseChatMessageHistory` over `store` (a `SqlAgentStore`), one per session id."""

    def __init__(
        self,
        session_id: str,
        store: AgentStore,
        *,
        actor_id: str = "local",
        agent: str = "langchain",
        keep_runs: int = DEFAULT_KEEP_RUNS,
        summarizer: Summarizer | None = None,
        fold_items: int = DEFAULT_FOLD_ITEMS,
    ) -> None:
        self.session_id = session_id
        self.history = ThreadHistory(
            store, session_id, actor_id=actor_id, agent=agent, keep_runs=keep_runs
        )
        self.summarizer = summarizer
        self.fold_items = fold_items
        self.last_rows_read = 0
        """Message rows the last `aget_messages` read: the bound, however long the thread."""

    @property
    def messages(self) -> list[BaseMessage]:  # type: ignore[override]
        raise NotImplementedError(
            "BoundedChatMessageHistory is async: call aget_messages (a chain's ainvoke does)"
        )

    async def aget_messages(self) -> list[BaseMessage]:
        """The summary (a system message) and the newest runs, whole."""
        view = await self.history.bounded()
        self.last_rows_read = view.rows_read
        lead: list[BaseMessage] = []
        if view.summary_text is not None:
            lead.append(SystemMessage(view.summary_text))
        return lead + _loaded(view.entries)

    def add_messages(self, messages: Sequence[BaseMessage]) -> None:
        raise NotImplementedError(
            "BoundedChatMessageHistory is async: call aadd_messages (a chain's ainvoke does)"
        )

    async def aadd_messages(self, messages: Sequence[BaseMessage]) -> None:
        """Append `messages` in order, all or none; a non-message is refused, naming it, with
        nothing written. Folds older runs into the summary when due and a summarizer is set."""
        batch = [
            (project_message(m, i), item_json(message_to_dict(m), label=label(m, i)))
            for i, m in enumerate(messages)
        ]
        await self.history.append(batch)
        if self.summarizer is not None:
            await self.history.compact_if_due(self.summarizer, fold_items=self.fold_items)

    async def acompact(self) -> FoldOutcome | None:
        """Fold every unsummarized run older than the kept ones into the summary now."""
        if self.summarizer is None:
            return None
        return await self.history.compact(self.summarizer)

    def clear(self) -> None:
        raise NotImplementedError("BoundedChatMessageHistory is async: call aclear")

    async def aclear(self) -> None:
        """Erase the thread: messages, summaries, search index."""
        await self.history.clear()


__all__ = ["BoundedChatMessageHistory", "project_message"]
