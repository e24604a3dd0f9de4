"""When a summarizing window folds early because the provider's prompt cache is cold anyway:
only at or past the TTL, only within half a fold batch of the high mark (by count or by
tokens), never with a TTL of 0 or an unknown idle time; and the settings that set the TTL."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from bounded_agents import AgentModule, agent
from bounded_agents.core.history import HistoryConfig, window_history
from bounded_agents.core.messages import Message
from bounded_agents.core.ports import HistoryPolicyContext, HistorySelection, HistorySummary
from bounded_agents.core.tokens import estimate_message_tokens
from bounded_agents.errors import ConfigError
from bounded_agents.settings import Settings
from bounded_agents.store import MemoryStore
from bounded_agents.testing import ScriptedProvider, reply

CTX = HistoryPolicyContext(thread_id="t", agent="a", actor_id="u", run_id="r")


async def _summarize(messages: list[Message], ctx: HistoryPolicyContext) -> HistorySummary:
    return HistorySummary(text="s")


def _thread(n: int) -> list[Message]:
    return [
        Message(role="user" if i % 2 == 0 else "assistant", content=f"m{i}", seq=i + 1)
        for i in range(n)
    ]


def _folded(selection: HistorySelection) -> int:
    return len(selection.drop)


def _ctx(idle: float | None, ttl: float = 300.0) -> HistoryPolicyContext:
    return CTX.model_copy(update={"idle_seconds": idle, "cache_ttl_seconds": ttl})


def test_a_cold_thread_folds_from_half_a_batch_below_the_mark_and_not_before() -> None:
    policy = window_history(max_messages=20, fold_messages=20, summarize=_summarize)
    # High mark 40 unsummarized messages; half a batch (10) below it is 30.
    assert _folded(policy.select(_thread(29), _ctx(300.0))) == 0
    assert _folded(policy.select(_thread(30), _ctx(300.0))) == 10, "cut back to the window"
    assert _folded(policy.select(_thread(30), _ctx(299.9))) == 0, "still hot"
    assert _folded(policy.select(_thread(39), _ctx(0.0))) == 0
    assert _folded(policy.select(_thread(40), _ctx(0.0))) == 20, "the mark folds hot or cold"


def test_no_ttl_or_no_idle_time_never_folds_early() -> None:
    policy = window_history(max_messages=20, fold_messages=20, summarize=_summarize)
    assert _folded(policy.select(_thread(39), _ctx(10**9, ttl=0.0))) == 0
    assert _folded(policy.select(_thread(39), _ctx(None))) == 0
    assert _folded(policy.select(_thread(39), CTX)) == 0, "a bare context says nothing"


def test_a_token_window_folds_cold_within_half_its_token_batch() -> None:
    messages = _thread(40)
    per = estimate_message_tokens(messages[0])
    assert all(estimate_message_tokens(m) == per for m in messages)
    policy = window_history(
        max_messages=None, max_tokens=10 * per, fold_tokens=10 * per, summarize=_summarize
    )
    # High mark 20 messages' tokens; half a token batch below it is 15.
    assert _folded(policy.select(messages[:14], _ctx(400.0))) == 0
    assert _folded(policy.select(messages[:15], _ctx(400.0))) == 5
    assert _folded(policy.select(messages[:15], _ctx(10.0))) == 0


def test_the_policys_own_ttl_outranks_the_loops() -> None:
    long_lived = window_history(
        max_messages=20, fold_messages=20, summarize=_summarize, cache_ttl_seconds=3600
    )
    assert _folded(long_lived.select(_thread(35), _ctx(400.0, ttl=300.0))) == 0
    short = window_history(
        max_messages=20, fold_messages=20, summarize=_summarize, cache_ttl_seconds=60
    )
    assert _folded(short.select(_thread(35), _ctx(100.0, ttl=0.0))) == 15


def test_a_window_without_a_summarizer_ignores_the_cache() -> None:
    policy = window_history(max_messages=20, min_messages=10)
    assert policy.select(_thread(25), _ctx(10**6)) == policy.select(_thread(25), CTX)


@pytest.mark.parametrize("bad", [-1.0, float("nan")])
def test_a_negative_or_nan_ttl_is_refused_everywhere(bad: float) -> None:
    with pytest.raises(ConfigError, match="cache_ttl_seconds"):
        window_history(max_messages=4, summarize=_summarize, cache_ttl_seconds=bad)
    with pytest.raises(ConfigError, match="cache_ttl_seconds"):
        HistoryConfig.coerce({"max_messages": 4, "summarize": True, "cache_ttl_seconds": bad})
    with pytest.raises(ValidationError, match="history_cache_ttl_seconds"):
        Settings(history_cache_ttl_seconds=bad)


def test_a_config_ttl_only_applies_to_a_summarizing_window() -> None:
    with pytest.raises(ConfigError, match="cache_ttl_seconds: only applies"):
        HistoryConfig.coerce({"max_messages": 4, "cache_ttl_seconds": 60})
    with pytest.raises(ConfigError, match="cache_ttl_seconds: only applies"):
        HistoryConfig.coerce({"runs": 2, "cache_ttl_seconds": 60})


def test_the_setting_defaults_to_five_minutes_and_reaches_the_loop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    @agent(name="plain", system_prompt="Help.")
    class Plain:
        pass

    def build() -> AgentModule:
        return AgentModule.for_root(
            model=ScriptedProvider(default=reply("ok")),
            store=MemoryStore(),
            agents=[Plain],
            settings=Settings(migrate_on_start=False),
        )

    assert Settings().history_cache_ttl_seconds == 300.0
    assert build().loop.deps.limits.cache_ttl_seconds == 300.0
    monkeypatch.setenv("AGENT_HISTORY_CACHE_TTL_SECONDS", "0")
    assert build().loop.deps.limits.cache_ttl_seconds == 0.0
    monkeypatch.setenv("AGENT_HISTORY_CACHE_TTL_SECONDS", "3600")
    assert build().loop.deps.limits.cache_ttl_seconds == 3600.0
