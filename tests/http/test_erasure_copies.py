"""Erasure follows the copies the project made of a message, on SQLite and PostgreSQL: a later
turn's `search_history` result that quoted it, that run's journal, and every view and prompt
built from them (issue 40, break 1)."""

from __future__ import annotations

import hashlib
import json
import uuid
from contextlib import AsyncExitStack

import httpx
import pytest

from bounded_agents.store.sql import SqlAgentStore
from tests.factories import summary_rows
from tests.http.conftest import (
    ALICE,
    ModuleFactory,
    http_settings,
    new_thread,
    open_client,
    post,
    transcript,
)
from tests.http.erasure import (
    SUMMARIZING,
    RecordingEcho,
    SeekerAgent,
    fetch_views,
    marker_hits,
)
from tests.http.test_openai_sdk import openai_app


async def _quoted_by_a_search(
    client: httpx.AsyncClient, store: SqlAgentStore, marker: str
) -> tuple[str, dict[str, object]]:
    """A `seeker` thread whose first message holds `marker`, folded into the summary, then a
    turn whose search found it: the thread's id and that turn's answer."""
    thread = await new_thread(client, agent_name="seeker")
    for text in [f"my secret is {marker}", "the boat is red", "the cat is Tom", "one", "two"]:
        r = await post(client, thread, text, agent_name="seeker")
        assert r.status_code == 200, r.text
    assert marker in (await summary_rows(store, thread))[-1][1]
    r = await post(client, thread, "/search_history secret", agent_name="seeker")
    assert r.status_code == 200, r.text
    answer = r.json()["message"]
    return thread, answer


async def test_an_erased_message_quoted_by_a_search_result_is_gone_from_every_copy(
    stack: AsyncExitStack, make_module: ModuleFactory, sql_store: SqlAgentStore
) -> None:
    model = RecordingEcho()
    module = make_module(model=model, agents=(SeekerAgent,), history=SUMMARIZING)
    client = await open_client(stack, openai_app(module))
    marker = f"MARK{uuid.uuid4().hex}"
    thread, answer = await _quoted_by_a_search(client, sql_store, marker)
    [result] = answer["tool_results"]
    hits = json.loads(result["content"])["results"]
    assert [h["seq"] for h in hits if marker in h["content"]] == [1], hits
    # the copies the attack found: the answer's tool result, its run's journal, every view
    assert {"messages.content", "messages.tool_results", "run_steps.payload"} <= set(
        await marker_hits(sql_store, marker)
    )
    views = await fetch_views(client, thread)
    assert all(marker in text for text in views.values()), [
        name for name, text in views.items() if marker not in text
    ]

    before = await transcript(client, thread)
    r = await client.delete(f"/threads/{thread}/messages/1", headers=ALICE)
    assert r.status_code == 204, r.text

    assert await marker_hits(sql_store, marker) == []
    after = await transcript(client, thread)
    # every other message as it was, at its seq: only the quote's text changed
    assert [(m["seq"], m["role"], m["content"]) for m in after] == [
        (m["seq"], m["role"], m["content"]) for m in before if m["seq"] != 1
    ]
    views = await fetch_views(client, thread)
    assert [name for name, text in views.items() if marker in text] == []
    # the search result keeps its shape and says what became of the row
    rows = (await client.get(f"/threads/{thread}/messages", headers=ALICE)).json()["messages"]
    searched = next(m for m in rows if m["tool_results"])
    quoted = json.loads(searched["tool_results"][0]["content"])["results"]
    erased = [h for h in quoted if h["seq"] == 1]
    assert erased == [{"seq": 1, "role": "user", "content": "[erased]"}], quoted
    assert all(h["content"] != "[erased]" for h in quoted if h["seq"] != 1)

    sent = len(model.sent)
    r = await post(client, thread, "what was it?", agent_name="seeker")
    assert r.status_code == 200, r.text
    after = model.sent[sent:]
    assert any(purpose == "chat" for purpose, _ in after)
    assert [text for _, text in after if marker in text] == []
    assert await marker_hits(sql_store, marker) == []


async def test_only_search_results_of_that_thread_after_the_message_are_rewritten(
    stack: AsyncExitStack, make_module: ModuleFactory, sql_store: SqlAgentStore
) -> None:
    """Another thread's search result quoting its own seq 1 keeps its text: the rewrite is by
    thread, and by seq within it."""
    client = await open_client(
        stack,
        openai_app(make_module(model=RecordingEcho(), agents=(SeekerAgent,), history=SUMMARIZING)),
    )
    marker, other = f"MARK{uuid.uuid4().hex}", f"KEEP{uuid.uuid4().hex}"
    thread, _ = await _quoted_by_a_search(client, sql_store, marker)
    kept_thread, _ = await _quoted_by_a_search(client, sql_store, other)

    r = await client.delete(f"/threads/{thread}/messages/1", headers=ALICE)
    assert r.status_code == 204, r.text

    assert await marker_hits(sql_store, marker) == []
    assert "messages.tool_results" in await marker_hits(sql_store, other)
    views = await fetch_views(client, kept_thread)
    assert other in views["messages"]


def _unkeyed_fingerprint(content: str) -> str:
    """What a guesser holding the database computes for a guessed content: the SHA-256 of the
    canonical request, as the fingerprint was before it was keyed."""
    canonical = json.dumps(
        {"route": "messages", "body": {"content": content}}, sort_keys=True, separators=(",", ":")
    )
    return hashlib.sha256(canonical.encode()).hexdigest()


@pytest.mark.parametrize("fingerprint_key", [None, "a-deployment-secret-of-32-chars!!"])
async def test_an_erased_keyed_turn_s_fingerprint_confirms_no_guess(
    stack: AsyncExitStack,
    make_module: ModuleFactory,
    sql_store: SqlAgentStore,
    fingerprint_key: str | None,
) -> None:
    settings = http_settings(fingerprint_key=fingerprint_key)
    client = await open_client(
        stack, openai_app(make_module(model=RecordingEcho(), settings=settings))
    )
    content = f"my secret is MARK{uuid.uuid4().hex}"
    thread = await new_thread(client)
    headers = {**ALICE, "Idempotency-Key": "k-1"}
    r = await client.post(
        f"/agents/helper/threads/{thread}/messages", headers=headers, json={"content": content}
    )
    assert r.status_code == 200, r.text
    again = await client.post(
        f"/agents/helper/threads/{thread}/messages", headers=headers, json={"content": content}
    )
    assert again.json()["run_id"] == r.json()["run_id"]  # the key still answers the repeat
    other = await client.post(
        f"/agents/helper/threads/{thread}/messages", headers=headers, json={"content": "other"}
    )
    assert other.status_code == 422, other.text  # and still tells another request apart

    r = await client.delete(f"/threads/{thread}/messages/1", headers=ALICE)
    assert r.status_code == 204, r.text

    guess = _unkeyed_fingerprint(content)
    assert await marker_hits(sql_store, guess) == []
    assert await marker_hits(sql_store, content) == []
