"""Fixtures for the provider tests: the fake OpenAI-compatible server and a client for it."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest

from bounded_agents.providers.anthropic import AnthropicProvider
from tests.providers.fake_anthropic import FakeAnthropic
from tests.providers.fake_openai import FakeOpenAI


@pytest.fixture
async def fake_openai() -> AsyncIterator[FakeOpenAI]:
    """A started server on a free loopback port; script it with `enqueue(Reply...)`.

    Teardown closes every connection and fails the test if the server itself broke.
    """
    server = FakeOpenAI()
    await server.start()
    try:
        yield server
    finally:
        await server.close()
    assert server.errors == [], f"the fake server failed: {server.errors!r}"


@pytest.fixture
async def fake_anthropic() -> AsyncIterator[FakeAnthropic]:
    """The same for the Anthropic Messages wire format (`tests/providers/fake_anthropic.py`)."""
    server = FakeAnthropic()
    await server.start()
    try:
        yield server
    finally:
        await server.close()
    assert server.errors == [], f"the fake server failed: {server.errors!r}"


@pytest.fixture
async def claude(fake_anthropic: FakeAnthropic) -> AsyncIterator[AnthropicProvider]:
    """The Anthropic provider on `fake_anthropic`, no retries, closed after the test."""
    provider = AnthropicProvider(
        api_key="k",
        model="claude-test",
        base_url=fake_anthropic.base_url.removesuffix("/v1"),
        max_retries=0,
    )
    try:
        yield provider
    finally:
        await provider.aclose()


@pytest.fixture
async def http_client() -> AsyncIterator[httpx.AsyncClient]:
    """An injected client; `trust_env=False` so a proxy setting can never divert loopback."""
    async with httpx.AsyncClient(trust_env=False) as client:
        yield client
