"""What `AgentModule.for_root` builds from its arguments and the settings, as functions: the
model AGENT_MODEL names, the journal wrapped for tracing and metrics, each `@agent` class as the
loop runs it, and the actor resolver. Kept apart from `bounded_agents.module` so the composition
root reads as what it wires, not how each part is made."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from opentelemetry.trace import TracerProvider

from bounded_agents.actors import ActorResolver, default_resolver
from bounded_agents.core.context_window import ChatMiddleware
from bounded_agents.core.history import HistoryConfig, HistoryPolicy, resolve_policy
from bounded_agents.core.loop import AgentDefinition
from bounded_agents.core.ports import AgentStore, DurableRuntime, ModelProvider
from bounded_agents.errors import ConfigError
from bounded_agents.observability import ObservedRuntime, TurnMetrics, model_names
from bounded_agents.providers import AnthropicOptions, provider_from_settings
from bounded_agents.registry import agent_spec, tool_bindings
from bounded_agents.settings import Settings

__all__ = ["agent_definitions", "model_from_settings", "observed_runtime", "pick_resolver"]


def model_from_settings(settings: Settings) -> ModelProvider:
    """The model AGENT_MODEL names, with its AGENT_OPENAI_* or AGENT_ANTHROPIC_* options."""
    key = settings.openai_api_key.get_secret_value() if settings.openai_api_key else None
    return provider_from_settings(
        settings.model,
        settings.openai_base_url,
        key,
        settings.openai_model,
        settings.model_timeout,
        settings.openai_max_tokens,
        settings.openai_max_tokens_field,
        anthropic=AnthropicOptions(
            base_url=settings.anthropic_base_url,
            api_key=(
                settings.anthropic_api_key.get_secret_value()
                if settings.anthropic_api_key
                else None
            ),
            model=settings.anthropic_model,
            max_tokens=settings.anthropic_max_tokens,
            cache=settings.anthropic_cache,
        ),
        prompt_cache_key=settings.openai_prompt_cache_key,
        prompt_cache_retention=settings.openai_prompt_cache_retention,
        tokenizer=settings.openai_tokenizer,
    )


def observed_runtime(
    journal: DurableRuntime,
    model: ModelProvider,
    settings: Settings,
    metrics: TurnMetrics | None,
    tracer_provider: TracerProvider | None,
) -> DurableRuntime:
    """The journal the loop runs, traced and metered unless both are switched off."""
    if not settings.tracing and metrics is None:
        return journal
    model_name, provider_name = model_names(model)
    return ObservedRuntime(
        journal,
        metrics=metrics,
        tracing=settings.tracing,
        model_name=model_name,
        provider_name=provider_name,
        tracer_provider=tracer_provider,
        capture_content=settings.captures_content(),
    )


def agent_definitions(
    agents: Sequence[type],
    history_policy: HistoryPolicy | None,
    history: HistoryConfig | Mapping[str, Any] | None,
    model: ModelProvider,
    chat_middleware: Sequence[ChatMiddleware],
    store: AgentStore,
) -> dict[str, AgentDefinition]:
    """Each `@agent` class as the loop runs it, by name; its own history outranks the module's.
    An agent declared `search=True` gets the history search tool over `store`."""
    definitions: dict[str, AgentDefinition] = {}
    for cls_ in agents:
        spec = agent_spec(cls_)
        if spec.name in definitions:
            raise ConfigError(f"two agents named {spec.name!r}")
        definitions[spec.name] = AgentDefinition(
            name=spec.name,
            system_prompt=spec.system_prompt,
            policy=resolve_policy(spec.history, history_policy, history, model),
            tools=tool_bindings(cls_(), search_store=store if spec.search else None),
            max_steps=spec.max_steps,
            middleware=(*chat_middleware, *spec.chat_middleware),
        )
    return definitions


def pick_resolver(given: ActorResolver | None, settings: Settings) -> tuple[ActorResolver, bool]:
    """The actor resolver, and whether it is local development mode (never for a given one)."""
    if given is not None:
        return given, False
    return default_resolver(settings.actor_keys())
