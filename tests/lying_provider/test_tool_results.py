"""Tools that return what JSON cannot hold, raise oddly, or answer in bytes a prompt cannot:
each is a result the model reads, never a failed turn (attack round 6: tuple keys, an int of
5,000 digits, a circular dict and an exception whose `str()` raises were 500s)."""

from __future__ import annotations

from contextlib import AsyncExitStack
from typing import Any

import httpx
import pytest

from bounded_agents.registry import agent, tool
from bounded_agents.store.sql import SqlAgentStore
from tests.http.conftest import ModuleFactory, new_thread, post, transcript
from tests.lying_provider.helpers import app_client, provider, rows
from tests.providers.fake_openai import FakeOpenAI, Reply, completion, wire_tool_call

RETURNS: dict[str, Any] = {
    "tuple_keys": {(1, 2): "x"},
    "huge_int": 10**5000,
    "nan": float("nan"),
    "bytes": b"\xff\xfe\x00abc",
    "surrogate": "a\ud800b\x00c",
    "ten_mb": "x" * (10 * 1024 * 1024),
}


class Boom(Exception):
    def __str__(self) -> str:
        raise RuntimeError("str of the exception fails")


@agent(name="helper", system_prompt="tools")
class Weird:
    @tool
    async def give(self, kind: str) -> Any:
        """Return something odd."""
        if kind == "circular":
            d: dict[str, Any] = {}
            d["d"] = d
            return d
        if kind == "bad_exc":
            raise Boom()
        if kind == "exit":
            raise SystemExit(3)
        return RETURNS[kind]


@pytest.mark.parametrize(
    "kind", ["tuple_keys", "huge_int", "circular", "bad_exc", "nan", "bytes", "surrogate", "ten_mb"]
)
async def test_an_odd_tool_return_is_a_result_not_a_failed_turn(
    sql_store: SqlAgentStore,
    stack: AsyncExitStack,
    make_module: ModuleFactory,
    fake_openai: FakeOpenAI,
    http_client: httpx.AsyncClient,
    kind: str,
) -> None:
    fake_openai.enqueue(
        Reply.json(completion(None, [wire_tool_call("c1", "give", f'{{"kind": "{kind}"}}')])),
        Reply.json(completion("done")),
    )
    client = await app_client(
        stack, make_module, provider(fake_openai, http_client), agents=[Weird]
    )
    tid = await new_thread(client)
    r = await post(client, tid, "go")
    assert r.status_code == 200, r.text[:500]
    msgs = await transcript(client, tid)
    assert [m["role"] for m in msgs] == ["user", "assistant"]
    assert len(msgs[1]["tool_results"]) == 1
    ledger = await rows(sql_store, "SELECT purpose FROM ledger")
    assert len(ledger) == 2


async def test_a_turn_that_fails_after_a_tool_round_leaves_its_paid_call_booked(
    sql_store: SqlAgentStore,
    stack: AsyncExitStack,
    make_module: ModuleFactory,
    fake_openai: FakeOpenAI,
    http_client: httpx.AsyncClient,
) -> None:
    """The model's second call fails (the server has no more answers) after an odd tool
    result: the first call, paid for, stays booked, and the quota's total agrees."""
    fake_openai.enqueue(
        Reply.json(completion(None, [wire_tool_call("c1", "give", '{"kind": "tuple_keys"}')])),
    )
    client = await app_client(
        stack, make_module, provider(fake_openai, http_client), agents=[Weird], quota=1_000_000
    )
    tid = await new_thread(client)
    await post(client, tid, "go")
    booked = await rows(sql_store, "SELECT prompt_tokens + completion_tokens FROM ledger")
    total = await rows(sql_store, "SELECT tokens FROM actor_usage")
    assert [int(b) for (b,) in booked] == [18]
    assert [int(t) for (t,) in total] == [18]
