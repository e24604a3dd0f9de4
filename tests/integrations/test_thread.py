"""The shared core, without any framework: ids, the store it needs, folds cut at runs."""

from __future__ import annotations

import json
from typing import Any

import pytest

from bounded_agents.core.messages import Message
from bounded_agents.core.ports import HistoryPolicyContext, HistorySummary
from bounded_agents.errors import ConfigError, InvalidInput
from bounded_agents.integrations import Projection, ThreadHistory, thread_id_for
from bounded_agents.integrations.items import NO_LINKS, Links, legacy_thread_id_for, view_start
from bounded_agents.integrations.thread import Entry
from bounded_agents.store import MemoryStore, SqlAgentStore
from tests.factories import summary_rows
from tests.integrations.helpers import NotesSummarizer, rows_read


def pair_links(item: Any) -> Links:
    """`{"call": n}` opens call n, `{"output": n}` answers it."""
    if "call" in item:
        return Links(opens=frozenset({str(item["call"])}))
    return Links(closes=frozenset({str(item["output"])})) if "output" in item else NO_LINKS


def run(n: int, size: int) -> list[tuple[Projection, str]]:
    return [
        (Projection("user", f"question {n}"), f'{{"q": {n}}}'),
        (Projection("assistant", "x" * size), f'{{"call": {n}}}'),
        (Projection("assistant", "y" * size), f'{{"output": {n}}}'),
        (Projection("assistant", f"answer {n}"), f'{{"a": {n}}}'),
    ]


def test_session_ids_map_to_thread_ids_the_store_can_hold_one_per_actor_and_adapter() -> None:
    ids = {
        thread_id_for(session, actor_id=actor, agent=agent)
        for session in ("user-42", "x" * 37, "tab\there")
        for actor in ("alice", "bob")
        for agent in ("openai-agents", "pydantic-ai")
    }
    assert len(ids) == 12 and all(len(i) == 36 for i in ids)
    assert thread_id_for("s", actor_id="a", agent="g") == thread_id_for(
        "s", actor_id="a", agent="g"
    )
    # A part holding what could separate parts makes no other triple's id (found by review).
    assert thread_id_for("s\x1fchat", actor_id="alice", agent="g") != thread_id_for(
        "chat", actor_id="alice\x1fs", agent="g"
    )
    # A session id that is itself a thread id names no other session's thread.
    made = thread_id_for("s", actor_id="a", agent="g")
    assert thread_id_for(made, actor_id="a", agent="g") != made
    assert legacy_thread_id_for("user-42") == "user-42"
    assert len(legacy_thread_id_for("x" * 37)) == 36
    with pytest.raises(InvalidInput, match="may not be empty"):
        thread_id_for("", actor_id="a", agent="g")


def test_a_store_without_the_powers_is_refused_naming_what_it_lacks() -> None:
    with pytest.raises(ConfigError, match=r"MemoryStore cannot back .* a bounded read"):
        ThreadHistory(MemoryStore(), "s")


async def test_every_fold_ends_at_the_end_of_a_run(sql_store: SqlAgentStore) -> None:
    """A fold budget that runs out inside a run folds up to the run before it: a boundary
    inside a run would leave the view starting on a tool output whose call was folded."""
    history = ThreadHistory(sql_store, "folds", keep_runs=2)
    for n in range(12):
        await history.append(run(n, 600))
    done = await history.compact(NotesSummarizer(), fold_max_tokens=1000)
    assert done.refused is None and done.folded == 10 * 4
    boundaries = [seq for seq, _ in await summary_rows(sql_store, history.thread_id)]
    assert len(boundaries) > 1  # the budget made it fold in several chunks
    assert all(seq % 4 == 0 for seq in boundaries), boundaries  # each after a run's answer
    view = await history.bounded()
    assert [e.message.role for e in view.entries][::4] == ["user", "user"]


async def test_a_run_larger_than_the_fold_budget_is_folded_whole(sql_store: SqlAgentStore) -> None:
    history = ThreadHistory(sql_store, "big-run", keep_runs=1)
    for n in range(3):
        await history.append(run(n, 5000))
    done = await history.compact(NotesSummarizer(), fold_max_tokens=500)
    assert done.folded == 8
    boundaries = [seq for seq, _ in await summary_rows(sql_store, history.thread_id)]
    assert boundaries == [4, 8]


async def test_a_thread_where_no_item_starts_a_run_is_read_within_max_items(
    sql_store: SqlAgentStore,
) -> None:
    """Found by attack: a thread whose items are all the agent's own (no `user` item, so one
    run) was read whole by the runs bound, 1,000 rows after 1,000 appends. The item cap bounds
    the read, and the items past it are owed to the next fold, which keeps the read bounded."""
    history = ThreadHistory(sql_store, "no-user", max_items=50)
    steps = [(Projection("assistant", f"step {n}"), f'{{"step": {n}}}') for n in range(1000)]
    for start in range(0, 1000, 100):
        await history.append(steps[start : start + 100])
    with rows_read(sql_store) as reads:
        view = await history.bounded()
    assert reads == [("load_thread_for_turn", 50)]
    assert view.skipped == 950 and [e.seq for e in view.entries] == list(range(951, 1001))
    summarizer = NotesSummarizer()
    done = await history.compact_if_due(summarizer, fold_items=100)
    assert done is not None and done.refused is None and done.folded == 950
    await history.append([(Projection("assistant", "step 1000"), '{"step": 1000}')])
    with rows_read(sql_store) as reads:
        view = await history.bounded()
    assert reads == [("load_thread_for_turn", 50)]
    assert view.summary is not None and view.summary.covers_through_seq == 950
    assert view.skipped == 1 and view.entries[-1].item == {"step": 1000}


async def test_a_view_cut_inside_a_run_begins_where_the_adapter_allows(
    sql_store: SqlAgentStore,
) -> None:
    """When the item cap cuts a run, the view does not begin on a tool output whose call it
    leaves out (a provider refuses one): it begins at the first item the adapter accepts, and
    the next fold takes the call and its output together."""
    history = ThreadHistory(
        sql_store,
        "cut",
        max_items=5,
        links=pair_links,
    )
    pairs = [
        item
        for n in range(10)
        for item in (
            (Projection("assistant", f"call {n}"), f'{{"call": {n}}}'),
            (Projection("assistant", f"output {n}"), f'{{"output": {n}}}'),
        )
    ]
    await history.append(pairs)
    view = await history.bounded()  # the newest 5 rows are seqs 16-20: 16 is an output
    assert [e.item for e in view.entries] == [
        {"call": 8},
        {"output": 8},
        {"call": 9},
        {"output": 9},
    ]
    assert view.skipped == 16 and view.rows_read == 5
    done = await history.compact(NotesSummarizer())
    assert done.folded == 16 and done.summary is not None
    assert done.summary.covers_through_seq == 16  # call 7 (seq 15) folded with its output
    # Below the cap too (found by review: an erasure leaves the page a row short): an output
    # whose call is not there is never where a view begins; it is owed to the next fold.
    short = ThreadHistory(sql_store, "short", max_items=5, links=pair_links)
    await short.append(pairs[1:4])
    view = await short.bounded()
    assert [e.item for e in view.entries] == [{"call": 1}, {"output": 1}] and view.skipped == 1


def test_max_items_below_one_is_refused(sql_store: SqlAgentStore) -> None:
    with pytest.raises(ConfigError, match="max_items must be at least 1"):
        ThreadHistory(sql_store, "s", max_items=0)


async def pop_raced_by_a_restart(
    store: SqlAgentStore, session: str, old: tuple[Projection, str], new: tuple[Projection, str]
) -> tuple[Entry | None, list[Entry]]:
    """Pop `session` holding `old`, with a clear and a first write of `new` (another session
    object of the same id) between the pop's read and its erasure; the popped entry and what
    the session holds after."""
    history = ThreadHistory(store, session)
    await history.append([old])
    read_newest = history.newest
    old_item = json.loads(old[1])

    async def newest_then_restarted(n: int) -> list[Entry]:
        found = await read_newest(n)
        if found and found[0].item == old_item:
            await ThreadHistory(store, session).clear()
            await ThreadHistory(store, session).append([new])
        return found

    history.newest = newest_then_restarted  # type: ignore[method-assign]
    popped = await history.pop()
    del history.newest
    return popped, await history.newest(10)


async def test_a_pop_raced_by_a_clear_and_a_restart_erases_nothing_it_did_not_read(
    sql_store: SqlAgentStore,
) -> None:
    """Found by attack: a pop reads the newest item, then erases its seq. A clear and a new
    first write between the two (the same session, its seqs from 1 again) put another item at
    that seq, which the pop erased while returning the one it had read."""
    popped, left = await pop_raced_by_a_restart(
        sql_store,
        "raced",
        (Projection("user", "old secret"), '{"old": 1}'),
        (Projection("user", "new question"), '{"new": 1}'),
    )
    # The pop read the old item, found its row gone, and popped the newest item it then read.
    assert popped is not None and popped.item == {"new": 1}
    assert left == []


class ChunkRecorder:
    """A summarizer that keeps the first words of every message it is handed (so the fold is
    related to its chunk) and records each call's chunk."""

    def __init__(self) -> None:
        self.chunks: list[list[int]] = []

    async def __call__(self, messages: list[Message], ctx: HistoryPolicyContext) -> HistorySummary:
        self.chunks.append([m.seq or 0 for m in messages])
        return HistorySummary(text="\n".join(" ".join(m.content.split()[:4]) for m in messages))


async def test_a_run_larger_than_the_fold_budget_is_cut_where_the_adapter_allows(
    sql_store: SqlAgentStore,
) -> None:
    """Found by attack: a thread where no item starts a run is one run, and its first fold
    handed the summarizer every item in one call (folded whole). With the adapter's word, a
    run over the budget is cut before a call, never between the call and its output."""
    history = ThreadHistory(sql_store, "big-steps", max_items=10, links=pair_links)
    words = " ".join(f"word{j}" for j in range(60))
    await history.append(
        [
            item
            for n in range(100)
            for item in (
                (Projection("assistant", f"call{n} {words}"), f'{{"call": {n}}}'),
                (Projection("assistant", f"output{n} {words}"), f'{{"output": {n}}}'),
            )
        ]
    )
    recorder = ChunkRecorder()
    done = await history.compact(recorder, fold_max_tokens=2000)
    # The view's first row (seq 191, call 95) is taken: no item of these links leads another,
    # so the unread row before it cannot lead into it (`items_lead`).
    assert done.refused is None and done.folded == 190
    assert len(recorder.chunks) > 5  # not one call for the whole backlog
    assert max(len(c) for c in recorder.chunks) <= 20
    assert all(c[0] % 2 == 1 and c[-1] % 2 == 0 for c in recorder.chunks)  # call ... output
    view = await history.bounded()
    assert view.entries[0].item == {"call": 95}


def test_a_view_begins_where_no_answer_lacks_its_call() -> None:
    """Per index, not per item (found by review): with parallel calls, the second call is no
    place to begin (the first's output follows it), and a call is none after its reasoning."""
    a, b = Links(opens=frozenset({"a"})), Links(opens=frozenset({"b"}))
    out_a, out_b = Links(closes=frozenset({"a"})), Links(closes=frozenset({"b"}))
    reasoning = Links(leads=True)
    assert view_start([b, out_a, out_b, a, b, out_a, out_b], first_trusted=False) == 3
    assert view_start([out_b, reasoning, a, out_a], first_trusted=False) == 1
    assert view_start([a, out_a], first_trusted=True) == 0
    assert view_start([a, out_a], first_trusted=False) is None  # index 0 only when trusted
    assert view_start([out_a, out_b], first_trusted=False) is None


async def test_a_raced_pop_tells_apart_two_items_of_the_same_text(sql_store: SqlAgentStore) -> None:
    """Found by review: the pop's digest named the projection alone, and every unknown SDK item
    projects to "" (a repeated "hi" to itself): the raced pop erased the new thread's item."""
    popped, left = await pop_raced_by_a_restart(
        sql_store,
        "same-text",
        (Projection("assistant", ""), '{"secret": "OLD"}'),
        (Projection("assistant", ""), '{"secret": "NEW"}'),
    )
    assert popped is not None and popped.item == {"secret": "NEW"}
    assert left == []


def test_a_view_never_begins_on_a_call_beside_a_call_its_reasoning_led() -> None:
    """Found by review: the first of two parallel calls without its output yet (awaiting
    approval), the page cut before the reasoning item: the second call was a place to begin,
    and the view sent it without the reasoning item that made both."""
    a, b = Links(opens=frozenset({"a"})), Links(opens=frozenset({"b"}))
    out_b = Links(closes=frozenset({"b"}))
    reasoning = Links(leads=True)
    assert view_start([a, b, out_b], first_trusted=False) is None
    assert view_start([reasoning, a, b, out_b], first_trusted=True) == 0
    assert view_start([a, b, out_b], first_trusted=True) == 0  # nothing left out leads


async def test_a_write_cleared_under_it_twice_starts_the_thread_again_and_is_stored_once(
    sql_store: SqlAgentStore,
) -> None:
    """Found by attack: a write retried once after finding its thread cleared; a second clear
    between the restart and the retry (PostgreSQL, a clear every 30 ms: 6-10 of 150 writes)
    raised ThreadNotFound where the session promises to start afresh."""
    history = ThreadHistory(sql_store, "cleared-twice")
    await history.append(run(0, 4))
    store_append = sql_store.append_messages
    clears = 0

    async def cleared_first(thread_id: str, messages: Any, **kw: Any) -> Any:
        nonlocal clears
        if clears < 3:  # another session object clears it before each of three tries
            clears += 1
            await ThreadHistory(sql_store, "cleared-twice").clear()
        return await store_append(thread_id, messages, **kw)

    sql_store.append_messages = cleared_first  # type: ignore[method-assign]
    try:
        await history.append(run(1, 4))
    finally:
        del sql_store.append_messages

    assert clears == 3
    assert [e.item for e in await history.newest(10)] == [json.loads(t) for _, t in run(1, 4)]
