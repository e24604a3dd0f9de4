"""A LangChain chat message history whose messages are the project's bounded SQL thread.

    chain = RunnableWithMessageHistory(
        runnable, lambda session_id: BoundedChatMessageHistory(session_id, store)
    )
    config = {"configurable": {"session_id": "u42"}}
    await chain.ainvoke({"question": "What changed?"}, config=config)

`aget_messages` gives the BOUNDED history (the thread's summary first, as a system message, then its
newest `keep_runs` runs whole, at most `max_items` items, read in one range scan), so a chain's
prompt costs the same at message 100 and 100,000 and an AI message's tool calls never lose their
tool messages. Messages are stored with LangChain's own `message_to_dict` and come back as they
were. `aclear` goes through the store's erasure. The store is async: use the chain's async methods
(`ainvoke`, `astream`); the sync ones raise a clear error instead of blocking an event loop.

Importing this module imports `langchain_core` (`pip install "bounded-agents[langchain]"`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Annotated, Any, NotRequired

from langchain.agents.middleware import AgentMiddleware, AgentState, ModelRequest
from langchain.agents.middleware.types import PrivateStateAttr
from langchain_core.chat_history import BaseChatMessageHistory
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    RemoveMessage,
    SystemMessage,
    ToolMessage,
    message_to_dict,
    messages_from_dict,
)
from langgraph.config import get_config
from langgraph.runtime import Runtime

from bounded_agents.core.ports import AgentStore, Summarizer
from bounded_agents.errors import InvalidInput
from bounded_agents.integrations.folds import FoldOutcome
from bounded_agents.integrations.items import NO_LINKS, Links, Projection, item_json, label
from bounded_agents.integrations.thread import (
    DEFAULT_FOLD_ITEMS,
    DEFAULT_KEEP_RUNS,
    DEFAULT_MAX_ITEMS,
    Entry,
    ThreadHistory,
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
    if isinstance(message, RemoveMessage):  # found by attack: stored, then read back as history
        raise InvalidInput(f"{label(message, index)} is an instruction to a graph, not a message")
    if isinstance(message, HumanMessage):
        return Projection("user", _text(message))
    if isinstance(message, SystemMessage):
        return Projection("system", _text(message))
    if isinstance(message, ToolMessage):
        return Projection("assistant", f"[tool output {message.name or ''}] {_text(message)}")
    if isinstance(message, AIMessage):
        try:
            calls = "".join(f"\n[tool call {c['name']}] {c['args']}" for c in message.tool_calls)
        except RecursionError:  # found by attack: arguments nested 3,000 deep raised it raw
            raise InvalidInput(f"{label(message, index)} is nested too deeply to store") from None
        return Projection("assistant", _text(message) + calls)
    return Projection("assistant", _text(message))  # chat, function, a custom type: verbatim


_AI_TYPES = frozenset({"ai", "AIMessageChunk"})
_TOOL_TYPES = frozenset({"tool", "ToolMessageChunk"})
"""`message_to_dict` types of the messages that make tool calls and answer them: a streamed
answer is stored as its chunk (`RunnableWithMessageHistory.astream` stores an
`AIMessageChunk`), and its calls must keep their outputs as an `AIMessage`'s do (found by
attack: a chunk's ToolMessage was left out of the view as an answer with no call)."""


def item_links(item: Any) -> Links:
    """How a stored message (`message_to_dict` JSON) ties to its neighbours
    (`ThreadHistory.links`): an AI message opens its tool calls' ids, a tool message closes
    its `tool_call_id`; chat models refuse a tool result with no call before it."""
    data = item.get("data") if isinstance(item, dict) else None
    if not isinstance(data, dict):
        return NO_LINKS
    if item.get("type") in _TOOL_TYPES:
        call_id = data.get("tool_call_id")
        return Links(closes=frozenset({call_id if isinstance(call_id, str) else ""}))
    calls = data.get("tool_calls")
    if item.get("type") in _AI_TYPES and isinstance(calls, list):
        return Links(opens=frozenset(str(c.get("id") or "") for c in calls if isinstance(c, dict)))
    return NO_LINKS


_LOADABLE = frozenset({"human", "ai", "system", "tool", "chat", "function"})
"""Message types `messages_from_dict` reads back; any other is tried before it is stored."""


def _stored(message: BaseMessage, index: int) -> str:
    """The message's `message_to_dict` JSON. A type LangChain could not load back (a custom
    subclass) is refused now, naming it, rather than stored into a thread no read could load."""
    data = message_to_dict(message)
    if message.type not in _LOADABLE:
        try:
            messages_from_dict([data])
        except (ValueError, TypeError, KeyError) as exc:
            raise InvalidInput(
                f"{label(message, index)} is of a type LangChain cannot load back: {exc}"
            ) from None
    return item_json(data, label=label(message, index))


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
        max_items: int = DEFAULT_MAX_ITEMS,
    ) -> None:
        self.session_id = session_id
        self.history = ThreadHistory(
            store,
            session_id,
            actor_id=actor_id,
            agent=agent,
            keep_runs=keep_runs,
            max_items=max_items,
            links=item_links,
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
        """The summary (a system message) and the newest runs, whole (at most `max_items`
        items: a view that begins inside a run leaves no tool message without its call)."""
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
        batch = [(project_message(m, i), _stored(m, i)) for i, m in enumerate(messages)]
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


class BoundedHistoryState(AgentState[Any]):
    """The agent state with the ids of the state's messages `BoundedHistoryMiddleware` has
    appended to the thread (private: not in the agent's input or output)."""

    bounded_history_stored_ids: NotRequired[Annotated[list[str], PrivateStateAttr]]


class BoundedHistoryMiddleware(AgentMiddleware[BoundedHistoryState, Any, Any]):
    """A `create_agent` middleware that keeps the thread in SQL and the checkpoint to one run.

    Every model call is sent the SQL selection (the summary, appended to the system prompt,
    and the newest `keep_runs` runs: one bounded read) followed by the run in flight from the
    agent's state (`awrap_model_call`). After the agent (`aafter_agent`) the run's messages
    are appended to the thread and their ids recorded in the state; before the next run
    (`abefore_agent`) exactly the recorded messages are removed from the state, so a
    checkpointer stores one run, never the whole thread. What is removed and appended does
    not depend on what else wrote to the thread in between (another agent on it, or one
    `session_id` shared by two LangGraph threads): each message is stored once, in order.
    A checkpoint written before the ids were recorded is read once by the older rule: the
    state's messages up to the thread's newest item are taken as stored.

    The thread is `session_id` when given, else the run's `thread_id` (its
    `config["configurable"]`). Async only: drive the agent with `ainvoke` / `astream`.
    """

    state_schema = BoundedHistoryState

    def __init__(
        self,
        store: AgentStore,
        *,
        session_id: str | None = None,
        actor_id: str = "local",
        agent: str = "langchain",
        keep_runs: int = DEFAULT_KEEP_RUNS,
        summarizer: Summarizer | None = None,
        fold_items: int = DEFAULT_FOLD_ITEMS,
        max_items: int = DEFAULT_MAX_ITEMS,
    ) -> None:
        super().__init__()
        self.store = store
        self.session_id = session_id
        self.actor_id = actor_id
        self.agent = agent
        self.keep_runs = keep_runs
        self.max_items = max_items
        self.summarizer = summarizer
        self.fold_items = fold_items
        self.last_rows_read = 0
        """Message rows the last model call's SQL selection read."""
        self._histories: dict[str, BoundedChatMessageHistory] = {}

    def history(self) -> BoundedChatMessageHistory:
        """The thread of the run in progress."""
        session = self.session_id
        if session is None:
            session = get_config().get("configurable", {}).get("thread_id")
        if not isinstance(session, str) or not session:
            raise InvalidInput(
                "BoundedHistoryMiddleware needs a session_id, or a thread_id in the run's "
                'config: {"configurable": {"thread_id": ...}}'
            )
        found = self._histories.get(session)
        if found is None:  # kept, so a thread is created and its owner checked once
            if len(self._histories) >= 1024:
                self._histories.clear()
            found = self._histories[session] = BoundedChatMessageHistory(
                session,
                self.store,
                actor_id=self.actor_id,
                agent=self.agent,
                keep_runs=self.keep_runs,
                max_items=self.max_items,
                summarizer=self.summarizer,
                fold_items=self.fold_items,
            )
        return found

    async def abefore_agent(
        self, state: BoundedHistoryState, runtime: Runtime[Any]
    ) -> dict[str, Any] | None:
        """Drop from the state what an earlier run already moved into SQL: the messages
        whose ids `aafter_agent` recorded (by the thread's newest item, for a state that
        has no record), and start this run's record empty."""
        messages = state["messages"]
        recorded = state.get("bounded_history_stored_ids")
        if recorded is None:
            stored = {m.id for m in await _stored_prefix(self.history(), messages)}
        else:
            stored = set(recorded)
        removed = [RemoveMessage(id=m.id) for m in messages if m.id is not None and m.id in stored]
        return {"messages": removed, "bounded_history_stored_ids": []}

    async def awrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], Awaitable[Any]],
    ) -> Any:
        history = self.history()
        view = await history.history.bounded()
        self.last_rows_read = view.rows_read
        in_flight = [m for m in request.messages if not isinstance(m, SystemMessage)]
        known = {m.id for m in in_flight if m.id is not None}
        earlier = [m for m in _loaded(view.entries) if m.id is None or m.id not in known]
        overrides: dict[str, Any] = {"messages": [*earlier, *in_flight]}
        if view.summary_text is not None:
            system = request.system_message
            lead = f"{system.content}\n\n" if system is not None and system.content else ""
            overrides["system_message"] = SystemMessage(lead + view.summary_text)
        return await handler(request.override(**overrides))

    async def aafter_agent(
        self, state: BoundedHistoryState, runtime: Runtime[Any]
    ) -> dict[str, Any] | None:
        """Append the run's messages (those whose ids are not recorded yet) to the thread,
        and record their ids. The state's reducer (`add_messages`) gives every message an
        id; one without (a state written around it) is appended and cannot be recorded."""
        history = self.history()
        messages = list(state["messages"])
        recorded = state.get("bounded_history_stored_ids")
        if recorded is None:  # a run begun before the ids were recorded
            new = messages[len(await _stored_prefix(history, messages)) :]
        else:
            known = set(recorded)
            new = [m for m in messages if m.id is None or m.id not in known]
        await history.aadd_messages(new)
        return {"bounded_history_stored_ids": [m.id for m in messages if m.id is not None]}


async def _stored_prefix(
    history: BoundedChatMessageHistory, messages: Sequence[BaseMessage]
) -> list[BaseMessage]:
    """The leading messages of `messages` already in the thread: up to the one whose id is
    the thread's newest item (one row read); none when it is not among them."""
    newest = await history.history.newest(1)
    if not newest or not isinstance(newest[0].item, dict):
        return []
    newest_id = newest[0].item.get("data", {}).get("id")
    if newest_id is None:
        return []
    for i, m in enumerate(messages):
        if m.id == newest_id:
            return list(messages[: i + 1])
    return []


__all__ = [
    "BoundedChatMessageHistory",
    "BoundedHistoryMiddleware",
    "BoundedHistoryState",
    "item_links",
    "project_message",
]
