"""Each phase of a turn called alone: its values built here, no `AgentLoop`.

A phase is a function of `(deps, turn, ...)`: the loop's collaborators as one frozen value and
the run's state as another. These tests build both directly over the in-memory store and
ledger, an inline (non-durable) context and a scripted model, and check what each phase does:
the load's selection and fold range, a fold's summarizer calls and stored summary, the answer's
model and tool steps, the finish's stored answer and ended run, and the preview.
"""

from __future__ import annotations

import ast
import inspect
import uuid
from pathlib import Path
from typing import Any

from bounded_agents.core.history import window_history
from bounded_agents.core.loop import AgentLoop
from bounded_agents.core.messages import ChatMessage, Message, ToolCall
from bounded_agents.core.ports import (
    HistoryPolicy,
    HistoryPolicyContext,
    HistorySummary,
    RunRequest,
    Usage,
)
from bounded_agents.core.report import RunReport
from bounded_agents.core.turn.answer import answer
from bounded_agents.core.turn.deps import TurnDeps, TurnLimits
from bounded_agents.core.turn.finish import store_answer
from bounded_agents.core.turn.fold import fold, rolling_prompt
from bounded_agents.core.turn.ledger import TurnLedger
from bounded_agents.core.turn.load import load_thread, persist
from bounded_agents.core.turn.preview import preview
from bounded_agents.core.turn.public import AgentDefinition
from bounded_agents.core.turn.state import Turn
from bounded_agents.core.turn.store import TurnStore
from bounded_agents.durable.context import InlineContext
from bounded_agents.durable.inline import InlineRuntime
from bounded_agents.store.ledger import MemoryLedger
from bounded_agents.store.memory import MemoryStore
from bounded_agents.testing import FunctionTool, ScriptedProvider, reply


def _deps(store: MemoryStore, model: ScriptedProvider, definition: AgentDefinition) -> TurnDeps:
    from datetime import UTC, datetime

    return TurnDeps(
        store=TurnStore(store),
        ledger=TurnLedger(MemoryLedger()),
        runtime=InlineRuntime(),
        model=model,
        agents={definition.name: definition},
        limits=TurnLimits(
            token_quota=None, fold_calls_per_turn=2, fold_timeout=5.0, cache_ttl_seconds=0.0
        ),
        clock=lambda: datetime.now(UTC),
    )


def _turn(definition: AgentDefinition, thread_id: str, content: str = "q") -> Turn:
    run_id = str(uuid.uuid4())
    request = RunRequest(
        run_id=run_id, thread_id=thread_id, actor_id="alice", agent=definition.name, content=content
    )
    return Turn(
        request=request,
        definition=definition,
        ctx=InlineContext(run_id),
        report=RunReport(run_id=run_id),
        hctx=HistoryPolicyContext(
            thread_id=thread_id, agent=definition.name, actor_id="alice", run_id=run_id
        ),
    )


def _agent(policy: HistoryPolicy, **tools: FunctionTool) -> AgentDefinition:
    return AgentDefinition(name="helper", system_prompt="You help.", policy=policy, tools=tools)


async def _thread(store: MemoryStore, n: int) -> str:
    thread = await store.create_thread(actor_id="alice", agent="helper")
    await store.append_messages(
        thread.id,
        [
            Message(role="user" if i % 2 == 0 else "assistant", content=f"m{i}")
            for i in range(1, n + 1)
        ],
    )
    return thread.id


class Summaries:
    """A summarizer that states what it was given, counting its calls."""

    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    async def __call__(self, messages: list[Message], ctx: HistoryPolicyContext) -> HistorySummary:
        self.calls.append([m.content for m in messages])
        previous = ctx.summary.text + " " if ctx.summary is not None else ""
        return HistorySummary(
            text=previous + " ".join(m.content for m in messages),
            usage=Usage(prompt_tokens=7, completion_tokens=3),
        )


async def test_the_load_phase_selects_the_window_and_names_the_fold_it_owes() -> None:
    store = MemoryStore()
    summaries = Summaries()
    definition = _agent(window_history(max_messages=4, summarize=summaries))
    deps = _deps(store, ScriptedProvider(), definition)
    tid = await _thread(store, 9)
    turn = _turn(definition, tid)

    recorded: dict[str, Any] = await load_thread(deps, turn, None)

    assert recorded["keep_refs"] == [6, 7, 8, 9]  # by seq: the rows are the copy
    assert [m.content for m in turn.kept or []] == ["m6", "m7", "m8", "m9"]
    assert recorded["fold"]["through"] == 5  # every message the window dropped
    assert turn.report.rows_read == 9
    assert summaries.calls == []  # the load only says what is owed; the fold makes it


async def test_the_persist_phase_stores_once_per_run_and_role() -> None:
    store = MemoryStore()
    definition = _agent(window_history(max_messages=4))
    deps = _deps(store, ScriptedProvider(), definition)
    tid = await _thread(store, 2)
    turn = _turn(definition, tid)
    user = Message(role="user", content="q", run_id=turn.request.run_id)

    assert await persist(deps, turn, user, tx=None) == {"seq": 3}
    assert await persist(deps, turn, user, tx=None) == {"seq": None}  # a replay's repeat

    thread = await store.get_thread(tid)
    assert thread is not None and [m.content for m in thread.messages] == ["m1", "m2", "q"]


async def _nine_messages_owing_a_fold() -> tuple[
    MemoryStore, Summaries, TurnDeps, Turn, dict[str, Any]
]:
    """A thread of nine messages under a window of four that summarizes, its load made: the
    fold of m1..m5 is owed and not made yet."""
    store = MemoryStore()
    summaries = Summaries()
    definition = _agent(window_history(max_messages=4, summarize=summaries))
    deps = _deps(store, ScriptedProvider(), definition)
    turn = _turn(definition, await _thread(store, 9))
    recorded: dict[str, Any] = await load_thread(deps, turn, None)
    return store, summaries, deps, turn, recorded


async def test_the_fold_phase_summarizes_the_owed_range_and_stores_it() -> None:
    store, summaries, deps, turn, recorded = await _nine_messages_owing_a_fold()
    tid = turn.request.thread_id

    summary, folds = await fold(deps, turn, summaries, None, recorded["fold"])

    assert summary is not None and summary.covers_through_seq == 5
    assert summaries.calls == [["m1", "m2", "m3", "m4", "m5"]]
    assert folds == 1
    stored = await store.latest_summary(tid)
    assert stored is not None and stored.text == "m1 m2 m3 m4 m5"
    assert turn.report.summary is not None and turn.report.summary.made
    assert [row.purpose for row in turn.report.ledger] == ["history_summary"]


async def test_the_prompt_phase_puts_the_summary_between_the_system_prompt_and_the_window() -> None:
    _, _, deps, turn, recorded = await _nine_messages_owing_a_fold()

    prompt = await rolling_prompt(deps, turn, recorded, user_seq=None)

    assert prompt[0] == ChatMessage(role="system", content="You help.")
    assert prompt[1].role == "system" and "m1 m2 m3 m4 m5" in prompt[1].content
    assert [m.content for m in prompt[2:]] == ["m6", "m7", "m8", "m9"]


async def test_the_answer_phase_runs_the_tool_then_calls_the_model_again() -> None:
    store = MemoryStore()

    async def shout(text: str) -> str:
        return text.upper() + "!"

    tool = FunctionTool("shout", shout)
    model = ScriptedProvider(
        [
            reply(tool_calls=[ToolCall(id="c1", name="shout", arguments={"text": "hi"})]),
            reply("done"),
        ]
    )
    definition = _agent(window_history(max_messages=4), shout=tool)
    deps = _deps(store, model, definition)
    tid = await _thread(store, 1)
    turn = _turn(definition, tid)
    prompt = [
        ChatMessage(role="system", content="You help."),
        ChatMessage(role="user", content="q"),
    ]

    message, digest = await answer(deps, turn, prompt, last_prompt=None)

    assert message.content == "done"
    assert [r.content for r in message.tool_results] == ["HI!"]
    assert tool.calls == [{"text": "hi"}]
    assert len(model.calls) == 2
    assert model.calls[1].messages[-1] == ChatMessage(role="tool", content="HI!", tool_call_id="c1")
    assert [row.purpose for row in turn.report.ledger] == ["chat", "chat"]  # each call booked
    assert digest.prompt is not None


async def test_the_finish_phase_stores_the_answer_and_ends_the_run() -> None:
    store = MemoryStore()
    definition = _agent(window_history(max_messages=4))
    deps = _deps(store, ScriptedProvider(), definition)
    tid = await _thread(store, 1)
    turn = _turn(definition, tid)
    runtime = deps.runtime
    turn.ctx = await runtime.begin(turn.request)
    reply_message = Message(role="assistant", content="a", run_id=turn.request.run_id)

    stored = await store_answer(deps, turn, reply_message)

    assert stored.seq == 2 and turn.report.status == "completed"
    record = await runtime.get_run(turn.request.run_id)
    assert record is not None and record.status == "completed"


async def test_the_preview_phase_shows_what_the_next_turn_keeps() -> None:
    store = MemoryStore()
    definition = _agent(window_history(max_messages=3))
    deps = _deps(store, ScriptedProvider(), definition)
    tid = await _thread(store, 6)

    shown = await preview(deps, tid, "alice")

    assert [m.content for m in shown.kept] == ["m5", "m6"]  # and the next user message
    assert "m4" in [m.content for m in shown.dropped]
    assert shown.total_tokens == sum(shown.tokens) > 0


def test_the_loop_is_no_class_chain() -> None:
    assert AgentLoop.__mro__ == (AgentLoop, object)


def test_every_phase_is_a_plain_function_of_deps_and_turn() -> None:
    for phase in (load_thread, persist, fold, rolling_prompt, answer, store_answer):
        params = list(inspect.signature(phase).parameters)
        assert params[:2] == ["deps", "turn"], phase.__name__


TURN_MODULES = sorted(
    [
        Path(__file__).resolve().parents[2] / "bounded_agents" / "core" / "loop.py",
        *(Path(__file__).resolve().parents[2] / "bounded_agents" / "core" / "turn").glob("*.py"),
    ]
)


def _functions(path: Path) -> list[ast.FunctionDef | ast.AsyncFunctionDef]:
    return [
        node
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
    ]


def test_no_turn_function_takes_more_than_four_positional_values_besides_deps_and_turn() -> None:
    wide = []
    for path in TURN_MODULES:
        for fn in _functions(path):
            positional = [
                a.arg
                for a in (*fn.args.posonlyargs, *fn.args.args)
                if a.arg not in ("self", "cls", "deps", "turn")
            ]
            if len(positional) > 4:
                wide.append(f"{path.name}:{fn.name}{positional}")
    assert len(TURN_MODULES) > 15
    assert wide == []


def test_no_phase_fetches_a_transaction_back_from_its_context() -> None:
    """Steps are handed their transaction (`DurableContext.step(..., writes=True)`)."""
    fetches = [
        f"{path.name}:{node.lineno}"
        for path in TURN_MODULES
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in ("transaction", "_tx")
    ]
    assert fetches == []


def test_a_summary_and_search_agent_is_told_the_summary_can_be_searched_past() -> None:
    from bounded_agents.core.ports import ThreadSummary
    from bounded_agents.core.search import SEARCH_TOOL_NAME, HistorySearchTool
    from bounded_agents.core.turn.prompt import SEARCH_HINT, history_prompt

    summary = ThreadSummary(text="- the user likes tea", covers_through_seq=4)
    plain = _agent(window_history(max_messages=4))
    searching = AgentDefinition(
        name="helper",
        system_prompt="You help.",
        policy=plain.policy,
        tools={SEARCH_TOOL_NAME: HistorySearchTool(MemoryStore())},
    )
    assert SEARCH_HINT not in history_prompt(plain, summary, [])[1].content
    told = history_prompt(searching, summary, [])[1].content
    assert "likes tea" in told and told.endswith(SEARCH_HINT)
