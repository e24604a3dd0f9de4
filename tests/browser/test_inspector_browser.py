"""The inspector in a real browser: sign in, open a thread whose window slid and folded, check
each turn against its run report, watch a live turn appear and finish, save a screenshot.

The app runs under uvicorn on a loopback port, in this test's event loop. Set
AGENT_INSPECTOR_SCREENSHOT=docs/inspector.png to refresh the README's picture.
"""

from __future__ import annotations

import asyncio
import os
import shutil
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

from playwright.async_api import Browser, Page

from bounded_agents.core.ports import ModelRequest, ModelResponse
from bounded_agents.module import AgentModule
from bounded_agents.providers import EchoModel
from bounded_agents.store.sql import SqlAgentStore
from tests.http.conftest import (
    ALICE,
    HelperAgent,
    http_settings,
    live_client,
    make_app,
    post,
    serve_live,
)

SUMMARIZING = {"max_messages": 4, "summarize": True}
TURNS = [
    "What does the pricing page say?",
    "/read_page https://example.com/pricing",
    "Summarize the plans for me.",
    "Which plan has <script>alert('x')</script> in its name?",
    "How much is the team plan per seat?",
    "And the annual discount?",
    "Compare it with last year's prices.",
    "Which one would you pick for five people?",
    "Thanks. Anything else I should know?",
]


class HeldEcho(EchoModel):
    """EchoModel whose chat calls wait while `open` is clear: a turn held in flight."""

    def __init__(self) -> None:
        super().__init__()
        self.open = asyncio.Event()
        self.open.set()
        self.waiting = asyncio.Event()

    async def complete(self, request: ModelRequest) -> ModelResponse:
        if request.purpose == "chat" and not self.open.is_set():
            self.waiting.set()
            await self.open.wait()
        return await super().complete(request)


async def text(page: Page, selector: str) -> str:
    return (await page.locator(selector).inner_text()).strip()


async def test_the_inspector_in_chromium(
    browser: Browser, stack: AsyncExitStack, sql_store: SqlAgentStore, tmp_path: Path
) -> None:
    model = HeldEcho()
    module = AgentModule.for_root(
        store=sql_store,
        model=model,
        agents=[HelperAgent],
        history=SUMMARIZING,
        settings=http_settings(),
    )
    url = await serve_live(stack, make_app(module))
    http = await live_client(stack, url)
    created = await http.post(
        "/agents/helper/threads", headers=ALICE, json={"title": "Pricing questions"}
    )
    thread = created.json()["id"]
    reports: list[dict[str, Any]] = []
    for content in TURNS:
        r = await post(http, thread, content)
        assert r.status_code == 200, r.text
        reports.append(r.json()["report"])

    context = await browser.new_context(viewport={"width": 1280, "height": 900})
    page = await context.new_page()
    dialogs: list[str] = []
    page.on("dialog", lambda d: dialogs.append(d.message))
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))

    # signing in: the page asks for the API key, then lists the actor's threads
    response = await page.goto(f"{url}/inspect/")
    assert response is not None and response.status == 401
    await page.fill("input[name=key]", "key-a")
    await page.click("button[type=submit]")
    await page.wait_for_selector("table.threads")
    assert await text(page, ".who strong") == "alice"
    row = page.locator("table.threads tbody tr")
    assert await row.count() == 1
    assert (await row.locator("td").nth(2).inner_text()).strip() == str(2 * len(TURNS))
    await page.click("text=Pricing questions")
    await page.wait_for_selector("ol.turns")

    # every turn, newest first, as its run report measured it
    shown = await page.locator("li.turn").evaluate_all("els => els.map(e => e.dataset.run)")
    assert shown == [r["run_id"] for r in reversed(reports)]
    made = 0
    for n, report in enumerate(reports):
        turn = f"#run-{report['run_id']}"
        summary = report["summary"]
        covers = summary["covers_through_seq"] if summary else 0
        kept = int(await text(page, f"{turn} .kept-n"))
        summarized = int(await text(page, f"{turn} .summarized-n"))
        assert summarized == covers  # the summary the prompt carried stands for these
        assert kept <= report["rows_read"]  # sent verbatim: only what the bounded read got
        assert kept + summarized == 2 * n + 1  # nothing of the thread is left out
        assert await text(page, f"{turn} .dropped-n") == "0"
        bars = (
            await page.locator(f"{turn} svg.bar")
            .first.locator("rect")
            .evaluate_all("rs => rs.map(r => r.getAttribute('class'))")
        )
        assert "kept" in bars and (("summarized" in bars) == (summarized > 0))
        if summary is not None and summary["made"]:
            made += 1
            assert await page.locator(f"{turn} .fold").count() == 1
    assert made >= 2, "the window folded more than once"

    # the hostile message is text on the page, and no script of it ran
    await page.locator(f"#run-{reports[3]['run_id']} details summary").click()
    assert (
        "<script>alert('x')</script>"
        in await page.locator(f"#run-{reports[3]['run_id']} ol.kept").inner_text()
    )
    assert dialogs == [] and errors == []

    # live: a turn in flight appears on the open page, then completes, without a reload
    await page.evaluate("window.__same_page = true")
    assert await page.locator("#timeline.live-on").count() == 1
    model.open.clear()
    turn = asyncio.create_task(post(http, thread, "One more, slowly."))
    await asyncio.wait_for(model.waiting.wait(), 10)
    running = page.locator("li.turn[data-status=running]")
    await running.wait_for(timeout=10_000)
    assert await running.locator(".steps").inner_text() != ""
    model.open.set()
    answered = await turn
    assert answered.status_code == 200
    run_id = answered.json()["run_id"]
    await page.wait_for_selector(f"#run-{run_id}[data-status=completed]", timeout=10_000)
    assert await page.evaluate("window.__same_page") is True
    assert await page.locator("li.turn").count() == len(TURNS) + 1

    # the picture: the timeline with the newest folded turn opened
    newest_fold = next(r for r in reversed(reports) if r["summary"] and r["summary"]["made"])
    await page.locator(f"#run-{newest_fold['run_id']} details summary").click()
    shot = tmp_path / "inspector.png"
    await page.screenshot(path=str(shot), full_page=True)
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    if target := os.environ.get("AGENT_INSPECTOR_SCREENSHOT"):
        shutil.copyfile(shot, target)

    # with JavaScript off the same page reads the same (server-rendered), it just stays put
    still = await browser.new_context(
        java_script_enabled=False, extra_http_headers={"Authorization": "Bearer key-a"}
    )
    static = await still.new_page()
    await static.goto(f"{url}/inspect/threads/{thread}")
    assert await static.locator("li.turn").count() == len(TURNS) + 1
    assert await static.locator("#timeline.live-on").count() == 0
    assert await text(static, f"#run-{run_id} .kept-n") == await text(
        page, f"#run-{run_id} .kept-n"
    )
    await still.close()

    # a run's page: its report's figures
    await page.click(f"#run-{newest_fold['run_id']} a.run")
    await page.wait_for_selector("table.calls")
    assert await text(page, ".rows-read") == str(newest_fold["rows_read"])
    assert await text(page, ".bytes-read") == str(newest_fold["bytes_read"])
    assert (await text(page, ".summary-fact")).startswith("made")
    purposes = await page.locator("td.purpose").all_inner_texts()
    assert purposes == [c["purpose"] for c in newest_fold["model_calls"]]
    assert errors == []
    await context.close()
