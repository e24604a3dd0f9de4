"""Threads, transcript paging and the window preview."""

from __future__ import annotations

from contextlib import AsyncExitStack

import httpx

from tests.http.conftest import (
    ALICE,
    ModuleFactory,
    assert_error,
    make_app,
    new_thread,
    open_client,
    post,
    transcript,
)


async def test_create_thread_returns_201_with_its_id_agent_and_title(
    client: httpx.AsyncClient,
) -> None:
    r = await client.post("/agents/helper/threads", headers=ALICE, json={"title": "Pages"})
    assert r.status_code == 201
    body = r.json()
    assert set(body) == {"id", "agent", "title"}
    assert body["agent"] == "helper" and body["title"] == "Pages"

    bare = await client.post("/agents/helper/threads", headers=ALICE)  # the body is optional
    assert bare.status_code == 201 and bare.json()["title"] is None


async def test_create_thread_refuses_unknown_agent_and_long_title(
    client: httpx.AsyncClient,
) -> None:
    assert_error(
        await client.post("/agents/nobody/threads", headers=ALICE, json={}), 404, "agent_not_found"
    )
    long = await client.post("/agents/helper/threads", headers=ALICE, json={"title": "t" * 501})
    assert_error(long, 422, "validation_error")
    extra = await client.post("/agents/helper/threads", headers=ALICE, json={"owner": "bob"})
    assert_error(extra, 422, "validation_error")


async def test_get_thread_shows_its_metadata(client: httpx.AsyncClient) -> None:
    r = await client.post("/agents/helper/threads", headers=ALICE, json={"title": "T"})
    thread_id = r.json()["id"]
    got = await client.get(f"/threads/{thread_id}", headers=ALICE)
    assert got.status_code == 200
    body = got.json()
    assert set(body) == {"id", "agent", "title", "created_at", "updated_at"}
    assert (body["id"], body["agent"], body["title"]) == (thread_id, "helper", "T")
    assert body["created_at"] is not None
    # the canonical form of an id is not required: any spelling of the UUID finds the thread
    upper = await client.get(f"/threads/{thread_id.upper()}", headers=ALICE)
    assert upper.status_code == 200 and upper.json()["id"] == thread_id


async def test_messages_are_paged_newest_page_first_oldest_first_within(
    client: httpx.AsyncClient,
) -> None:
    thread_id = await new_thread(client)
    for i in range(3):
        assert (await post(client, thread_id, f"message {i}")).status_code == 200
    everything = await transcript(client, thread_id)
    assert [m["seq"] for m in everything] == [1, 2, 3, 4, 5, 6]
    assert [m["role"] for m in everything] == ["user", "assistant"] * 3

    first = await client.get(f"/threads/{thread_id}/messages", headers=ALICE, params={"limit": 4})
    page = first.json()
    assert [m["seq"] for m in page["messages"]] == [3, 4, 5, 6]
    assert page["next_before"] == 3
    older = await client.get(
        f"/threads/{thread_id}/messages",
        headers=ALICE,
        params={"limit": 4, "before": page["next_before"]},
    )
    assert [m["seq"] for m in older.json()["messages"]] == [1, 2]
    assert older.json()["next_before"] is None

    exact = await client.get(f"/threads/{thread_id}/messages", headers=ALICE, params={"limit": 6})
    assert exact.json()["next_before"] is None  # nothing older: no empty page to ask for


async def test_message_paging_parameters_are_validated(client: httpx.AsyncClient) -> None:
    thread_id = await new_thread(client)
    lax = ({"before": "1.0"}, {"before": "+2"}, {"before": " 3"}, {"before": "1_0"})
    for params in ({"limit": 0}, {"limit": 201}, {"before": 0}, {"limit": "many"}, *lax):
        r = await client.get(f"/threads/{thread_id}/messages", headers=ALICE, params=params)
        assert_error(r, 422, "validation_error")


async def test_window_shows_kept_messages_with_token_estimates(client: httpx.AsyncClient) -> None:
    thread_id = await new_thread(client)
    assert (await post(client, thread_id, "/read_page https://example.org")).status_code == 200
    r = await client.get(f"/threads/{thread_id}/window", headers=ALICE)
    assert r.status_code == 200
    window = r.json()
    assert set(window) == {
        "thread_id",
        "agent",
        "read_bound",
        "read_token_bound",
        "read_run_bound",
        "kept",
        "dropped_read_count",
        "dropped_count",  # deprecated alias, one release
        "dropped",
        "summarizes",
        "summary",
        "next_fold",
        "total_tokens",
    }
    assert window["thread_id"] == thread_id and window["agent"] == "helper"
    assert window["read_bound"] == 20
    assert [m["role"] for m in window["kept"]] == ["user", "assistant"]
    assert all(m["tokens"] > 0 for m in window["kept"])
    # the page the tool read rides on the assistant message and dominates the estimate
    assert window["kept"][1]["tokens"] > 4000
    assert window["total_tokens"] == sum(m["tokens"] for m in window["kept"])
    assert window["dropped_read_count"] == 0 and window["dropped"] == []
    assert window["summarizes"] is False


async def test_window_and_run_report_show_the_rolling_summary(
    stack: AsyncExitStack, make_module: ModuleFactory
) -> None:
    """`GET /window` shows the summary (text and boundary) and the fold the next turn would
    make; a run's report says whether it made the summary or reused it, and from what."""
    module = make_module(history={"max_messages": 2, "summarize": True, "fold_messages": 4})
    client = await open_client(stack, make_app(module))
    thread_id = await new_thread(client)
    reports = []
    for i in range(5):
        r = await post(client, thread_id, f"question {i}")
        assert r.status_code == 200, r.text
        reports.append(r.json()["report"])
    made = [r for r in reports if r["summary"] and r["summary"]["made"]]
    reused = [r for r in reports if r["summary"] and not r["summary"]["made"]]
    assert made and reused, [r["summary"] for r in reports]
    first = made[0]["summary"]
    assert first["previous_covers_through_seq"] is None and first["folds"] == 1
    assert first["input_messages"] == first["covers_through_seq"]
    assert first["input_tokens"] > 0
    run = await client.get(f"/runs/{made[0]['run_id']}", headers=ALICE)
    assert run.json()["summary"] == first

    window = (await client.get(f"/threads/{thread_id}/window", headers=ALICE)).json()
    summary = window["summary"]
    assert summary["covers_through_seq"] == reports[-1]["summary"]["covers_through_seq"]
    assert summary["text"].startswith("Summary of ")
    assert window["read_bound"] == 6  # the window plus a fold batch
    # Ten messages, five summarized: the next turn's own message reaches the high mark (6), so
    # it will fold 6..9 and keep the newest stored message beside its own.
    assert window["next_fold"] == {"from_seq": 6, "through_seq": 9, "messages": 4}
    assert window["summarizes"] is True
    assert [m["seq"] for m in window["kept"]] == [10]
    assert [m["seq"] for m in window["dropped"]] == [6, 7, 8, 9]


async def test_window_names_its_dropped_count_for_the_rows_read_not_the_thread(
    stack: AsyncExitStack, make_module: ModuleFactory
) -> None:
    """Issue 40: `dropped_count` counted the rows the bounded read returned and the policy did
    not keep, never the thread's older messages, and its name said otherwise. It is now
    `dropped_read_count`; `dropped_count` stays one release as a deprecated alias."""
    client = await open_client(stack, make_app(make_module(history={"max_messages": 3})))
    thread_id = await new_thread(client)
    for i in range(5):
        assert (await post(client, thread_id, f"turn {i}")).status_code == 200
    window = (await client.get(f"/threads/{thread_id}/window", headers=ALICE)).json()

    older = 10 - len(window["kept"])  # what the thread holds that the window does not send
    assert window["dropped_read_count"] == len(window["dropped"]) < older
    assert window["dropped_count"] == window["dropped_read_count"]
    spec = (await client.get("/openapi.json")).json()
    fields = spec["components"]["schemas"]["WindowOut"]["properties"]
    assert fields["dropped_count"].get("deprecated") is True
    assert "dropped_read_count" in fields["dropped_count"]["description"]
    assert "not the thread" in fields["dropped_read_count"]["description"]
