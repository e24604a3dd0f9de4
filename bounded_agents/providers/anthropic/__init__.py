"""Claude over Anthropic's native Messages API (the optional extra `bounded-agents[anthropic]`).

Native rather than Anthropic's OpenAI-compatible endpoint because only the native API caches
prompts: `wire` places the `cache_control` breakpoints where the history keeps the prompt
stable, `provider` makes the calls through the `anthropic` SDK, and `response` reads the
answers and books cache reads and writes apart (`Usage.cached_tokens`,
`Usage.cache_write_tokens`).
"""

from __future__ import annotations

from bounded_agents.providers.anthropic.provider import ANTHROPIC_BASE_URL, AnthropicProvider
from bounded_agents.providers.anthropic.response import STOP_REASONS
from bounded_agents.providers.anthropic.wire import CachePlan, messages_body, min_cacheable_tokens

__all__ = [
    "ANTHROPIC_BASE_URL",
    "STOP_REASONS",
    "AnthropicProvider",
    "CachePlan",
    "messages_body",
    "min_cacheable_tokens",
]
