"""Values of the same form (issue 36): a correction or an aside that never names its topic is
shown after the hit whose value has its form (`core.search_forms`), on every store: memory's
fallback scan, SQLite's FTS5 and PostgreSQL's tsvector. A pasted log is never such a row, and
what the results already show is not repeated."""

from __future__ import annotations

import json
from typing import Any

import pytest
from sqlalchemy import event

from bounded_agents.core.erasure import redact_search_result
from bounded_agents.core.messages import ChatMessage, Message, ToolCall, ToolResult
from bounded_agents.core.ports import MARK_END, MARK_START, AgentStore, SearchHit
from bounded_agents.core.search import HistorySearchTool
from bounded_agents.core.search_forms import (
    MAX_FORMS,
    form,
    forms_near_matches,
    same_form_hits,
    values,
)
from bounded_agents.core.turn.public import ToolContext
from bounded_agents.store.sql import SqlAgentStore
from tests.factories import assistant, user
from tests.store.conftest import ContractStore

LOG = (
    "Here is what the worker logged:\n"
    "2027-03-04T10:11:12.123Z INFO  [worker-3] req=ab12cd34 order=ORD-48213 latency=52ms\n"
    "2027-03-04T10:11:13.456Z WARN  [worker-1] req=ef56ab78 order=ORD-77120 latency=940ms"
)


def chatter(n: int) -> list[Message]:
    return [
        m
        for i in range(n)
        for m in (user(f"By the way, chapter {i} was about the weather."), assistant("Nice."))
    ]


async def _thread(store: AgentStore, messages: list[Message]) -> str:
    thread = await store.create_thread(actor_id="alice", agent="helper")
    await store.append_messages(thread.id, messages)
    return thread.id


async def _search(
    store: AgentStore, thread_id: str, query: str, prompt: tuple[ChatMessage, ...] = ()
) -> list[dict[str, Any]]:
    result = await HistorySearchTool(store).invoke_in_turn(
        {"query": query}, ToolContext(thread_id=thread_id, prompt=prompt)
    )
    assert not result.is_error, result.content
    rows: list[dict[str, Any]] = json.loads(result.content)["results"]
    return rows


async def test_a_correction_without_its_topic_follows_the_old_values_hit(
    store: ContractStore,
) -> None:
    tid = await _thread(
        store,
        [
            user("For the record, our invoice number is INV-2027-1187."),  # 1
            assistant("Noted."),  # 2
            *chatter(3),  # 3..8
            user("Actually, use INV-2027-5523 instead."),  # 9: no word of the topic
            *chatter(2),  # 10..13
        ],
    )

    found = await _search(store, tid, "invoice number")

    assert [(r["seq"], r.get("same_form_as")) for r in found] == [(1, None), (9, 1)]
    assert found[1]["content"] == "Actually, use INV-2027-5523 instead."
    assert found[1]["role"] == "user"


async def test_an_aside_is_reached_through_a_logged_value_and_the_log_is_never_a_row(
    store: ContractStore,
) -> None:
    tid = await _thread(
        store,
        [
            user(LOG),  # 1: found by "order"; holds ORD-99999 values, and many others
            assistant("Thanks for the log."),  # 2
            *chatter(2),  # 3..6
            user("Oh, and ORD-41234 is the one on the packing slip."),  # 7
            user("Another log:\n" + LOG.replace("48213", "11111").replace("77120", "22222")),
            *chatter(2),
        ],
    )

    found = await _search(store, tid, "order number")

    alike = [r for r in found if "same_form_as" in r]
    assert [(r["seq"], r["content"]) for r in alike] == [
        (7, "Oh, and ORD-41234 is the one on the packing slip.")
    ]
    assert alike[0]["same_form_as"] in {1, 8}  # the log hit whose value has the form


def dated_log(day: int) -> str:
    """A pasted log whose every line holds the year: the index ranks it above a statement."""
    return "Here is what the worker logged:\n" + "\n".join(
        f"2027-08-{day:02d}T10:{i:02d}:12.123Z INFO [worker-{i}] req=ab12cd{i:02d} latency={i}ms"
        for i in range(12)
    )


async def test_a_corrected_date_is_followed_by_its_year_past_the_logs_that_hold_it(
    store: ContractStore,
) -> None:
    tid = await _thread(
        store,
        [
            user("Our delivery date is 2027-10-24."),  # 1
            assistant("Noted."),  # 2
            *chatter(2),  # 3..6
            user("Scratch what I said before, make that 2027-01-08."),  # 7: no word of the topic
            *[m for day in range(1, 26) for m in (user(dated_log(day)), assistant("Thanks."))],
        ],
    )

    found = await _search(store, tid, "delivery date")

    assert [(r["seq"], r.get("same_form_as")) for r in found] == [(1, None), (7, 1)]
    assert found[1]["content"] == "Scratch what I said before, make that 2027-01-08."


async def test_a_search_held_to_short_messages_ranks_them_among_themselves(
    store: ContractStore,
) -> None:
    """`max_chars` (the port's, or the scan's): the 25 logs that rank first for their year
    are left out, so the one short statement holding it is found in a page of one."""
    tid = await _thread(
        store,
        [
            user("Everything has to arrive by 2027-03-04."),  # 1
            *[user(dated_log(day)) for day in range(1, 26)],
        ],
    )
    tool = HistorySearchTool(store)

    short = await tool._search(tid, "2027", 1, max_chars=500)
    every = await tool._search(tid, "2027", 30)

    assert [h.seq for h in short] == [1]
    assert len(every) == 26 and every[0].seq != 1


async def test_a_value_already_shown_is_not_followed_again(store: ContractStore) -> None:
    tid = await _thread(
        store,
        [
            user("The order number is ORD-41234."),  # 1
            *chatter(2),
            user("ORD-41234 again, for the courier."),  # 6: the same value: not a new one
            *chatter(2),
        ],
    )
    shown = (ChatMessage(role="user", content="ORD-41234 again, for the courier."),)

    assert [r.get("same_form_as") for r in await _search(store, tid, "order number")] == [None]
    assert [r["seq"] for r in await _search(store, tid, "order number", shown)] == [1]


async def test_a_form_is_searched_at_most_max_forms_times_per_search() -> None:
    """However many hits hold values, the forms followed are bounded: one indexed search each."""
    hits = [
        SearchHit(
            seq=i,
            role="user",
            content=f"ticket {p}-{i}",
            marked=f"{MARK_START}ticket{MARK_END} {p}-{i}",
            relevance=1.0,
        )
        for i, p in enumerate(["AB", "CD", "EF", "GH", "IJ", "KL"], start=1)
    ]
    asked: list[str] = []

    async def search(query: str, limit: int, max_chars: int) -> list[SearchHit]:
        asked.append(query)
        return []

    assert await same_form_hits(search, hits) == {}
    assert asked == ["ab", "cd", "ef"][:MAX_FORMS]


def test_a_form_keeps_the_prefix_and_the_shape() -> None:
    assert form("INV-2027-5523") == ("inv", "INV-9999-9999")
    assert form("ord-41234") == ("ord", "ORD-99999")
    assert form("NL-12X4") == ("nl", "NL-99A9")
    # an ISO date is looked up by its year, a word both indexes hold
    assert form("2027-05-12") == ("2027", "9999-99-99")
    assert form("2027-5-1") == ("2027", "9999-9-9")
    # no letter prefix, no digit, the prefix glued to the digits, or a date with slashes (one
    # word on PostgreSQL) or a time in it: nothing to look it up by
    unfollowed = ("Teal-Pro", "pg13.5", "B123", "45,750", "2027/05/12", "2027-05-12T10:11:12Z")
    assert [form(v) for v in unfollowed] == [None] * len(unfollowed)
    # a slash keeps the value one word on PostgreSQL (`wh/123`): its prefix is no word there
    assert form("WH/123") is None


def test_values_are_the_tokens_holding_a_digit() -> None:
    line = "2027-03-04T10:11:12.123Z INFO [worker-3] req=ab12cd34 order=ORD-48213 at Ghent"
    assert values(line) == ["2027-03-04T10:11:12.123Z", "worker-3", "ab12cd34", "ORD-48213"]


def test_the_value_nearest_a_match_comes_first_and_far_values_are_not_followed() -> None:
    marked = (
        f"[worker-3] req=ab12cd34 {MARK_START}order{MARK_END}=ORD-48213"
        " and later on, far away: TCK-1234"
    )
    assert list(forms_near_matches(marked)) == ["ORD-99999", "WORKER-9"]
    assert forms_near_matches("It is ORD-41234.") == {"ORD-99999": "ord"}  # no match: all of it


async def test_erasing_a_message_shown_as_a_same_form_row_redacts_the_row(
    store: ContractStore,
) -> None:
    tid = await _thread(
        store,
        [
            user("Our order number is ORD-10001."),
            *chatter(2),
            user("Scratch that, make it ORD-20002."),  # 6
            *chatter(1),
        ],
    )
    result = await HistorySearchTool(store).invoke_in_turn(
        {"query": "order number"}, ToolContext(thread_id=tid, prompt=())
    )
    assert "ORD-20002" in result.content

    redacted = redact_search_result(result.content, 6)

    assert redacted is not None and "ORD-20002" not in redacted
    assert "ORD-10001" in redacted


def test_each_value_is_measured_against_its_two_neighbouring_matches_only(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A pasted log with thousands of matches and values: measuring every value against
    every match took 100 s for one 300 KB message (found by attack); now at most two
    distances per value, counted."""
    from bounded_agents.core import search_forms

    measured: list[int] = []
    real = search_forms._gap

    def counting(token: tuple[int, int], match: tuple[int, int]) -> int:
        measured.append(1)
        return real(token, match)

    monkeypatch.setattr(search_forms, "_gap", counting)
    lines = 2_000
    marked = " ".join(
        f"{MARK_START}order{MARK_END} AB-{1000 + i} CD-{1000 + i}" for i in range(lines)
    )

    found = forms_near_matches(marked)

    assert found == {"AB-9999": "ab", "CD-9999": "cd"}
    assert len(measured) <= 2 * (2 * lines)  # two values a line, two neighbours each


async def test_only_a_search_held_to_short_messages_measures_their_text(
    sql_store: SqlAgentStore,
) -> None:
    """A search without `max_chars` never measures a row's text (the bound would read every
    matched row's content); with it, PostgreSQL reads the stored size before it counts
    characters, so a long text is never decompressed to be counted."""
    tid = await _thread(sql_store, [user("Everything has to arrive by 2027-03-04.")])
    sent: list[str] = []

    def before(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        sent.append(statement)

    event.listen(sql_store.engine.sync_engine, "before_cursor_execute", before)
    try:
        unbounded = await sql_store.search_history(tid, "2027", limit=5)
        searches = len(sent)
        bounded = await sql_store.search_history(tid, "2027", limit=5, max_chars=100)
    finally:
        event.remove(sql_store.engine.sync_engine, "before_cursor_execute", before)

    assert [h.seq for h in unbounded] == [h.seq for h in bounded] == [1]
    assert searches and not any("length(" in s for s in sent[:searches])
    measured = [s for s in sent[searches:] if "length(" in s]
    assert measured
    if sql_store.engine.dialect.name == "postgresql":
        assert all(s.index("octet_length(") < s.index(" length(") for s in measured)


async def test_an_identifier_beside_a_date_is_followed_before_the_date(
    store: ContractStore,
) -> None:
    """Found by review: one form is followed per hit, the nearest; a date nearer the match
    than the order number took it, and the correction was no longer reached."""
    tid = await _thread(
        store,
        [
            user("Our order from 2027-03-01 is ORD-41234."),  # 1
            assistant("Noted."),  # 2
            *chatter(2),  # 3..6
            user("Actually, use ORD-55120 instead."),  # 7
        ],
    )

    found = await _search(store, tid, "order")

    assert (7, 1) in [(r["seq"], r.get("same_form_as")) for r in found]


def dated_tool_log(i: int) -> Message:
    """A pasted log arriving as a tool result: its message's content is empty."""
    log = "\n".join(f"2027-08-{i % 28 + 1:02d} 10:{k:02d}:12 INFO worker-{k}" for k in range(40))
    call = ToolCall(id=f"c{i}", name="read_logs", arguments={"n": i})
    return Message(
        role="assistant",
        content="",
        tool_calls=[call],
        tool_results=[ToolResult(call_id=f"c{i}", content=log)],
    )


async def test_a_correction_is_followed_past_logs_that_arrive_as_tool_results(
    store: ContractStore,
) -> None:
    """Found by review: the statement bound measured a message's content only, so logs in
    tool results (empty content) still took every candidate's place."""
    tid = await _thread(
        store,
        [
            user("Our delivery date is 2027-10-24."),  # 1
            assistant("Noted."),  # 2
            user("Scratch what I said before, make that 2027-01-08."),  # 3
            *[m for i in range(60) for m in (user("check"), dated_tool_log(i))],
        ],
    )

    found = await _search(store, tid, "delivery date")

    assert [(r["seq"], r.get("same_form_as")) for r in found][:2] == [(1, None), (3, 1)]


class OldSearcher:
    """A store written against the port before `max_chars`, behind a tracing proxy that
    takes `**kwargs`: the follow must not hand the keyword on (found by review: the inner
    store raised TypeError and every follow was lost)."""

    def __init__(self, inner: SqlAgentStore) -> None:
        self._inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def search_history(self, thread_id: str, query: str, *, limit: int) -> Any:
        return await self._inner.search_history(thread_id, query, limit=limit)


class Traced:
    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def search_history(self, *args: Any, **kwargs: Any) -> Any:
        return await self._inner.search_history(*args, **kwargs)


@pytest.mark.parametrize("wrap", [OldSearcher, lambda s: Traced(OldSearcher(s))])
async def test_a_searcher_without_max_chars_still_follows_forms(
    sql_store: SqlAgentStore, wrap: Any
) -> None:
    tid = await _thread(
        sql_store,
        [
            user("For the record, our invoice number is INV-2027-1187."),
            assistant("Noted."),
            user("Actually, use INV-2027-5523 instead."),
        ],
    )
    result = await HistorySearchTool(wrap(sql_store)).invoke_in_turn(
        {"query": "invoice number"}, ToolContext(thread_id=tid, prompt=())
    )
    rows = json.loads(result.content)["results"]
    assert [(r["seq"], r.get("same_form_as")) for r in rows] == [(1, None), (3, 1)]
