"""Tool-result clearing in the inspector, on SQLite and PostgreSQL: the run page of a turn
that sent an old page as a placeholder says how many results it cleared and how many tokens
they were, the model got the placeholder, and the stored thread still holds the whole page."""

from __future__ import annotations

from contextlib import AsyncExitStack

from app.main import fake_page
from bounded_agents.core.history.clearing import CLEARED_PREFIX
from bounded_agents.core.messages import ToolCall
from bounded_agents.testing import ScriptedProvider, reply
from tests.http.conftest import ALICE, ModuleFactory, make_app, new_thread, open_client, post

CLEARING = {
    "max_messages": 20,
    "clear_tool_results_keep": 0,
    "clear_tool_results_step_tokens": 1000,
}
URL = "https://example.com/report"


async def test_the_run_page_shows_what_a_turn_cleared_and_the_thread_keeps_it_whole(
    stack: AsyncExitStack, make_module: ModuleFactory
) -> None:
    read = ToolCall(id="r1", name="read_page", arguments={"url": URL})
    model = ScriptedProvider([reply("", tool_calls=[read]), reply("read it"), reply("fine")])
    client = await open_client(stack, make_app(make_module(model=model, history=CLEARING)))
    thread = await new_thread(client)
    assert (await post(client, thread, "read the report")).status_code == 200
    second = await post(client, thread, "thanks")
    assert second.status_code == 200, second.text
    report = second.json()["report"]
    assert report["cleared_results"] == 1 and report["cleared_tokens"] > 1000

    sent = [m.content for m in model.calls[2].messages if m.role == "tool"]
    assert len(sent) == 1 and sent[0].startswith(CLEARED_PREFIX)
    page = (await client.get(f"/inspect/runs/{report['run_id']}", headers=ALICE)).text
    assert '<span class="cleared-results">1</span>' in page
    assert f'<span class="cleared-tokens">{report["cleared_tokens"]}</span>' in page

    stored = (await client.get(f"/threads/{thread}/messages", headers=ALICE)).json()
    results = [r["content"] for m in stored["messages"] for r in m.get("tool_results", [])]
    assert results == [fake_page(URL)]
