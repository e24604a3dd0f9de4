"""Provider faults end in a retried success or a failed run with a clear error: the user's
message kept, no partial answer stored, and the thread taking the next turn."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import httpx
import pytest

from bounded_agents.core.history import window_history
from bounded_agents.core.loop import AgentLoop, LoopEvent
from bounded_agents.errors import (
    ProviderBadResponse,
    ProviderError,
    ProviderRateLimited,
    ProviderTimeout,
    QuotaExceeded,
    RunFailed,
)
from bounded_agents.providers import OpenAICompatibleProvider
from bounded_agents.store import SqlAgentStore
from tests.factories import sql_loop
from tests.providers.fake_openai import FakeOpenAI, Reply, chunk, completion, usage_chunk


@pytest.fixture
async def provider(
    fake_openai: FakeOpenAI, http_client: httpx.AsyncClient
) -> AsyncIterator[OpenAICompatibleProvider]:
    waits: list[float] = []

    async def no_sleep(seconds: float) -> None:
        waits.append(seconds)

    yield OpenAICompatibleProvider(
        base_url=fake_openai.base_url,
        api_key="sk-test",
        model="fake-model",
        timeout=0.5,
        max_retries=2,
        client=http_client,
        sleep=no_sleep,
    )


def _loop(
    store: SqlAgentStore, provider: OpenAICompatibleProvider, *, token_quota: int | None = None
) -> AgentLoop:
    return sql_loop(store, provider, window_history(max_messages=10), token_quota=token_quota)


async def _turn(loop: AgentLoop, tid: str, content: str, *, stream: bool = False) -> str:
    events: list[LoopEvent] = []

    async def sink(event: LoopEvent) -> None:
        events.append(event)

    result = await loop.run_turn(
        agent="helper",
        thread_id=tid,
        actor_id="alice",
        content=content,
        run_id=str(uuid.uuid4()),
        on_event=sink if stream else None,
    )
    return result.message.content


async def _transcript(store: SqlAgentStore, tid: str) -> list[tuple[str, str]]:
    thread = await store.get_thread(tid)
    assert thread is not None
    return [(m.role, m.content) for m in thread.messages]


@pytest.mark.parametrize(
    ("label", "replies"),
    [
        ("429 with Retry-After", [Reply.error(429, "slow down", headers={"Retry-After": "1"})]),
        ("5xx", [Reply.error(500, "oops"), Reply.error(503, "busy")]),
        ("timeout", [Reply(delay=1.5)]),
    ],
)
async def test_transient_faults_are_retried_into_a_success(
    sql_store: SqlAgentStore,
    provider: OpenAICompatibleProvider,
    fake_openai: FakeOpenAI,
    label: str,
    replies: list[Reply],
) -> None:
    fake_openai.enqueue(*replies, Reply.json(completion("recovered")))
    tid = (await sql_store.create_thread(actor_id="alice", agent="helper")).id
    assert await _turn(_loop(sql_store, provider), tid, "hi") == "recovered", label
    assert await _transcript(sql_store, tid) == [("user", "hi"), ("assistant", "recovered")]
    assert len(fake_openai.requests) == len(replies) + 1


@pytest.mark.parametrize(
    ("label", "replies", "stream", "error"),
    [
        ("timeouts past the retries", [Reply(delay=1.5)] * 3, False, ProviderTimeout),
        ("429 past the retries", [Reply.error(429, "no")] * 3, False, ProviderRateLimited),
        ("5xx past the retries", [Reply.error(502, "bad gateway")] * 3, False, ProviderError),
        ("malformed JSON", [Reply.text("{not json")], False, ProviderBadResponse),
        (
            "a stream cut mid-way",
            [Reply.sse([chunk({"content": "partial ans"}), chunk({"content": "wer"})], cut=True)],
            True,
            ProviderBadResponse,
        ),
    ],
)
async def test_lasting_faults_fail_the_run_cleanly_and_the_thread_goes_on(
    sql_store: SqlAgentStore,
    provider: OpenAICompatibleProvider,
    fake_openai: FakeOpenAI,
    label: str,
    replies: list[Reply],
    stream: bool,
    error: type[ProviderError],
) -> None:
    fake_openai.enqueue(*replies)
    tid = (await sql_store.create_thread(actor_id="alice", agent="helper")).id
    loop = _loop(sql_store, provider)
    with pytest.raises(RunFailed) as info:
        await _turn(loop, tid, "hello", stream=stream)
    assert isinstance(info.value.cause, error), label
    assert info.value.cause_code == error.code
    assert await _transcript(sql_store, tid) == [("user", "hello")], "no partial answer stored"
    record = await loop.runtime.get_run(info.value.run_id)
    assert record is not None and record.status == "failed" and record.error_code == error.code

    fake_openai.enqueue(
        Reply.sse([chunk({"content": "fine"}), usage_chunk(3, 1)])
        if stream
        else Reply.json(completion("fine"))
    )
    assert await _turn(loop, tid, "again", stream=stream) == "fine"
    assert await _transcript(sql_store, tid) == [
        ("user", "hello"),
        ("user", "again"),
        ("assistant", "fine"),
    ]


async def test_a_failed_run_resumes_once_the_provider_is_back(
    sql_store: SqlAgentStore,
    provider: OpenAICompatibleProvider,
    fake_openai: FakeOpenAI,
) -> None:
    fake_openai.enqueue(*[Reply.error(500, "down")] * 3)
    tid = (await sql_store.create_thread(actor_id="alice", agent="helper")).id
    loop = _loop(sql_store, provider)
    with pytest.raises(RunFailed) as info:
        await _turn(loop, tid, "question")
    fake_openai.enqueue(Reply.json(completion("late answer")))
    result = await loop.resume(info.value.run_id)
    assert result.message.content == "late answer"
    assert await _transcript(sql_store, tid) == [("user", "question"), ("assistant", "late answer")]
    sent = [fake_openai.requests[i].json()["messages"] for i in (0, 3)]
    assert sent[0] == sent[1], "the resumed call sends the prompt of the first attempt"


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
async def test_a_server_that_reports_no_usage_still_spends_the_quota(
    sql_store: SqlAgentStore,
    fake_openai: FakeOpenAI,
    provider: OpenAICompatibleProvider,
    stream: bool,
) -> None:
    """Booked as 0 tokens, such a server's calls would never reach the ledger or a quota."""
    body = completion("an answer of some length")
    del body["usage"]
    if stream:
        done = chunk({}, finish_reason="stop")
        fake_openai.enqueue(Reply.sse([chunk({"content": "an answer of some length"}), done]))
    else:
        fake_openai.enqueue(Reply.json(body))
    loop = _loop(sql_store, provider, token_quota=1)
    tid = (await sql_store.create_thread(actor_id="alice", agent="helper")).id

    await _turn(loop, tid, "hello", stream=stream)

    used = await loop.ledger.tokens_used("alice")
    # system "You help." ceil(9/4)+4 = 7, "hello" 6 in; the answer ceil(24/4)+4 = 10 out
    assert used == 7 + 6 + 10
    with pytest.raises(QuotaExceeded):
        await _turn(loop, tid, "again")
