"""Hysteresis windows: the start stays put between cuts, a cut lands on a run's start, and the
cut is a function of the stored thread, so a bounded page cuts where the whole thread does."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bounded_agents.core.history import (
    HistoryConfig,
    WindowHistory,
    policy_from_config,
    window_history,
)
from bounded_agents.core.messages import Message, ToolCall, ToolResult
from bounded_agents.core.ports import HistoryPolicyContext, Thread, ThreadTurnQuery
from bounded_agents.core.reads import bounded_page
from bounded_agents.core.tokens import estimate_message_tokens
from bounded_agents.errors import ConfigError
from bounded_agents.settings import Settings
from tests.factories import assistant, user

CTX = HistoryPolicyContext(thread_id="t", agent="a", actor_id="u", run_id="r")


@st.composite
def transcripts(draw: st.DrawFn) -> list[Message]:
    """Runs of a user message and one or more assistant messages (imported history may hold
    several, or a leading greeting), some with tool exchanges; sizes vary a lot."""
    out: list[Message] = []
    if draw(st.booleans()):
        out.append(assistant("hello " * draw(st.integers(1, 20))))
    for run in range(draw(st.integers(1, 50))):
        out.append(user("q" * draw(st.integers(1, 300))))
        for k in range(draw(st.sampled_from([1, 1, 1, 2, 3]))):
            calls = [ToolCall(id=f"c{run}-{k}", name="look", arguments={})] * draw(
                st.sampled_from([0, 0, 1])
            )
            out.append(
                Message(
                    role="assistant",
                    content="a" * draw(st.integers(0, 400)),
                    tool_calls=calls,
                    tool_results=[ToolResult(call_id=c.id, content="r" * 500) for c in calls],
                )
            )
    return [m.model_copy(update={"seq": i + 1}) for i, m in enumerate(out)]


def policies(*, plain_limits: bool = True) -> st.SearchStrategy[WindowHistory]:
    """Hysteresis windows by count, by tokens, by both; with `plain_limits` also a count
    hysteresis beside a plain token budget (which slides, as a plain limit does, when it
    binds)."""
    count = st.tuples(st.integers(2, 30), st.integers(1, 29)).filter(lambda hl: hl[1] < hl[0])
    tokens = st.tuples(st.integers(50, 3000), st.integers(1, 2999)).filter(lambda hl: hl[1] < hl[0])
    pure = [
        count.map(lambda hl: window_history(max_messages=hl[0], min_messages=hl[1])),
        tokens.map(
            lambda hl: window_history(max_messages=None, max_tokens=hl[0], min_tokens=hl[1])
        ),
        st.tuples(count, tokens).map(
            lambda p: window_history(
                max_messages=p[0][0], min_messages=p[0][1], max_tokens=p[1][0], min_tokens=p[1][1]
            )
        ),
    ]
    mixed = st.tuples(count, st.integers(50, 3000)).map(
        lambda p: window_history(max_messages=p[0][0], min_messages=p[0][1], max_tokens=p[1])
    )
    return st.one_of(*pure, mixed) if plain_limits else st.one_of(*pure)


def turns(thread: list[Message]) -> list[int]:
    """Thread lengths at which a turn runs: each time the newest message is a user message."""
    return [i + 1 for i, m in enumerate(thread) if m.role == "user"]


def cut_of(policy: WindowHistory, messages: list[Message]) -> int:
    return len(policy.select(messages, CTX).drop)


def grids(policy: WindowHistory, messages: list[Message]) -> tuple[int, int]:
    """Where the thread's length puts each mark's grid: a cut may move only when one changes."""
    count = tokens = 0
    if policy.min_messages is not None and policy.count_limit is not None:
        count = (len(messages) - policy.min_messages) // (policy.count_limit - policy.min_messages)
    if policy.min_tokens is not None and policy.token_limit is not None:
        total = sum(estimate_message_tokens(m) for m in messages)
        tokens = (total - policy.min_tokens) // (policy.token_limit - policy.min_tokens)
    return max(count, -1), max(tokens, -1)


def forced(policy: WindowHistory, messages: list[Message], cut: int) -> bool:
    """The kept part is only what must ride (the newest run) because no message starts at or
    after the token grid: a message larger than the low mark on its own. The next turn may cut
    it away while the grid stays put."""
    if policy.min_tokens is None or policy.token_limit is None:
        return False
    starts = list(itertools.accumulate((estimate_message_tokens(m) for m in messages), initial=0))
    step = policy.token_limit - policy.min_tokens
    grid = max(0, (starts[-1] - policy.min_tokens) // step * step)
    return all(s < grid for s in starts[:-1])


@settings(max_examples=100, deadline=None)
@given(thread=transcripts(), policy=policies(plain_limits=False))
def test_between_two_cuts_each_prompt_extends_the_previous_one(
    thread: list[Message], policy: WindowHistory
) -> None:
    previous: tuple[int, tuple[int, int], bool] | None = None
    for length in turns(thread):
        messages = thread[:length]
        cut = cut_of(policy, messages)
        grid = grids(policy, messages)
        if previous is not None:
            prev_cut, prev_grid, prev_forced = previous
            if grid == prev_grid and not prev_forced:
                assert cut == prev_cut, "the start moved between two cuts"
            assert cut >= prev_cut, "a window never moves back"
        previous = (cut, grid, forced(policy, messages, cut))


@settings(max_examples=100, deadline=None)
@given(thread=transcripts(), policy=policies())
def test_a_cut_never_splits_a_run_and_keeps_below_the_high_mark(
    thread: list[Message], policy: WindowHistory
) -> None:
    for length in turns(thread):
        messages = thread[:length]
        kept = policy.select(messages, CTX).keep
        cut = length - len(kept)
        assert kept[-1] is messages[-1], "the current user message always rides"
        assert cut == 0 or messages[cut].role == "user", "the window starts at a run's start"
        if policy.min_messages is not None and policy.count_limit is not None:
            assert len(kept) < policy.count_limit
        if policy.token_limit is not None and len(kept) > 1:
            assert sum(estimate_message_tokens(m) for m in kept) <= policy.token_limit


@settings(max_examples=100, deadline=None)
@given(thread=transcripts(), policy=policies())
def test_the_bounded_page_selects_what_the_whole_thread_selects(
    thread: list[Message], policy: WindowHistory
) -> None:
    """The read bound is at most the high mark, and `select` over that page alone, told where
    it starts (`skipped`, `tokens_before`), keeps exactly what it keeps over everything."""
    bound = policy.read_bound
    assert bound is not None
    if policy.count_limit is not None:
        assert bound.messages == policy.count_limit
    if policy.token_limit is not None:
        assert bound.tokens == policy.token_limit
    for length in turns(thread):
        messages = thread[:length]
        page = bounded_page(
            Thread(id="t", actor_id="u", agent="a", messages=messages),
            ThreadTurnQuery.of("t", bound, after_summary=False),
        )
        ctx = CTX.model_copy(update={"skipped": page.skipped, "tokens_before": page.tokens_before})
        assert policy.select(page.messages, ctx).keep == policy.select(messages, CTX).keep


def test_regular_turns_cut_once_per_step_and_keep_between_the_marks() -> None:
    """Two messages per turn, window 40/20: one cut every ten turns, 20..39 messages kept."""
    policy = window_history(max_messages=40, min_messages=20)
    thread = [
        m.model_copy(update={"seq": i + 1})
        for i, m in enumerate(m for n in range(200) for m in (user(f"q{n}"), assistant(f"a{n}")))
    ]
    cuts, kept, previous = 0, [], None
    for length in turns(thread):
        cut = cut_of(policy, thread[:length])
        kept.append(length - cut)
        cuts += previous is not None and cut != previous
        previous = cut
    assert cuts == 18  # a cut every 10 turns once the thread passes the high mark (turn 21)
    assert min(kept[20:]) == 21 and max(kept) == 39


def test_hysteresis_is_off_unless_configured() -> None:
    policy = window_history(max_messages=10)
    messages = [m.model_copy(update={"seq": i + 1}) for i, m in enumerate([user("x")] * 30)]
    assert policy.select(messages, CTX).keep == messages[-10:]
    assert policy.min_messages is None and policy.min_tokens is None


def test_a_summarizing_window_given_marks_folds_from_the_high_mark_to_the_low_one() -> None:
    async def summarize(messages: list[Message], ctx: HistoryPolicyContext) -> object:
        raise AssertionError

    marks = window_history(max_messages=40, min_messages=20, summarize=summarize)  # type: ignore[arg-type]
    fold = window_history(max_messages=20, fold_messages=20, summarize=summarize)  # type: ignore[arg-type]
    for policy in (marks, fold):
        assert policy.count_limit == 20 and policy.fold_messages == 20
        assert policy.read_bound is not None and policy.read_bound.messages == 40
    tokens = window_history(
        max_messages=None,
        max_tokens=4000,
        min_tokens=1000,
        summarize=summarize,  # type: ignore[arg-type]
    )
    assert tokens.token_limit == 1000 and tokens.fold_tokens == 3000
    assert tokens.read_bound is not None and tokens.read_bound.tokens == 4000


@pytest.mark.parametrize(
    ("config", "key"),
    [
        ({"min_messages": 5}, "min_messages"),
        ({"max_messages": 10, "min_messages": 10}, "min_messages"),
        ({"max_messages": 10, "min_messages": 12}, "min_messages"),
        ({"max_tokens": 100, "min_tokens": 100}, "min_tokens"),
        ({"max_messages": 10, "min_tokens": 5}, "min_tokens"),
        (
            {"max_messages": 40, "min_messages": 20, "fold_messages": 10, "summarize": True},
            "fold_messages",
        ),
        ({"runs": 3, "min_messages": 2}, "min_messages"),
        ({"max_messages": 10, "min_messages": 0}, "min_messages"),
    ],
)
def test_contradictory_marks_are_a_config_error_naming_the_key(
    config: dict[str, object], key: str
) -> None:
    with pytest.raises(ConfigError, match=key):
        HistoryConfig.coerce(config)


def test_consistent_fold_and_marks_are_accepted_and_the_config_builds_hysteresis() -> None:
    HistoryConfig.coerce(
        {"max_messages": 40, "min_messages": 20, "fold_messages": 20, "summarize": True}
    )
    policy = policy_from_config(HistoryConfig(max_messages=40, min_messages=20), None)
    assert isinstance(policy, WindowHistory)
    assert (policy.count_limit, policy.min_messages) == (40, 20)
    with pytest.raises(ConfigError, match="min_tokens"):
        window_history(max_tokens=100, min_tokens=50, estimate=lambda m: 1)


def test_settings_take_the_low_marks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENT_HISTORY_MAX_MESSAGES", "40")
    monkeypatch.setenv("AGENT_HISTORY_MIN_MESSAGES", "20")
    monkeypatch.setenv("AGENT_HISTORY_MAX_TOKENS", "8000")
    monkeypatch.setenv("AGENT_HISTORY_MIN_TOKENS", "4000")
    config = Settings().history_config()
    assert config is not None
    assert (config.min_messages, config.min_tokens) == (20, 4000)
    monkeypatch.setenv("AGENT_HISTORY_MIN_MESSAGES", "50")
    with pytest.raises(ValueError, match="AGENT_HISTORY_MIN_MESSAGES"):
        Settings()
