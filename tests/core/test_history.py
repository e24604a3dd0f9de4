"""History rules 1, 5, 8 and 10: the window, the config, precedence and the declared read bound."""

from typing import Any

import pytest
from pydantic import ValidationError

from bounded_agents.core.history import (
    HistoryConfig,
    HistoryPolicy,
    HistoryPolicyContext,
    HistorySelection,
    HistorySummary,
    RunsWindow,
    SummarizingRunsWindow,
    WindowHistory,
    latest_message_only,
    policy_from_config,
    resolve_policy,
    runs_window,
    validate_module_history,
    whole_thread,
    window_history,
)
from bounded_agents.core.messages import Message
from bounded_agents.core.ports import ModelRequest, ModelResponse, ReadBound, Usage
from bounded_agents.core.summary import render_history_summary
from bounded_agents.core.tokens import estimate_message_tokens
from bounded_agents.errors import ConfigError

CTX = HistoryPolicyContext(thread_id="t1", agent="helper", actor_id="u1", run_id="r1")


def msgs(n: int, chars: int = 40) -> list[Message]:
    """n alternating user/assistant messages; at 40 chars each costs 14 tokens."""
    return [
        Message(role="user" if i % 2 == 0 else "assistant", content=f"{i:0{chars}d}")
        for i in range(n)
    ]


def sized(*chars: int) -> list[Message]:
    return [Message(role="user", content=str(i) * c) for i, c in enumerate(chars)]


async def fake_summarizer(dropped: list[Message], ctx: HistoryPolicyContext) -> HistorySummary:
    return HistorySummary(text=f"{len(dropped)} messages", usage=Usage())


class FakeModel:
    async def complete(self, request: ModelRequest) -> ModelResponse:
        return ModelResponse(content="summary")


class PinTheBrief:
    """A custom policy: keeps the first message and the newest two."""

    def select(self, messages: list[Message], ctx: HistoryPolicyContext) -> HistorySelection:
        return HistorySelection(keep=messages[:1] + messages[-2:], drop=messages[1:-2])


# --- the window ----------------------------------------------------------------------------


def test_count_window_keeps_the_newest() -> None:
    m = msgs(10)
    sel = window_history(max_messages=4).select(m, CTX)
    assert sel.keep == m[6:]
    assert sel.drop == m[:6]


def test_count_window_larger_than_thread_keeps_everything() -> None:
    m = msgs(3)
    assert window_history(max_messages=10).select(m, CTX) == HistorySelection(keep=m, drop=[])


def test_token_window_keeps_the_newest_that_fit() -> None:
    m = msgs(10)  # 14 tokens each
    sel = window_history(max_tokens=14 * 3).select(m, CTX)
    assert sel.keep == m[7:]
    sel = window_history(max_tokens=14 * 3 + 13).select(m, CTX)
    assert sel.keep == m[7:]


@pytest.mark.parametrize(
    ("max_messages", "max_tokens", "kept"),
    [(2, 14 * 5, 2), (5, 14 * 2, 2), (3, 14 * 3, 3)],
)
def test_both_limits_the_stricter_wins(max_messages: int, max_tokens: int, kept: int) -> None:
    m = msgs(10)
    sel = window_history(max_messages=max_messages, max_tokens=max_tokens).select(m, CTX)
    assert sel.keep == m[-kept:]
    assert sel.drop == m[:-kept]


def test_max_messages_zero_still_keeps_the_newest() -> None:
    m = msgs(5)
    sel = window_history(max_messages=0).select(m, CTX)
    assert sel.keep == [m[-1]]
    assert sel.drop == m[:-1]


def test_newest_over_budget_alone_still_rides() -> None:
    m = sized(4, 4, 4000)
    sel = window_history(max_tokens=10).select(m, CTX)
    assert sel.keep == [m[-1]]
    assert sel.drop == m[:-1]


def test_token_walk_stops_at_the_first_message_that_would_exceed() -> None:
    # costs from the newest back: 14 (fits), 1004 (would exceed), 5, 5 (would fit, but the walk
    # has stopped: skipping the big one would make the kept part non-contiguous)
    m = sized(4, 4, 4000, 40)
    budget = estimate_message_tokens(m[3]) + 2 * estimate_message_tokens(m[0])
    sel = window_history(max_tokens=budget).select(m, CTX)
    assert sel.keep == [m[3]]
    assert sel.drop == m[:3]


def test_empty_thread_gives_empty_keep_and_drop() -> None:
    for policy in (window_history(max_messages=0), window_history(max_tokens=1), whole_thread()):
        assert policy.select([], CTX) == HistorySelection(keep=[], drop=[])


def test_no_limit_keeps_everything() -> None:
    m = msgs(7)
    assert window_history().select(m, CTX).keep == m


def test_custom_estimator_is_used() -> None:
    m = msgs(6)
    sel = window_history(max_tokens=3, estimate=lambda _m: 1).select(m, CTX)
    assert sel.keep == m[3:]


def test_negative_limits_are_rejected() -> None:
    with pytest.raises(ConfigError, match="max_messages"):
        window_history(max_messages=-1)
    with pytest.raises(ConfigError, match="max_tokens"):
        window_history(max_tokens=-1)


def test_select_does_not_mutate_its_input() -> None:
    m = msgs(6)
    snapshot = list(m)
    window_history(max_messages=2).select(m, CTX)
    assert m == snapshot


# --- the declared read bound ---------------------------------------------------------------


def test_every_builtin_declares_a_read_bound() -> None:
    assert window_history(max_messages=6).read_bound == ReadBound(messages=6)
    assert window_history(max_messages=6, max_tokens=100).read_bound == ReadBound(
        messages=6, tokens=100
    )
    assert window_history(max_tokens=100).read_bound == ReadBound(tokens=100)
    # Summarizing: the read takes the window plus a fold batch (half the window by default).
    assert window_history(max_messages=6, summarize=fake_summarizer).read_bound == ReadBound(
        messages=10
    )
    assert window_history(max_messages=40, summarize=fake_summarizer).read_bound == ReadBound(
        messages=60
    )
    assert window_history().read_bound == ReadBound(messages=40)
    assert runs_window(max_runs=3).read_bound == ReadBound(runs=3)
    assert whole_thread().read_bound is None


def test_a_custom_estimator_keeps_the_token_budget_out_of_the_read() -> None:
    """The store can only sum the estimate it stores; another estimator is applied by select."""
    policy = window_history(max_messages=None, max_tokens=100, estimate=lambda m: 1)
    assert policy.read_bound is None


def test_window_history_without_a_limit_keeps_forty_as_adonis_does() -> None:
    m = msgs(50)
    sel = window_history().select(m, CTX)
    assert sel.keep == m[-40:] and sel.drop == m[:10]


def test_declared_bound_is_kept_by_select_on_the_newest_rows() -> None:
    # The promise: selecting over only what the bound reads gives the same keep.
    m = msgs(20)
    policy = window_history(max_messages=6, max_tokens=14 * 4)
    bound = policy.read_bound
    assert bound is not None and bound.messages is not None
    full = policy.select(m, CTX)
    bounded = policy.select(m[-bound.messages :], CTX)
    assert len(full.keep) <= bound.messages
    assert full.keep == bounded.keep == m[-len(full.keep) :]


def test_policy_attributes_the_loop_reads() -> None:
    plain = window_history(max_messages=3)
    assert plain.summarize is None
    assert plain.render_summary is render_history_summary
    summarizing = window_history(max_messages=3, summarize=fake_summarizer)
    assert summarizing.summarize is fake_summarizer
    assert getattr(PinTheBrief(), "read_bound", None) is None


def test_builtins_and_custom_policies_satisfy_the_protocol() -> None:
    for policy in (window_history(), runs_window(max_runs=1), whole_thread(), PinTheBrief()):
        assert isinstance(policy, HistoryPolicy)
    assert not isinstance(HistoryConfig(), HistoryPolicy)


# --- HistoryConfig -------------------------------------------------------------------------


def test_config_defaults_and_dict_coercion() -> None:
    config = HistoryConfig()
    assert (config.max_messages, config.max_tokens, config.summarize, config.enabled) == (
        None,
        None,
        False,
        True,
    )
    assert (config.runs, config.summary_token_threshold, config.keep_recent_runs) == (None, None, 5)
    assert HistoryConfig.coerce({"max_messages": 6}) == HistoryConfig(max_messages=6)
    assert HistoryConfig.coerce(config) is config


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"max_messages": 0}, "max_messages"),
        ({"max_messages": -3}, "max_messages"),
        ({"max_tokens": 0}, "max_tokens"),
        ({"max_tokens": -1}, "max_tokens"),
        ({"max_mesages": 6}, "max_mesages"),
        ({"summarize": "yes please"}, "summarize"),
        ({"enabled": "sometimes"}, "enabled"),
        ({"runs": 0}, "runs"),
        ({"summary_token_threshold": 0, "summarize": True}, "summary_token_threshold"),
        ({"keep_recent_runs": 0}, "keep_recent_runs"),
        ({"fold_max_tokens": 0}, "fold_max_tokens"),
    ],
)
def test_invalid_config_is_a_config_error_naming_the_key(data: dict[str, Any], field: str) -> None:
    with pytest.raises(ConfigError, match=rf"invalid history: {field}(\.\w+)?: "):
        HistoryConfig.coerce(data)


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"runs": 2, "max_messages": 4}, "runs"),
        ({"runs": 2, "summarize": True}, "runs"),
        ({"summary_token_threshold": 500}, "summary_token_threshold"),
        (
            {"summary_token_threshold": 500, "max_tokens": 9, "summarize": True},
            "summary_token_threshold",
        ),
        ({"keep_recent_runs": 3, "max_messages": 4}, "keep_recent_runs"),
        ({"fold_messages": 3, "max_messages": 4}, "fold_messages"),
    ],
)
def test_strategies_that_do_not_combine_are_refused_naming_the_key(
    data: dict[str, Any], field: str
) -> None:
    with pytest.raises(ConfigError, match=rf"invalid history: {field}: "):
        HistoryConfig.coerce(data)


def test_config_is_frozen_and_coerce_rejects_other_types() -> None:
    with pytest.raises(ValidationError):
        HistoryConfig(max_messages=3).max_messages = 4  # type: ignore[misc]
    with pytest.raises(ConfigError):
        HistoryConfig.coerce(6)  # type: ignore[arg-type]


def test_config_accepts_a_callable_summarizer() -> None:
    assert HistoryConfig(summarize=fake_summarizer).summarize is fake_summarizer


# --- policy_from_config --------------------------------------------------------------------


def test_policy_from_config_builds_the_window() -> None:
    policy = policy_from_config(HistoryConfig(max_messages=4, max_tokens=100), None)
    assert isinstance(policy, WindowHistory)
    assert (policy.count_limit, policy.token_limit) == (4, 100)
    assert policy.read_bound == ReadBound(messages=4, tokens=100)
    assert policy.summarize is None


def test_policy_from_config_builds_each_strategy() -> None:
    assert isinstance(policy_from_config(HistoryConfig(runs=3), None), RunsWindow)
    summarized = policy_from_config(
        HistoryConfig(summary_token_threshold=900, keep_recent_runs=2, summarize=True), FakeModel()
    )
    assert isinstance(summarized, SummarizingRunsWindow)
    assert (summarized.token_threshold, summarized.keep_recent_runs) == (900, 2)
    default = policy_from_config(HistoryConfig(), None)
    assert isinstance(default, WindowHistory) and default.count_limit == 40


def test_summarize_true_binds_the_model_and_bounds_the_read() -> None:
    policy = policy_from_config(HistoryConfig(max_messages=4, summarize=True), FakeModel())
    assert callable(getattr(policy, "summarize", None))
    assert getattr(policy, "read_bound", None) == ReadBound(messages=8)


def test_summarize_true_without_a_model_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="model"):
        policy_from_config(HistoryConfig(max_messages=4, summarize=True), None)


def test_callable_summarize_is_used_as_is() -> None:
    policy = policy_from_config(HistoryConfig(max_tokens=50, summarize=fake_summarizer), None)
    assert getattr(policy, "summarize", None) is fake_summarizer


def test_disabled_history_keeps_only_the_newest_message() -> None:
    m = msgs(9)
    for config in (
        HistoryConfig(enabled=False),
        HistoryConfig(enabled=False, max_messages=20, summarize=True),
    ):
        policy = policy_from_config(config, None)
        sel = policy.select(m, CTX)
        assert sel.keep == [m[-1]]
        assert sel.drop == m[:-1]
        assert getattr(policy, "read_bound", None) == ReadBound(messages=1)
        assert getattr(policy, "summarize", None) is None
    assert latest_message_only().select(m[:1], CTX).keep == m[:1]


# --- precedence ----------------------------------------------------------------------------


def test_agent_history_outranks_module_policy_and_module_history() -> None:
    pinned = PinTheBrief()
    policy = resolve_policy({"max_messages": 2}, pinned, HistoryConfig(max_messages=9))
    assert isinstance(policy, WindowHistory)
    assert policy.count_limit == 2

    agent_policy = PinTheBrief()
    assert resolve_policy(agent_policy, pinned, {"max_messages": 9}) is agent_policy


def test_module_policy_outranks_module_history() -> None:
    pinned = PinTheBrief()
    assert resolve_policy(None, pinned, HistoryConfig(max_messages=9)) is pinned


def test_module_history_applies_when_nothing_more_specific() -> None:
    policy = resolve_policy(None, None, {"max_messages": 9})
    assert getattr(policy, "read_bound", None) == ReadBound(messages=9)


def test_no_ceiling_anywhere_sends_the_whole_thread() -> None:
    policy = resolve_policy(None, None, None)
    m = msgs(50)
    assert policy.select(m, CTX) == HistorySelection(keep=m, drop=[])
    assert getattr(policy, "read_bound", None) is None


def test_resolve_passes_the_model_to_a_summarizing_config() -> None:
    policy = resolve_policy(HistoryConfig(max_messages=3, summarize=True), None, None, FakeModel())
    assert callable(getattr(policy, "summarize", None))
    with pytest.raises(ConfigError):
        resolve_policy(None, None, {"max_messages": 3, "summarize": True})


def test_resolve_rejects_values_of_the_wrong_type() -> None:
    with pytest.raises(ConfigError, match="agent history"):
        resolve_policy(6, None, None)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="history_policy"):
        validate_module_history({"max_messages": 3}, None, None)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="max_messages"):
        resolve_policy({"max_messages": 0}, None, None)


def test_a_bad_module_history_is_refused_even_when_every_agent_overrides_it() -> None:
    with pytest.raises(ConfigError, match="max_messages"):
        validate_module_history(None, {"max_messages": 0}, None)
    with pytest.raises(ConfigError, match="colour"):
        validate_module_history(None, {"colour": "blue"}, None)
    with pytest.raises(ConfigError, match="model"):
        validate_module_history(None, {"summarize": True}, None)
    validate_module_history(None, {"summarize": True}, FakeModel())  # a 40-message window
