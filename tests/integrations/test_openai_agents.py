"""The OpenAI Agents SDK `Session` over the store, against the real SDK (`openai-agents`):
its `Runner` drives an `Agent` whose model is the SDK's `Model` interface with a script."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest
from agents import Agent, RunConfig, Runner, Usage, function_tool
from agents.items import ModelResponse, TResponseInputItem
from agents.memory.session import Session
from agents.models.interface import Model
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
)

from bounded_agents.core.ports import HistorySummary
from bounded_agents.errors import InvalidInput
from bounded_agents.integrations import thread_id_for
from bounded_agents.integrations.openai_agents import BoundedSession
from bounded_agents.store import SqlAgentStore
from tests.conftest import emptied_store
from tests.http.erasure import marker_hits
from tests.integrations.helpers import NotesSummarizer, rows_read


class ScriptedModel(Model):
    """Asks for the `weather` tool on each user turn, then answers with what it returned."""

    def __init__(self) -> None:
        self.inputs: list[list[Any]] = []
        self.calls = 0

    async def get_response(
        self, system_instructions: Any, input: Any, *args: Any, **kwargs: Any
    ) -> ModelResponse:
        items = input if isinstance(input, list) else [{"role": "user", "content": input}]
        self.inputs.append(items)
        last = items[-1]
        if last.get("type") == "function_call_output":
            text = ResponseOutputText(
                type="output_text", text=f"it is {last['output']}", annotations=[]
            )
            out: list[Any] = [
                ResponseOutputMessage(
                    id=f"msg_{self.calls}",
                    type="message",
                    role="assistant",
                    status="completed",
                    content=[text],
                )
            ]
        else:
            self.calls += 1
            out = [
                ResponseFunctionToolCall(
                    type="function_call",
                    id=f"fc_{self.calls}",
                    call_id=f"call_{self.calls}",
                    name="weather",
                    arguments=json.dumps({"city": "Paris"}),
                    status="completed",
                )
            ]
        return ModelResponse(output=out, usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError


@function_tool
def weather(city: str) -> str:
    """The weather in `city`."""
    return f"sunny in {city}"


NO_TRACING = RunConfig(tracing_disabled=True)
REPO = Path(__file__).resolve().parents[2]


def run_items(n: int, marker: str = "") -> list[TResponseInputItem]:
    """One run as the SDK stores it: the question, a tool call, its output, the answer."""
    return [
        {"role": "user", "content": f"question {n} {marker}".strip()},
        {"type": "function_call", "call_id": f"c{n}", "name": "weather", "arguments": "{}"},
        {"type": "function_call_output", "call_id": f"c{n}", "output": f"out {n}"},
        {
            "type": "message",
            "role": "assistant",
            "content": [{"type": "output_text", "text": f"answer {n}", "annotations": []}],
        },
    ]  # type: ignore[list-item]


def assert_calls_paired(items: list[Any]) -> None:
    calls = {i["call_id"] for i in items if i.get("type") == "function_call"}
    outputs = {i["call_id"] for i in items if i.get("type") == "function_call_output"}
    assert calls == outputs


def test_the_session_is_the_sdks_session_protocol(sql_store: SqlAgentStore) -> None:
    assert isinstance(BoundedSession("s", sql_store), Session)


async def test_an_agent_runs_three_turns_with_a_tool_call_against_the_store(
    sql_store: SqlAgentStore,
) -> None:
    model = ScriptedModel()
    agent = Agent(name="helper", instructions="You help.", model=model, tools=[weather])
    session = BoundedSession("thread-a", sql_store, keep_runs=2)
    for question in ("one", "two", "three"):
        with rows_read(sql_store) as reads:
            result = await Runner.run(agent, question, session=session, run_config=NO_TRACING)
        assert result.final_output == "it is sunny in Paris"
    stored = await session.get_items(100)
    assert [i.get("type", "message") for i in stored] == [
        "message",
        "function_call",
        "function_call_output",
        "message",
    ] * 3
    # The third turn's first model call saw the two kept runs (8 items) and its question.
    third = model.inputs[4]
    assert len(third) == 2 * 4 + 1 and third[-1]["content"] == "three"
    # Its one bounded read returned those 8 rows; the SDK's own checks read raw tails only.
    assert reads[0] == ("load_thread_for_turn", 8)
    assert all(name == "list_messages" for name, _ in reads[1:]), reads


async def test_every_item_type_round_trips_verbatim_even_an_unknown_one(
    sql_store: SqlAgentStore,
) -> None:
    items: list[Any] = [
        {"role": "user", "content": [{"type": "input_text", "text": "look"}]},
        {
            "type": "reasoning",
            "id": "rs_1",
            "summary": [{"type": "summary_text", "text": "thinking"}],
            "encrypted_content": "xyz",
        },
        {
            "type": "function_call",
            "id": "fc_1",
            "call_id": "c1",
            "name": "f",
            "arguments": '{"a": [1, 2.5, null]}',
            "status": "completed",
        },
        {
            "type": "function_call_output",
            "call_id": "c1",
            "output": [{"type": "input_text", "text": "é\u2028"}],
        },
        {"type": "handoff_call", "id": "h1", "target": "other agent"},
        {
            "type": "computer_call",
            "id": "cc",
            "call_id": "c2",
            "action": {"type": "click", "x": 1, "y": 2},
            "pending_safety_checks": [],
            "status": "completed",
        },
        {"type": "a_type_from_2030", "payload": {"nested": {"deep": True}}, "order": 7},
        {
            "type": "message",
            "role": "assistant",
            "id": "m1",
            "status": "completed",
            "content": [{"type": "output_text", "text": "done", "annotations": []}],
        },
    ]
    session = BoundedSession("thread-b", sql_store)
    await session.add_items(items)
    assert await session.get_items(len(items)) == items
    assert await session.get_items() == items
    assert await session.get_items(2) == items[-2:]


async def test_a_malformed_item_is_refused_naming_it_and_nothing_is_written(
    sql_store: SqlAgentStore,
) -> None:
    session = BoundedSession("thread-c", sql_store)
    await session.add_items(run_items(0))
    bad: list[Any] = [*run_items(1), {"content": "no role, no type"}]
    with pytest.raises(InvalidInput, match=r"item 4 \(no type"):
        await session.add_items(bad)
    with pytest.raises(InvalidInput, match=r"item 1 \(set"):
        await session.add_items([run_items(2)[0], {1, 2}])  # type: ignore[list-item]
    with pytest.raises(InvalidInput, match=r"item 0 .*not JSON-serializable"):
        await session.add_items([{"type": "x", "when": object()}])  # type: ignore[list-item]
    assert len(await session.get_items(100)) == 4


async def test_a_ten_thousand_item_thread_reads_the_bound_keeps_calls_whole_and_carries_the_summary(
    sql_store: SqlAgentStore,
) -> None:
    session = BoundedSession("thread-d", sql_store, keep_runs=3, summarizer=NotesSummarizer())
    for start in range(0, 2500, 250):
        await session.add_items([i for n in range(start, start + 250) for i in run_items(n)])
    assert len(await session.get_items(10_001)) == 10_000
    with rows_read(sql_store) as reads:
        view = await session.get_items()
    assert (
        reads == [("load_thread_for_turn", 12)] and len(view) == 12
    )  # three runs of four items, one read
    assert_calls_paired(view)
    folded = await session.compact(force=True)
    assert folded is not None and folded.folded == 10_000 - 12 and folded.refused is None
    model = ScriptedModel()
    agent = Agent(name="helper", instructions="You help.", model=model, tools=[weather])
    with rows_read(sql_store) as reads:
        await Runner.run(agent, "next", session=session, run_config=NO_TRACING)
    sent = model.inputs[0]
    assert sent[0]["role"] == "developer" and "answer 2496" in sent[0]["content"]
    assert len(sent) == 1 + 12 + 1  # the summary, three runs, the question
    assert_calls_paired(sent[1:])
    # The run stored its own four items only: never the summary item it was handed.
    assert len(await session.get_items(20_000)) == 10_000 + 4
    # Every read of the turn returned at most the bound (plus the run in flight's items).
    assert reads[0] == ("load_thread_for_turn", 12)
    assert max(n for _, n in reads) <= 3 * 4 + 4 and sum(n for _, n in reads) < 100, reads


async def test_pop_item_and_clear_session_leave_the_text_in_no_table(
    sql_store: SqlAgentStore,
) -> None:
    session = BoundedSession("thread-e", sql_store, keep_runs=1, summarizer=NotesSummarizer())
    await session.add_items(run_items(0, "MARKPOPPED"))
    await session.add_items(run_items(1))
    await session.add_items([{"role": "user", "content": "MARKLAST secret"}])
    await session.compact(force=True)  # the first runs are in the summary now
    assert await marker_hits(sql_store, "MARKPOPPED") != []
    popped = await session.pop_item()
    assert popped == {"role": "user", "content": "MARKLAST secret"}
    assert await marker_hits(sql_store, "MARKLAST") == []
    await session.clear_session()
    assert await marker_hits(sql_store, "MARKPOPPED") == []
    assert await session.get_items() == [] and await session.pop_item() is None
    await session.add_items(run_items(5))  # the session goes on after a clear
    assert len(await session.get_items()) == 4


async def test_concurrent_add_items_keep_each_batch_whole_and_in_order(
    sql_store: SqlAgentStore,
) -> None:
    first, second = BoundedSession("thread-f", sql_store), BoundedSession("thread-f", sql_store)
    batches = [[{"type": "x", "batch": b, "i": i} for i in range(50)] for b in range(8)]
    await asyncio.gather(
        *((first if b % 2 else second).add_items(batch) for b, batch in enumerate(batches))
    )  # type: ignore[arg-type]
    stored = await first.get_items(1000)
    assert len(stored) == 400
    runs = [stored[k : k + 50] for k in range(0, 400, 50)]
    assert sorted(r[0]["batch"] for r in runs) == list(range(8))
    assert all(r == batches[r[0]["batch"]] for r in runs)


async def test_two_processes_adding_to_one_session_lose_nothing_and_keep_each_batch_whole(
    db_url: str,
) -> None:
    async with emptied_store(db_url) as store:
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        procs = [
            await asyncio.create_subprocess_exec(
                *(sys.executable, "-m", "tests.integrations.appender"),
                *(db_url, "two-proc", tag, "25"),
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                env=env,
                cwd=REPO,
            )
            for tag in ("a", "b")
        ]
        for p in procs:
            assert p.stdout is not None and (await p.stdout.readline()).strip() == b"ready"
        for p in procs:
            assert p.stdin is not None
            p.stdin.write(b"go\n")
            await p.stdin.drain()
        for p in procs:
            assert await asyncio.wait_for(p.wait(), 120) == 0
        stored: list[Any] = await BoundedSession("two-proc", store).get_items(10_000)
        assert len(stored) == 2 * 25 * 20
        batches = [stored[k : k + 20] for k in range(0, len(stored), 20)]
        for batch in batches:  # each batch contiguous, its items in order
            assert [i["i"] for i in batch] == list(range(20))
            assert len({(i["tag"], i["batch"]) for i in batch}) == 1
        for tag in ("a", "b"):  # each process's batches in the order it wrote them
            order = [b[0]["batch"] for b in batches if b[0]["tag"] == tag]
            assert order == list(range(25))


async def test_another_actors_session_of_the_same_id_is_a_thread_of_its_own(
    sql_store: SqlAgentStore,
) -> None:
    alice = BoundedSession("shared-id", sql_store, actor_id="alice")
    await alice.add_items(run_items(0, "MARKALICE"))
    bob = BoundedSession("shared-id", sql_store, actor_id="bob")
    assert await bob.get_items() == [] and await bob.get_items(5) == []
    assert await bob.pop_item() is None
    await bob.clear_session()
    await bob.add_items(run_items(1))
    assert not any("MARKALICE" in str(item) for item in await bob.get_items())
    assert len(await alice.get_items()) == 4


async def test_the_runs_context_names_the_actor(sql_store: SqlAgentStore) -> None:
    agent = Agent(name="helper", instructions="You help.", model=ScriptedModel(), tools=[weather])
    session = BoundedSession("ctx-thread", sql_store)  # built for no one in particular
    await Runner.run(
        agent, "hi", session=session, context={"actor_id": "alice"}, run_config=NO_TRACING
    )
    alices = thread_id_for("ctx-thread", actor_id="alice", agent=session.history.agent)
    info = await sql_store.get_thread_info(alices)
    assert info is not None and info.actor_id == "alice"
    await Runner.run(
        agent, "me too", session=session, context={"actor_id": "bob"}, run_config=NO_TRACING
    )
    assert len(await BoundedSession("ctx-thread", sql_store, actor_id="alice").get_items()) == 4
    bobs = await BoundedSession("ctx-thread", sql_store, actor_id="bob").get_items()
    assert len(bobs) == 4 and "hi" not in [i.get("content") for i in bobs]


async def test_nul_and_lone_surrogates_round_trip_verbatim(sql_store: SqlAgentStore) -> None:
    """Model and tool text may hold what no store column can (U+0000, a lone surrogate): the
    item comes back exactly, and the run is not failed for it."""
    items: list[Any] = [
        {"role": "user", "content": "a\x00b \ud800 c"},
        {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c", "output": "\x00\udfff"},
    ]
    session = BoundedSession("odd-text", sql_store)
    await session.add_items(items)
    assert await session.get_items() == items


class AnsweringModel(Model):
    """Answers at once, with a response id: the runner then runs the session's compaction."""

    def __init__(self) -> None:
        self.inputs: list[list[Any]] = []

    async def get_response(
        self, system_instructions: Any, input: Any, *args: Any, **kwargs: Any
    ) -> ModelResponse:
        self.inputs.append(list(input))
        n = len(self.inputs)
        text = ResponseOutputText(type="output_text", text=f"reply {n}", annotations=[])
        message = ResponseOutputMessage(
            id=f"msg_{n}", type="message", role="assistant", status="completed", content=[text]
        )
        return ModelResponse(output=[message], usage=Usage(), response_id=f"resp_{n}")

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError


async def test_the_runner_compacts_the_session_through_the_summarizer(
    sql_store: SqlAgentStore,
) -> None:
    summarizer = NotesSummarizer()
    session = BoundedSession(
        "auto-fold", sql_store, keep_runs=1, summarizer=summarizer, fold_items=4
    )
    model = AnsweringModel()
    agent = Agent(name="helper", instructions="You help.", model=model)
    for n in range(4):
        await Runner.run(agent, f"question {n}", session=session, run_config=NO_TRACING)
    assert summarizer.calls >= 1  # the runner called run_compaction, and it was due
    sent = model.inputs[-1]
    assert sent[0]["role"] == "developer" and "question 0" in sent[0]["content"]
    assert sent[-1]["content"] == "question 3"
    assert len(await session.get_items(100)) == 8  # the raw thread is whole


async def test_a_session_of_tool_steps_alone_reads_max_items_and_begins_on_a_call(
    sql_store: SqlAgentStore,
) -> None:
    """No item starts a run (no user message), so the runs bound alone read the whole session:
    the item cap bounds it, and the view never begins on an output whose call it left out."""
    session = BoundedSession("steps-only", sql_store, max_items=5)
    for n in range(10):
        await session.add_items(
            [
                {"type": "function_call", "call_id": f"c{n}", "name": "f", "arguments": "{}"},
                {"type": "function_call_output", "call_id": f"c{n}", "output": f"out {n}"},
            ]
        )
    items = await session.get_items()
    assert session.last_rows_read == 5
    assert [(i.get("type"), i.get("call_id")) for i in items] == [
        ("function_call", "c8"),
        ("function_call_output", "c8"),
        ("function_call", "c9"),
        ("function_call_output", "c9"),
    ]


def _call(call_id: str) -> dict[str, Any]:
    return {"type": "function_call", "call_id": call_id, "name": "f", "arguments": "{}"}


def _output(call_id: str) -> dict[str, Any]:
    return {"type": "function_call_output", "call_id": call_id, "output": f"out {call_id}"}


def _paired(items: list[Any]) -> bool:
    calls = [i.get("call_id") for i in items if i.get("type") == "function_call"]
    outputs = [i.get("call_id") for i in items if i.get("type") == "function_call_output"]
    return sorted(calls) == sorted(outputs)


async def test_parallel_calls_and_reasoning_are_never_parted_in_a_capped_view(
    sql_store: SqlAgentStore,
) -> None:
    """Found by review: a view cut inside a run began on the second of two parallel calls (the
    first's output then had no call), or on a call without its reasoning item (the Responses
    API refuses both)."""
    parallel = BoundedSession("parallel", sql_store, max_items=7)
    for n in range(4):
        await parallel.add_items(
            [_call(f"a{n}"), _call(f"b{n}"), _output(f"a{n}"), _output(f"b{n}")]
        )
    items = await parallel.get_items()
    assert [i["call_id"] for i in items] == ["a3", "b3", "a3", "b3"] and _paired(items)

    reasoned = BoundedSession("reasoned", sql_store, max_items=5)
    for n in range(4):
        reasoning = {"type": "reasoning", "id": f"rs{n}", "summary": []}
        await reasoned.add_items([reasoning, _call(f"c{n}"), _output(f"c{n}")])
    items = await reasoned.get_items()
    assert [i.get("id") or i["call_id"] for i in items] == ["rs3", "c3", "c3"]


async def test_a_pop_leaves_no_capped_view_beginning_on_an_output(
    sql_store: SqlAgentStore,
) -> None:
    """Found by review: an erased seq is never handed out again, so after a pop the capped
    page held one row fewer than the cap, and the view began on an output."""
    session = BoundedSession("popped", sql_store, max_items=6)
    for n in range(6):
        await session.add_items([_call(f"c{n}"), _output(f"c{n}")])
    await session.add_items([{"role": "assistant", "content": "done"}])
    assert await session.pop_item() is not None
    items = await session.get_items()
    assert items[0]["type"] == "function_call" and _paired(items)


async def test_a_fold_over_parallel_calls_never_ends_with_a_call_open(
    sql_store: SqlAgentStore,
) -> None:
    session = BoundedSession("parallel-fold", sql_store, max_items=8)
    words = " ".join(f"w{j}" for j in range(60))
    for n in range(12):
        await session.add_items(
            [
                {**_call(f"a{n}"), "arguments": json.dumps({"q": words})},
                {**_call(f"b{n}"), "arguments": json.dumps({"q": words})},
                {**_output(f"a{n}"), "output": words},
                {**_output(f"b{n}"), "output": words},
            ]
        )
    chunks: list[list[str]] = []

    async def recorder(messages: list[Any], ctx: Any) -> HistorySummary:
        chunks.append(
            [
                m.content.split()[1] if m.content.startswith("[tool call") else "out"
                for m in messages
            ]
        )
        return HistorySummary(text="\n".join(" ".join(m.content.split()[:4]) for m in messages))

    done = await session.history.compact(recorder, fold_max_tokens=1500)
    assert done.refused is None and len(chunks) > 2
    assert all(len(c) % 4 == 0 for c in chunks), chunks  # whole rounds: two calls, two outputs
    items = await session.get_items()
    assert _paired(items) and items[1]["type"] == "function_call"


def _answers_have_calls(items: list[Any]) -> bool:
    made: set[str] = set()
    for i in items:
        if i.get("type") == "function_call":
            made.add(i["call_id"])
        elif i.get("type") == "function_call_output" and i["call_id"] not in made:
            return False
    return True


class ApprovalModel(Model):
    """Calls `delete_file` when asked to delete, answers "done" after its output, else "sure"."""

    def __init__(self) -> None:
        self.inputs: list[list[Any]] = []

    async def get_response(
        self, system_instructions: Any, input: Any, *args: Any, **kwargs: Any
    ) -> ModelResponse:
        items = input if isinstance(input, list) else [{"role": "user", "content": input}]
        self.inputs.append(list(items))
        last = items[-1]
        if last.get("role") == "user" and "delete" in str(last.get("content")):
            call = ResponseFunctionToolCall(
                type="function_call",
                id="fc_1",
                call_id="call_1",
                name="delete_file",
                arguments=json.dumps({"path": "a"}),
                status="completed",
            )
            return ModelResponse(output=[call], usage=Usage(), response_id=None)
        text = "done" if last.get("type") == "function_call_output" else "sure"
        message = ResponseOutputMessage(
            id=f"msg_{len(self.inputs)}",
            type="message",
            role="assistant",
            status="completed",
            content=[ResponseOutputText(type="output_text", text=text, annotations=[])],
        )
        return ModelResponse(output=[message], usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError


@function_tool(needs_approval=True)
def delete_file(path: str) -> str:
    """Delete `path` (asks for approval first)."""
    return f"deleted {path}"


async def test_a_call_approved_after_the_next_message_never_sends_its_output_alone(
    sql_store: SqlAgentStore,
) -> None:
    """Found by attack: a run paused on a call needing approval, the user's next message
    answered meanwhile, then the call approved (`RunState`): its output is stored in the
    later run, and a view beginning at that run's user item sent the output without its
    call, with the default bounds ten runs later too. The output is left out of the view."""
    model = ApprovalModel()
    agent = Agent(name="files", model=model, tools=[delete_file])
    session = BoundedSession("late", sql_store, keep_runs=1)
    paused = await Runner.run(agent, "delete a", session=session, run_config=NO_TRACING)
    state = paused.to_state()
    await Runner.run(agent, "what's the time?", session=session, run_config=NO_TRACING)
    state.approve(paused.interruptions[0])
    await Runner.run(agent, state, session=session, run_config=NO_TRACING)
    stored = await BoundedSession("late", sql_store, keep_runs=99).get_items()
    assert [i.get("type") or i.get("role") for i in stored][:5] == [
        "user",
        "function_call",
        "user",
        "message",
        "function_call_output",
    ]

    view = await session.get_items()
    await Runner.run(agent, "thanks", session=session, run_config=NO_TRACING)

    assert _answers_have_calls(view)
    assert "what's the time?" in [i.get("content") for i in view]
    assert all(_answers_have_calls(sent) for sent in model.inputs)


async def test_a_capped_view_with_no_clean_start_sends_no_output_without_its_call(
    sql_store: SqlAgentStore,
) -> None:
    """Found by attack: when no place of a capped page leaves every output with its call (two
    parallel calls, a cap of two), the page was kept whole: two outputs and no call."""
    session = BoundedSession("no-clean", sql_store, keep_runs=1, max_items=2)
    await session.add_items([{"role": "user", "content": "look up a and b"}])  # type: ignore[list-item]
    await session.add_items([_call("a"), _call("b"), _output("a"), _output("b")])  # type: ignore[list-item]

    view = await session.get_items()

    assert view == []
    assert _answers_have_calls(await BoundedSession("no-clean", sql_store).get_items())


async def test_a_capped_view_never_sends_a_call_without_its_reasoning_item(
    sql_store: SqlAgentStore,
) -> None:
    """Found by attack: with no clean place in the page, the page was kept whole and began on
    a call whose reasoning item the cap left out (the Responses API refuses it on every turn).
    The page is skipped whole, and the next fold takes it."""
    session = BoundedSession("reasoned", sql_store, keep_runs=1, max_items=2)
    reasoning = {"type": "reasoning", "id": "rs_1", "summary": []}
    await session.add_items([{"role": "user", "content": "q"}, reasoning, _call("a"), _output("a")])  # type: ignore[list-item]

    assert await session.get_items() == []
    wider = await BoundedSession("reasoned", sql_store, keep_runs=1, max_items=3).get_items()
    assert [i.get("type") for i in wider] == ["reasoning", "function_call", "function_call_output"]


def _said(text: str, role: str = "user") -> dict[str, Any]:
    if role == "user":
        return {"role": "user", "content": text}
    content = [{"type": "output_text", "text": text, "annotations": []}]
    return {"type": "message", "role": "assistant", "content": content}


async def test_a_page_skipped_whole_is_folded_by_the_next_compact(sql_store: SqlAgentStore) -> None:
    """Found by review: a page with no clean start was skipped from the view, and the fold
    took its boundary from the view's first entry, so with none it folded nothing: the page
    was in neither the view nor the summary."""
    notes = NotesSummarizer()
    session = BoundedSession("skipped", sql_store, keep_runs=1, max_items=2, summarizer=notes)
    reasoning = {"type": "reasoning", "id": "rs_1", "summary": []}
    await session.add_items([_said("remember PLUM-7"), reasoning, _call("a"), _call("b")])  # type: ignore[list-item]
    await session.add_items([_output("a"), _output("b")])  # type: ignore[list-item]
    assert await session.get_items() == []

    done = await session.history.compact(notes)

    assert done.summary is not None and "PLUM-7" in done.summary.text
    assert done.folded == 6


async def test_an_output_older_than_its_call_never_costs_the_view_its_runs_prompt(
    sql_store: SqlAgentStore,
) -> None:
    """Found by review: an output dropped from the view (its call older than it) still made
    every place before it unclean, so a capped view began after the user's prompt of the run
    it sits in. A run's start is always a place to begin once such outputs are dropped."""
    session = BoundedSession("prompt-kept", sql_store, keep_runs=2, max_items=5)
    await session.add_items([_said("delete a"), _call("c1")])  # type: ignore[list-item]
    await session.add_items([_said("PROMPT-2 what's the time?"), _said("sure", "assistant")])  # type: ignore[list-item]
    await session.add_items([_output("c1"), _said("done", "assistant")])  # type: ignore[list-item]

    view = await session.get_items()

    assert view[0] == _said("PROMPT-2 what's the time?")
    assert _answers_have_calls(view) and len(view) == 3


def program_run(n: int) -> list[Any]:
    """A run with programmatic tool calling: the SDK pairs `program` with `program_output`
    by `call_id`, as a function call with its output."""
    return [
        {"role": "user", "content": f"question {n}"},
        {"type": "program", "id": f"pg{n}", "call_id": f"pc{n}", "code": "tools.x()"},
        {"type": "program_output", "id": f"po{n}", "call_id": f"pc{n}", "result": f"{n * 6}"},
        {"type": "message", "role": "assistant", "content": f"answer {n}"},
    ]


async def test_a_programs_output_stays_in_the_view_with_its_program(
    sql_store: SqlAgentStore,
) -> None:
    """Found by attack: only `*_call` items opened a call, so every `program_output` was left
    out of the view as an answer without a call, and the model lost the program's result."""
    session = BoundedSession("programs", sql_store, keep_runs=2)
    for n in range(4):
        await session.add_items(program_run(n))

    view = await session.get_items()

    assert [i.get("type", "message") for i in view] == [
        "message",
        "program",
        "program_output",
        "message",
    ] * 2
    assert [i["result"] for i in view if i.get("type") == "program_output"] == ["12", "18"]


async def test_an_item_holding_an_integer_past_pythons_digit_limit_is_refused_in_one_line(
    sql_store: SqlAgentStore,
) -> None:
    """Found by attack: the error's label printed the item, and Python refuses to print an
    int of more than 4,300 digits: a raw ValueError instead of `InvalidInput`."""
    session = BoundedSession("huge-int", sql_store)
    with pytest.raises(InvalidInput, match=r"^item 0 \(function_call_output: \.\.\.\) is not JSON"):
        await session.add_items(
            [{"type": "function_call_output", "call_id": "c", "output": {"n": 10**5000}}]
        )  # type: ignore[list-item]
    assert await session.get_items() == []
