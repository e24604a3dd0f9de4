"""Google's OpenAI-compatible Gemini endpoint, as the real provider parses it from a local
fake: the cached prompt tokens it reports on an implicit-cache hit
(`usage.prompt_tokens_details.cached_tokens`, with its other details null) are booked as
cached, a call without a hit (`prompt_tokens_details: null`) leaves them unknown, and the
thinking tokens it counts only in `total_tokens` are booked as completion, streamed or not."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from bounded_agents.core.ports import Usage
from bounded_agents.providers import OpenAICompatibleProvider
from tests.providers.fake_openai import FakeOpenAI, Reply, chunk, completion, usage_chunk
from tests.providers.test_openai_compat import KEY, ask, collect


@pytest.fixture
def gemini(fake_openai: FakeOpenAI, http_client: httpx.AsyncClient) -> OpenAICompatibleProvider:
    """The provider pointed at the fake as at Gemini's OpenAI-compatible base URL."""
    return OpenAICompatibleProvider(
        base_url=fake_openai.base_url,
        api_key=KEY,
        model="gemini-2.5-flash",
        timeout=5.0,
        max_retries=0,
        client=http_client,
    )


def gemini_usage(prompt: int, completion_tokens: int, thoughts: int, cached: int | None) -> Any:
    """The usage object the Gemini endpoint sends (shape from openai/openai-python#2544)."""
    return {
        "completion_tokens": completion_tokens,
        "prompt_tokens": prompt,
        "total_tokens": prompt + completion_tokens + thoughts,
        "completion_tokens_details": {
            "accepted_prediction_tokens": None,
            "audio_tokens": None,
            "reasoning_tokens": None,
            "rejected_prediction_tokens": None,
        },
        "prompt_tokens_details": (
            None if cached is None else {"audio_tokens": None, "cached_tokens": cached}
        ),
    }


async def test_gemini_cached_tokens_and_thinking_are_booked(
    fake_openai: FakeOpenAI, gemini: OpenAICompatibleProvider
) -> None:
    first = completion("hi")
    first["usage"] = gemini_usage(1469, 744, 283, cached=None)  # building the cache
    second = completion("hi")
    second["usage"] = gemini_usage(1520, 40, 0, cached=1014)  # an implicit-cache hit
    for body in (first, second):
        fake_openai.enqueue(Reply.json(body))
    got = [(await gemini.complete(ask("hello"))).usage for _ in range(2)]

    assert got == [
        Usage(prompt_tokens=1469, completion_tokens=744 + 283, cached_tokens=None),
        Usage(prompt_tokens=1520, completion_tokens=40, cached_tokens=1014),
    ]


async def test_a_gemini_stream_books_its_cached_tokens_from_the_usage_chunk(
    fake_openai: FakeOpenAI, gemini: OpenAICompatibleProvider
) -> None:
    last = usage_chunk(3000, 12)
    last["usage"] = gemini_usage(3000, 12, 30, cached=2048)
    fake_openai.enqueue(Reply.sse([chunk({"content": "ok"}), last]))

    events = await collect(gemini.stream(ask("hello")))

    assert events[-1].usage == Usage(prompt_tokens=3000, completion_tokens=42, cached_tokens=2048)


async def test_an_openai_total_equal_to_the_sum_changes_nothing(
    fake_openai: FakeOpenAI, gemini: OpenAICompatibleProvider
) -> None:
    body = completion("hi", prompt_tokens=2000, completion_tokens=7)
    body["usage"]["total_tokens"] = 2007
    body["usage"]["prompt_tokens_details"] = {"cached_tokens": 1920}
    fake_openai.enqueue(Reply.json(body))

    usage = (await gemini.complete(ask("hello"))).usage

    assert usage == Usage(prompt_tokens=2000, completion_tokens=7, cached_tokens=1920)
