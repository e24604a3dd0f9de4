"""Provider usage is validated before it is booked: a negative count (which made the actor's
total negative, an unlimited quota) or one no call can run up (3,000,000,000, which overflowed
the INTEGER column and failed the run as a database outage) is a bad provider response, and
the ledger's columns hold any figure a call may report, and sums of them."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import httpx
import pytest

from bounded_agents.core.history import window_history
from bounded_agents.core.ports import MAX_CALL_TOKENS, LedgerEntry
from bounded_agents.errors import ProviderBadResponse, RunFailed
from bounded_agents.providers import OpenAICompatibleProvider
from bounded_agents.store import SqlAgentStore
from bounded_agents.store.ledger import SqlLedger
from tests.factories import sql_loop
from tests.providers.fake_openai import FakeOpenAI, Reply, chunk, completion, usage_chunk


@pytest.fixture
async def provider(
    fake_openai: FakeOpenAI, http_client: httpx.AsyncClient
) -> AsyncIterator[OpenAICompatibleProvider]:
    yield OpenAICompatibleProvider(
        base_url=fake_openai.base_url, api_key=None, model="fake-model", client=http_client
    )


BAD_USAGE = [
    pytest.param({"prompt_tokens": -1_000_000}, id="negative"),
    pytest.param({"prompt_tokens": 3_000_000_000}, id="over-int32"),
    pytest.param({"completion_tokens": MAX_CALL_TOKENS + 1}, id="over-the-bound"),
    pytest.param({"prompt_tokens": 2.5}, id="fractional"),
    pytest.param({"prompt_tokens": "12"}, id="a-string"),
]


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
@pytest.mark.parametrize("usage", BAD_USAGE)
async def test_out_of_range_usage_is_a_bad_provider_response_and_books_nothing(
    sql_store: SqlAgentStore,
    fake_openai: FakeOpenAI,
    provider: OpenAICompatibleProvider,
    usage: dict[str, object],
    stream: bool,
) -> None:
    counts = {"prompt_tokens": 11, "completion_tokens": 7, **usage}
    if stream:
        last = usage_chunk(0, 0)
        last["usage"] = counts
        fake_openai.enqueue(Reply.sse([chunk({"content": "hi"}), last]))
    else:
        body = completion("hi")
        body["usage"] = counts
        fake_openai.enqueue(Reply.json(body))
    loop = sql_loop(sql_store, provider, window_history(max_messages=10))
    tid = (await sql_store.create_thread(actor_id="alice", agent="helper")).id

    async def sink(_event: object) -> None:
        pass

    with pytest.raises(RunFailed) as failed:
        await loop.run_turn(
            agent="helper",
            thread_id=tid,
            actor_id="alice",
            content="hello",
            run_id=str(uuid.uuid4()),
            on_event=sink if stream else None,
        )
    assert isinstance(failed.value.cause, ProviderBadResponse), failed.value.cause
    assert "usage" in failed.value.cause.message
    assert await loop.ledger.tokens_used("alice") == 0  # nothing booked, never below zero
    assert await loop.ledger.entries_for_run(failed.value.run_id) == []


async def test_the_ledger_holds_any_figure_and_its_sums(sql_store: SqlAgentStore) -> None:
    ledger = SqlLedger(sql_store.engine)
    entry = LedgerEntry(
        run_id="r",
        thread_id="t",
        actor_id="alice",
        agent="helper",
        purpose="chat",
        model="m",
        prompt_tokens=3_000_000_000,
        completion_tokens=MAX_CALL_TOKENS,
    )
    await ledger.record(entry)
    await ledger.record(entry)
    assert await ledger.entries_for_run("r") == [entry, entry]
    assert await ledger.tokens_used("alice") == 2 * (3_000_000_000 + MAX_CALL_TOKENS)
