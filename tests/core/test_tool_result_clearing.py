"""Tool-result clearing as a pure function: the newest results ride, older ones become
placeholders naming the tool, size and seq, and the cleared set moves only in steps, so the
prompts between two steps extend each other (a provider's prompt cache keeps hitting)."""

from __future__ import annotations

import itertools

import pytest

from bounded_agents.core.history import HistoryConfig, policy_from_config
from bounded_agents.core.history.clearing import (
    CLEARED_PREFIX,
    ToolResultClearing,
    clear_tool_results,
)
from bounded_agents.core.history.powers import result_clearing
from bounded_agents.core.messages import Message, ToolCall, ToolResult, to_chat_messages
from bounded_agents.errors import ConfigError
from tests.factories import assistant, user


def fetched(i: int, chars: int = 4000) -> list[Message]:
    """One run that fetched a page: the question, the call with its result, the answer."""
    return [
        user(f"read page {i}"),
        Message(
            role="assistant",
            content="",
            tool_calls=[ToolCall(id=f"c{i}", name="fetch", arguments={"page": i})],
            tool_results=[ToolResult(call_id=f"c{i}", content=f"page {i} " + "x" * chars)],
        ),
        assistant(f"page {i} read"),
    ]


def thread(runs: int) -> list[Message]:
    return [m for i in range(runs) for m in fetched(i)] + [user("next?")]


def test_the_newest_results_ride_and_older_ones_become_placeholders_naming_tool_size_seq() -> None:
    keep = thread(4)
    clearing = ToolResultClearing(keep_results=1, step_tokens=1002)  # one result a step
    sent, cleared = clear_tool_results(keep, clearing, first_seq=11, searchable=True)
    contents = [r.content for m in sent for r in m.tool_results]
    assert [c.startswith(CLEARED_PREFIX) for c in contents] == [True, True, True, False]
    assert "fetch returned 4,007 characters (~1,002 tokens) at message seq 12" in contents[0]
    assert "search_history" in contents[0]
    assert cleared.results == 3 and cleared.tokens == 3 * 1002
    assert [m.tool_calls for m in sent] == [m.tool_calls for m in keep]  # the calls are kept
    assert keep[1].tool_results[0].content.startswith("page 0 x")  # the input is untouched


def test_clearing_moves_only_in_steps_so_prompts_between_steps_extend_each_other() -> None:
    clearing = ToolResultClearing(keep_results=1, step_tokens=3000)
    prompts = [to_chat_messages(clear_tool_results(thread(n), clearing)[0]) for n in range(1, 12)]
    changes = 0
    for before, after in itertools.pairwise(prompts):
        # The newer prompt drops the trailing user message of the older and adds a run.
        if after[: len(before) - 1] != before[:-1]:
            changes += 1
    # 10 more results past the newest one, about 1,000 tokens each: a step each 3,000.
    assert changes == 3


def test_nothing_is_cleared_below_one_step_or_with_clearing_off() -> None:
    keep = thread(3)
    sent, cleared = clear_tool_results(keep, ToolResultClearing(keep_results=1, step_tokens=5000))
    assert sent == keep and cleared.results == 0
    assert result_clearing(policy_from_config(HistoryConfig(max_messages=40), None)) is None


def test_the_history_config_builds_a_clearing_policy_and_refuses_a_lone_step() -> None:
    config = HistoryConfig(max_messages=40, clear_tool_results_keep=2)
    assert result_clearing(policy_from_config(config, None)) == ToolResultClearing(keep_results=2)
    runs = HistoryConfig(runs=3, clear_tool_results_keep=0, clear_tool_results_step_tokens=9)
    assert result_clearing(policy_from_config(runs, None)) == ToolResultClearing(
        keep_results=0, step_tokens=9
    )
    with pytest.raises(ConfigError, match="clear_tool_results_step_tokens"):
        HistoryConfig.coerce({"max_messages": 4, "clear_tool_results_step_tokens": 100})


def _searched_in_one_step(found: str) -> Message:
    """One step's three searches, stored on one message: the later two send the row the first
    quotes as `shown_above` (core.search_results)."""
    from bounded_agents.core.ports import MARK_END, MARK_START, SearchHit
    from bounded_agents.core.search_results import quoted_rows, render_hits
    from bounded_agents.core.search_text import SEARCH_TOOL_NAME

    marked = found.replace("discount", f"{MARK_START}discount{MARK_END}")
    hit = SearchHit(seq=1, role="user", content=found, marked=marked, relevance=1.0)
    texts = [render_hits([hit])]
    for _ in range(2):
        texts.append(render_hits([hit], shown=quoted_rows(texts)))
    assert '"shown_above": true' in texts[1]
    calls = [
        ToolCall(id=f"s{i}", name=SEARCH_TOOL_NAME, arguments={"query": "d"}) for i in range(3)
    ]
    results = [ToolResult(call_id=f"s{i}", content=t) for i, t in enumerate(texts)]
    return Message(role="assistant", content="ok", tool_calls=calls, tool_results=results, seq=3)


def test_a_search_result_a_kept_sibling_points_back_to_is_not_cleared() -> None:
    """Clearing the first of a step's searches while a later one that says `shown_above` rides
    would leave the model neither copy of the row (found by review)."""
    found = "Please note: the discount code is SPRING-7731. " + "x" * 400
    message = _searched_in_one_step(found)
    out, cleared = clear_tool_results(
        [message], ToolResultClearing(keep_results=1, step_tokens=50), searchable=True
    )
    sent = "".join(r.content for r in out[0].tool_results)
    assert "SPRING-7731" in sent
    assert cleared.results == 0 and cleared.tokens == 0
    # Another tool's results in the same place are cleared as before.
    fetches = [m for m in fetched(0, chars=400) if m.tool_results] * 3
    numbered = [m.model_copy(update={"seq": i}) for i, m in enumerate(fetches)]
    _, other = clear_tool_results(numbered, ToolResultClearing(keep_results=1, step_tokens=50))
    assert other.results == 2
