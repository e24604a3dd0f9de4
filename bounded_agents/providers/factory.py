"""`provider_from_settings`: the configured provider, `"echo"`, `"openai"` or `"anthropic"`, from
plain values.

It takes plain values rather than a settings object so this package does not depend on
`bounded_agents.settings`; whoever reads the settings passes the fields in. The Anthropic SDK is
an optional extra, imported only when that kind is chosen.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import httpx

from bounded_agents.core.ports import ModelProvider
from bounded_agents.errors import ConfigError
from bounded_agents.providers.echo import EchoModel
from bounded_agents.providers.openai.compat import OpenAICompatibleProvider

OPENAI_BASE_URL = "https://api.openai.com/v1"
"""Where `kind="openai"` points when no base URL is given."""


def provider_from_settings(
    kind: str,
    base_url: str | None,
    api_key: str | None,
    model: str | None,
    timeout: float,
    max_tokens: int | None = None,
    max_tokens_field: str = "max_tokens",
    *,
    anthropic: AnthropicOptions | None = None,
    prompt_cache_key: str = "auto",
    prompt_cache_retention: str | None = None,
    tokenizer: str | None = None,
) -> ModelProvider:
    """Build the configured provider: ``"echo"``, ``"openai"`` (any OpenAI-compatible server)
    or ``"anthropic"`` (Claude's native Messages API, from `anthropic`'s options).

    Raises:
        ConfigError: for an unknown kind, or ``"openai"`` without a model name (there is no
            sensible default model across OpenAI, Ollama, vLLM and llama.cpp), or a
            `tokenizer` tiktoken cannot load offline (`providers/openai/tokens.py`).
    """
    normalized = kind.strip().lower()
    if normalized == "echo":
        return EchoModel()
    if normalized == "openai":
        if not model:
            raise ConfigError(
                "model kind 'openai' needs a model name (e.g. AGENT_OPENAI_MODEL=gpt-4o-mini)"
            )
        options: dict[str, Any] = {
            "base_url": base_url or OPENAI_BASE_URL,
            "api_key": api_key,
            "model": model,
            "timeout": timeout,
            "max_tokens": max_tokens,
            "max_tokens_field": max_tokens_field,
            "prompt_cache_key": sends_cache_key(prompt_cache_key, base_url or OPENAI_BASE_URL),
            "prompt_cache_retention": prompt_cache_retention,
        }
        if tokenizer:  # exact counts offline (the extra `bounded-agents[tiktoken]`)
            from bounded_agents.providers.openai.tokens import (
                TiktokenCounter,
                TiktokenOpenAIProvider,
            )

            return TiktokenOpenAIProvider(counter=TiktokenCounter.named(tokenizer), **options)
        return OpenAICompatibleProvider(**options)
    if normalized == "anthropic":
        return anthropic_provider(anthropic or AnthropicOptions(), timeout)
    raise ConfigError(f"unknown model kind {kind!r}: expected 'echo', 'openai' or 'anthropic'")


def sends_cache_key(setting: str, base_url: str) -> bool:
    """AGENT_OPENAI_PROMPT_CACHE_KEY: `on`, `off`, or `auto` (only to OpenAI's own API: a
    local server or gateway may refuse a field it does not know)."""
    if setting == "auto":
        return httpx.URL(base_url).host == "api.openai.com"
    return setting == "on"


@dataclass(frozen=True)
class AnthropicOptions:
    """What AGENT_MODEL=anthropic is built from (the AGENT_ANTHROPIC_* settings)."""

    base_url: str = "https://api.anthropic.com"
    api_key: str | None = None
    model: str = "claude-sonnet-4-5"
    max_tokens: int | None = None
    cache: bool = True


def anthropic_provider(options: AnthropicOptions, timeout: float) -> ModelProvider:
    """The Anthropic provider, imported only here: its SDK is an optional extra, and a
    deployment without it must still start with the other kinds.

    Raises:
        ConfigError: the extra is not installed, or no API key is set anywhere.
    """
    try:
        from bounded_agents.providers.anthropic import AnthropicProvider
    except ImportError as exc:
        raise ConfigError(
            "model kind 'anthropic' needs the anthropic SDK: "
            "pip install 'bounded-agents[anthropic]'"
        ) from exc
    key = options.api_key or os.environ.get("ANTHROPIC_API_KEY")
    if not key:
        raise ConfigError(
            "model kind 'anthropic' needs an API key: "
            "set AGENT_ANTHROPIC_API_KEY (or ANTHROPIC_API_KEY)"
        )
    return AnthropicProvider(
        api_key=key,
        model=options.model,
        base_url=options.base_url,
        timeout=timeout,
        max_tokens=options.max_tokens,
        cache=options.cache,
    )


__all__ = [
    "OPENAI_BASE_URL",
    "AnthropicOptions",
    "anthropic_provider",
    "provider_from_settings",
    "sends_cache_key",
]
