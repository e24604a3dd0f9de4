"""Secrets stay secret: API keys are compared in constant time, and neither an API key nor the
OpenAI key from Settings ever reaches a log record (every logger at DEBUG, uvicorn's access log
included), an error body, or a repr of the settings."""

from __future__ import annotations

import base64
import hmac
import logging
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AsyncExitStack

import httpx
import pytest
from starlette.requests import Request

import bounded_agents.actors
from bounded_agents.actors import api_key_resolver
from bounded_agents.core.ports import RunRecord
from bounded_agents.durable import SqlJournal
from bounded_agents.module import AgentModule
from bounded_agents.redact import redacted_url
from bounded_agents.settings import Settings
from bounded_agents.store.sql import SqlAgentStore
from tests.http.conftest import HelperAgent, make_app, new_thread, post, serve_live
from tests.providers.fake_openai import FakeOpenAI, Reply, completion
from tests.reliability.processes import free_port

ALICE_KEY = "sk-alice-4f0c2d9e7b1a46c3a8d5e2f19b7c6d01"
BOB_KEY = "sk-bob-9a1e5c3b7d2f48e6b0c4a9d8e7f6a5b4"
CAROL_KEY = "sk-carol-0d9c8b7a6f5e4d3c2b1a0f9e8d7c6b5a"
OPENAI_KEY = "sk-openai-93e1b7c5a2d84f60b9c1e7d3a5f2c8e4"
API_KEYS = f"{ALICE_KEY}=alice,{BOB_KEY}=bob,{CAROL_KEY}=carol"
SECRETS = [ALICE_KEY, BOB_KEY, CAROL_KEY, OPENAI_KEY]


def _pieces(secret: str) -> list[str]:
    """The secret, and the part of it that tells it apart (a log may cut a prefix off)."""
    return [secret, secret.split("-")[-1]]


def assert_no_secret(text: str, where: str) -> None:
    for secret in SECRETS:
        for piece in _pieces(secret):
            assert piece not in text, f"{where} reveals {piece!r}: {text[:1000]}"


# --- constant-time comparison --------------------------------------------------------------


def _request(authorization: str | None) -> Request:
    headers = [] if authorization is None else [(b"authorization", authorization.encode())]
    return Request({"type": "http", "method": "GET", "path": "/", "headers": headers})


@pytest.fixture
def compared(monkeypatch: pytest.MonkeyPatch) -> list[tuple[bytes, bytes]]:
    """Every (configured key, given token) pair the resolver hands to `hmac.compare_digest`."""
    calls: list[tuple[bytes, bytes]] = []
    real: Callable[[bytes, bytes], bool] = hmac.compare_digest

    def counting(a: bytes, b: bytes) -> bool:
        calls.append((a, b))
        return real(a, b)

    monkeypatch.setattr(bounded_agents.actors.hmac, "compare_digest", counting)
    return calls


@pytest.mark.parametrize(
    ("token", "actor"),
    [
        (ALICE_KEY, "alice"),  # the first key matches: the others are still compared
        (BOB_KEY, "bob"),
        (CAROL_KEY, "carol"),  # the last key matches
        (ALICE_KEY[:-1], None),  # one character short
        (ALICE_KEY + "0", None),  # one character long
        (ALICE_KEY.upper(), None),
        ("x", None),
    ],
    ids=["first", "middle", "last", "prefix", "longer", "case", "junk"],
)
async def test_every_configured_key_is_compared_with_compare_digest(
    compared: list[tuple[bytes, bytes]], token: str, actor: str | None
) -> None:
    resolve = api_key_resolver(Settings(api_keys=API_KEYS).actor_keys())
    found = await resolve(_request(f"Bearer {token}"))
    assert (found.id if found else None) == actor
    keys = [ALICE_KEY.encode(), BOB_KEY.encode(), CAROL_KEY.encode()]
    assert sorted(a for a, _ in compared) == sorted(keys)  # each key once, no early exit
    assert all(b == token.encode() for _, b in compared)


async def test_a_request_without_a_bearer_token_compares_nothing(
    compared: list[tuple[bytes, bytes]],
) -> None:
    resolve = api_key_resolver(Settings(api_keys=API_KEYS).actor_keys())
    for header in (None, "", "Bearer", "Bearer ", f"Basic {ALICE_KEY}", ALICE_KEY):
        assert await resolve(_request(header)) is None, header
    assert compared == []


# --- settings ----------------------------------------------------------------------------------


def test_settings_never_show_their_keys() -> None:
    s = Settings(api_keys=API_KEYS, openai_api_key=OPENAI_KEY)
    for shown in (repr(s), str(s), s.model_dump_json(), repr(s.model_dump()), f"{s!r}"):
        assert_no_secret(shown, "Settings")
    assert s.actor_keys() == {ALICE_KEY: "alice", BOB_KEY: "bob", CAROL_KEY: "carol"}


# --- logs and error bodies ---------------------------------------------------------------------


@pytest.fixture
def every_logger_at_debug(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    caplog.set_level(logging.DEBUG)
    for name in list(logging.root.manager.loggerDict):
        caplog.set_level(logging.DEBUG, logger=name)
    for name in (
        "bounded_agents",
        "uvicorn",
        "uvicorn.access",
        "uvicorn.error",
        "httpx",
        "httpcore",
    ):
        caplog.set_level(logging.DEBUG, logger=name)
    yield caplog


@pytest.fixture
async def module(sql_store: SqlAgentStore, fake_openai: FakeOpenAI) -> AsyncIterator[AgentModule]:
    """The module as configured from Settings: API keys, and the OpenAI-compatible provider
    (the fake server) with its key. The failures scripted below are final: none is retried."""
    settings = Settings(
        api_keys=API_KEYS,
        model="openai",
        openai_base_url=fake_openai.base_url,
        openai_api_key=OPENAI_KEY,
        openai_model="fake-model",
        model_timeout=5.0,
        migrate_on_start=False,
    )
    yield AgentModule.for_root(
        store=sql_store, agents=[HelperAgent], history={"max_messages": 20}, settings=settings
    )


async def test_no_key_reaches_a_log_record_or_an_error_body(
    stack: AsyncExitStack,
    module: AgentModule,
    fake_openai: FakeOpenAI,
    every_logger_at_debug: pytest.LogCaptureFixture,
) -> None:
    caplog = every_logger_at_debug
    url = await serve_live(stack, make_app(module), access_log=True)
    client = await stack.enter_async_context(
        httpx.AsyncClient(base_url=url, trust_env=False, timeout=10.0)
    )
    alice = {"Authorization": f"Bearer {ALICE_KEY}"}
    bob = {"Authorization": f"Bearer {BOB_KEY}"}
    responses: list[httpx.Response] = []

    fake_openai.enqueue(
        Reply.json(completion("a fine answer")),
        # providers that echo the key back, in an error and in a broken body
        Reply.error(401, f"Incorrect API key provided: {OPENAI_KEY}"),
        Reply.error(400, f"bad request from key {OPENAI_KEY}"),
        Reply.text(f"<html>proxy error for Bearer {OPENAI_KEY}</html>", content_type="text/html"),
    )
    thread_id = await new_thread(client, alice)
    for content in ("hello", "again", "and again", "once more"):
        responses.append(await post(client, thread_id, content, headers=alice))
    assert [r.status_code for r in responses] == [200, 502, 502, 502], [r.text for r in responses]
    responses.append(await client.get(f"/runs/{responses[1].json()['run_id']}", headers=alice))
    responses.append(await client.get(f"/threads/{thread_id}/messages", headers=alice))

    # failed authentication, every way round
    for headers in (
        {"Authorization": f"Bearer {ALICE_KEY[:-1]}"},
        {"Authorization": f"Bearer {ALICE_KEY}x"},
        {"Authorization": f"Basic {ALICE_KEY}"},
        {"Authorization": ALICE_KEY},
        {"X-Api-Key": ALICE_KEY},
        {"Authorization": f"Bearer {OPENAI_KEY}"},
    ):
        responses.append(await client.get(f"/threads/{thread_id}", headers=headers))
        responses.append(await post(client, thread_id, "let me in", headers=headers))
        assert responses[-1].status_code == 401
    responses.append(await client.get(f"/threads/{thread_id}", headers=bob))  # 404: not his
    assert responses[-1].status_code == 404
    fake_openai.assert_consumed()
    # the key really was used: the provider got it
    assert {r.headers.get("authorization") for r in fake_openai.requests} == {
        f"Bearer {OPENAI_KEY}"
    }

    for r in responses:
        assert_no_secret(r.text, f"{r.request.method} {r.request.url.path} -> {r.status_code}")
        assert_no_secret(repr(r.headers.multi_items()), "response headers")
    records = caplog.records
    assert any(r.name == "uvicorn.access" for r in records), "the access log was not captured"
    assert any(r.levelno == logging.DEBUG for r in records)
    for record in records:
        assert_no_secret(record.getMessage(), f"log record {record.name}")
        assert_no_secret(repr(record.args), f"log record args {record.name}")
    assert_no_secret(caplog.text, "the formatted log (tracebacks included)")


# --- credentials in the provider URL ---------------------------------------------------------

URL_USER, URL_PASSWORD = "proxyuser", "pr0xy-S3CRET-7d1e"


def _credentialed(base_url: str) -> str:
    return base_url.replace("http://", f"http://{URL_USER}:{URL_PASSWORD}@", 1)


def _url_module(sql_store: SqlAgentStore, base_url: str) -> AgentModule:
    settings = Settings(
        api_keys=API_KEYS,
        model="openai",
        openai_base_url=_credentialed(base_url),
        openai_model="fake-model",
        model_timeout=0.5,
        migrate_on_start=False,
    )
    module = AgentModule.for_root(
        store=sql_store, agents=[HelperAgent], history={"max_messages": 20}, settings=settings
    )
    module.loop.model.backoff_base = 0.01  # type: ignore[attr-defined]  # retries, quickly
    return module


async def test_provider_url_credentials_reach_no_client_run_record_or_log(
    stack: AsyncExitStack,
    sql_store: SqlAgentStore,
    fake_openai: FakeOpenAI,
    every_logger_at_debug: pytest.LogCaptureFixture,
) -> None:
    """Every provider error path, JSON and SSE, with `user:password@` in AGENT_OPENAI_BASE_URL:
    the 502 body, the SSE `error` event, `GET /runs/{id}`, the stored run and every log record
    hold neither the password nor the URL's user info; the server still gets them as Basic
    auth. A refused connection (nothing listening) goes through a second module."""
    caplog = every_logger_at_debug
    module = _url_module(sql_store, fake_openai.base_url)
    url = await serve_live(stack, make_app(module), access_log=True)
    client = await stack.enter_async_context(
        httpx.AsyncClient(base_url=url, trust_env=False, timeout=30.0)
    )
    alice = {"Authorization": f"Bearer {ALICE_KEY}"}
    sse = {**alice, "Accept": "text/event-stream"}
    echoed = f"proxy refused {URL_USER}:{URL_PASSWORD}@127.0.0.1"
    slow = Reply(delay=2.0)
    fake_openai.enqueue(
        Reply.error(403, echoed),  # a final 4xx echoing the credentials
        *[slow] * 4,  # a timeout, every attempt
        Reply.error(500, echoed),  # a 5xx, retried ...
        Reply.text("not json {", content_type="application/json"),  # ... then unparseable
        Reply.sse(['{"choices": [{"delta": {"content": "cut"}}]}'], cut=True),  # stream cut
        Reply.error(401, echoed),  # a final 4xx on the stream
        Reply.sse([{"error": {"message": echoed}}]),  # an error mid-stream
    )
    thread_id = await new_thread(client, alice)
    path = f"/agents/helper/threads/{thread_id}/messages"
    responses: list[httpx.Response] = []
    run_ids: list[str] = []
    for _ in range(3):
        r = await client.post(path, json={"content": "hi"}, headers=alice)
        assert r.status_code == 502, r.text
        run_ids.append(r.json()["run_id"])
        responses.append(r)
    for _ in range(3):
        r = await client.post(path, json={"content": "hi"}, headers=sse)
        assert r.status_code == 200 and "event: error" in r.text, r.text
        run_ids.append(r.text.split('"run_id":"')[1].split('"')[0])
        responses.append(r)

    refused = _url_module(sql_store, f"http://127.0.0.1:{free_port()}/v1")
    refused_url = await serve_live(stack, make_app(refused))
    other = await stack.enter_async_context(
        httpx.AsyncClient(base_url=refused_url, trust_env=False, timeout=30.0)
    )
    for headers in (alice, sse):
        r = await other.post(path, json={"content": "hi"}, headers=headers)
        assert r.status_code in (200, 502), r.text
        assert "provider_error" in r.text, r.text
        responses.append(r)
        run_ids.append(r.text.split('"run_id":"')[1].split('"')[0])
    fake_openai.assert_consumed()
    assert {r.headers.get("authorization") for r in fake_openai.requests} == {
        "Basic " + base64.b64encode(f"{URL_USER}:{URL_PASSWORD}".encode()).decode()
    }

    for run_id in run_ids:
        responses.append(await client.get(f"/runs/{run_id}", headers=alice))
        assert responses[-1].status_code == 200
        record = await module_record(sql_store, run_id)
        assert record is not None and record.error_message
        assert_no_credentials(record.error_message, f"stored run {run_id}")
    for r in responses:
        assert_no_credentials(r.text, f"{r.request.method} {r.request.url.path}")
    for record in caplog.records:
        assert_no_credentials(record.getMessage(), f"log record {record.name}")
    assert_no_credentials(caplog.text, "the formatted log (tracebacks included)")


def assert_no_credentials(text: str, where: str) -> None:
    for piece in (URL_PASSWORD, f"{URL_USER}:"):
        assert piece not in text, f"{where} reveals {piece!r}: {text[:1000]}"


async def module_record(sql_store: SqlAgentStore, run_id: str) -> RunRecord | None:
    return await SqlJournal(sql_store.engine).get_run(run_id)


def test_settings_mask_url_passwords_in_their_repr() -> None:
    s = Settings(
        database_url=f"postgresql+asyncpg://app:{URL_PASSWORD}@db/agents",
        openai_base_url=f"http://{URL_USER}:{URL_PASSWORD}@proxy/v1",
    )
    for shown in (repr(s), str(s), f"{s!r}"):
        assert URL_PASSWORD not in shown, shown
        assert "app:***@db/agents" in shown and f"{URL_USER}:***@proxy/v1" in shown


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("postgresql+asyncpg://app:pw@db/agents", "postgresql+asyncpg://app:***@db/agents"),
        # found by review: a password holding `/`, `?` or `#` (unescaped, as people type them)
        # ended the authority early, and the password was shown whole
        ("postgresql+asyncpg://app:Xy7/s3cr3t@db/agents", "postgresql+asyncpg://app:***@db/agents"),
        (
            "postgresql+asyncpg://app:a?s3cr3t#x@db:5432/agents",
            "postgresql+asyncpg://app:***@db:5432/agents",
        ),
        ("http://me:p@ss/w0rd@gw.example.com/v1", "http://me:***@gw.example.com/v1"),
        ("postgresql+asyncpg://db:5432/agents", "postgresql+asyncpg://db:5432/agents"),
        ("sqlite+aiosqlite:///./agent.db", "sqlite+aiosqlite:///./agent.db"),
        ("https://api.example.com/v1/@me", "https://api.example.com/v1/@me"),
    ],
)
def test_a_url_password_is_masked_whatever_it_holds(url: str, shown: str) -> None:
    assert redacted_url(url) == shown
