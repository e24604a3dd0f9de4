"""Building a policy from its declarative form and resolving which one an agent runs:
`policy_from_config` (a `HistoryConfig` to a policy), `resolve_policy` (the precedence agent ->
module `history_policy` -> module `history`) and `validate_module_history` (checked at wiring).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeAlias

from bounded_agents.core.history.config import HistoryConfig
from bounded_agents.core.history.runs import (
    runs_window,
    summarizing_runs_window,
)
from bounded_agents.core.history.windows import (
    DEFAULT_WINDOW_MESSAGES,
    latest_message_only,
    whole_thread,
    window_history,
)
from bounded_agents.core.ports import (
    HistoryPolicy,
    ModelProvider,
    Summarizer,
)
from bounded_agents.core.summary import summarize_with_model
from bounded_agents.errors import ConfigError


def policy_from_config(config: HistoryConfig, model: ModelProvider | None) -> HistoryPolicy:
    """Build the policy a `HistoryConfig` describes.

    `enabled=False` gives `latest_message_only()`. `runs` gives `runs_window`,
    `summary_token_threshold` gives `summarizing_runs_window`, anything else a `window_history`
    (40 messages when no limit is given), each clearing old tool results when
    `clear_tool_results_keep` is set. `summarize=True` binds `summarize_with_model(model)`
    and raises `ConfigError` when no model is given; a callable `summarize` is used as is.
    """
    if not config.enabled:
        return latest_message_only()
    clearing = config.tool_result_clearing
    if config.runs is not None:
        return runs_window(config.runs, clear_tool_results=clearing)
    summarizer: Summarizer | None
    if config.summarize is True:
        if model is None:
            raise ConfigError("history summarize=True needs a model to summarize with")
        summarizer = summarize_with_model(model, carry=config.summary_carry)
    elif config.summarize is False:
        summarizer = None
    else:
        summarizer = config.summarize
    if config.summary_token_threshold is not None:
        assert summarizer is not None  # the config's own validation guarantees it
        return summarizing_runs_window(
            summarizer,
            config.summary_token_threshold,
            keep_recent_runs=config.keep_recent_runs,
            fold_max_tokens=config.fold_max_tokens,
            clear_tool_results=clearing,
        )
    if config.max_messages is None and config.max_tokens is None:
        max_messages: int | None = DEFAULT_WINDOW_MESSAGES
    else:
        max_messages = config.max_messages
    return window_history(
        max_messages=max_messages,
        max_tokens=config.max_tokens,
        summarize=summarizer,
        fold_messages=config.fold_messages,
        fold_tokens=config.fold_tokens,
        fold_max_tokens=config.fold_max_tokens,
        min_messages=config.min_messages,
        min_tokens=config.min_tokens,
        cache_ttl_seconds=config.cache_ttl_seconds,
        clear_tool_results=clearing,
    )


HistorySpec: TypeAlias = HistoryConfig | Mapping[str, Any] | HistoryPolicy
"""What `history=` accepts: a config, a dict validated into one, or a policy."""


def _from_spec(spec: HistorySpec, model: ModelProvider | None, where: str) -> HistoryPolicy:
    if isinstance(spec, HistoryConfig | Mapping):
        return policy_from_config(HistoryConfig.coerce(spec), model)
    if isinstance(spec, HistoryPolicy):
        return spec
    raise ConfigError(f"{where} must be a HistoryConfig, a dict or a HistoryPolicy, got {spec!r}")


def resolve_policy(
    agent_history: HistorySpec | None,
    module_history_policy: HistoryPolicy | None,
    module_history: HistoryConfig | Mapping[str, Any] | None,
    model: ModelProvider | None = None,
) -> HistoryPolicy:
    """The policy a turn uses, most specific first (docs/history.md): the
    agent's `@agent(history=...)` (config, dict or policy), then the module's `history_policy`,
    then the module's `history`.

    The first one set wins outright; nothing is merged across levels. With none set the whole
    thread is sent (`whole_thread()`). `model` is what `summarize=True` binds; a config that asks
    for a summary without one raises `ConfigError`, as does a value of the wrong type. The
    module-wide levels are validated whether or not an agent overrides them (`for_root` calls
    `validate_module_history` first).
    """
    if agent_history is not None:
        return _from_spec(agent_history, model, "agent history")
    if module_history_policy is not None:
        return module_history_policy
    if module_history is not None:
        return policy_from_config(HistoryConfig.coerce(module_history), model)
    return whole_thread()


def validate_module_history(
    module_history_policy: HistoryPolicy | None,
    module_history: HistoryConfig | Mapping[str, Any] | None,
    model: ModelProvider | None,
) -> None:
    """Refuse a bad module-wide history at wiring time, even when every agent overrides it:
    a setting that is never used is still a mistake its author wants to hear about."""
    if module_history_policy is not None and not isinstance(module_history_policy, HistoryPolicy):
        raise ConfigError(f"history_policy must be a HistoryPolicy, got {module_history_policy!r}")
    if module_history is not None:
        policy_from_config(HistoryConfig.coerce(module_history), model)


__all__ = ["HistorySpec", "policy_from_config", "resolve_policy", "validate_module_history"]
