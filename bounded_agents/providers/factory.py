"""`provider_from_settings`: the configured provider, `"echo"` or `"openai"`, from plain values.

It takes plain values rather than a settings object so this package does not depend on
`bounded_agents.settings`; whoever reads the settings passes the fields in.
"""

from __future__ import annotations

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
) -> ModelProvider:
    """Build the configured provider: ``"echo"`` or ``"openai"`` (any OpenAI-compatible server).

    Raises:
        ConfigError: for an unknown kind, or ``"openai"`` without a model name (there is no
            sensible default model across OpenAI, Ollama, vLLM and llama.cpp).
    """
    normalized = kind.strip().lower()
    if normalized == "echo":
        return EchoModel()
    if normalized == "openai":
        if not model:
            raise ConfigError(
                "model kind 'openai' needs a model name (e.g. AGENT_OPENAI_MODEL=gpt-4o-mini)"
            )
        return OpenAICompatibleProvider(
            base_url=base_url or OPENAI_BASE_URL,
            api_key=api_key,
            model=model,
            timeout=timeout,
            max_tokens=max_tokens,
            max_tokens_field=max_tokens_field,
        )
    raise ConfigError(f"unknown model kind {kind!r}: expected 'echo' or 'openai'")


__all__ = ["OPENAI_BASE_URL", "provider_from_settings"]
