"""Exact token counts for OpenAI models with `tiktoken` (the optional extra
`bounded-agents[tiktoken]`), for the loop's token calibration (`bounded_agents.core.calibration`).

`AGENT_OPENAI_TOKENIZER=o200k_base` (or `cl100k_base`, the encoding of the configured model)
makes the provider a `TokenCountingProvider`: before a model has reported usage, the loop asks it
for an exact count of a fold's opening messages and sizes the first chunk by it. tiktoken
fetches an encoding's BPE file from the network on first use and caches it in
`TIKTOKEN_CACHE_DIR`; a service must not depend on that at run time, so the setting requires
`TIKTOKEN_CACHE_DIR` to be set (fill it once, at build time, by loading the encoding where the
network is allowed) and a failure to load is a `ConfigError` at start-up, in one line.

A chat message costs its role's and content's tokens plus `TOKENS_PER_MESSAGE`, a tool call its
name's and arguments' tokens, and every prompt `REPLY_PRIMING` more: OpenAI's published
accounting for chat models, which the provider's reported `prompt_tokens` keeps checking.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from typing import Any

from bounded_agents.core.messages import ChatMessage, Message
from bounded_agents.core.ports import ModelRequest
from bounded_agents.errors import ConfigError
from bounded_agents.providers.openai.compat import OpenAICompatibleProvider

TOKENS_PER_MESSAGE = 3
REPLY_PRIMING = 3


class TiktokenCounter:
    """`TokenCounter` by a tiktoken encoding."""

    def __init__(self, encoding: Any) -> None:
        self.encoding = encoding
        """A `tiktoken.Encoding` (typed loosely: tiktoken is an optional extra)."""

    @classmethod
    def named(cls, name: str) -> TiktokenCounter:
        """The encoding `name` from tiktoken's cache, never the network (see the module)."""
        if not os.environ.get("TIKTOKEN_CACHE_DIR"):
            raise ConfigError(
                f"AGENT_OPENAI_TOKENIZER={name}: set TIKTOKEN_CACHE_DIR to a directory holding "
                "the encoding (tiktoken downloads it otherwise, and this service never "
                "downloads at run time)"
            )
        try:
            import tiktoken
        except ImportError:
            raise ConfigError(
                f"AGENT_OPENAI_TOKENIZER={name} needs tiktoken: pip install "
                "'bounded-agents[tiktoken]'"
            ) from None
        try:
            return cls(tiktoken.get_encoding(name))
        except Exception as exc:
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            raise ConfigError(
                f"AGENT_OPENAI_TOKENIZER={name}: tiktoken could not load it from "
                f"TIKTOKEN_CACHE_DIR ({first})"
            ) from exc

    def tokens(self, text: str) -> int:
        return len(self.encoding.encode(text, disallowed_special=()))

    def count(self, messages: Sequence[Message | ChatMessage], model: str = "") -> int:
        total = REPLY_PRIMING
        for message in messages:
            total += TOKENS_PER_MESSAGE + self.tokens(message.role) + self.tokens(message.content)
            for call in message.tool_calls:
                total += self.tokens(call.name) + self.tokens(json.dumps(call.arguments))
        return total


class TiktokenOpenAIProvider(OpenAICompatibleProvider):
    """`OpenAICompatibleProvider` that also counts a request's tokens exactly, offline
    (`TokenCountingProvider`), by `counter`."""

    def __init__(self, *args: Any, counter: TiktokenCounter, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.counter = counter

    async def count_tokens(self, request: ModelRequest) -> int:
        return self.counter.count(request.messages, self.model)


__all__ = ["REPLY_PRIMING", "TOKENS_PER_MESSAGE", "TiktokenCounter", "TiktokenOpenAIProvider"]
