"""A server's tool-call ids of any length: a 300-character id reached the journal's step name
(`tool:<n>:<id>`, VARCHAR(200)) and failed the turn on PostgreSQL only (attack round 6); an id
past 64 characters is now renamed `call_<digest>`, in the stored call and its result alike."""

from __future__ import annotations

from contextlib import AsyncExitStack

import httpx

from bounded_agents.store.sql import SqlAgentStore
from tests.http.conftest import ModuleFactory, new_thread, post, transcript
from tests.lying_provider.helpers import app_client, provider, rows
from tests.providers.fake_openai import FakeOpenAI, Reply, completion, wire_tool_call


async def test_a_300_character_tool_call_id_does_not_fail_the_turn(
    sql_store: SqlAgentStore,
    stack: AsyncExitStack,
    make_module: ModuleFactory,
    fake_openai: FakeOpenAI,
    http_client: httpx.AsyncClient,
) -> None:
    long_id = "call_" + "x" * 295
    fake_openai.enqueue(
        Reply.json(completion(None, [wire_tool_call(long_id, "read_page", '{"url": "u"}')])),
        Reply.json(completion("done")),
    )
    client = await app_client(stack, make_module, provider(fake_openai, http_client))
    tid = await new_thread(client)
    r = await post(client, tid, "read it")
    assert r.status_code == 200, r.text
    msgs = await transcript(client, tid)
    assert [m["role"] for m in msgs] == ["user", "assistant"]
    assert len(msgs[1]["tool_results"]) == 1 and not msgs[1]["tool_results"][0]["is_error"]
    renamed = msgs[1]["tool_calls"][0]["id"]
    assert renamed.startswith("call_") and len(renamed) == 37
    assert msgs[1]["tool_results"][0]["call_id"] == renamed
    # next turn works
    fake_openai.enqueue(Reply.json(completion("again")))
    r = await post(client, tid, "again")
    assert r.status_code == 200, r.text
    ledger = await rows(sql_store, "SELECT prompt_tokens FROM ledger")
    assert len(ledger) == 3
