"""The Pydantic AI message store over the store, against the real `pydantic_ai`: an `Agent`
with a `FunctionModel` and a tool."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Sequence
from typing import Any

import pytest
from pydantic_ai import (
    Agent,
    AgentRunResult,
    BinaryContent,
    DeferredToolRequests,
    DeferredToolResults,
)
from pydantic_ai.capabilities import ProcessHistory
from pydantic_ai.messages import (
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    SystemPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.models.test import TestModel

from bounded_agents.errors import InvalidInput
from bounded_agents.integrations.pydantic_ai import (
    BoundedMessageStore,
    _dumped,
    _item_keys,
    history_processor,
    project_message,
    returns_as_text,
)
from bounded_agents.store import SqlAgentStore
from tests.http.erasure import marker_hits
from tests.integrations.helpers import NotesSummarizer, rows_read


def weather_agent(seen: list[list[ModelMessage]]) -> Agent[None, str]:
    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        seen.append(list(messages))
        last = messages[-1].parts[-1]
        if isinstance(last, ToolReturnPart):
            return ModelResponse(parts=[TextPart(f"it is {last.content}")])
        return ModelResponse(parts=[ToolCallPart("weather", {"city": "Paris"})])

    agent: Agent[None, str] = Agent(FunctionModel(respond), instructions="You help.")

    @agent.tool_plain
    def weather(city: str) -> str:
        return f"sunny in {city}"

    return agent


def run_messages(n: int, marker: str = "") -> list[ModelMessage]:
    return [
        ModelRequest(parts=[UserPromptPart(f"question {n} {marker}".strip())]),
        ModelResponse(parts=[ToolCallPart("weather", {"n": n}, tool_call_id=f"c{n}")]),
        ModelRequest(parts=[ToolReturnPart("weather", f"out {n}", tool_call_id=f"c{n}")]),
        ModelResponse(parts=[TextPart(f"answer {n}")]),
    ]


def calls_paired(messages: list[ModelMessage]) -> bool:
    calls = {p.tool_call_id for m in messages for p in m.parts if isinstance(p, ToolCallPart)}
    returns = {p.tool_call_id for m in messages for p in m.parts if isinstance(p, ToolReturnPart)}
    return calls == returns


async def test_an_agent_runs_three_turns_with_a_tool_call_and_saves_each_run_once(
    sql_store: SqlAgentStore,
) -> None:
    seen: list[list[ModelMessage]] = []
    agent = weather_agent(seen)
    history = BoundedMessageStore(sql_store, keep_runs=2)
    for question in ("one", "two", "three"):
        with rows_read(sql_store) as reads:
            messages = await history.load("conv-a")
        result = await agent.run(question, message_history=messages)
        assert result.output == "it is sunny in Paris"
        assert await history.save(result.new_messages(), conversation_id="conv-a") == 4
        assert await history.save(result.new_messages(), conversation_id="conv-a") == 0
    assert reads == [("load_thread_for_turn", 8)]
    # The third run's first model call: two kept runs and its own request.
    assert len(seen[4]) == 2 * 4 + 1 and calls_paired(seen[4][:-1])
    # Messages come back exactly as Pydantic AI made them.
    assert await history.load("conv-a") == [*messages[4:], *result.new_messages()]


async def test_a_malformed_message_is_refused_naming_it_and_nothing_is_written(
    sql_store: SqlAgentStore,
) -> None:
    history = BoundedMessageStore(sql_store)
    bad = [*run_messages(0), {"kind": "request"}]
    with pytest.raises(InvalidInput, match=r"item 4 \(request.*not a ModelRequest"):
        await history.save(bad, conversation_id="conv-b")  # type: ignore[arg-type]
    with pytest.raises(InvalidInput, match="needs a conversation_id"):
        await history.save(run_messages(0))
    assert await history.load("conv-b") == []


async def test_a_ten_thousand_message_thread_loads_the_bound_and_carries_the_summary(
    sql_store: SqlAgentStore,
) -> None:
    history = BoundedMessageStore(sql_store, keep_runs=3, summarizer=NotesSummarizer())
    for start in range(0, 2500, 250):
        batch = [m for n in range(start, start + 250) for m in run_messages(n)]
        await history.save(batch, conversation_id="conv-c")
    with rows_read(sql_store) as reads:
        loaded = await history.load("conv-c")
    # the bound, and the thread's first request (its system prompts, had the agent any): 13
    opening = [("load_thread_for_turn", 12), ("messages_after", 1)]
    assert reads == opening and len(loaded) == 12 and calls_paired(loaded)
    folded = await history.compact("conv-c")
    assert folded is not None and folded.folded == 10_000 - 12
    seen: list[list[ModelMessage]] = []
    with rows_read(sql_store) as reads:
        messages = await history.load("conv-c")
    result = await weather_agent(seen).run("next", message_history=messages)
    assert reads == opening
    lead = seen[0][0]
    assert isinstance(lead, ModelRequest) and isinstance(lead.parts[0], SystemPromptPart)
    assert "answer 2496" in lead.parts[0].content
    # Pydantic AI merges consecutive requests: the summary rides on the first kept run's.
    assert isinstance(lead.parts[1], UserPromptPart) and lead.parts[1].content == "question 2497"
    assert len(seen[0]) == 12 + 1 and calls_paired(seen[0][:-1])
    assert await history.save(result.new_messages(), conversation_id="conv-c") == 4


async def test_pop_and_clear_leave_the_text_in_no_table(sql_store: SqlAgentStore) -> None:
    history = BoundedMessageStore(sql_store, keep_runs=1, summarizer=NotesSummarizer())
    await history.save(run_messages(0, "MARKFOLDED"), conversation_id="conv-d")
    await history.save(run_messages(1), conversation_id="conv-d")
    await history.save([ModelRequest(parts=[UserPromptPart("MARKLAST")])], conversation_id="conv-d")
    await history.compact("conv-d")
    assert await marker_hits(sql_store, "MARKFOLDED") != []
    popped = await history.pop("conv-d")
    assert isinstance(popped, ModelRequest) and await marker_hits(sql_store, "MARKLAST") == []
    await history.clear("conv-d")
    assert await marker_hits(sql_store, "MARKFOLDED") == []
    assert await history.load("conv-d") == []


def test_the_history_processor_keeps_the_summary_and_the_newest_runs_whole() -> None:
    summary = ModelRequest(parts=[SystemPromptPart("notes")])
    runs = [run_messages(n) for n in range(5)]
    messages = [summary, *(m for run in runs for m in run)]
    kept = history_processor(2)(messages)
    assert kept == [summary, *runs[3], *runs[4]]
    assert history_processor(9)(messages) == messages


async def test_the_history_processor_bounds_an_agents_run() -> None:
    seen: list[list[ModelMessage]] = []

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        seen.append(list(messages))
        return ModelResponse(parts=[TextPart("ok")])

    bound = ProcessHistory(history_processor(2))
    agent: Agent[None, str] = Agent(FunctionModel(respond), capabilities=[bound])
    summary = ModelRequest(parts=[SystemPromptPart("notes")])
    history = [summary, *(m for n in range(6) for m in run_messages(n))]
    await agent.run("next", message_history=history)
    sent = seen[0]
    assert isinstance(sent[0], ModelRequest) and sent[0].parts[0] == summary.parts[0]
    prompts = [p.content for m in sent for p in m.parts if isinstance(p, UserPromptPart)]
    assert prompts == ["question 5", "next"]  # the run in flight counts as one of the two
    assert calls_paired(sent)


async def test_pydantic_ai_agents_system_prompt_is_still_sent_once_its_first_run_left_the_view(
    sql_store: SqlAgentStore,
) -> None:
    """Pydantic AI adds an agent's `system_prompt` only to a run with an EMPTY history: the
    first run's request holds it. `load` keeps it once that run is older than `keep_runs`
    (as `history_processor` does in flight). Found by attack: from the fourth run on (keep 2)
    the model was sent no system prompt."""
    seen: list[list[ModelMessage]] = []

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        seen.append(list(messages))
        return ModelResponse(parts=[TextPart("d'accord")])

    agent: Agent[None, str] = Agent(
        FunctionModel(respond), system_prompt="You are Bob. Always answer in French."
    )
    history = BoundedMessageStore(sql_store, keep_runs=2)
    for question in ("one", "two", "three", "four", "five"):
        result = await agent.run(question, message_history=await history.load("conv-1"))
        await history.save(result.new_messages(), conversation_id="conv-1")
        sent = [
            p.content
            for m in seen[-1]
            if isinstance(m, ModelRequest)
            for p in m.parts
            if isinstance(p, SystemPromptPart)
        ]
        assert "You are Bob. Always answer in French." in sent, (question, sent)


async def test_a_run_saved_in_parts_keeps_every_part_and_a_second_save_stores_nothing(
    sql_store: SqlAgentStore,
) -> None:
    """Saved after each node of `agent.iter` (so a crash loses nothing): found by attack, the
    parts after the second that began with a message of the same role were dropped, silently
    (save returned 0): the tool return and the answer were lost."""

    def two_rounds(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        returns = sum(isinstance(p, ToolReturnPart) for m in messages for p in m.parts)
        if returns >= 2:
            return ModelResponse(parts=[TextPart("sunny in both")])
        city = ["Paris", "Lyon"][returns]
        return ModelResponse(parts=[ToolCallPart("weather", {"city": city})])

    agent: Agent[None, str] = Agent(FunctionModel(two_rounds), instructions="You help.")

    @agent.tool_plain
    def weather(city: str) -> str:
        return f"sunny in {city}"

    history = BoundedMessageStore(sql_store)
    saved: list[int] = []
    async with agent.iter("Weather in Paris and Lyon?") as run:
        done = 0
        async for _node in run:
            new = run.new_messages()
            if len(new) > done:
                saved.append(await history.save(new[done:], conversation_id="parts"))
                done = len(new)
    whole = run.new_messages()

    assert sum(saved) == len(whole) == 6 and 0 not in saved
    loaded = await history.load("parts")
    assert [m.kind for m in loaded] == [m.kind for m in whole] and calls_paired(loaded)
    assert await history.save(whole, conversation_id="parts") == 0  # the whole run again
    assert await history.save(whole[2:4], conversation_id="parts") == 0  # a part again
    assert len(await history.load("parts")) == 6

    # Found by review: a batch that starts as a stored one and goes on (a part whose save
    # committed but whose reply was lost, retried with the next; or the whole run after only
    # some parts) lost what it added. It stores exactly what it adds.
    other = BoundedMessageStore(sql_store)
    assert await other.save(whole[:2], conversation_id="retried") == 2
    assert await other.save(whole[:4], conversation_id="retried") == 2  # retried with the next
    assert await other.save(whole, conversation_id="retried") == 2  # the whole run after parts
    assert await other.save(whole, conversation_id="retried") == 0
    again = await other.load("retried")
    assert [m.kind for m in again] == [m.kind for m in whole] and calls_paired(again)


async def test_overlapping_saves_of_one_run_at_once_store_each_message_once(
    sql_store: SqlAgentStore,
) -> None:
    """Parts, a part retried with the next, and the whole run, all saved at once on one
    store object. Found by attack: keyed by each batch's first message, 24 of 30 such rounds
    stored messages twice. Each message now has its own key."""
    history = BoundedMessageStore(sql_store, keep_runs=100)
    whole = run_messages(0)
    saves = [whole[:2], whole[2:], whole[:3], whole, whole[1:], whole]
    results = await asyncio.gather(*(history.save(b, conversation_id="at-once") for b in saves))

    # What is stored, read raw: the saves race, so the order may be the saves' (a later part
    # can land first), and `load` leaves out a tool return stored before its call.
    stored = await history.thread("at-once").newest(100)
    dumped = sorted(json.dumps(e.item, sort_keys=True) for e in stored)
    expected = ModelMessagesTypeAdapter.dump_python(whole, mode="json")
    assert sum(results) == len(whole) == len(stored)
    assert dumped == sorted(json.dumps(m, sort_keys=True) for m in expected)


async def test_a_conversation_of_tool_steps_alone_reads_max_items_and_begins_on_a_call(
    sql_store: SqlAgentStore,
) -> None:
    """No request carries a user prompt, so the runs bound alone read the whole conversation:
    the item cap bounds it, and `load` never begins on a tool return whose call it left out."""
    history = BoundedMessageStore(sql_store, max_items=5)
    steps: list[ModelMessage] = []
    for n in range(10):
        steps += [
            ModelResponse(parts=[ToolCallPart("f", {"n": n}, tool_call_id=f"c{n}")]),
            ModelRequest(parts=[ToolReturnPart("f", f"out {n}", tool_call_id=f"c{n}")]),
        ]
    await history.save(steps, conversation_id="steps-only")
    loaded = await history.load("steps-only")
    assert history.last_rows_read == 6  # the view's 5, and the opening request's system prompts
    assert [type(m).__name__ for m in loaded] == [
        "ModelResponse",
        "ModelRequest",
        "ModelResponse",
        "ModelRequest",
    ]
    first = loaded[0]
    assert isinstance(first, ModelResponse) and isinstance(first.parts[0], ToolCallPart)
    assert first.parts[0].tool_call_id == "c8"


def approval_agent(
    seen: list[list[ModelMessage]] | None = None, capabilities: Sequence[Any] = ()
) -> Agent[None, str | DeferredToolRequests]:
    """An agent whose tool needs approval: its first run pauses on the call, and the run that
    resumes it with the user's next prompt stores ONE request holding the tool's return and
    that prompt (what Pydantic AI builds for `deferred_tool_results` with a `user_prompt`).
    What the model is sent goes to `seen`."""

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if seen is not None:
            seen.append(list(messages))
        last = messages[-1].parts
        if any(isinstance(p, UserPromptPart) and p.content == "delete a" for p in last):
            call = ToolCallPart("delete_file", {"path": "a"}, tool_call_id="d1")
            return ModelResponse(parts=[call])
        return ModelResponse(parts=[TextPart("done")])

    agent: Agent[None, str | DeferredToolRequests] = Agent(
        FunctionModel(respond),
        output_type=[str, DeferredToolRequests],
        capabilities=list(capabilities),
    )

    @agent.tool_plain(requires_approval=True)
    def delete_file(path: str) -> str:
        return f"deleted {path}"

    return agent


async def pause_then_resume(
    agent: Agent[None, str | DeferredToolRequests], history: BoundedMessageStore, cid: str
) -> AgentRunResult[str | DeferredToolRequests]:
    """The approval agent's two runs, each loaded from and saved to `history`: the first
    pauses on its call, the second approves it with the user's next prompt."""
    first = await agent.run("delete a", message_history=await history.load(cid))
    assert isinstance(first.output, DeferredToolRequests)
    await history.save(first.new_messages(), conversation_id=cid)
    second = await agent.run(
        "and tell me when done",
        message_history=await history.load(cid),
        deferred_tool_results=DeferredToolResults(approvals={"d1": True}),
    )
    await history.save(second.new_messages(), conversation_id=cid)
    return second


def returns_have_calls(messages: list[ModelMessage]) -> bool:
    """Every tool return answers a call sent before it (a provider refuses one that does not)."""
    calls: set[str] = set()
    for m in messages:
        for p in m.parts:
            if isinstance(p, ToolCallPart):
                calls.add(p.tool_call_id)
            elif isinstance(p, ToolReturnPart) and p.tool_call_id not in calls:
                return False
    return True


async def test_a_resumed_run_whose_request_holds_a_return_and_a_prompt_never_loads_an_orphan(
    sql_store: SqlAgentStore,
) -> None:
    """Found by review: the request resuming a paused call with the user's next prompt starts
    a run, so a view of the newest run began on it and left out the call its return answers.
    The return is now shown as text in that request (the call is in the older run), and the
    user's prompt stays."""
    agent = approval_agent()
    history = BoundedMessageStore(sql_store, keep_runs=1)
    second = await pause_then_resume(agent, history, "approve")
    loaded = await history.load("approve")
    assert returns_have_calls(loaded)
    text = [p.content for m in loaded for p in m.parts if isinstance(p, UserPromptPart)]
    assert "and tell me when done" in text
    assert any("deleted a" in str(t) for t in text)  # the return's content, kept as text
    in_flight = history_processor(1)(second.all_messages())
    assert returns_have_calls(in_flight)
    assert "and tell me when done" in [
        p.content for m in in_flight for p in m.parts if isinstance(p, UserPromptPart)
    ]
    third = await agent.run("thanks", message_history=loaded)  # the agent takes the history
    assert third.output == "done"


async def test_a_capped_view_keeps_a_resumed_runs_prompt(sql_store: SqlAgentStore) -> None:
    """Found by attack: with the newest run fitting the cap, the view skipped the request
    resuming a paused call with the user's next prompt (it answered a call the page did not
    hold), so the model lost the prompt and the tool's result. Its return is sent as text."""
    history = BoundedMessageStore(sql_store, keep_runs=2, max_items=3)
    await pause_then_resume(approval_agent(), history, "capped")

    loaded = await history.load("capped")

    assert returns_have_calls(loaded)
    text = [str(p.content) for m in loaded for p in m.parts if isinstance(p, UserPromptPart)]
    returned = [p.content for m in loaded for p in m.parts if isinstance(p, ToolReturnPart)]
    assert "and tell me when done" in text
    assert returned == ["deleted a"]  # with its call: the page's first row is that response


async def test_the_history_processor_never_rewrites_a_resumed_runs_stored_return(
    sql_store: SqlAgentStore,
) -> None:
    """Found by review: Pydantic AI stores what its history processors return, so a
    processor that sent a resumed run's return as text replaced the return in
    `new_messages()`: the stored call had no return, and the model was later told the
    deletion was interrupted. The processor keeps the call's response instead."""
    seen: list[list[ModelMessage]] = []
    agent = approval_agent(seen, [ProcessHistory(history_processor(1))])
    history = BoundedMessageStore(sql_store, keep_runs=5)
    await pause_then_resume(agent, history, "kept")

    stored = await history.load("kept")
    returns = [p for m in stored for p in m.parts if isinstance(p, ToolReturnPart)]
    assert [(p.tool_call_id, p.content) for p in returns] == [("d1", "deleted a")]
    assert returns_have_calls(seen[-1])  # the model saw the call with its return


def test_a_return_sent_as_text_keeps_its_files_and_its_time() -> None:
    """Found by review: the text alone lost a tool's images, and a fresh timestamp made two
    loads of one history unequal."""
    image = BinaryContent(data=b"\x89PNG", media_type="image/png")
    orphan = ModelRequest(
        parts=[
            ToolReturnPart("snap", image, tool_call_id="gone"),
            UserPromptPart("what is in it?"),
        ]
    )

    once = returns_as_text([orphan])
    again = returns_as_text([orphan])

    assert once == again
    part = once[0].parts[0]
    assert isinstance(part, UserPromptPart) and image in list(part.content)
    assert part.timestamp == orphan.parts[0].timestamp


def test_the_history_processor_keeps_every_response_whose_call_a_kept_request_answers() -> None:
    """Found by review: a request answering calls of two earlier responses kept the newer
    response only, and sent the older call's return alone."""
    messages: list[ModelMessage] = [
        ModelRequest(parts=[UserPromptPart("first")]),
        ModelResponse(parts=[ToolCallPart("f", {}, tool_call_id="a")]),
        ModelRequest(parts=[UserPromptPart("second")]),
        ModelResponse(parts=[ToolCallPart("f", {}, tool_call_id="b")]),
        ModelRequest(
            parts=[
                ToolReturnPart("f", "A", tool_call_id="a"),
                ToolReturnPart("f", "B", tool_call_id="b"),
                UserPromptPart("third"),
            ]
        ),
    ]

    kept = history_processor(1)(messages)

    assert kept == messages[1:]
    assert returns_have_calls(kept)


async def two_runs() -> tuple[AgentRunResult[str], AgentRunResult[str]]:
    """Two `TestModel` runs of one conversation: Pydantic AI gives each its own `run_id`."""
    agent: Agent[None, str] = Agent(TestModel(custom_output_text="ok"))
    first = await agent.run("one")
    second = await agent.run("two", message_history=first.all_messages())
    assert {m.run_id for m in first.new_messages()} != {m.run_id for m in second.new_messages()}
    return first, second


async def test_two_runs_saved_in_one_batch_are_stored_once_whatever_is_retried(
    sql_store: SqlAgentStore,
) -> None:
    """Found by attack: every message of a batch was keyed by the batch's first `run_id`, so
    the second run's messages saved with the first (`r1 + r2`, or `all_messages()`) were
    stored again when the second run's save was retried (4 stored, then 2 more)."""
    first, second = await two_runs()
    history = BoundedMessageStore(sql_store)
    both = first.new_messages() + second.new_messages()

    assert await history.save(both, conversation_id="batch") == 4
    assert await history.save(second.new_messages(), conversation_id="batch") == 0
    assert await history.save(first.new_messages(), conversation_id="batch") == 0
    assert await history.save(second.all_messages(), conversation_id="batch") == 0
    assert len(await history.thread("batch").newest(100)) == 4

    # `all_messages()` first, then the newest run's `new_messages()`: the same.
    assert await history.save(second.all_messages(), conversation_id="whole") == 4
    assert await history.save(second.new_messages(), conversation_id="whole") == 0
    assert len(await history.thread("whole").newest(100)) == 4


def _key_before(run_id: str | None, text: str) -> str:
    """The key every message of a batch had before messages were keyed by their own run:
    the batch's first run id (none: empty) and the message's JSON."""
    namespace = uuid.UUID("0f3c7a52-58a4-4ec4-8f0e-2c7e93a1d6b4")
    return str(uuid.uuid5(namespace, f"{run_id or ''}\x1f{text}"))


async def test_a_batch_of_one_run_keeps_its_keys_and_a_retry_after_the_upgrade_stores_nothing(
    sql_store: SqlAgentStore,
) -> None:
    """Keys are what a retry is matched by: a run stored under the old keys must not be
    stored again once messages are keyed by their own run. A batch of one run (a message
    without a run id in it included) keys as before; in a batch of two, each message keys as
    its own run's batch does (before, the second run's took the first's id)."""
    first, second = await two_runs()
    run = first.new_messages()
    loose = ModelRequest(parts=[UserPromptPart("no run id")])  # a message built by hand
    assert loose.run_id is None
    one_run = [*run, loose]
    texts = [_dumped(m, i) for i, m in enumerate(one_run)]
    old = [_key_before(run[0].run_id, t) for t in texts]
    assert _item_keys(one_run, texts) == old
    assert _item_keys([loose], texts[-1:]) == [_key_before(None, texts[-1])]

    both = first.new_messages() + second.new_messages()
    both_texts = [_dumped(m, i) for i, m in enumerate(both)]
    assert _item_keys(both, both_texts) == (
        _item_keys(both[:2], both_texts[:2]) + _item_keys(both[2:], both_texts[2:])
    )

    # Stored before the upgrade, under the old keys; retried after it: nothing stored again.
    history = BoundedMessageStore(sql_store)
    batch = [
        (project_message(m, i), t) for i, (m, t) in enumerate(zip(one_run, texts, strict=True))
    ]
    assert len(await history.thread("upgraded").append(batch, keys=old)) == 3
    assert await history.save(one_run, conversation_id="upgraded") == 0
    assert await history.save(run, conversation_id="upgraded") == 0
