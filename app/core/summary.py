"""Folding what a history window dropped into a summary the model can still act on.

`summarize_with_model` is the built-in summarizer (`HistoryConfig(summarize=True)` binds it): one
extra, non-streamed call to the module's model with `purpose="history_summary"`, so the ledger
books its tokens apart from the agent's own steps. Summaries ROLL: each call is handed the summary
so far (`ctx.summary`) and only the messages newly left out, and returns the next summary, so a
call's input is bounded by the fold batch, never by the thread. `render_history_summary` is the
default wording of the summary in the prompt.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from app.core.messages import ChatMessage, Message
from app.core.ports import (
    HistoryPolicyContext,
    HistorySummary,
    ModelProvider,
    ModelRequest,
    Summarizer,
)
from app.core.tokens import MESSAGE_ALLOWANCE

DEFAULT_HISTORY_SUMMARY_INSTRUCTION = (
    "Summarize this conversation for an assistant that will continue it without seeing these "
    "messages. Preserve decisions made, facts and constraints the user stated, identifiers and "
    "names mentioned, and anything left unresolved. Omit pleasantries. "
    "Reply with the summary only \u2014 no preamble, no headings."
)
"""What the summarizer is told when no instruction is given: Adonis's text, word for word.

Written for a reader who continues the conversation without seeing the messages, so it asks for
what a later turn must act on (decisions, stated facts and constraints, identifiers and names,
what is unresolved) rather than a readable recap.
"""

DEFAULT_FOLD_MAX_TOKENS = 8000
"""Estimated input tokens one summarizer call may be handed (summary so far plus messages).
Well inside the context window of any model one would summarize with; a longer backlog is
folded in several calls, each extending the summary of the one before."""

SUMMARY_SHARE = 2
"""A summary may take 1/SUMMARY_SHARE of the fold budget (`summary_token_cap`)."""

PREVIOUS_SUMMARY_HEADING = "Summary of the conversation so far:"
NEW_MESSAGES_HEADING = "Messages since then:"


def render_history_summary(text: str) -> str:
    """The default wording of a folded-history summary in the prompt.

    The summary goes in a delimited `<conversation_summary>` block, followed by a note that the
    messages it stands in for are no longer sent verbatim, so the model neither mistakes the
    summary for something the user said nor asks for what it already covers. Pure: the loop runs
    it outside any checkpoint.
    """
    return (
        f"<conversation_summary>\n{text}\n</conversation_summary>\n"
        "Earlier messages in this thread are no longer included verbatim. "
        "Treat the summary above as an accurate record of them."
    )


def summary_token_cap(fold_max_tokens: int) -> int:
    """The estimated tokens a summary may have: half the fold budget (4,000 by default).

    Every fold hands the summarizer the summary so far plus new messages within
    `fold_max_tokens`, and every later prompt carries the summary. A summary allowed to grow
    with the thread would make both O(thread) again; held to half the budget, each fold still
    has half of it for new messages (a budget under 10 tokens leaves a summary of 5). Raise
    `fold_max_tokens` for longer summaries.
    """
    return max(MESSAGE_ALLOWANCE + 1, fold_max_tokens // SUMMARY_SHARE)


def clip_summary(text: str, cap: int) -> str:
    """`text` cut to at most `cap` estimated tokens (as `estimate_message_tokens` counts a
    message holding it), keeping its END, from a word break when one is near; unchanged (but
    for surrounding whitespace) when it fits.

    The backstop for a summarizer that ignores `summary_max_tokens`. What is cut is lost, so
    the choice is which loss: a summary extends the previous one, so its newest facts tend to
    come last, and a summary kept at its cap by its head would take in nothing new ever again.
    Kept by its end, it forgets its oldest facts first, as the window itself does."""
    text = text.strip()
    limit = max(0, (cap - MESSAGE_ALLOWANCE) * 4)
    if len(text) <= limit:
        return text
    cut = text[len(text) - limit :]
    breaks = [i for i in (cut.find(" "), cut.find("\n")) if i >= 0]
    if breaks and min(breaks) <= limit // 5:
        cut = cut[min(breaks) :]
    return cut.strip()


SUMMARY_MODEL_TOKENS = 0.8
"""The share of a summary's cap `summarize_with_model` asks the model for, in its own tokens:
about 4.5 characters each in English prose, against the estimate's 4."""


def _model_tokens(cap: int | None) -> int | None:
    if cap is None:
        return None
    return max(1, int((cap - MESSAGE_ALLOWANCE) * SUMMARY_MODEL_TOKENS))


def _limit(ctx: HistoryPolicyContext) -> str:
    """The word limit that closes the summarizer's instruction: about three words per four
    tokens."""
    cap = ctx.summary_max_tokens
    if cap is None:
        return ""
    words = max(1, (cap - MESSAGE_ALLOWANCE) * 3 // 4)
    return f"\n\nKeep the summary under {words:,} words."


def _render_transcript(messages: Sequence[Message]) -> str:
    """A plain-text transcript of stored messages, tool exchanges and attachments included.

    Sent as ONE user message rather than replayed as chat messages: the summarizer must read the
    conversation, not continue it, and a replayed tool exchange could invite it to call tools.
    """
    lines: list[str] = []
    for m in messages:
        lines.append(f"{m.role}: {m.content}")
        for call in m.tool_calls:
            args = json.dumps(call.arguments, sort_keys=True, ensure_ascii=False)
            lines.append(f"  [tool call {call.id}] {call.name}({args})")
        for result in m.tool_results:
            label = "tool error" if result.is_error else "tool result"
            lines.append(f"  [{label} {result.call_id}] {result.content}")
        for att in m.attachments:
            lines.append(f"  [attachment] {att.name} ({att.media_type})")
    return "\n".join(lines)


def fold_input(messages: Sequence[Message], ctx: HistoryPolicyContext) -> str:
    """What one fold hands the model: the summary so far (if any), then the new messages. With
    no summary yet it is the plain transcript, as a first summary has nothing to extend."""
    transcript = _render_transcript(messages)
    if ctx.summary is None:
        return transcript
    return f"{PREVIOUS_SUMMARY_HEADING}\n{ctx.summary.text}\n\n{NEW_MESSAGES_HEADING}\n{transcript}"


def summarize_with_model(
    model: ModelProvider, instruction: str = DEFAULT_HISTORY_SUMMARY_INSTRUCTION
) -> Summarizer:
    """A `HistoryPolicy.summarize` backed by one non-streamed call to `model`.

    The returned coroutine function takes `(messages, ctx)` and makes exactly ONE
    `model.complete(...)` call: a system message holding `instruction`, then a user message
    holding the summary so far (`ctx.summary`, when there is one) and a transcript of `messages`;
    no tools (a summary must not act), and `purpose="history_summary"` so the call gets a ledger
    row of its own. With `ctx.summary_max_tokens` set (the loop sets it) the instruction ends
    with a word limit, and the request's `max_tokens` is `SUMMARY_MODEL_TOKENS` of the cap: a
    model's tokens run longer than the estimate's four characters, so a model stopped by it
    still fits. It returns the response's text, usage and model name. `complete` rather than
    `stream` keeps the summary's tokens out of the user's live stream.

    The loop runs it inside a `history:summarize` checkpoint, so it may do I/O: a replay reads
    the journaled summary back instead of calling the model again.
    """

    async def summarize(messages: list[Message], ctx: HistoryPolicyContext) -> HistorySummary:
        request = ModelRequest(
            messages=[
                ChatMessage(role="system", content=instruction + _limit(ctx)),
                ChatMessage(role="user", content=fold_input(messages, ctx)),
            ],
            tools=[],
            purpose="history_summary",
            max_tokens=_model_tokens(ctx.summary_max_tokens),
        )
        response = await model.complete(request)
        return HistorySummary(
            text=response.content, usage=response.usage, model=response.model or None
        )

    return summarize


__all__ = [
    "DEFAULT_FOLD_MAX_TOKENS",
    "DEFAULT_HISTORY_SUMMARY_INSTRUCTION",
    "clip_summary",
    "fold_input",
    "render_history_summary",
    "summarize_with_model",
    "summary_token_cap",
]
