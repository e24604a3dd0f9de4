"""ModelProvider adapters: the offline EchoModel and an OpenAI-compatible HTTP provider.

echo.py       `EchoModel`, deterministic and offline: the embedded default
openai/       `OpenAICompatibleProvider`, any server of OpenAI's chat completions API
factory.py    `provider_from_settings`, the provider `AGENT_MODEL` names
"""

from __future__ import annotations

from bounded_agents.providers.echo import EchoModel
from bounded_agents.providers.factory import OPENAI_BASE_URL, provider_from_settings
from bounded_agents.providers.openai import OpenAICompatibleProvider

__all__ = ["OPENAI_BASE_URL", "EchoModel", "OpenAICompatibleProvider", "provider_from_settings"]
