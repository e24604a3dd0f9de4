"""Rule 4: the built-in summarizer is one non-streamed, tool-less call; its wording is fixed."""

from collections.abc import AsyncIterator

import pytest

from bounded_agents.core.history import (
    HistoryConfig,
    HistoryPolicyContext,
    HistorySummary,
    policy_from_config,
    window_history,
)
from bounded_agents.core.messages import Message, ToolCall, ToolResult
from bounded_agents.core.ports import ModelRequest, ModelResponse, TextDelta, ThreadSummary, Usage
from bounded_agents.core.summary import (
    APPEND_SUMMARY_INSTRUCTION,
    CLIP_NOTE,
    COMPRESS_SUMMARY_INSTRUCTION,
    DEFAULT_HISTORY_SUMMARY_INSTRUCTION,
    PROSE_SUMMARY_INSTRUCTION,
    clip_summary,
    fold_rejection,
    render_history_summary,
    summarize_with_model,
    summary_token_cap,
)
from bounded_agents.core.tokens import estimate_message_tokens

CTX = HistoryPolicyContext(thread_id="t1", agent="helper", actor_id="u1", run_id="r1")


class CountingModel:
    """Records every request; streaming exists only to prove the summarizer never uses it."""

    def __init__(self) -> None:
        self.requests: list[ModelRequest] = []
        self.streamed = 0

    async def complete(self, request: ModelRequest) -> ModelResponse:
        self.requests.append(request)
        return ModelResponse(
            content="The user wants Postgres.",
            usage=Usage(prompt_tokens=120, completion_tokens=9),
            model="fake",
        )

    async def stream(self, request: ModelRequest) -> AsyncIterator[TextDelta | ModelResponse]:
        self.streamed += 1
        yield TextDelta(text="no")


DROPPED = [
    Message(role="user", content="Move billing to Postgres. Ticket BILL-42.", run_id="a"),
    Message(
        role="assistant",
        content="",
        tool_calls=[ToolCall(id="c1", name="lookup", arguments={"ticket": "BILL-42"})],
        tool_results=[ToolResult(call_id="c1", content="status: open")],
        run_id="a",
    ),
    Message(role="assistant", content="Done: plan drafted.", run_id="a"),
]


async def test_summarize_with_model_makes_exactly_one_tool_less_history_summary_call() -> None:
    model = CountingModel()
    summary = await summarize_with_model(model)(DROPPED, CTX)

    assert summary == HistorySummary(
        text="The user wants Postgres.",
        usage=Usage(prompt_tokens=120, completion_tokens=9),
        model="fake",
    )
    assert len(model.requests) == 1
    assert model.streamed == 0
    request = model.requests[0]
    assert request.purpose == "history_summary"
    assert request.tools == []
    assert [m.role for m in request.messages] == ["system", "user"]
    assert request.messages[0].content == DEFAULT_HISTORY_SUMMARY_INSTRUCTION
    transcript = request.messages[1].content
    for needle in ("Move billing to Postgres", "BILL-42", "lookup", "status: open", "Done"):
        assert needle in transcript


async def test_custom_instruction_is_sent() -> None:
    model = CountingModel()
    await summarize_with_model(model, instruction="Bullet points only.")(DROPPED, CTX)
    assert model.requests[0].messages[0].content == "Bullet points only."


async def test_summarize_true_binds_summarize_with_model() -> None:
    model = CountingModel()
    policy = policy_from_config(HistoryConfig(max_messages=1, summarize=True), model)
    summarize = getattr(policy, "summarize", None)
    assert summarize is not None
    sel = policy.select([*DROPPED, Message(role="user", content="and now?")], CTX)
    summary = await summarize(sel.drop, CTX)
    assert summary.text == "The user wants Postgres."
    assert [r.purpose for r in model.requests] == ["history_summary"]


def test_default_instruction_asks_for_what_a_later_turn_acts_on() -> None:
    text = DEFAULT_HISTORY_SUMMARY_INSTRUCTION.lower()
    for needle in ("decisions", "constraints", "identifiers", "names", "open questions"):
        assert needle in text
    assert "pleasantries" in text
    assert "notes only" in text


def test_default_instruction_carries_old_facts_forward_and_replaces_updated_values() -> None:
    """A fold is handed the summary so far: the instruction must ask for the UPDATED summary,
    not a recap of the new messages (the prose instruction lost what the old summary held)."""
    text = DEFAULT_HISTORY_SUMMARY_INSTRUCTION.lower()
    assert "every fact from the notes so far" in text
    assert "keep only the new value" in text
    assert "one short fact per line" in text


def test_render_history_summary_format() -> None:
    assert render_history_summary("The user is migrating billing.") == (
        "<conversation_summary>\nThe user is migrating billing.\n</conversation_summary>\n"
        "Earlier messages in this thread are no longer included verbatim: the summary above "
        "stands for them. Where it says part of it was lost, do not guess what that part held."
    )


def test_the_rendered_summary_never_calls_itself_accurate() -> None:
    """A clipped summary is not a whole record; the model must not be told it is."""
    assert "accurate" not in render_history_summary("x")


def test_window_history_renders_with_the_default() -> None:
    assert window_history(max_messages=2).render_summary is render_history_summary
    custom = window_history(max_messages=2, render_summary=str.upper)
    assert custom.render_summary("x") == "X"


def test_the_prose_instruction_is_adonis_text_word_for_word() -> None:
    assert PROSE_SUMMARY_INSTRUCTION == (
        "Summarize this conversation for an assistant that will continue it without seeing "
        "these messages. Preserve decisions made, facts and constraints the user stated, "
        "identifiers and names mentioned, and anything left unresolved. Omit pleasantries. "
        "Reply with the summary only \u2014 no preamble, no headings."
    )


async def test_a_fold_hands_the_model_the_summary_so_far_and_only_the_new_messages() -> None:
    model = CountingModel()
    so_far = ThreadSummary(text="The user is moving billing to Postgres.", covers_through_seq=40)
    ctx = CTX.model_copy(update={"summary": so_far})
    new = [Message(role="user", content="Also rename BILL-42.", seq=41)]
    await summarize_with_model(model)(new, ctx)
    sent = model.requests[0].messages[1].content
    assert sent.startswith("Summary of the conversation so far:\nThe user is moving billing")
    assert sent.endswith("Messages since then:\nuser: Also rename BILL-42.")


async def test_a_summarizer_may_return_no_usage_and_no_model() -> None:
    summary = HistorySummary(text="short")
    assert (summary.usage, summary.model) == (None, None)


async def test_summarize_with_model_asks_for_less_than_the_summary_cap() -> None:
    """A word limit in the instruction, and 80% of the cap in model tokens (which run longer
    than the estimate's): a model that obeys either is not clipped. No cap, no limit."""
    model = CountingModel()
    await summarize_with_model(model)(DROPPED, CTX.model_copy(update={"summary_max_tokens": 300}))
    await summarize_with_model(model)(DROPPED, CTX)
    capped, free = model.requests
    assert (capped.max_tokens, free.max_tokens) == (236, None)
    assert capped.messages[0].content == (
        DEFAULT_HISTORY_SUMMARY_INSTRUCTION + "\n\nKeep the summary under 222 words."
    )
    assert free.messages[0].content == DEFAULT_HISTORY_SUMMARY_INSTRUCTION
    assert capped.messages[1:] == free.messages[1:]


def test_the_summary_cap_is_half_the_fold_budget() -> None:
    assert summary_token_cap(8000) == 4000
    assert summary_token_cap(401) == 200
    assert summary_token_cap(1) == 5, "never below one character's worth"


def test_clip_summary_keeps_a_summary_that_fits_unchanged() -> None:
    text = "x" * ((100 - 4) * 4)  # exactly 100 estimated tokens
    assert clip_summary(text, 100) == text


def test_clip_summary_keeps_the_end_from_a_word_break_and_says_it_cut() -> None:
    """The newest facts of a rolling summary come last: the end is kept, whole words only, led
    by the note that tells the model (and later folds) that part of it is lost."""
    text = " ".join(f"word{i}" for i in range(1000))
    clipped = clip_summary(text, 100)
    assert estimate_message_tokens(Message(role="system", content=clipped)) <= 100
    assert clipped.startswith(CLIP_NOTE + "\n")
    body = clipped.removeprefix(CLIP_NOTE + "\n")
    assert text.endswith(body) and text[-len(body) - 1] == " ", "starts on a whole word"
    assert body.endswith("word999")
    assert len(body) > 200, "the word break is near the limit, not far after it"


def test_clipping_a_clipped_summary_leaves_one_note() -> None:
    text = CLIP_NOTE + "\n" + " ".join(f"word{i}" for i in range(1000))
    assert clip_summary(text, 100).count(CLIP_NOTE) == 1


def test_clip_summary_cuts_text_without_breaks_at_the_limit() -> None:
    assert clip_summary("x" + "y" * 10_000, 10) == "y" * 24, "no room for the note at a tiny cap"
    assert clip_summary("abc", 4) == "", "a cap below the per-message allowance keeps nothing"
    assert clip_summary("  short  ", 10) == "short", "surrounding whitespace never counts"
    assert clip_summary("tail" + " " * 10_000, 10) == "tail", "nor is it what gets kept"


@pytest.mark.parametrize(
    ("made", "reason"),
    [
        (HistorySummary(text=""), "empty"),
        (HistorySummary(text=" \n\t "), "empty"),
        (HistorySummary(text="half a summ", finish_reason="length"), "truncated"),
        (HistorySummary(text="", finish_reason="length"), "truncated"),  # a reasoning model
        (HistorySummary(text="", finish_reason="tool_calls"), "tool_call"),
        (HistorySummary(text="no", finish_reason="content_filter"), "refused"),
        (HistorySummary(text=DEFAULT_HISTORY_SUMMARY_INSTRUCTION), "echo"),
        (HistorySummary(text="Sure! " + PROSE_SUMMARY_INSTRUCTION.upper()), "echo"),
        (
            HistorySummary(text="Summary of the conversation so far:\nx\n\nMessages since then:"),
            "echo",
        ),
        (HistorySummary(text="- order ORD-1", finish_reason="stop"), None),
        (HistorySummary(text="- order ORD-1"), None),
    ],
)
def test_fold_rejection_refuses_what_does_not_stand_for_its_messages(
    made: HistorySummary, reason: str | None
) -> None:
    assert fold_rejection(made) == reason


class ToolCallingModel(CountingModel):
    async def complete(self, request: ModelRequest) -> ModelResponse:
        self.requests.append(request)
        return ModelResponse(
            content="", tool_calls=[ToolCall(id="c", name="x", arguments={})], finish_reason="stop"
        )


async def test_a_tool_call_only_answer_comes_back_as_a_tool_call_finish() -> None:
    made = await summarize_with_model(ToolCallingModel())(DROPPED, CTX)
    assert (made.text, made.finish_reason) == ("", "tool_calls")
    assert fold_rejection(made) == "tool_call"


async def test_a_compress_call_hands_the_model_the_summary_alone_with_its_own_instruction() -> None:
    model = CountingModel()
    long = ThreadSummary(text="- fact one\n- fact two", covers_through_seq=80)
    ctx = CTX.model_copy(
        update={"summary": long, "fold_task": "compress", "summary_max_tokens": 100}
    )
    await summarize_with_model(model)([], ctx)
    system, user = model.requests[0].messages
    assert system.content.startswith(COMPRESS_SUMMARY_INSTRUCTION)
    assert "under 72 words" in system.content
    assert user.content == "- fact one\n- fact two"


async def test_append_hands_the_model_only_the_new_messages_and_keeps_the_old_notes() -> None:
    """`carry="append"`: no old fact depends on the model copying it forward."""
    model = CountingModel()
    so_far = ThreadSummary(text="- order ORD-1", covers_through_seq=4)
    ctx = CTX.model_copy(update={"summary": so_far, "summary_max_tokens": 200})
    made = await summarize_with_model(model, carry="append")(DROPPED, ctx)
    system, user = model.requests[0].messages
    assert system.content.startswith(APPEND_SUMMARY_INSTRUCTION)
    assert "ORD-1" not in user.content and "BILL-42" in user.content
    assert made.text == "- order ORD-1\nThe user wants Postgres."


async def test_append_keeps_an_empty_answer_empty_so_the_fold_is_refused() -> None:
    class Silent(CountingModel):
        async def complete(self, request: ModelRequest) -> ModelResponse:
            return ModelResponse(content="  ", finish_reason="stop")

    so_far = ThreadSummary(text="- order ORD-1", covers_through_seq=4)
    ctx = CTX.model_copy(update={"summary": so_far})
    made = await summarize_with_model(Silent(), carry="append")(DROPPED, ctx)
    assert fold_rejection(made) == "empty"


async def test_summary_carry_reaches_the_built_in_summarizer_from_the_config() -> None:
    with pytest.raises(ValueError):
        summarize_with_model(CountingModel(), carry="sideways")  # type: ignore[arg-type]
    model = CountingModel()
    config = HistoryConfig(max_messages=4, summarize=True, summary_carry="append")
    summarize = policy_from_config(config, model).summarize  # type: ignore[attr-defined]
    await summarize(DROPPED, CTX)
    assert model.requests[0].messages[0].content.startswith(APPEND_SUMMARY_INSTRUCTION)
