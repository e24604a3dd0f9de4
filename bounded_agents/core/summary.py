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
import re
from collections.abc import Sequence
from typing import Literal

from bounded_agents.core.messages import ChatMessage, Message, digest_rows
from bounded_agents.core.ports import (
    HistoryPolicyContext,
    HistorySummary,
    ModelProvider,
    ModelRequest,
    ModelResponse,
    Summarizer,
)
from bounded_agents.core.tokens import MESSAGE_ALLOWANCE

PROSE_SUMMARY_INSTRUCTION = (
    "Summarize this conversation for an assistant that will continue it without seeing these "
    "messages. Preserve decisions made, facts and constraints the user stated, identifiers and "
    "names mentioned, and anything left unresolved. Omit pleasantries. "
    "Reply with the summary only \u2014 no preamble, no headings."
)
"""The instruction before rolling summaries were measured (Adonis's text, word for word). It
asks for a recap of the messages and says nothing of the summary so far, so a small model
rewrites the newest messages and drops what the previous summary held (bench/README.md)."""

DEFAULT_HISTORY_SUMMARY_INSTRUCTION = (
    "You keep the running notes of a conversation for an assistant that will continue it "
    "without seeing the messages. Write the updated notes: every fact from the notes so far, "
    "plus every new fact from the new messages. When a new message changes a value (a date, an "
    "amount, an address, a decision), keep only the new value. Keep names, identifiers (order, "
    "ticket and tracking numbers), dates, amounts, decisions, constraints the user set and open "
    'questions exactly as written. Write one short fact per line, each starting with "- ". '
    "Omit pleasantries and anything a continuing assistant does not need. "
    "Reply with the notes only."
)
"""What the summarizer is told when no instruction is given.

A fold hands the summarizer the summary so far plus new messages, so the instruction asks for
the UPDATED summary (carry every old fact forward, replace what changed) rather than a recap of
the messages, and for a fact list, which keeps identifiers verbatim and compresses well. It
measured best of the instructions compared in bench/README.md ("Recall").
"""

APPEND_SUMMARY_INSTRUCTION = (
    "Write notes on these new messages of a conversation for an assistant that will continue "
    "it without seeing them. Note every name, identifier (order, ticket and tracking numbers), "
    "date, amount, decision, constraint the user set and open question exactly as written; "
    "for a value that changed, note its new value. Write one short fact per line, each "
    'starting with "- ". Omit pleasantries and small talk. Reply with the notes only.'
)
"""What the summarizer is told for `carry="append"`: notes on the new messages alone, which the
summarizer appends to the notes so far. Nothing then depends on the model copying the old
facts forward (what a small model fails at); the notes grow until the loop compresses them."""

COMPRESS_SUMMARY_INSTRUCTION = (
    "These are the running notes of a conversation, and they have grown too long. Rewrite them "
    "shorter for an assistant that will continue the conversation without seeing it. Keep "
    "every name, identifier, date, amount, decision, constraint and open question exactly as "
    "written, and only the current value of anything that was updated; drop repetition and "
    "detail the assistant does not need. Write one short fact per line, each starting with "
    '"- ". Reply with the notes only.'
)
"""What `summarize_with_model` is told for a `fold_task="compress"` call: a summary that
outgrew its cap is folded into itself instead of losing its oldest facts to a clip."""

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
    summary for something the user said nor asks for what it already covers. It does not call
    the summary complete: a clipped summary says so in its own text (`CLIP_NOTE`). Pure: the
    loop runs it outside any checkpoint.
    """
    return (
        f"<conversation_summary>\n{text}\n</conversation_summary>\n"
        "Earlier messages in this thread are no longer included verbatim: the summary above "
        "stands for them. Where it says part of it was lost, do not guess what that part held."
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


CLIP_NOTE = (
    "[The oldest part of these notes was cut to fit their size limit: facts from it may be "
    "missing.]"
)
"""Leads a summary that was clipped: the model that reads it is told that it is not whole, and
so is every later fold (which is asked to carry its facts forward, this line included)."""


ARCHIVE_NOTE = "[Older notes of this summary are archived, not lost: search the history for them.]"
"""Leads a summary whose oldest part was archived (`SummaryArchive`) instead of cut: the model
is told where those notes went. Not counted as kept text, like `CLIP_NOTE`."""


ARCHIVED_UNSEARCHABLE_NOTE = "[Older notes of this summary are archived and not shown here.]"
"""`ARCHIVE_NOTE` for an agent without the search tool: the notes are kept (the inspector lists
them; erasure reaches them), but this model cannot look them up."""


def split_summary(text: str, cap: int, note: str = ARCHIVE_NOTE) -> tuple[str, str]:
    """(what `clip_summary` keeps, led by `note` when it cut; the oldest part it cut, "" when
    nothing was), for a store that archives that part instead of dropping it. The kept text is
    a suffix of the summary (less any note it led with), so the cut part is what precedes it."""
    kept = clip_summary(text, cap, note=note)
    whole = text.strip()
    for old in (CLIP_NOTE, ARCHIVE_NOTE, ARCHIVED_UNSEARCHABLE_NOTE):
        if whole.startswith(old):
            whole = whole[len(old) :].strip()
    body = kept.removeprefix(note).strip()
    if body == whole or not whole.endswith(body):
        return kept, ""
    return kept, whole[: len(whole) - len(body)].strip()


def clip_summary(text: str, cap: int, *, note: str | None = None) -> str:
    """`text` cut to at most `cap` estimated tokens (as `estimate_message_tokens` counts a
    message holding it), keeping its END, from a word break when one is near, and led by
    `CLIP_NOTE`; unchanged (but for surrounding whitespace) when it fits.

    The LAST resort, after the summary was asked to compress itself (the loop's fold): what is
    cut is lost, so the loop reports it (`summary.clipped`, a metric, a span attribute) and the
    note tells the model. A summary extends the previous one, so its newest facts tend to come
    last; one kept by its head at the cap would take in nothing new ever again."""
    lead = CLIP_NOTE if note is None else note
    text = text.strip()
    limit = max(0, (cap - MESSAGE_ALLOWANCE) * 4)
    if len(text) <= limit:
        return text
    # The note needs room of its own: a cap too small for it and as much text again gets none.
    noted = len(lead) + 1 <= limit // 2
    if noted:
        limit -= len(lead) + 1
        for old in (CLIP_NOTE, ARCHIVE_NOTE, ARCHIVED_UNSEARCHABLE_NOTE):
            if text.startswith(old):
                text = text[len(old) :].strip()
    # With the note set aside, what is left may fit already: then nothing of it is cut.
    start = max(0, len(text) - limit)
    cut = text[start:] if limit else ""
    breaks = [i for i in (cut.find(" "), cut.find("\n")) if i >= 0]
    if start and breaks and min(breaks) <= limit // 5:
        cut = cut[min(breaks) :]
    body = cut.strip()
    return f"{lead}\n{body}" if noted else body


def summary_fits(text: str, cap: int) -> bool:
    """True when `text` is within `cap` estimated tokens (the measure `clip_summary` cuts by)."""
    return len(text.strip()) <= max(0, (cap - MESSAGE_ALLOWANCE) * 4)


_ECHO_PROBE_CHARS = 60


def _normalized(text: str) -> str:
    return " ".join(text.split()).casefold()


_ECHO_PROBES = tuple(
    _normalized(instruction)[:_ECHO_PROBE_CHARS]
    for instruction in (
        PROSE_SUMMARY_INSTRUCTION,
        DEFAULT_HISTORY_SUMMARY_INSTRUCTION,
        COMPRESS_SUMMARY_INSTRUCTION,
    )
)


_REFUSAL = re.compile(
    r"^\W*(i'?m sorry|i am sorry|sorry,|i can(?:no|')t|i cannot|i'?m (?:not able|unable)|"
    r"i am (?:not able|unable)|as an ai\b|unfortunately,? i)",
    re.IGNORECASE,
)
REFUSAL_CHARS = 400
"""A refusal is short: only an answer under this many characters that OPENS like one
("I'm sorry", "I can't", "As an AI") is taken for one; a long summary that mentions an apology
further in is a summary."""


_WORDLIKE = re.compile(r"[^\W_]")
"""A letter or digit of any script (Unicode word characters, less the underscore)."""


def fold_rejection(made: HistorySummary) -> str | None:
    """Why a summarizer's answer must not become the thread's summary, or None to accept it.

    A stored summary REPLACES what it covers: the previous summary and every folded message are
    never sent again. So an answer that does not stand for them is refused, and the boundary and
    the previous summary stay: `truncated` (the model stopped at its token cap:
    `finish_reason: length`, also what a reasoning model returns with no text when it spent its
    budget thinking), `tool_call` (it acted instead of writing), `refused` (a content filter,
    or a short answer that opens like a refusal: "I'm sorry, I can't help with that"),
    `empty` (no letter or digit of any script: whitespace, punctuation, the U+FFFD a NUL
    becomes; ten NULs were stored and led every later view, found by attack), `echo` (the
    instruction or the fold's own input headings given back). What the answer SAYS is judged
    apart, against the chunk it folds: `bounded_agents.core.fold_health.unrelated_fold`
    (reason `unrelated`)."""
    reason = made.finish_reason
    if reason == "length":
        return "truncated"
    if reason in ("tool_calls", "function_call"):
        return "tool_call"
    if reason == "content_filter":
        return "refused"
    if not _WORDLIKE.search(made.text):
        return "empty"
    if len(made.text.strip()) < REFUSAL_CHARS and _REFUSAL.match(made.text.strip()):
        return "refused"
    normalized = _normalized(made.text)
    if any(probe in normalized for probe in _ECHO_PROBES) or (
        _normalized(NEW_MESSAGES_HEADING) in normalized
        and _normalized(PREVIOUS_SUMMARY_HEADING) in normalized
    ):
        return "echo"
    return None


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


def _summary_request(
    messages: list[Message],
    ctx: HistoryPolicyContext,
    instruction: str,
    appending: bool,
    previous: str,
) -> ModelRequest:
    """The one call's request: the instruction with its word limit, then what the task hands
    the model (the over-long summary alone, the new messages alone, or the summary so far and
    them), with no tools, so a summary cannot act."""
    if ctx.fold_task == "compress":
        system, user = COMPRESS_SUMMARY_INSTRUCTION, previous
    elif appending:
        system, user = instruction, _render_transcript(messages)
    else:
        system, user = instruction, fold_input(messages, ctx)
    return ModelRequest(
        messages=[
            ChatMessage(role="system", content=system + _limit(ctx)),
            ChatMessage(role="user", content=user),
        ],
        tools=[],
        purpose="history_summary",
        max_tokens=_model_tokens(ctx.summary_max_tokens),
    )


def _summary_made(response: ModelResponse, previous: str) -> HistorySummary:
    """The call's answer as a summary; appended to `previous` (the notes so far, `""` unless
    they are carried by appending)."""
    finish = response.finish_reason
    if response.tool_calls and not response.content.strip():
        finish = "tool_calls"  # told to call none; whatever the provider named it
    text = response.content
    if previous and text.strip():
        # An empty answer stays empty, so the loop refuses it rather than storing the old
        # notes as if the new messages had been read.
        text = f"{previous}\n{text.strip()}"
    return HistorySummary(
        text=text,
        usage=response.usage,
        model=response.model or None,
        finish_reason=finish,
    )


def summarize_with_model(
    model: ModelProvider,
    instruction: str | None = None,
    *,
    carry: Literal["rewrite", "append"] = "rewrite",
) -> Summarizer:
    """A `HistoryPolicy.summarize` backed by one non-streamed call to `model`.

    `carry` is how the summary so far reaches the next one. `rewrite` (the default instruction
    `DEFAULT_HISTORY_SUMMARY_INSTRUCTION`): the model is handed the summary so far and the new
    messages and writes the updated summary, deduplicated, updated values replaced. `append`
    (`APPEND_SUMMARY_INSTRUCTION`): the model is handed the new messages alone, and its notes are
    appended to the summary so far, so no old fact depends on the model copying it; the summary
    then grows until it is compressed (`fold_task="compress"`). bench/README.md ("Recall")
    measures both.

    The returned coroutine function takes `(messages, ctx)` and makes exactly ONE
    `model.complete(...)` call: a system message holding `instruction`, then a user message
    holding the summary so far (`ctx.summary`, when there is one) and a transcript of `messages`;
    no tools (a summary must not act), and `purpose="history_summary"` so the call gets a ledger
    row of its own. With `ctx.summary_max_tokens` set (the loop sets it) the instruction ends
    with a word limit, and the request's `max_tokens` is `SUMMARY_MODEL_TOKENS` of the cap: a
    model's tokens run longer than the estimate's four characters, so a model stopped by it
    still fits. With `ctx.fold_task == "compress"` it is handed the over-long summary alone,
    with `COMPRESS_SUMMARY_INSTRUCTION`. It returns the response's text, usage, model name and
    finish reason (the loop refuses a truncated or tool-call-only answer: `fold_rejection`).
    `complete` rather than `stream` keeps the summary's tokens out of the user's live stream.

    The loop runs it inside a `history:summarize` checkpoint, so it may do I/O: a replay reads
    the journaled summary back instead of calling the model again.
    """

    if carry not in ("rewrite", "append"):
        raise ValueError(f"carry must be 'rewrite' or 'append', got {carry!r}")
    appending = carry == "append"
    told = instruction or (
        APPEND_SUMMARY_INSTRUCTION if appending else DEFAULT_HISTORY_SUMMARY_INSTRUCTION
    )

    async def summarize(messages: list[Message], ctx: HistoryPolicyContext) -> HistorySummary:
        previous = ctx.summary.text.strip() if ctx.summary is not None else ""
        extend = appending and ctx.fold_task == "fold" and bool(previous)
        response = await model.complete(_summary_request(messages, ctx, told, appending, previous))
        return _summary_made(response, previous if extend else "")

    return summarize


def chunk_digest(rows: Sequence[tuple[int, str, str]]) -> str:
    """What a fold's chunk was made of, as (seq, role, content) rows in seq order: the check a
    store makes before it saves a summary made outside a run (`IntactSummarySaver`). A count of
    the chunk's seqs cannot tell a thread from one erased and made again under the same id,
    whose seqs start at 1 again (found by attack: a session cleared while its fold's summarizer
    ran, then started again, got the erased conversation's summary, across actors too). The
    content is what a summarizer reads; whatever else a row holds never reaches the summary."""
    return digest_rows(rows)


__all__ = [
    "APPEND_SUMMARY_INSTRUCTION",
    "ARCHIVED_UNSEARCHABLE_NOTE",
    "ARCHIVE_NOTE",
    "CLIP_NOTE",
    "COMPRESS_SUMMARY_INSTRUCTION",
    "DEFAULT_FOLD_MAX_TOKENS",
    "DEFAULT_HISTORY_SUMMARY_INSTRUCTION",
    "PROSE_SUMMARY_INSTRUCTION",
    "chunk_digest",
    "clip_summary",
    "fold_input",
    "fold_rejection",
    "render_history_summary",
    "split_summary",
    "summarize_with_model",
    "summary_fits",
    "summary_token_cap",
]
