"""Exact token counts for OpenAI models with the real `tiktoken` (the extra
`bounded-agents[tiktoken]`), offline: the tests build a byte-level encoding with tiktoken's own
`Encoding` (every byte one token), so the counts are known, and never load one from the
network. `AGENT_OPENAI_TOKENIZER` without `TIKTOKEN_CACHE_DIR` is refused at configuration
time, in one line, before tiktoken could try a download."""

from __future__ import annotations

import json

import pytest
import tiktoken

from bounded_agents.core.messages import ChatMessage, ToolCall
from bounded_agents.core.ports import ModelRequest, supports_token_counting
from bounded_agents.errors import ConfigError
from bounded_agents.module import model_from_settings
from bounded_agents.providers.openai import OpenAICompatibleProvider
from bounded_agents.providers.openai.tokens import (
    REPLY_PRIMING,
    TOKENS_PER_MESSAGE,
    TiktokenCounter,
    TiktokenOpenAIProvider,
)
from bounded_agents.settings import Settings


def byte_encoding() -> tiktoken.Encoding:
    """A real tiktoken encoding with no merges: one token per byte."""
    return tiktoken.Encoding(
        name="bytes",
        pat_str=r"\S+|\s+",
        mergeable_ranks={bytes([i]): i for i in range(256)},
        special_tokens={},
    )


def test_a_chat_prompt_is_counted_as_openai_accounts_it() -> None:
    counter = TiktokenCounter(byte_encoding())
    call = ToolCall(id="c1", name="lookup", arguments={"q": "ORD-1"})
    messages = [
        ChatMessage(role="system", content="You help."),
        ChatMessage(role="user", content="Where is ORD-1? <|endoftext|>"),
        ChatMessage(role="assistant", content="", tool_calls=[call]),
    ]
    expected = REPLY_PRIMING + 3 * TOKENS_PER_MESSAGE
    expected += len("system") + len("You help.")
    expected += len("user") + len("Where is ORD-1? <|endoftext|>")  # special text: plain text
    expected += len("assistant") + len("lookup") + len(json.dumps({"q": "ORD-1"}))
    assert counter.count(messages) == expected


async def test_the_provider_counts_a_request_exactly_without_calling_the_server() -> None:
    """`TokenCountingProvider`: the loop asks it once before the first fold
    (`count_before_learning`); the plain provider has no such power."""
    provider = TiktokenOpenAIProvider(
        base_url="http://127.0.0.1:9/v1",  # nothing listens: a call would fail
        api_key=None,
        model="gpt-test",
        counter=TiktokenCounter(byte_encoding()),
    )
    try:
        assert supports_token_counting(provider)
        request = ModelRequest(messages=[ChatMessage(role="user", content="12345")])
        assert await provider.count_tokens(request) == REPLY_PRIMING + 3 + 4 + 5
    finally:
        await provider.aclose()
    plain = OpenAICompatibleProvider(base_url="http://127.0.0.1:9/v1", api_key=None, model="m")
    try:
        assert not supports_token_counting(plain)
    finally:
        await plain.aclose()


def test_a_tokenizer_without_a_cache_dir_is_refused_in_one_line(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("TIKTOKEN_CACHE_DIR", raising=False)
    settings = Settings(model="openai", openai_model="gpt-4o", openai_tokenizer="o200k_base")
    with pytest.raises(ConfigError, match="TIKTOKEN_CACHE_DIR") as raised:
        model_from_settings(settings)
    assert "\n" not in str(raised.value)


def test_an_encoding_tiktoken_does_not_know_is_refused_in_one_line(
    monkeypatch: pytest.MonkeyPatch, tmp_path: object
) -> None:
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))
    settings = Settings(model="openai", openai_model="gpt-4o", openai_tokenizer="no_such_base")
    with pytest.raises(ConfigError, match="no_such_base") as raised:
        model_from_settings(settings)
    assert "\n" not in str(raised.value)
