"""Erasure over HTTP, on SQLite and PostgreSQL: a deleted message leaves no byte of itself in any
table (summaries and journals included), the summary is folded again without it, and a deleted
thread is gone but for its ledger rows."""

from __future__ import annotations

import uuid
from contextlib import AsyncExitStack

import httpx

from bounded_agents.store.sql import SqlAgentStore
from tests.factories import summary_rows
from tests.http.conftest import (
    ALICE,
    ModuleFactory,
    make_app,
    new_thread,
    open_client,
    post,
    transcript,
)
from tests.http.erasure import SUMMARIZING, RecordingEcho, marker_hits

FACTS = ["the cat is called Tom", "the boat is red", "the key is under the mat"]


async def _summarized(
    client: httpx.AsyncClient, store: SqlAgentStore, marker: str
) -> tuple[str, list[dict[str, object]]]:
    """A thread whose first message holds `marker`, then the facts, then turns until a summary
    covers the first message: its id and transcript."""
    thread = await new_thread(client)
    for text in [f"my secret is {marker}", *FACTS, "one more thing", "and another"]:
        r = await post(client, thread, text)
        assert r.status_code == 200, r.text
    summaries = await summary_rows(store, thread)
    assert summaries and marker in summaries[-1][1], summaries
    return thread, await transcript(client, thread)


async def test_a_deleted_message_is_in_no_column_of_any_table_nor_in_the_next_prompt(
    stack: AsyncExitStack, make_module: ModuleFactory, sql_store: SqlAgentStore
) -> None:
    model = RecordingEcho()
    client = await open_client(stack, make_app(make_module(model=model, history=SUMMARIZING)))
    marker = f"MARK{uuid.uuid4().hex}"
    thread, messages = await _summarized(client, sql_store, marker)
    before = set(await marker_hits(sql_store, marker))
    # the scan sees it wherever it went: the row, the summary, the journal, the run's request
    assert {"messages.content", "thread_summaries.text", "run_steps.payload", "runs.request"} <= (
        before
    )
    seq = next(m["seq"] for m in messages if marker in str(m["content"]))

    r = await client.delete(f"/threads/{thread}/messages/{seq}", headers=ALICE)
    assert r.status_code == 204, r.text
    assert r.content == b""

    assert await marker_hits(sql_store, marker) == []
    sent = len(model.sent)
    r = await post(client, thread, "what do you know?")
    assert r.status_code == 200, r.text
    after = model.sent[sent:]
    assert any(purpose == "chat" for purpose, _ in after)
    assert all(marker not in text for _, text in after), after
    assert await marker_hits(sql_store, marker) == []
    assert all(marker not in str(m["content"]) for m in await transcript(client, thread))


async def test_an_erased_message_s_summary_is_folded_again_without_it_keeping_the_other_facts(
    stack: AsyncExitStack, make_module: ModuleFactory, sql_store: SqlAgentStore
) -> None:
    client = await open_client(
        stack, make_app(make_module(model=RecordingEcho(), history=SUMMARIZING))
    )
    marker = f"MARK{uuid.uuid4().hex}"
    thread, messages = await _summarized(client, sql_store, marker)
    covered = (await summary_rows(sql_store, thread))[-1][0]
    seq = next(m["seq"] for m in messages if marker in str(m["content"]))
    assert (
        await client.delete(f"/threads/{thread}/messages/{seq}", headers=ALICE)
    ).status_code == 204
    assert all(boundary < seq for boundary, _ in await summary_rows(sql_store, thread))

    for i in range(3):
        assert (await post(client, thread, f"later {i}")).status_code == 200
    boundary, text = (await summary_rows(sql_store, thread))[-1]
    assert boundary >= covered  # the erased span is summarized again, and past it
    assert marker not in text
    for fact in FACTS:
        assert fact in text, text
    window = (await client.get(f"/threads/{thread}/window", headers=ALICE)).json()
    assert window["summary"]["covers_through_seq"] == boundary
    assert marker not in window["summary"]["text"]


async def test_a_fold_span_erased_whole_costs_no_call_and_later_folds_step_over_the_gap(
    stack: AsyncExitStack, make_module: ModuleFactory, sql_store: SqlAgentStore
) -> None:
    model = RecordingEcho()
    client = await open_client(stack, make_app(make_module(model=model, history=SUMMARIZING)))
    thread = await new_thread(client)
    for i in range(6):
        assert (await post(client, thread, f"turn {i}")).status_code == 200
    boundary = (await summary_rows(sql_store, thread))[-1][0]
    erased = range(boundary + 1, boundary + 7)
    for seq in erased:
        r = await client.delete(f"/threads/{thread}/messages/{seq}", headers=ALICE)
        assert r.status_code == 204, r.text

    summaries = len([p for p, _ in model.sent if p == "history_summary"])
    r = await post(client, thread, "after the erasure")
    assert r.status_code == 200, r.text
    folded = r.json()["report"]["summary"]
    assert (folded["rejected_reasons"], folded["calls"]) == (["erased"], 0)
    assert len([p for p, _ in model.sent if p == "history_summary"]) == summaries
    for i in range(3):
        assert (await post(client, thread, f"later {i}")).status_code == 200
    newest = (await summary_rows(sql_store, thread))[-1][0]
    assert newest > erased[-1]
    seqs = [m["seq"] for m in await transcript(client, thread)]
    assert not set(erased) & set(seqs)
