"""`bounded_agents.core.erasure`: which rows of a stored search result an erasure rewrites."""

from __future__ import annotations

import json

from bounded_agents.core.erasure import (
    ERASED,
    ERROR_REDACTED,
    redact_error,
    redact_search_result,
    redact_search_results,
)
from bounded_agents.core.messages import Message, ToolCall, ToolResult
from bounded_agents.core.ports import SearchHit
from bounded_agents.core.search import render_hits
from bounded_agents.store.memory import MemoryStore
from tests.factories import user


def _result(*rows: dict[str, object], omitted: int = 0) -> str:
    return json.dumps({"results": list(rows), "omitted": omitted}, ensure_ascii=False)


def test_only_the_rows_quoting_the_seq_lose_their_text_and_other_text_keys() -> None:
    content = _result(
        {"seq": 3, "role": "user", "content": "secret", "snippet": "…secret…", "at": "2026"},
        {"seq": 4, "role": "assistant", "content": "kept", "newer": 1},
        {"role": "summary", "content": "covers 2-5 secret", "from_seq": 2, "to_seq": 5},
        {"role": "summary", "content": "covers 6-9", "from_seq": 6, "to_seq": 9},
        omitted=2,
    )
    redacted = json.loads(redact_search_result(content, 3) or "")
    assert redacted == {
        "results": [
            {"seq": 3, "role": "user", "content": ERASED},
            {"seq": 4, "role": "assistant", "content": "kept", "newer": 1},
            {"role": "summary", "content": ERASED, "from_seq": 2, "to_seq": 5},
            {"role": "summary", "content": "covers 6-9", "from_seq": 6, "to_seq": 9},
        ],
        "omitted": 2,
    }
    assert "secret" not in json.dumps(redacted)


def _hit(text: str, seq: int) -> SearchHit:
    """A user message found by a search, as the store hands it to `render_hits`."""
    return SearchHit(seq=seq, role="user", content=text, marked=text, relevance=1.0)


def test_a_result_that_does_not_quote_the_seq_or_is_not_a_result_is_left_alone() -> None:
    hits = render_hits([_hit("a", 5)])
    assert redact_search_result(hits, 4) is None
    assert redact_search_result("the search failed: OperationalError", 4) is None
    assert redact_search_result('["not", "a", "result"]', 4) is None
    assert redact_search_result(redact_search_result(hits, 5) or "", 5) is None  # idempotent


def test_a_reply_row_is_erased_by_its_own_seq_and_its_question_kept() -> None:
    question = SearchHit(
        seq=8, role="assistant", content="What is your order number?", marked="x", relevance=1.0
    )
    rendered = render_hits([question], replies={0: _hit("It is ORD-41234.", 9)})

    redacted = json.loads(redact_search_result(rendered, 9) or "")

    assert [(r["seq"], r["content"]) for r in redacted["results"]] == [(8, "x"), (9, ERASED)]
    assert redacted["results"][1]["reply_to"] == 8  # a number: it names no content
    assert "ORD-41234" not in json.dumps(redacted)


def test_only_the_results_of_search_calls_are_rewritten() -> None:
    quoted = render_hits([_hit("secret", 2)])
    calls = [
        ToolCall(id="a", name="search_history", arguments={"query": "secret"}),
        ToolCall(id="b", name="read_page", arguments={"url": "x"}),
    ]
    results = [ToolResult(call_id="a", content=quoted), ToolResult(call_id="b", content=quoted)]
    redacted = redact_search_results(calls, results, 2)
    assert redacted is not None
    assert ERASED in redacted[0].content and "secret" not in redacted[0].content
    assert redacted[1] == results[1]  # a user tool's output is its own, not a search's quote
    assert redact_search_results(calls, results, 7) is None


def test_an_error_keeps_the_part_the_project_wrote_and_loses_the_provider_s_text() -> None:
    assert redact_error("provider_error", "provider returned HTTP 400: bad 'secret'") == (
        f"provider returned HTTP 400: {ERROR_REDACTED}"
    )
    assert redact_error("internal_error", "KeyError: 'secret'") == ERROR_REDACTED
    assert redact_error("provider_bad_response", "provider failed mid-stream: secret") == (
        f"provider failed mid-stream: {ERROR_REDACTED}"
    )
    # fixed texts and texts redacted already are left as they are (no write)
    assert redact_error("journal_erased", "the run's process stopped, and ...") is None
    assert redact_error("lease_expired", "the run's process stopped before it finished") is None
    assert redact_error("provider_error", f"provider returned HTTP 400: {ERROR_REDACTED}") is None


async def test_the_memory_store_erases_the_quotes_too() -> None:
    store = MemoryStore()
    thread = await store.create_thread(actor_id="a", agent="x")
    call = ToolCall(id="c", name="search_history", arguments={"query": "secret"})
    quoted = render_hits([_hit("my secret", 1)])
    answer = Message(
        role="assistant",
        content="found",
        tool_calls=[call],
        tool_results=[ToolResult(call_id="c", content=quoted)],
    )
    await store.append_messages(thread.id, [user("my secret"), user("where?"), answer])

    assert await store.delete_message(thread.id, 1)

    kept = (await store.get_thread(thread.id)) or None
    assert kept is not None
    assert "secret" not in kept.messages[-1].tool_results[0].content
    assert ERASED in kept.messages[-1].tool_results[0].content


def test_a_result_nested_past_the_parsers_depth_is_left_alone_not_raised() -> None:
    """Erasure reads a search result as `quoted_rows` does (`result_rows`): text nested past
    the JSON parser's depth is not a result, so there is nothing of it to redact (it raised
    `RecursionError`)."""
    assert redact_search_result("[" * 3000, 1) is None
