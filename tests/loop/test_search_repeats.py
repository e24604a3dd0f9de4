"""A search row an earlier search of the same step quotes is not sent again (`shown_above`).

A model that needs several facts asks several searches in one step; the rows they find overlap.
On the recall bench, 31 of the 78 rows of a 20-search probe repeated a row of an earlier result
in the same prompt. Each row's text now reaches the model once: a repeat keeps its place, seq
and role, and says `shown_above` instead of its text. Never where the model might read neither
copy: an earlier step's result, or any result of an agent whose middleware rewrites prompts."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest

from bounded_agents import AgentModule, agent
from bounded_agents.core.context_window import context_window
from bounded_agents.core.erasure import ERASED, redact_search_result
from bounded_agents.core.history import window_history
from bounded_agents.core.messages import ChatMessage, ToolCall
from bounded_agents.core.ports import ModelRequest, ModelResponse
from bounded_agents.core.search import SEARCH_TOOL_NAME, HistorySearchTool
from bounded_agents.core.search_results import quoted_rows
from bounded_agents.core.turn.public import ToolContext
from bounded_agents.errors import ProviderError, RunFailed
from bounded_agents.settings import Settings
from bounded_agents.store import SqlAgentStore
from bounded_agents.testing import ScriptedProvider, reply
from tests.factories import assistant, user
from tests.loop.conftest import SQL_JOURNAL_ONLY, LoopEnv

FACT = "Please note: the discount code is SPRING-7731."
FILLER = [m for i in range(10) for m in (user(f"Chat {i} about films."), assistant("Sure."))]


@agent(name="seeker", history={"max_messages": 4}, search=True)
class Seeker:
    pass


def _calls(*queries: str, step: int = 0) -> list[ToolCall]:
    return [
        ToolCall(id=f"s{step}_{i}", name=SEARCH_TOOL_NAME, arguments={"query": q})
        for i, q in enumerate(queries)
    ]


def _rows(message: ChatMessage) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = json.loads(message.content)["results"]
    return rows


async def _module(store: SqlAgentStore, script: list[Any]) -> tuple[AgentModule, str]:
    module = AgentModule.for_root(
        model=ScriptedProvider(script),
        store=store,
        agents=[Seeker],
        settings=Settings(migrate_on_start=False),
    )
    thread = await store.create_thread(actor_id="alice", agent="seeker")
    await store.append_messages(thread.id, [user(FACT), assistant("Noted."), *FILLER])
    return module, thread.id


async def test_sibling_searches_send_a_row_they_share_once(sql_store: SqlAgentStore) -> None:
    seen: list[ModelRequest] = []

    async def answer(request: ModelRequest) -> ModelResponse:
        seen.append(request)
        return reply("ok")

    script: list[Any] = [reply("", tool_calls=_calls("discount code", "SPRING code")), answer]
    module, tid = await _module(sql_store, script)
    await module.run_turn(agent="seeker", thread_id=tid, actor_id="alice", content="Which one?")

    first, second = [m for m in seen[0].messages if m.role == "tool"]
    assert _rows(first)[0]["content"] == FACT
    repeat = next(r for r in _rows(second) if r["seq"] == 1)
    assert repeat == {"seq": 1, "role": "user", "shown_above": True}
    sent = "".join(m.content for m in seen[0].messages if m.role == "tool")
    assert sent.count("SPRING-7731") == 1


async def test_a_search_in_a_later_step_sends_its_rows_whole(sql_store: SqlAgentStore) -> None:
    """Only the running step's own search calls count, the set known to reach the next call
    whole (an earlier turn's result may be refolded away first: found by attack, with
    `summarizing_runs_window`; and call ids repeat across turns)."""
    seen: list[ModelRequest] = []

    async def again(request: ModelRequest) -> ModelResponse:
        return reply("", tool_calls=_calls("discount", step=1))

    async def answer(request: ModelRequest) -> ModelResponse:
        seen.append(request)
        return reply("ok")

    script: list[Any] = [reply("", tool_calls=_calls("discount code")), again, answer]
    module, tid = await _module(sql_store, script)
    result = await module.run_turn(
        agent="seeker", thread_id=tid, actor_id="alice", content="Which one?"
    )

    later = [m for m in seen[0].messages if m.tool_call_id == "s1_0"]
    assert _rows(later[0])[0]["content"] == FACT
    stored = [r.content for r in result.message.tool_results]
    assert stored == [m.content for m in seen[0].messages if m.role == "tool"]


@agent(
    name="trimmed",
    history={"max_messages": 4},
    search=True,
    chat_middleware=[context_window(max_chars_per_tool=300)],
)
class Trimmed:
    pass


async def test_with_middleware_every_result_sends_its_rows(sql_store: SqlAgentStore) -> None:
    """A middleware may cut what the model is sent: the first result's row of the fact is past
    the 300 characters it keeps of a tool result, so the second must send the text (found by
    attack: it said `shown_above`, and the model never read the fact)."""
    seen: list[ModelRequest] = []

    async def answer(request: ModelRequest) -> ModelResponse:
        seen.append(request)
        return reply("ok")

    both = [
        ToolCall(id="s0_0", name=SEARCH_TOOL_NAME, arguments={"query": "films", "k": 12}),
        ToolCall(id="s0_1", name=SEARCH_TOOL_NAME, arguments={"query": "SPRING-7731"}),
    ]
    module = AgentModule.for_root(
        model=ScriptedProvider([reply("", tool_calls=both), answer]),
        store=sql_store,
        agents=[Trimmed],
        settings=Settings(migrate_on_start=False),
    )
    thread = await sql_store.create_thread(actor_id="alice", agent="trimmed")
    fact = "Also about films: the discount code is SPRING-7731."
    await sql_store.append_messages(thread.id, [user(fact), assistant("Noted."), *FILLER])
    await module.run_turn(
        agent="trimmed", thread_id=thread.id, actor_id="alice", content="Which one?"
    )

    assert any("SPRING-7731" in m.content for m in seen[0].messages if m.role == "tool")


@SQL_JOURNAL_ONLY
async def test_a_resumed_run_sends_the_shared_row_once_as_the_first_attempt_did(
    env: LoopEnv,
) -> None:
    """The answering call fails after the tool round committed; the resume replays both
    journaled results: the fact's text reaches the model once, the repeat still points at it."""
    tid = await env.thread([user(FACT), assistant("Noted."), *FILLER])
    tools = {SEARCH_TOOL_NAME: HistorySearchTool(env.store)}
    run_id = str(uuid.uuid4())
    asked = reply("", tool_calls=_calls("discount code", "SPRING code"))
    failing = ScriptedProvider([asked, ProviderError("down")])
    with pytest.raises(RunFailed):
        await env.loop(failing, window_history(max_messages=4), tools=tools).run_turn(
            agent="helper", thread_id=tid, actor_id="alice", content="code?", run_id=run_id
        )
    model = ScriptedProvider([reply("done")])
    await env.loop(model, window_history(max_messages=4), tools=tools).resume(run_id)

    sent = [m for m in model.calls[0].messages if m.role == "tool"]
    assert [m.tool_call_id for m in sent] == ["s0_0", "s0_1"]
    assert "".join(m.content for m in sent).count("SPRING-7731") == 1
    assert _rows(sent[1])[0] == {"seq": 1, "role": "user", "shown_above": True}


async def test_a_provider_repeating_a_call_id_still_pairs_each_row_with_its_text(
    sql_store: SqlAgentStore,
) -> None:
    """A lying provider names both searches `c1`: the loop renames the second, and the repeat
    row's first copy is the first call's result, which the model is sent."""
    seen: list[ModelRequest] = []

    async def answer(request: ModelRequest) -> ModelResponse:
        seen.append(request)
        return reply("ok")

    same = [
        ToolCall(id="c1", name=SEARCH_TOOL_NAME, arguments={"query": q})
        for q in ("discount code", "SPRING code")
    ]
    module, tid = await _module(sql_store, [reply("", tool_calls=same), answer])
    await module.run_turn(agent="seeker", thread_id=tid, actor_id="alice", content="Which one?")

    asking = next(m for m in seen[0].messages if m.tool_calls)
    tools = [m for m in seen[0].messages if m.role == "tool"]
    assert [m.tool_call_id for m in tools] == [c.id for c in asking.tool_calls]
    assert len({m.tool_call_id for m in tools}) == 2
    assert _rows(tools[0])[0]["content"] == FACT
    assert _rows(tools[1])[0] == {"seq": 1, "role": "user", "shown_above": True}


async def test_a_row_is_repeated_when_its_snippet_differs() -> None:
    """A long message found by two searches shows two windows of it: neither is shown above."""
    log = " ".join(f"line{i}" for i in range(200))
    text = f"alpha {log} omega"
    hits = [_hit(text, 7, "alpha"), _hit(text, 7, "omega")]
    first = ChatMessage(role="tool", content=_render(hits[0]), tool_call_id="s0_0")
    store = _FixedStore(hits[1])
    prompt = (_asking("s0_0", "s0_1"), first)
    result = await HistorySearchTool(store).invoke_in_turn(
        {"query": "omega"}, ToolContext("t", prompt, sent_as_is=True)
    )
    (row,) = json.loads(result.content)["results"]
    assert "omega" in row["content"] and "shown_above" not in row


async def test_only_the_search_tools_own_results_count_as_shown() -> None:
    """Another tool answering in the same JSON shape does not hide a row: the model may not
    read it as a search result."""
    hit = _hit(FACT, 1, "discount")
    other = ChatMessage(role="tool", content=_render(hit), tool_call_id="x1")
    asking = ChatMessage(
        role="assistant",
        content="",
        tool_calls=[ToolCall(id="x1", name="lookalike", arguments={})],
    )
    result = await HistorySearchTool(_FixedStore(hit)).invoke_in_turn(
        {"query": "discount"}, ToolContext("t", (asking, other), sent_as_is=True)
    )
    assert json.loads(result.content)["results"][0]["content"] == FACT


async def test_an_error_or_cleared_result_quotes_nothing() -> None:
    hit = _hit(FACT, 1, "discount")
    for earlier in ("the search failed: OSError", "[cleared: 412 tokens]", "{}", "[1, 2]"):
        tool = ChatMessage(role="tool", content=earlier, tool_call_id="s0_0")
        prompt = (_asking("s0_0", "s0_1"), tool)
        result = await HistorySearchTool(_FixedStore(hit)).invoke_in_turn(
            {"query": "discount"}, ToolContext("t", prompt, sent_as_is=True)
        )
        assert json.loads(result.content)["results"][0]["content"] == FACT, earlier


async def test_a_call_id_an_earlier_turn_gave_another_tool_is_not_read_as_a_search() -> None:
    """Call ids repeat across turns (a local server numbers calls per response): an earlier
    turn's `fetch` answered as `call_0` with 3,000 nested brackets is not parsed (found by
    attack: `RecursionError` failed every later turn's search)."""
    hit = _hit(FACT, 1, "discount")
    fetch = ToolCall(id="call_0", name="fetch", arguments={})
    prompt = (
        ChatMessage(role="assistant", content="", tool_calls=[fetch]),
        ChatMessage(role="tool", content="[" * 3000, tool_call_id="call_0"),
        ChatMessage(role="assistant", content="ok"),
        ChatMessage(role="user", content="and the code?"),
        _asking("call_0"),
    )
    result = await HistorySearchTool(_FixedStore(hit)).invoke_in_turn(
        {"query": "discount"}, ToolContext("t", prompt, sent_as_is=True)
    )
    assert json.loads(result.content)["results"][0]["content"] == FACT
    assert quoted_rows(["[" * 3000]) == set()


def test_a_true_seq_quotes_no_message() -> None:
    """JSON `true` is not seq 1 (in Python, True == 1)."""
    fake = json.dumps({"results": [{"seq": True, "role": "user", "content": FACT}]})
    assert quoted_rows([fake]) == set()


def test_erasing_a_message_a_repeat_row_names_leaves_no_text() -> None:
    rendered = json.dumps({"results": [{"seq": 4, "role": "user", "shown_above": True}]})
    redacted = redact_search_result(rendered, 4)
    assert redacted is not None
    assert json.loads(redacted)["results"] == [
        {"seq": 4, "role": "user", "shown_above": True, "content": ERASED}
    ]


# --- helpers: a store answering one fixed hit, and the rendering of one --------------------


def _hit(text: str, seq: int, term: str) -> Any:
    from bounded_agents.core.ports import MARK_END, MARK_START, SearchHit

    marked = text.replace(term, f"{MARK_START}{term}{MARK_END}")
    return SearchHit(seq=seq, role="user", content=text, marked=marked, relevance=1.0)


def _render(hit: Any) -> str:
    from bounded_agents.core.search_results import render_hits

    return render_hits([hit])


def _asking(*call_ids: str) -> ChatMessage:
    calls = [ToolCall(id=i, name=SEARCH_TOOL_NAME, arguments={"query": "x"}) for i in call_ids]
    return ChatMessage(role="assistant", content="", tool_calls=calls)


class _FixedStore:
    """A store with a search index that always finds `hit` (and reads no replies)."""

    def __init__(self, hit: Any) -> None:
        self.hit = hit

    async def search_history(self, thread_id: str, query: str, *, limit: int) -> list[Any]:
        return [self.hit]

    async def messages_at(self, thread_id: str, seqs: Any) -> list[Any]:
        return []
