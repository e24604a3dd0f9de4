"""Rule 11: context_window trims one call's provider-shaped messages, never orphaning a tool."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bounded_agents.core.context_window import (
    DEFAULT_WINDOW_NOTICE,
    ChatMiddleware,
    WindowMetrics,
    context_window,
)
from bounded_agents.core.messages import ChatMessage, ToolCall
from bounded_agents.errors import ConfigError


def system(text: str = "You are helpful.") -> ChatMessage:
    return ChatMessage(role="system", content=text)


def user(text: str = "question") -> ChatMessage:
    return ChatMessage(role="user", content=text)


def assistant(text: str = "answer", calls: tuple[str, ...] = ()) -> ChatMessage:
    return ChatMessage(
        role="assistant",
        content=text,
        tool_calls=[ToolCall(id=c, name="look", arguments={}) for c in calls],
    )


def tool(call_id: str, text: str = "result") -> ChatMessage:
    return ChatMessage(role="tool", content=text, tool_call_id=call_id)


def notice(text: str = DEFAULT_WINDOW_NOTICE) -> ChatMessage:
    return ChatMessage(role="system", content=text)


# --- configuration -------------------------------------------------------------------------


def test_no_limit_is_a_no_op_with_a_warning() -> None:
    """As ThenaJS's contextWindow: no option, no trimming. It warns, since a window that trims
    nothing is almost surely a forgotten limit."""
    msgs = [system(), user("1"), assistant("", ("c1",)), tool("c1", "x" * 10_000), user("2")]
    with pytest.warns(UserWarning, match="trims nothing"):
        mw = context_window()
    out, metrics = mw(msgs)
    assert out == msgs
    assert metrics == {
        "window_trimmed": False,
        "messages_sent": 5,
        "messages_original": 5,
        "window_orphans_dropped": 0,
    }
    with pytest.warns(UserWarning, match="trims nothing"):
        mw = context_window(notice="x")
    assert mw(msgs)[0] == msgs


@pytest.mark.parametrize("name", ["max_turns", "max_chars", "max_chars_per_tool"])
@pytest.mark.parametrize("value", [0, -1])
def test_limits_below_one_are_rejected(name: str, value: int) -> None:
    with pytest.raises(ConfigError, match=name):
        context_window(**{name: value})  # type: ignore[arg-type]


def test_a_window_is_a_chat_middleware() -> None:
    mw: ChatMiddleware = context_window(max_turns=3)
    out, metrics = mw([user()])
    assert out == [user()]
    assert metrics == {
        "window_trimmed": False,
        "messages_sent": 1,
        "messages_original": 1,
        "window_orphans_dropped": 0,
    }
    assert set(metrics) == set(WindowMetrics.model_fields)


# --- max_turns and the system head ---------------------------------------------------------


def test_max_turns_keeps_the_last_messages_and_never_cuts_the_system_head() -> None:
    msgs = [system("a"), system("b"), user("1"), assistant("2"), user("3"), assistant("4")]
    out, metrics = context_window(max_turns=2)(msgs)
    assert out == [system("a"), system("b"), notice(), user("3"), assistant("4")]
    assert metrics == {
        "window_trimmed": True,
        "messages_sent": 5,
        "messages_original": 6,
        "window_orphans_dropped": 0,
    }


def test_max_turns_does_not_count_the_head() -> None:
    msgs = [system(), user("1"), assistant("2")]
    out, metrics = context_window(max_turns=2)(msgs)
    assert out == msgs
    assert metrics["window_trimmed"] is False


def test_input_is_not_mutated() -> None:
    msgs = [system(), user("1"), assistant("2"), user("3")]
    snapshot = list(msgs)
    context_window(max_turns=1, max_chars_per_tool=1)(msgs)
    assert msgs == snapshot


# --- max_chars -----------------------------------------------------------------------------


def test_max_chars_trims_from_the_front_until_it_fits() -> None:
    msgs = [system("s" * 1000), user("a" * 10), assistant("b" * 10), user("c" * 10)]
    out, metrics = context_window(max_chars=20, notice=False)(msgs)
    assert out == [msgs[0], msgs[2], msgs[3]]  # the head's 1000 chars are not counted
    assert metrics["messages_sent"] == 3


def test_max_chars_counts_tool_call_arguments() -> None:
    """A deliberate difference from ThenaJS, which counts content only: by content alone this
    history is 3 characters and would all be sent, with a 100-character argument unbounded."""
    big_call = ChatMessage(
        role="assistant",
        content="",
        tool_calls=[ToolCall(id="c1", name="look", arguments={"q": "x" * 100})],
    )
    msgs = [user("a"), big_call, tool("c1", "r"), user("b")]
    out, metrics = context_window(max_chars=50, notice=False)(msgs)
    assert out == [user("b")]
    assert metrics["window_orphans_dropped"] == 1


def test_max_chars_never_drops_the_newest_message_for_budget() -> None:
    msgs = [user("a"), assistant("b"), user("x" * 500)]
    out, _ = context_window(max_chars=10, notice=False)(msgs)
    assert out == [user("x" * 500)]


def test_both_limits_apply() -> None:
    msgs = [user("a" * 10), assistant("b" * 10), user("c" * 10), assistant("d" * 30)]
    out, _ = context_window(max_turns=3, max_chars=45, notice=False)(msgs)
    assert out == msgs[2:]


# --- max_chars_per_tool --------------------------------------------------------------------


def test_tool_output_over_the_ceiling_is_truncated_without_counting_as_trimmed() -> None:
    """`window_trimmed` means messages were cut, not shortened (as in ThenaJS's metric)."""
    msgs = [user(), assistant("", ("c1", "c2")), tool("c1", "x" * 10), tool("c2", "y" * 3)]
    out, metrics = context_window(max_chars_per_tool=4)(msgs)
    assert out[2] == tool("c1", "xxxx\n… [truncated]")
    assert out[3] == tool("c2", "yyy")
    assert metrics == {
        "window_trimmed": False,
        "messages_sent": 4,
        "messages_original": 4,
        "window_orphans_dropped": 0,
    }


def test_only_tool_messages_are_truncated() -> None:
    msgs = [system("s" * 10), user("u" * 10), assistant("a" * 10)]
    out, metrics = context_window(max_chars_per_tool=2)(msgs)
    assert out == msgs
    assert metrics["window_trimmed"] is False


# --- orphans -------------------------------------------------------------------------------


def test_a_cut_between_a_call_and_its_answers_walks_forward_past_the_orphans() -> None:
    msgs = [
        system(),
        user("1"),
        assistant("", ("c1", "c2")),
        tool("c1"),
        tool("c2"),
        assistant("done"),
        user("2"),
    ]
    out, metrics = context_window(max_turns=4)(msgs)
    assert out == [system(), notice(), assistant("done"), user("2")]
    assert metrics == {
        "window_trimmed": True,
        "messages_sent": 4,
        "messages_original": 7,
        "window_orphans_dropped": 2,
    }


def test_untrimmed_input_is_left_alone() -> None:
    msgs = [system(), tool("c0"), user()]  # malformed, but nothing was cut: not ours to fix
    out, metrics = context_window(max_turns=10)(msgs)
    assert out == msgs
    assert metrics["window_orphans_dropped"] == 0


# --- notice --------------------------------------------------------------------------------


def test_custom_notice_and_silent_cut() -> None:
    msgs = [system(), user("1"), assistant("2"), user("3")]
    out, _ = context_window(max_turns=1, notice="[cut]")(msgs)
    assert out == [system(), notice("[cut]"), user("3")]
    out, metrics = context_window(max_turns=1, notice=False)(msgs)
    assert out == [system(), user("3")]
    assert metrics["messages_sent"] == 2


def test_notice_goes_first_when_there_is_no_head() -> None:
    out, _ = context_window(max_turns=1)([user("1"), assistant("2"), user("3")])
    assert out == [notice(), user("3")]


def test_warn_index_failure_is_a_deprecated_alias_for_notice() -> None:
    msgs = [user("1"), assistant("2"), user("3")]
    with pytest.warns(DeprecationWarning, match="notice"):
        mw = context_window(max_turns=1, warn_index_failure="[old]")
    assert mw(msgs)[0] == [notice("[old]"), user("3")]
    with pytest.warns(DeprecationWarning):
        mw = context_window(max_turns=1, warn_index_failure=False)
    assert mw(msgs)[0] == [user("3")]


def test_the_deprecation_and_no_limit_warnings_point_at_the_line_that_called() -> None:
    with pytest.warns(DeprecationWarning) as deprecated:
        context_window(max_turns=1, warn_index_failure="[old]")
    with pytest.warns(UserWarning) as limitless:
        context_window()
    assert [w.filename for w in (*deprecated, *limitless)] == [__file__, __file__]


def test_notice_wins_over_warn_index_failure() -> None:
    msgs = [user("1"), assistant("2"), user("3")]
    with pytest.warns(DeprecationWarning):
        mw = context_window(max_turns=1, notice="[new]", warn_index_failure="[old]")
    assert mw(msgs)[0] == [notice("[new]"), user("3")]
    with pytest.warns(DeprecationWarning):
        mw = context_window(max_turns=1, notice=DEFAULT_WINDOW_NOTICE, warn_index_failure="[o]")
    assert mw(msgs)[0] == [notice(), user("3")]


# --- property: no orphan tool message ever leaves ------------------------------------------


@st.composite
def transcripts(draw: st.DrawFn) -> list[ChatMessage]:
    out = [system(f"s{i}") for i in range(draw(st.integers(min_value=0, max_value=2)))]
    for t in range(draw(st.integers(min_value=0, max_value=8))):
        out.append(user("u" * draw(st.integers(min_value=0, max_value=60))))
        for s in range(draw(st.integers(min_value=0, max_value=3))):
            ids = tuple(f"c{t}-{s}-{k}" for k in range(draw(st.integers(1, 3))))
            out.append(assistant("", ids))
            out.extend(tool(i, "r" * draw(st.integers(min_value=0, max_value=200))) for i in ids)
        out.append(assistant("a" * draw(st.integers(min_value=0, max_value=60))))
    return out


limits = st.one_of(st.none(), st.integers(min_value=1, max_value=400))


@given(
    msgs=transcripts(),
    max_turns=limits,
    max_chars=limits,
    max_chars_per_tool=limits,
    use_notice=st.booleans(),
)
def test_no_orphan_tool_message_ever_leaves(
    msgs: list[ChatMessage],
    max_turns: int | None,
    max_chars: int | None,
    max_chars_per_tool: int | None,
    use_notice: bool,
) -> None:
    if max_turns is None and max_chars is None and max_chars_per_tool is None:
        max_turns = 3
    mw = context_window(
        max_turns=max_turns,
        max_chars=max_chars,
        max_chars_per_tool=max_chars_per_tool,
        notice=DEFAULT_WINDOW_NOTICE if use_notice else False,
    )
    out, metrics = mw(msgs)

    # every tool message answers a call made by an assistant message that was sent before it,
    # and every call that was sent has its answer sent too
    called: set[str] = set()
    answered: set[str] = set()
    for m in out:
        if m.role == "tool":
            assert m.tool_call_id in called
            answered.add(m.tool_call_id)
        called.update(c.id for c in m.tool_calls)
    assert answered == called

    head = msgs[: next((i for i, m in enumerate(msgs) if m.role != "system"), len(msgs))]
    assert out[: len(head)] == head
    assert metrics["messages_original"] == len(msgs)
    assert metrics["messages_sent"] == len(out)
    if max_turns is not None:
        body = [m for m in out[len(head) :] if m.content != DEFAULT_WINDOW_NOTICE]
        assert len(body) <= max_turns
    if not metrics["window_trimmed"]:
        # nothing cut; at most tool outputs shortened
        assert [(m.role, m.tool_call_id) for m in out] == [(m.role, m.tool_call_id) for m in msgs]
        if max_chars_per_tool is None:
            assert out == msgs


def test_the_step_after_a_tool_call_keeps_the_call_with_its_answers() -> None:
    """A cut landing on trailing tool answers must not walk past them into nothing."""
    msgs = [system(), user("q"), assistant("", calls=("c1", "c2")), tool("c1"), tool("c2")]
    out, metrics = context_window(max_turns=1)(msgs)
    assert [m.role for m in out] == ["system", "system", "assistant", "tool", "tool"]
    assert metrics["window_orphans_dropped"] == 0
    out, _ = context_window(max_chars=1, notice=False)(msgs)
    assert [m.role for m in out] == ["system", "assistant", "tool", "tool"]


def test_a_budget_too_small_for_anything_still_sends_the_step_being_answered() -> None:
    """A deliberate difference from ThenaJS, which would send the system messages alone here
    (and count the tool answer as an orphan): the model would then answer a step it cannot see.
    Over budget by the newest step beats a silently wrong answer."""
    msgs = [
        system(),
        user("q" * 50),
        assistant("", calls=("c1",)),
        tool("c1", "r" * 50),
    ]
    out, metrics = context_window(max_chars=1)(msgs)
    assert out == [system(), notice(), msgs[2], msgs[3]]
    assert metrics == {
        "window_trimmed": True,
        "messages_sent": 4,
        "messages_original": 4,
        "window_orphans_dropped": 0,
    }
    # the newest message alone, when it is not a tool answer
    out, metrics = context_window(max_chars=1)([system(), user("a" * 50), user("b" * 50)])
    assert out == [system(), notice(), user("b" * 50)]
    assert metrics["window_trimmed"] is True


@given(msgs=transcripts(), max_turns=limits, max_chars=limits)
def test_the_newest_message_always_rides(
    msgs: list[ChatMessage], max_turns: int | None, max_chars: int | None
) -> None:
    if max_turns is None and max_chars is None:
        max_turns = 1
    out, _ = context_window(max_turns=max_turns, max_chars=max_chars)(msgs)
    if any(m.role != "system" for m in msgs):
        assert out[-1] == msgs[-1]
