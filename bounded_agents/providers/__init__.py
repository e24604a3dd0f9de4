"""ModelProvider adapters: the offline EchoModel, an OpenAI-compatible HTTP provider and (an
optional extra, imported only when chosen) Claude's native Messages API.

echo.py       `EchoModel`, deterministic and offline: the embedded default
openai/       `OpenAICompatibleProvider`, any server of OpenAI's chat completions API
anthropic/    `AnthropicProvider`, the Messages API with cache breakpoints (`[anthropic]` extra)
factory.py    `provider_from_settings`, the provider `AGENT_MODEL` names
"""

from __future__ import annotations

from bounded_agents.providers.echo import EchoModel
from bounded_agents.providers.factory import (
    OPENAI_BASE_URL,
    AnthropicOptions,
    anthropic_provider,
    provider_from_settings,
    sends_cache_key,
)
from bounded_agents.providers.openai import OpenAICompatibleProvider

__all__ = [
    "OPENAI_BASE_URL",
    "AnthropicOptions",
    "EchoModel",
    "OpenAICompatibleProvider",
    "anthropic_provider",
    "provider_from_settings",
    "sends_cache_key",
]
