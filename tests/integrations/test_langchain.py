"""The LangChain chat message history over the store, against the real `langchain` v1: an
agent made by `create_agent` with a fake chat model and a tool, and RunnableWithMessageHistory."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain.agents.middleware import HumanInTheLoopMiddleware
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import (
    AIMessage,
    AIMessageChunk,
    BaseMessage,
    ChatMessage,
    HumanMessage,
    RemoveMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.prompts import ChatPromptTemplate, MessagesPlaceholder
from langchain_core.runnables.history import RunnableWithMessageHistory
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command

from bounded_agents.errors import InvalidInput
from bounded_agents.integrations.langchain import (
    BoundedChatMessageHistory,
    BoundedHistoryMiddleware,
)
from bounded_agents.store import SqlAgentStore
from tests.http.erasure import marker_hits
from tests.integrations.helpers import NotesSummarizer, rows_read


class ToolingFakeModel(GenericFakeChatModel):
    """LangChain's fake chat model, with tools bound as a no-op (the script decides); every
    call's messages are kept in `seen`."""

    seen: list[list[BaseMessage]] = []  # noqa: RUF012 - a pydantic field, copied per instance

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> Any:
        return self

    async def _agenerate(self, messages: list[BaseMessage], *args: Any, **kwargs: Any) -> Any:
        self.seen.append(list(messages))
        return await super()._agenerate(messages, *args, **kwargs)


@tool
def weather(city: str) -> str:
    """The weather in `city`."""
    return f"sunny in {city}"


def script(turns: int) -> list[AIMessage]:
    out: list[AIMessage] = []
    for n in range(turns):
        call = {
            "name": "weather",
            "args": {"city": "Paris"},
            "id": f"call_{n}",
            "type": "tool_call",
        }
        out += [AIMessage("", tool_calls=[call]), AIMessage(f"answer {n}")]
    return out


def run_messages(n: int, marker: str = "") -> list[BaseMessage]:
    call = {"name": "weather", "args": {"n": n}, "id": f"c{n}", "type": "tool_call"}
    return [
        HumanMessage(f"question {n} {marker}".strip()),
        AIMessage("", tool_calls=[call]),
        ToolMessage(f"out {n}", tool_call_id=f"c{n}", name="weather"),
        AIMessage(f"answer {n}"),
    ]


def calls_paired(messages: Sequence[BaseMessage]) -> bool:
    calls = {c["id"] for m in messages if isinstance(m, AIMessage) for c in m.tool_calls}
    outputs = {m.tool_call_id for m in messages if isinstance(m, ToolMessage)}
    return calls == outputs


async def test_an_agent_runs_three_turns_with_a_tool_call_against_the_history(
    sql_store: SqlAgentStore,
) -> None:
    model = ToolingFakeModel(messages=iter(script(3)))
    agent = create_agent(model, tools=[weather], system_prompt="You help.")
    history = BoundedChatMessageHistory("lc-a", sql_store, keep_runs=2)
    for question in ("one", "two", "three"):
        with rows_read(sql_store) as reads:
            before = await history.aget_messages()
        state = await agent.ainvoke({"messages": [*before, HumanMessage(question)]})
        new = state["messages"][len(before) :]
        assert [type(m).__name__ for m in new] == [
            "HumanMessage",
            "AIMessage",
            "ToolMessage",
            "AIMessage",
        ]
        assert new[2].content == "sunny in Paris"
        await history.aadd_messages(new)
    assert reads == [("load_thread_for_turn", 8)] and calls_paired(before)
    assert [m.content for m in await history.aget_messages()][-4:] == [
        "three",
        "",
        "sunny in Paris",
        "answer 2",
    ]


async def test_runnable_with_message_history_keeps_its_turns_in_the_store(
    sql_store: SqlAgentStore,
) -> None:
    model = GenericFakeChatModel(messages=iter([AIMessage(f"a{n}") for n in range(3)]))
    prompt = ChatPromptTemplate.from_messages(
        [("system", "You help."), MessagesPlaceholder("history"), ("human", "{q}")]
    )
    with pytest.warns(DeprecationWarning, match="RunnableWithMessageHistory"):
        chain = RunnableWithMessageHistory(
            prompt | model,
            lambda session_id: BoundedChatMessageHistory(session_id, sql_store, keep_runs=1),
            input_messages_key="q",
            history_messages_key="history",
        )
    for q in ("one", "two", "three"):
        await chain.ainvoke({"q": q}, config={"configurable": {"session_id": "lc-b"}})
    kept = await BoundedChatMessageHistory("lc-b", sql_store, keep_runs=9).aget_messages()
    assert [m.content for m in kept] == ["one", "a0", "two", "a1", "three", "a2"]


async def test_a_malformed_message_is_refused_naming_it_and_nothing_is_written(
    sql_store: SqlAgentStore,
) -> None:
    history = BoundedChatMessageHistory("lc-c", sql_store)
    with pytest.raises(InvalidInput, match=r"item 4 \(str.*not a LangChain message"):
        await history.aadd_messages([*run_messages(0), "plain text"])  # type: ignore[list-item]
    assert await history.aget_messages() == []
    with pytest.raises(NotImplementedError, match="aget_messages"):
        _ = history.messages
    # Found by attack: a graph's RemoveMessage was stored, then read back as history.
    with pytest.raises(InvalidInput, match=r"item 1 \(RemoveMessage.*instruction to a graph"):
        await history.aadd_messages([HumanMessage("hi"), RemoveMessage(id="m1")])
    assert await history.aget_messages() == []


async def test_a_ten_thousand_message_thread_reads_the_bound_and_carries_the_summary(
    sql_store: SqlAgentStore,
) -> None:
    history = BoundedChatMessageHistory("lc-d", sql_store, keep_runs=3)
    for start in range(0, 2500, 250):
        await history.aadd_messages([m for n in range(start, start + 250) for m in run_messages(n)])
    history.summarizer = NotesSummarizer()
    folded = await history.acompact()
    assert folded is not None and folded.folded == 10_000 - 12
    with rows_read(sql_store) as reads:
        loaded = await history.aget_messages()
    assert reads == [("load_thread_for_turn", 12)]
    assert isinstance(loaded[0], SystemMessage) and "answer 2496" in str(loaded[0].content)
    assert len(loaded) == 1 + 12 and calls_paired(loaded[1:])
    assert loaded[1:] == [m for n in range(2497, 2500) for m in run_messages(n)]


async def test_aclear_leaves_the_text_in_no_table(sql_store: SqlAgentStore) -> None:
    history = BoundedChatMessageHistory(
        "lc-e", sql_store, keep_runs=1, summarizer=NotesSummarizer(), fold_items=1
    )
    await history.aadd_messages(run_messages(0, "MARKFOLDED"))
    await history.aadd_messages(run_messages(1))  # folds run 0: past the kept run
    assert "MARKFOLDED" in str((await history.aget_messages())[0].content)
    await history.aclear()
    assert await marker_hits(sql_store, "MARKFOLDED") == []
    assert await history.aget_messages() == []


async def test_the_middleware_feeds_the_model_sql_and_keeps_one_run_in_the_checkpoint(
    sql_store: SqlAgentStore,
) -> None:
    model = ToolingFakeModel(messages=iter(script(3)))
    middleware = BoundedHistoryMiddleware(sql_store, keep_runs=2)
    agent = create_agent(
        model,
        tools=[weather],
        system_prompt="You help.",
        middleware=[middleware],
        checkpointer=InMemorySaver(),
    )
    config: Any = {"configurable": {"thread_id": "lc-mw"}}
    for question in ("one", "two", "three"):
        state = await agent.ainvoke({"messages": [HumanMessage(question)]}, config=config)
        assert state["messages"][-1].content.startswith("answer")
    # The third run's first model call: the system prompt, two runs from SQL, the question.
    third = model.seen[4]
    assert [m.content for m in third[1:]][-1] == "three" and len(third) == 1 + 2 * 4 + 1
    assert calls_paired(third[1:-1]) and middleware.last_rows_read == 8
    # The checkpoint holds the last run only; the thread, all three.
    checkpoint = await agent.aget_state(config)
    assert checkpoint.values["messages"][0].content == "three"
    assert len(checkpoint.values["messages"]) == 4
    stored = await BoundedChatMessageHistory("lc-mw", sql_store, keep_runs=9).aget_messages()
    assert [m.content for m in stored if isinstance(m, HumanMessage)] == ["one", "two", "three"]
    assert len(stored) == 12


async def test_the_middleware_reads_the_bound_from_a_ten_thousand_message_thread(
    sql_store: SqlAgentStore,
) -> None:
    history = BoundedChatMessageHistory("lc-mw-long", sql_store, keep_runs=3)
    for start in range(0, 2500, 500):
        await history.aadd_messages([m for n in range(start, start + 500) for m in run_messages(n)])
    history.summarizer = NotesSummarizer()
    await history.acompact()
    model = ToolingFakeModel(messages=iter(script(1)))
    middleware = BoundedHistoryMiddleware(sql_store, session_id="lc-mw-long", keep_runs=3)
    agent = create_agent(model, tools=[weather], system_prompt="You help.", middleware=[middleware])
    with rows_read(sql_store) as reads:
        await agent.ainvoke({"messages": [HumanMessage("next")]})
    bounded = [n for name, n in reads if name == "load_thread_for_turn"]
    assert bounded == [12, 12]  # one bounded read per model call, the bound each time
    assert max(n for _, n in reads) == 12
    first = model.seen[0]
    assert isinstance(first[0], SystemMessage) and str(first[0].content).startswith("You help.")
    assert "answer 2496" in str(first[0].content)  # the summary rides on the system prompt
    assert len(first) == 1 + 12 + 1 and calls_paired(first[1:-1])


def humans(messages: Sequence[BaseMessage]) -> list[str | list[Any]]:
    return [m.content for m in messages if isinstance(m, HumanMessage)]


async def test_another_writer_between_two_checkpointed_runs_stores_each_message_once(
    sql_store: SqlAgentStore,
) -> None:
    """Found by attack: the middleware took the state's messages up to the thread's newest
    item as stored; another agent writing to the thread between two checkpointed runs left
    the newest item out of the state, so the first run was stored again and the model was
    sent it after the other writer's run."""
    model = ToolingFakeModel(messages=iter(script(2)))
    model.seen = []
    checkpointed = create_agent(
        model,
        tools=[weather],
        middleware=[BoundedHistoryMiddleware(sql_store, keep_runs=9)],
        checkpointer=InMemorySaver(),
    )
    other = create_agent(
        ToolingFakeModel(messages=iter(script(1))),
        tools=[weather],
        middleware=[BoundedHistoryMiddleware(sql_store, keep_runs=9)],
    )
    config: Any = {"configurable": {"thread_id": "lc-mw-other"}}

    await checkpointed.ainvoke({"messages": [HumanMessage("e1")]}, config=config)
    await other.ainvoke({"messages": [HumanMessage("e-other")]}, config=config)
    state = await checkpointed.ainvoke({"messages": [HumanMessage("e2")]}, config=config)

    stored = await BoundedChatMessageHistory("lc-mw-other", sql_store, keep_runs=9).aget_messages()
    assert humans(stored) == ["e1", "e-other", "e2"] and len(stored) == 12
    assert calls_paired(stored)
    assert humans(model.seen[2]) == ["e1", "e-other", "e2"]  # the e2 run's first model call
    assert len(state["messages"]) == 4


async def test_one_session_used_by_two_langgraph_threads_in_turn_stores_each_message_once(
    sql_store: SqlAgentStore,
) -> None:
    """Found by attack: one `session_id`, two checkpointed LangGraph threads used in turn;
    each thread's checkpoint missed the other's newest run, so it was stored again whole."""
    model = ToolingFakeModel(messages=iter(script(5)))
    model.seen = []
    agent = create_agent(
        model,
        tools=[weather],
        middleware=[BoundedHistoryMiddleware(sql_store, session_id="lc-mw-shared", keep_runs=9)],
        checkpointer=InMemorySaver(),
    )
    questions = ["c1", "c2", "c3", "c4", "c5"]
    for question, thread in zip(questions, ["t1", "t2", "t1", "t2", "t1"], strict=True):
        config: Any = {"configurable": {"thread_id": thread}}
        state = await agent.ainvoke({"messages": [HumanMessage(question)]}, config=config)
        assert len(state["messages"]) == 4

    stored = await BoundedChatMessageHistory("lc-mw-shared", sql_store, keep_runs=9).aget_messages()
    assert humans(stored) == questions and len(stored) == 20 and calls_paired(stored)
    assert humans(model.seen[8]) == questions  # the c5 run's first model call


async def test_a_checkpoint_written_before_the_stored_ids_were_kept_is_dropped_once(
    sql_store: SqlAgentStore,
) -> None:
    """A checkpoint from the earlier version holds its run and no record of what was
    stored: the thread's newest item decides, as it did then."""
    saver = InMemorySaver()
    config: Any = {"configurable": {"thread_id": "lc-mw-old"}}
    plain = create_agent(
        ToolingFakeModel(messages=iter(script(1))), tools=[weather], checkpointer=saver
    )
    first = await plain.ainvoke({"messages": [HumanMessage("one")]}, config=config)
    await BoundedChatMessageHistory("lc-mw-old", sql_store).aadd_messages(first["messages"])
    agent = create_agent(
        ToolingFakeModel(messages=iter(script(1))),
        tools=[weather],
        middleware=[BoundedHistoryMiddleware(sql_store, keep_runs=9)],
        checkpointer=saver,
    )

    state = await agent.ainvoke({"messages": [HumanMessage("two")]}, config=config)

    assert humans(state["messages"]) == ["two"] and len(state["messages"]) == 4
    stored = await BoundedChatMessageHistory("lc-mw-old", sql_store, keep_runs=9).aget_messages()
    assert humans(stored) == ["one", "two"] and len(stored) == 8


class NoteMessage(BaseMessage):
    """A message type of the user's own, which LangChain's loader does not know."""

    type: str = "note"


async def test_every_message_type_round_trips_and_an_unloadable_one_is_refused(
    sql_store: SqlAgentStore,
) -> None:
    history = BoundedChatMessageHistory("lc-types", sql_store)
    messages: list[BaseMessage] = [
        HumanMessage(
            [
                {"type": "text", "text": "look"},
                {"type": "image_url", "image_url": {"url": "https://x/y.png"}},
            ]
        ),
        AIMessage(
            "",
            tool_calls=[{"name": "f", "args": {"a": [1, None]}, "id": "c1", "type": "tool_call"}],
            additional_kwargs={"k": "v"},
        ),
        ToolMessage("é\u2028", tool_call_id="c1", status="error", artifact={"raw": 1}),
        ChatMessage("hello", role="critic"),
        SystemMessage("be brief", id="sys-1"),
        AIMessage(
            "done",
            response_metadata={"model_name": "m"},
            usage_metadata={"input_tokens": 1, "output_tokens": 2, "total_tokens": 3},
        ),
    ]
    await history.aadd_messages(messages)
    assert await history.aget_messages() == messages
    with pytest.raises(InvalidInput, match=r"item 1 \(NoteMessage.*cannot load back"):
        await history.aadd_messages([HumanMessage("x"), NoteMessage("a note")])
    assert len(await history.aget_messages()) == len(messages)


async def test_a_history_of_tool_steps_alone_reads_max_items_and_begins_on_a_call(
    sql_store: SqlAgentStore,
) -> None:
    """No human message starts a run, so the runs bound alone read the whole history: the
    item cap bounds it, and the view never begins on a tool message whose call it left out."""
    history = BoundedChatMessageHistory("steps-only", sql_store, max_items=5)
    steps: list[BaseMessage] = []
    for n in range(10):
        call = {"name": "weather", "args": {"n": n}, "id": f"c{n}", "type": "tool_call"}
        steps += [
            AIMessage("", tool_calls=[call]),
            ToolMessage(f"out {n}", tool_call_id=f"c{n}", name="weather"),
        ]
    await history.aadd_messages(steps)
    loaded = await history.aget_messages()
    assert history.last_rows_read == 5
    assert loaded == steps[-4:] and calls_paired(loaded)


def returns_have_calls(messages: Sequence[BaseMessage]) -> bool:
    made: set[str] = set()
    for m in messages:
        if isinstance(m, AIMessage):
            made |= {str(c["id"]) for c in m.tool_calls}
        elif isinstance(m, ToolMessage) and m.tool_call_id not in made:
            return False
    return True


async def test_a_resume_that_adds_a_human_message_never_sends_a_tool_result_alone(
    sql_store: SqlAgentStore,
) -> None:
    """Found by attack: a human-in-the-loop resume with a human message added
    (`Command(resume=..., update=...)`) stores the tool's result after that message, in a
    later run than its call, and the next model call of a `keep_runs=1` middleware was sent
    the result without its call. It is left out of the view."""
    call = {"name": "weather", "args": {"city": "Paris"}, "id": "call_1", "type": "tool_call"}
    model = ToolingFakeModel(
        messages=iter([AIMessage("", tool_calls=[call]), AIMessage("answer 1"), AIMessage("2")])
    )
    model.seen = []
    agent = create_agent(
        model,
        tools=[weather],
        middleware=[
            HumanInTheLoopMiddleware(interrupt_on={"weather": True}),
            BoundedHistoryMiddleware(sql_store, keep_runs=1),
        ],
        checkpointer=InMemorySaver(),
    )
    config: Any = {"configurable": {"thread_id": "lc-resume"}}
    paused = await agent.ainvoke({"messages": [HumanMessage("weather?")]}, config=config)
    assert paused.get("__interrupt__")
    resume = Command(
        resume={"decisions": [{"type": "approve"}]},
        update={"messages": [HumanMessage("also, hurry")]},
    )
    await agent.ainvoke(resume, config=config)

    await agent.ainvoke({"messages": [HumanMessage("next")]}, config=config)

    last = model.seen[-1]
    assert returns_have_calls(last)
    assert [m.content for m in last if isinstance(m, HumanMessage)] == ["also, hurry", "next"]


async def test_a_capped_page_beginning_on_a_call_is_kept_for_adapters_whose_items_never_lead(
    sql_store: SqlAgentStore,
) -> None:
    """Found by review: the page's first row was never trusted (its predecessor is unread),
    so a LangChain page [calls, outputs] under a cap of 3 was skipped whole; nothing leads a
    LangChain message, so the page is a valid view."""
    calls = [
        {"name": "weather", "args": {}, "id": f"call_{i}", "type": "tool_call"} for i in (1, 2)
    ]
    history = BoundedChatMessageHistory("lc-capped", sql_store, keep_runs=1, max_items=3)
    await history.aadd_messages(
        [
            HumanMessage("PROMPT"),
            AIMessage("", tool_calls=calls),
            ToolMessage("RESULT-1", tool_call_id="call_1"),
            ToolMessage("RESULT-2", tool_call_id="call_2"),
        ]
    )

    view = await history.aget_messages()

    assert [type(m).__name__ for m in view] == ["AIMessage", "ToolMessage", "ToolMessage"]
    assert returns_have_calls(view)


async def test_a_streamed_answers_tool_calls_keep_their_tool_messages_in_the_view(
    sql_store: SqlAgentStore,
) -> None:
    """Found by attack: `RunnableWithMessageHistory.astream` stores the answer as an
    `AIMessageChunk`, whose calls were not read as calls, so its ToolMessage was left out of
    the view as an answer with no call (a prompt every chat model refuses)."""
    call = {"name": "weather", "args": {"city": "Paris"}, "id": "c1", "type": "tool_call"}
    history = BoundedChatMessageHistory("streamed", sql_store)
    await history.aadd_messages(
        [
            HumanMessage("weather?"),
            AIMessageChunk("", tool_calls=[call]),
            ToolMessage("sunny", tool_call_id="c1", name="weather"),
            AIMessage("It is sunny."),
        ]
    )

    view = await history.aget_messages()

    assert [type(m).__name__ for m in view] == [
        "HumanMessage",
        "AIMessageChunk",
        "ToolMessage",
        "AIMessage",
    ]
