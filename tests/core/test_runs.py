"""Rule 10: runs are one user message and everything done for it, and are never split."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bounded_agents.core.history import (
    HistoryPolicyContext,
    HistorySelection,
    HistorySummary,
    runs_window,
    split_runs,
    summarizing_runs_window,
)
from bounded_agents.core.messages import Message, ToolCall, ToolResult
from bounded_agents.core.ports import ReadBound, Usage
from bounded_agents.core.tokens import estimate_message_tokens
from bounded_agents.errors import ConfigError

CTX = HistoryPolicyContext(thread_id="t1", agent="helper", actor_id="u1", run_id="r1")


async def fake_summarizer(dropped: list[Message], ctx: HistoryPolicyContext) -> HistorySummary:
    return HistorySummary(text="", usage=Usage())


def run(run_id: str | None, steps: int = 1, chars: int = 40) -> list[Message]:
    """One run: a user message, `steps` tool exchanges, a final answer."""
    out = [Message(role="user", content="q" * chars, run_id=run_id)]
    for i in range(steps):
        call = ToolCall(id=f"{run_id}-{i}", name="look", arguments={})
        out.append(
            Message(
                role="assistant",
                content="",
                tool_calls=[call],
                tool_results=[ToolResult(call_id=call.id, content="r" * chars)],
                run_id=run_id,
            )
        )
    out.append(Message(role="assistant", content="a" * chars, run_id=run_id))
    return out


def thread(*runs: list[Message]) -> list[Message]:
    return [m for r in runs for m in r]


# --- grouping ------------------------------------------------------------------------------


def test_split_runs_groups_by_run_id() -> None:
    a, b, c = run("a", 2), run("b", 0), run("c", 1)
    assert split_runs(thread(a, b, c)) == [a, b, c]


def test_split_runs_without_run_ids_starts_a_run_at_each_user_message() -> None:
    a, b = run(None, 1), run(None, 0)
    assert split_runs(thread(a, b)) == [a, b]


def test_split_runs_edge_cases() -> None:
    assert split_runs([]) == []
    greeting = Message(role="assistant", content="hello")
    a = run(None, 0)
    assert split_runs([greeting, *a]) == [[greeting], a]
    # an id-less non-user message joins the run before it, whatever that run's id
    stray = Message(role="system", content="note")
    b = run("b", 0)
    assert split_runs([*b, stray]) == [[*b, stray]]


# --- runs_window ---------------------------------------------------------------------------


def test_runs_window_keeps_the_newest_whole_runs() -> None:
    a, b, c, d = run("a", 2), run("b", 0), run("c", 3), run("d", 0)
    sel = runs_window(max_runs=2).select(thread(a, b, c, d), CTX)
    assert sel.keep == thread(c, d)
    assert sel.drop == thread(a, b)


def test_runs_window_never_cuts_the_run_in_flight() -> None:
    a, current = run("a", 1), [Message(role="user", content="now", run_id="z")]
    for n in (0, 1):
        sel = runs_window(max_runs=n).select(thread(a, current), CTX)
        assert sel.keep == current
    assert runs_window(max_runs=5).select(thread(a, current), CTX).drop == []


def test_runs_window_reads_its_runs_and_rejects_negative() -> None:
    policy = runs_window(max_runs=3)
    assert policy.read_bound == ReadBound(runs=3)
    assert runs_window(max_runs=0).read_bound == ReadBound(runs=1)  # the run in flight
    assert policy.summarize is None
    assert policy.select([], CTX) == HistorySelection(keep=[], drop=[])
    with pytest.raises(ConfigError, match="max_runs"):
        runs_window(max_runs=-1)


# --- summarizing_runs_window ---------------------------------------------------------------


def test_summarizing_runs_window_keeps_everything_under_the_threshold() -> None:
    m = thread(run("a"), run("b"), run("c"))
    total = sum(estimate_message_tokens(x) for x in m)  # the default estimator
    policy = summarizing_runs_window(
        summarize=fake_summarizer, token_threshold=total + 1, keep_recent_runs=1
    )
    assert policy.select(m, CTX) == HistorySelection(keep=m, drop=[])
    # HasteKit summarizes when the count REACHES the threshold (>=), not only past it.
    at = summarizing_runs_window(
        summarize=fake_summarizer, token_threshold=total, keep_recent_runs=1
    )
    assert at.select(m, CTX).keep == m[-len(run("c")) :]


def test_summarizing_runs_window_drops_older_runs_past_the_threshold() -> None:
    a, b, c = run("a"), run("b"), run("c")
    policy = summarizing_runs_window(
        summarize=fake_summarizer, token_threshold=10, keep_recent_runs=2, estimate=lambda _: 1
    )
    m = thread(a, b, c)  # 9 messages, 9 tokens: at the threshold nothing happens
    assert policy.select(m, CTX).drop == []
    m = thread(a, b, c, run("d"))  # 12 tokens: past it
    sel = policy.select(m, CTX)
    assert sel.keep == m[6:]
    assert sel.drop == thread(a, b)


def test_summarizing_runs_window_attributes() -> None:
    policy = summarizing_runs_window(summarize=fake_summarizer, token_threshold=100)
    assert policy.summarize is fake_summarizer
    assert policy.keep_recent_runs == 5  # HasteKit's default
    assert policy.read_bound == ReadBound(tokens=100, runs=5, widest=True)
    with pytest.raises(ConfigError, match="token_threshold"):
        summarizing_runs_window(summarize=fake_summarizer, token_threshold=0)


@pytest.mark.parametrize("keep", [0, -4])
def test_keep_recent_runs_below_one_is_raised_to_one(keep: int) -> None:
    a, b = run("a"), run("b")
    policy = summarizing_runs_window(
        summarize=fake_summarizer, token_threshold=1, keep_recent_runs=keep
    )
    assert policy.keep_recent_runs == 1
    sel = policy.select(thread(a, b), CTX)
    assert sel.keep == b
    assert sel.drop == a


# --- property: a run is never split --------------------------------------------------------


@st.composite
def threads(draw: st.DrawFn) -> list[Message]:
    n_runs = draw(st.integers(min_value=0, max_value=8))
    with_ids = draw(st.booleans())
    out: list[Message] = []
    for i in range(n_runs):
        steps = draw(st.integers(min_value=0, max_value=3))
        chars = draw(st.integers(min_value=0, max_value=400))
        out.extend(run(f"r{i}" if with_ids else None, steps, chars))
    return out


def assert_whole_runs(messages: list[Message], sel: HistorySelection) -> None:
    assert sel.drop + sel.keep == messages
    if messages:
        runs = split_runs(messages)
        assert runs[-1] == sel.keep[-len(runs[-1]) :]  # the run in flight rides whole
        # the cut lands on a run boundary: kept and dropped runs are whole runs
        assert split_runs(sel.drop) + split_runs(sel.keep) == runs
    else:
        assert sel.keep == []


@given(messages=threads(), max_runs=st.integers(min_value=0, max_value=10))
def test_runs_window_never_splits_a_run(messages: list[Message], max_runs: int) -> None:
    sel = runs_window(max_runs=max_runs).select(messages, CTX)
    assert_whole_runs(messages, sel)
    assert len(split_runs(sel.keep)) == min(max(1, max_runs), len(split_runs(messages)))


@given(
    messages=threads(),
    threshold=st.integers(min_value=1, max_value=3000),
    keep=st.integers(min_value=-2, max_value=6),
)
def test_summarizing_runs_window_never_splits_a_run(
    messages: list[Message], threshold: int, keep: int
) -> None:
    policy = summarizing_runs_window(
        summarize=fake_summarizer, token_threshold=threshold, keep_recent_runs=keep
    )
    assert_whole_runs(messages, policy.select(messages, CTX))


def test_run_less_history_groups_by_user_message_alone() -> None:
    """Imported history without run ids: each user message starts a run, every other message
    joins the run before it, and a run id never splits or joins anything by itself."""
    q1, q2 = Message(role="user", content="q1"), Message(role="user", content="q2")
    a2 = Message(role="assistant", content="a2")
    tagged = Message(role="assistant", content="a3", run_id="elsewhere")
    assert split_runs([q1, q2, a2, tagged]) == [[q1], [q2, a2, tagged]]
    greeting = Message(role="assistant", content="hi")
    assert split_runs([greeting, q1]) == [[greeting], [q1]]
