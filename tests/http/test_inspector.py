"""The inspector pages: what they show against the run reports, escaping, and actor isolation.

The browser test (`tests/browser/`) drives the same pages in Chromium; these read the HTML.
"""

from __future__ import annotations

import asyncio
import re
from contextlib import AsyncExitStack
from html.parser import HTMLParser
from typing import Any

import httpx
import pytest

from bounded_agents.core.ports import ModelResponse, Usage
from bounded_agents.http.inspector import LOGIN_BODY_LIMIT
from bounded_agents.providers import EchoModel
from bounded_agents.testing import Gate, ScriptedProvider, reply
from tests.http.conftest import (
    ALICE,
    BOB,
    ModuleFactory,
    http_settings,
    make_app,
    new_thread,
    open_client,
    post,
)

SUMMARIZING = {"max_messages": 4, "summarize": True}


class Turns(HTMLParser):
    """Each `li.turn`'s data attributes and the numbers in its `strong.*-n` elements."""

    def __init__(self) -> None:
        super().__init__()
        self.turns: list[dict[str, Any]] = []
        self._field: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        classes = (a.get("class") or "").split()
        if tag == "li" and "turn" in classes:
            self.turns.append({"run": a["data-run"], "status": a["data-status"]})
        elif self.turns and any(c.endswith("-n") for c in classes):
            self._field = next(c for c in classes if c.endswith("-n"))[:-2]

    def handle_data(self, data: str) -> None:
        if self._field is not None:
            self.turns[-1][self._field] = int(data)
            self._field = None


def turns_of(html: str) -> dict[str, dict[str, Any]]:
    parser = Turns()
    parser.feed(html)
    return {t["run"]: t for t in parser.turns}


async def summarized_thread(client: httpx.AsyncClient, turns: int = 8) -> tuple[str, list[Any]]:
    thread = await new_thread(client)
    reports = []
    for i in range(turns):
        r = await post(client, thread, f"question {i}: what did we say before?")
        assert r.status_code == 200, r.text
        reports.append(r.json()["report"])
    return thread, reports


async def test_the_timeline_shows_each_turn_as_its_run_report_measured_it(
    stack: AsyncExitStack, make_module: ModuleFactory
) -> None:
    client = await open_client(stack, make_app(make_module(history=SUMMARIZING)))
    thread, reports = await summarized_thread(client)
    r = await client.get(f"/inspect/threads/{thread}", headers=ALICE)
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/html")
    shown = turns_of(r.text)
    assert list(shown) == [rep["run_id"] for rep in reversed(reports)]  # newest first
    made = 0
    for report in reports:
        turn = shown[report["run_id"]]
        chat = next(c for c in report["model_calls"] if c["purpose"] == "chat")
        summary = report["summary"]
        # the prompt was: system prompt + (summary) + kept messages
        assert chat["messages_original"] == 1 + (summary is not None) + turn["kept"], turn
        assert turn["summarized"] == (summary["covers_through_seq"] if summary else 0)
        assert turn["dropped"] == 0  # a rolling summary leaves nothing out unsummarized
        assert turn["status"] == "completed"
        made += bool(summary and summary["made"])
    assert made >= 1, "the thread folded at least once"
    assert r.text.count("summary made") == made
    # the run page has the report's figures
    last = reports[-1]
    page = (await client.get(f"/inspect/runs/{last['run_id']}", headers=ALICE)).text
    assert f'<span class="rows-read">{last["rows_read"]}</span>' in page
    assert f'<span class="bytes-read">{last["bytes_read"]}</span>' in page
    for name, size in last["journal_bytes"].items():
        assert re.search(rf"<code>{re.escape(name)}</code></td><td class=\"num\">{size}<", page)


async def test_a_dropping_window_shows_what_it_dropped(
    stack: AsyncExitStack, make_module: ModuleFactory
) -> None:
    client = await open_client(stack, make_app(make_module(history={"max_messages": 3})))
    thread, reports = await summarized_thread(client, turns=4)
    shown = turns_of((await client.get(f"/inspect/threads/{thread}", headers=ALICE)).text)
    for n, report in enumerate(reports):
        turn = shown[report["run_id"]]
        length = 2 * n + 1  # the user message of turn n is message 2n+1
        assert turn["kept"] == min(3, length) == report["rows_read"]
        assert turn["dropped"] == length - turn["kept"]
        assert turn["summarized"] == 0


async def test_each_turns_kept_messages_are_shown_from_their_rows_read_once_a_page(
    stack: AsyncExitStack, make_module: ModuleFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`load:thread` names the kept messages by seq (issue 37, sixth round): the page reads
    their rows, one read for all its turns, and shows each turn's own window."""
    module = make_module(history={"max_messages": 3})
    client = await open_client(stack, make_app(module))
    thread, _ = await summarized_thread(client, turns=4)
    reads: list[tuple[int, int]] = []
    store = type(module.store)
    original = store.messages_after

    async def counted(self: Any, thread_id: str, after_seq: int, limit: int) -> Any:
        reads.append((after_seq, limit))
        return await original(self, thread_id, after_seq, limit)

    monkeypatch.setattr(store, "messages_after", counted)
    page = (await client.get(f"/inspect/threads/{thread}", headers=ALICE)).text
    kept = re.findall(r'<h4>Kept messages[^<]*</h4>\s*<ol class="kept">(.*?)</ol>', page, re.S)
    texts = [re.findall(r'<pre class="text">(.*?)</pre>', k, re.S) for k in kept]
    assert len(texts) == 4  # one list a turn
    newest = [t for t in texts if t and t[-1].startswith("question 3")]
    assert len(newest) == 1 and len(newest[0]) == 3, texts
    assert newest[0][0].startswith("question 2") and "question 2" in newest[0][1]
    assert reads == [(0, 7)], "one read of the page's kept span (seqs 1 to 7)"


async def test_a_message_holding_a_script_tag_renders_as_text(
    stack: AsyncExitStack, make_module: ModuleFactory
) -> None:
    client = await open_client(stack, make_app(make_module(history=SUMMARIZING)))
    hostile = '<script>alert("pwned")</script><img src=x onerror=alert(1)>'
    r = await client.post("/agents/helper/threads", headers=ALICE, json={"title": hostile})
    thread = r.json()["id"]
    for _ in range(6):  # enough turns that the hostile text also reaches the summary
        assert (await post(client, thread, hostile)).status_code == 200
    pages = [
        await client.get("/inspect/", headers=ALICE),
        await client.get(f"/inspect/threads/{thread}", headers=ALICE),
        await client.get(f"/inspect/threads/{thread}/timeline", headers=ALICE),
    ]
    for page in pages:
        assert page.status_code == 200
        assert "<script>alert" not in page.text and "<img src=x" not in page.text
        assert "&lt;script&gt;alert(&#34;pwned&#34;)&lt;/script&gt;" in page.text
        # the only script a page loads is the inspector's own, from its own origin
        assert re.findall(r"<script[^>]*>", page.text) in (
            [],
            ['<script src="/inspect/static/inspector.js" defer>'],
        )
    csp = pages[1].headers["content-security-policy"]
    assert "script-src 'self'" in csp and "unsafe-inline" not in csp
    assert pages[1].text.count("&lt;script&gt;") >= 6


async def test_every_inspector_route_is_isolated_by_actor(
    stack: AsyncExitStack, make_module: ModuleFactory
) -> None:
    client = await open_client(stack, make_app(make_module()))
    thread = await new_thread(client, ALICE)
    run_id = (await post(client, thread, "alice's secret")).json()["run_id"]
    routes = [
        f"/inspect/threads/{thread}",
        f"/inspect/threads/{thread}/timeline",
        f"/inspect/runs/{run_id}",
    ]
    for url in routes:
        assert (await client.get(url, headers=ALICE)).status_code == 200, url
        as_bob = await client.get(url, headers=BOB)
        assert as_bob.status_code == 404, url
        assert "alice&#39;s secret" not in as_bob.text and thread not in as_bob.text[:0] + ""
        assert (await client.get(url)).status_code == 401, url  # nobody
        wrong = await client.get(url, headers={"Authorization": "Bearer nope"})
        assert wrong.status_code == 401, url
    # lists: each actor sees only their own threads
    assert thread in (await client.get("/inspect/", headers=ALICE)).text
    assert thread not in (await client.get("/inspect/", headers=BOB)).text
    nobody = await client.get("/inspect/")
    assert nobody.status_code == 401 and 'name="key"' in nobody.text  # the sign-in form
    # ids that are not UUIDs are the same 404
    assert (await client.get("/inspect/threads/nope", headers=ALICE)).status_code == 404
    assert (await client.get("/inspect/runs/nope", headers=ALICE)).status_code == 404


async def test_signing_in_keeps_the_key_in_a_cookie_the_resolver_reads(
    stack: AsyncExitStack, make_module: ModuleFactory
) -> None:
    client = await open_client(stack, make_app(make_module()))
    thread = await new_thread(client, ALICE)
    bad = await client.post("/inspect/login", content="key=wrong", headers=_FORM)
    assert bad.status_code == 401 and "names no actor" in bad.text
    signed = await client.post("/inspect/login", content="key=key-b", headers=_FORM)
    assert signed.status_code == 303 and signed.headers["location"] == "/inspect/"
    cookie = signed.headers["set-cookie"].lower()
    assert "httponly" in cookie and "samesite=strict" in cookie and "path=/inspect" in cookie
    listing = await client.get("/inspect/")  # the client keeps the cookie: bob, no header
    assert listing.status_code == 200 and "actor <strong>bob</strong>" in listing.text
    assert (await client.get(f"/inspect/threads/{thread}")).status_code == 404  # alice's
    await client.post("/inspect/logout")
    assert (await client.get("/inspect/")).status_code == 401


async def test_a_sign_in_form_over_its_limit_is_a_413_page_and_signs_nobody_in(
    stack: AsyncExitStack, make_module: ModuleFactory
) -> None:
    """The anonymous form is read up to `LOGIN_BODY_LIMIT` only (found by attack: it was read
    whole; tests/reliability/test_inspector_login_body.py measures the memory): a valid key
    padded past the limit is refused, a form at the limit still signs in."""
    client = await open_client(stack, make_app(make_module()))
    padded = "key=key-b&pad=" + "x" * LOGIN_BODY_LIMIT
    r = await client.post("/inspect/login", content=padded, headers=_FORM)
    assert r.status_code == 413 and "too large" in r.text
    assert r.headers["content-type"].startswith("text/html") and "set-cookie" not in r.headers
    at_limit = "key=key-b&pad=" + "x" * (LOGIN_BODY_LIMIT - len("key=key-b&pad="))
    signed = await client.post("/inspect/login", content=at_limit, headers=_FORM)
    assert signed.status_code == 303 and "set-cookie" in signed.headers


_FORM = {"Content-Type": "application/x-www-form-urlencoded"}

CROSS_SITE = [
    {"Origin": "http://evil.example"},
    {"Origin": "http://evil.example", "Sec-Fetch-Site": "cross-site"},
    {"Sec-Fetch-Site": "cross-site"},
    {"Sec-Fetch-Site": "same-site"},  # a sibling subdomain is another site's page too
    {"Origin": "null"},  # a sandboxed frame or a redirect hides where it came from
    {"Origin": "http://test.evil.example"},
    {"Origin": "http://test", "Sec-Fetch-Site": "cross-site"},  # the browser's word wins
]
SAME_ORIGIN = [
    {"Origin": "http://test", "Sec-Fetch-Site": "same-origin"},
    {"Origin": "http://test"},  # a browser without Fetch Metadata
    {"Sec-Fetch-Site": "none"},  # the user's own action
    {},  # no browser at all (curl, a script): as it always was
]


async def test_a_cross_site_login_is_refused_and_sets_no_cookie(
    stack: AsyncExitStack, make_module: ModuleFactory
) -> None:
    """Found by attack: a form on evil.example posting the attacker's key to /inspect/login got
    a 303 and the cookie (login CSRF: the victim then works in the attacker's account)."""
    client = await open_client(stack, make_app(make_module()))
    for headers in CROSS_SITE:
        r = await client.post("/inspect/login", content="key=key-b", headers={**_FORM, **headers})
        assert r.status_code == 403, (headers, r.status_code)
        assert "set-cookie" not in r.headers, headers
        assert r.headers["content-type"].startswith("text/html"), headers
        assert "another site is refused" in r.text, headers
        assert (await client.get("/inspect/")).status_code == 401, headers  # still signed out
    for headers in SAME_ORIGIN:
        r = await client.post("/inspect/login", content="key=key-b", headers={**_FORM, **headers})
        assert r.status_code == 303 and "set-cookie" in r.headers, (headers, r.status_code)


async def test_a_cross_site_logout_is_refused_and_keeps_the_session(
    stack: AsyncExitStack, make_module: ModuleFactory
) -> None:
    client = await open_client(stack, make_app(make_module()))
    signed = await client.post("/inspect/login", content="key=key-a", headers=_FORM)
    assert signed.status_code == 303
    for headers in CROSS_SITE:
        r = await client.post("/inspect/logout", headers=headers)
        assert r.status_code == 403 and "set-cookie" not in r.headers, headers
        assert (await client.get("/inspect/")).status_code == 200, headers  # still signed in
    same = await client.post("/inspect/logout", headers=SAME_ORIGIN[0])
    assert same.status_code == 303 and "set-cookie" in same.headers
    assert (await client.get("/inspect/")).status_code == 401


async def test_a_page_number_out_of_range_is_a_400_page_not_a_database_error(
    stack: AsyncExitStack, make_module: ModuleFactory
) -> None:
    """`?page=` and `?before=` past what the database holds used to reach the SQL (503 on
    PostgreSQL, 500 on SQLite); now the inspector answers with a page of its own."""
    client = await open_client(stack, make_app(make_module()))
    thread = await new_thread(client)
    urls = [
        *(f"/inspect/?page={n}" for n in ("0", "-1", str(10**20), "two")),
        *(
            f"/inspect/threads/{thread}?before={n}"
            for n in ("0", str(2**31), str(2**63), "1.0", "%2B2", "%203")
        ),
        f"/inspect/threads/{thread}/timeline?before={2**31}",
    ]
    for url in urls:
        r = await client.get(url, headers=ALICE)
        assert r.status_code == 400, (url, r.text)
        assert r.headers["content-type"].startswith("text/html"), url
        assert r.headers["content-security-policy"].startswith("default-src 'none'"), url
        assert "page:" in r.text or "before:" in r.text, (url, r.text)
    assert (await client.get(f"/inspect/?page={2**31 // 25}", headers=ALICE)).status_code == 200


async def test_a_turn_in_flight_is_on_the_timeline_with_its_checkpoints(
    stack: AsyncExitStack, make_module: ModuleFactory
) -> None:
    gate = Gate(reply("late"))
    client = await open_client(stack, make_app(make_module(model=ScriptedProvider([gate]))))
    thread = await new_thread(client)
    turn = asyncio.create_task(post(client, thread, "slow one"))
    await gate.reached()
    fragment = await client.get(f"/inspect/threads/{thread}/timeline", headers=ALICE)
    (running,) = turns_of(fragment.text).values()
    assert running["status"] == "running"
    assert "load:thread" in fragment.text and "<html" not in fragment.text
    gate.release.set()
    assert (await turn).status_code == 200
    fragment = await client.get(f"/inspect/threads/{thread}/timeline", headers=ALICE)
    (done,) = turns_of(fragment.text).values()
    assert done["status"] == "completed"


async def test_the_thread_list_is_newest_first_and_paged(
    stack: AsyncExitStack, make_module: ModuleFactory
) -> None:
    client = await open_client(stack, make_app(make_module()))
    threads = [await new_thread(client) for _ in range(27)]
    await asyncio.sleep(1.1)  # SQLite's CURRENT_TIMESTAMP counts whole seconds
    assert (await post(client, threads[0], "now the newest")).status_code == 200
    first = (await client.get("/inspect/", headers=ALICE)).text
    second = (await client.get("/inspect/?page=2", headers=ALICE)).text
    order = re.findall(r'href="/inspect/threads/([0-9a-f-]{36})"', first + second)
    assert order[0] == threads[0]
    assert sorted(order) == sorted(threads) and len(order) == 27
    assert 'href="/inspect/?page=2"' in first and 'href="/inspect/?page=1"' in second


async def test_inspector_and_metrics_are_off_by_setting(
    stack: AsyncExitStack, make_module: ModuleFactory
) -> None:
    settings = http_settings(inspector=False, metrics=False)
    client = await open_client(stack, make_app(make_module(settings=settings)))
    assert (await client.get("/inspect/", headers=ALICE)).status_code == 404
    assert (await client.get("/metrics")).status_code == 404


async def test_the_script_and_styles_are_served_from_the_package(
    stack: AsyncExitStack, make_module: ModuleFactory
) -> None:
    client = await open_client(stack, make_app(make_module(model=EchoModel())))
    js = await client.get("/inspect/static/inspector.js")
    assert js.status_code == 200 and js.headers["content-type"].startswith("text/javascript")
    assert "innerHTML" in js.text and "http" not in js.text.replace("text/html", "")  # no CDN
    assert (await client.get("/inspect/static/inspector.css")).status_code == 200
    assert (await client.get("/inspect/static/..%2Fschemas.py")).status_code == 404


LOG_OUT = 'action="/inspect/logout"'


async def test_local_mode_pages_offer_no_log_out_since_every_request_is_actor_local(
    stack: AsyncExitStack, make_module: ModuleFactory
) -> None:
    module = make_module(settings=http_settings(api_keys=None))
    client = await open_client(stack, make_app(module))
    thread = await new_thread(client, headers={})
    for page in ("/inspect/", f"/inspect/threads/{thread}"):
        r = await client.get(page)
        assert r.status_code == 200 and "actor <strong>local</strong>" in r.text
        assert LOG_OUT not in r.text


async def test_pages_signed_in_with_an_api_key_offer_log_out(
    stack: AsyncExitStack, make_module: ModuleFactory
) -> None:
    client = await open_client(stack, make_app(make_module()))
    thread = await new_thread(client, ALICE)
    for page in ("/inspect/", f"/inspect/threads/{thread}"):
        r = await client.get(page, headers=ALICE)
        assert r.status_code == 200 and "actor <strong>alice</strong>" in r.text
        assert LOG_OUT in r.text


class EmptySummaries:
    """One model for chat and summaries: the chat answers, every summary comes back empty."""

    model = "empty-summaries"

    async def complete(self, request: Any) -> Any:
        from bounded_agents.core.ports import ModelResponse

        if request.purpose == "history_summary":
            return ModelResponse(content="", finish_reason="stop")
        return ModelResponse(content="answer", finish_reason="stop")


def _memory_health(html: str) -> dict[str, str]:
    found = re.search(r'<dl class="facts memory-health">(.*?)</dl>', html, re.S)
    assert found, "the thread page shows the memory health"
    return {
        k: " ".join(v.split())
        for k, v in re.findall(r'<dd class="([a-z-]+)">(.*?)</dd>', found.group(1), re.S)
    }


async def test_the_thread_page_shows_the_memory_health_of_a_failing_summarizer(
    stack: AsyncExitStack, make_module: ModuleFactory
) -> None:
    """Issue 36: the last fold's outcome, the backoff, the messages owed and the archived
    notes, as the store and the next turn's fold have them."""
    module = make_module(model=EmptySummaries(), history=SUMMARIZING)
    client = await open_client(stack, make_app(module))
    thread, reports = await summarized_thread(client, turns=8)
    last = reports[-1]["summary"]
    assert last["failures"] >= 2
    html = (await client.get(f"/inspect/threads/{thread}", headers=ALICE)).text
    shown = _memory_health(html)
    health = await module.store.fold_health(thread)  # type: ignore[attr-defined]
    assert health is not None and health.outcome == "empty"
    assert shown["last-fold"] == f"empty ({health.failures} failed in a row)"
    owed = int(shown["owed"])
    assert owed >= last["pending"] > 0, "what the summary does not cover, beyond the window"
    waits = last["backoff_turns"] if last["outcome"] == "backoff" else None
    if waits:
        assert shown["backoff"] == f"the next {waits} turn{'s' if waits != 1 else ''} will not fold"
    parts = await module.store.archived_parts(thread)  # type: ignore[attr-defined]
    assert shown["archived"] == str(len(parts)), "the store's archived summary parts, counted"


async def test_the_messages_owed_after_an_erasure_count_the_messages_left_not_their_seqs(
    stack: AsyncExitStack, make_module: ModuleFactory
) -> None:
    """An erased message leaves its seq: the inspector counted the fold's seq span as the
    messages owed (the turn's report already counted messages), so it showed more owed than
    the thread holds. Now the window's `next_fold.messages`, and the page, count them."""
    module = make_module(model=EmptySummaries(), history=SUMMARIZING)
    client = await open_client(stack, make_app(module))
    thread, _ = await summarized_thread(client, turns=8)
    for seq in (2, 3, 5):
        r = await client.delete(f"/threads/{thread}/messages/{seq}", headers=ALICE)
        assert r.status_code == 204, r.text

    fold = (await client.get(f"/threads/{thread}/window", headers=ALICE)).json()["next_fold"]
    stored = await module.store.get_thread(thread)
    assert stored is not None
    held = [
        m.seq for m in stored.messages if fold["from_seq"] <= (m.seq or 0) <= fold["through_seq"]
    ]
    assert fold["from_seq"] == 1 and fold["through_seq"] - fold["from_seq"] + 1 == len(held) + 3
    assert fold["messages"] == len(held)
    html = (await client.get(f"/inspect/threads/{thread}", headers=ALICE)).text
    assert _memory_health(html)["owed"] == str(len(held))


async def test_a_healthy_summarizing_thread_shows_ok_and_a_plain_window_shows_none(
    stack: AsyncExitStack, make_module: ModuleFactory
) -> None:
    client = await open_client(stack, make_app(make_module(history=SUMMARIZING)))
    thread, reports = await summarized_thread(client, turns=8)
    assert any(r["summary"] and r["summary"]["made"] for r in reports)
    shown = _memory_health((await client.get(f"/inspect/threads/{thread}", headers=ALICE)).text)
    assert shown["last-fold"] == "ok"
    assert shown["archived"] == "0", "a store with an archive counts it, none archived yet"
    assert shown["backoff"] == "none: the next turn may fold"

    plain = await open_client(stack, make_app(make_module(history={"max_messages": 3})))
    thread, _ = await summarized_thread(plain, turns=2)
    html = (await plain.get(f"/inspect/threads/{thread}", headers=ALICE)).text
    assert "memory-health" not in html


async def test_the_run_page_ledger_shows_the_calls_cache_reads_and_writes(
    stack: AsyncExitStack, make_module: ModuleFactory
) -> None:
    """A provider's cache figures (Anthropic's reads and writes) reach the ledger, the run
    report and the run page's ledger row."""
    cached = ModelResponse(
        content="hello",
        model="claude-test",
        usage=Usage(
            prompt_tokens=2000, completion_tokens=5, cached_tokens=1500, cache_write_tokens=400
        ),
    )
    client = await open_client(stack, make_app(make_module(model=ScriptedProvider([cached]))))
    thread = await new_thread(client)
    r = await post(client, thread, "hi")
    assert r.status_code == 200, r.text
    report = r.json()["report"]
    [row] = report["ledger"]
    assert (row["prompt_tokens"], row["cached_tokens"], row["cache_write_tokens"]) == (
        2000,
        1500,
        400,
    )
    page = (await client.get(f"/inspect/runs/{report['run_id']}", headers=ALICE)).text
    assert (
        '<td class="num">2000</td><td class="num">5</td><td class="num">1500</td>'
        '<td class="num">400</td>'
    ) in page
