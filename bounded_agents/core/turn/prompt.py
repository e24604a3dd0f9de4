"""The one prompt builder: what a run's model is sent, from what the run journaled.

A replay must send the model the same prompt byte for byte, so a prompt is a pure function of
the journal: `load:thread` (the kept messages, the summary read, the fold owed), each
`history:summarize*` step's summary, and the tool calls fed back. The loop builds its prompts
here as the run goes (`opening_prompt`, then `refolded_prompt` after a mid-run fold), and the
`/v1/responses/{id}/input_items` route rebuilds a finished run's last prompt here too
(`rebuilt_prompt`), from the same functions: a change to the layout is made once.

Layout: the system prompt, the summary (rendered by the policy), a note on what a degraded
fold left out, then the kept messages (and, within a run, each model step's tool calls and
their results).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from bounded_agents.core.checkpoints import (
    LoadThreadPayload,
    SummarizePayload,
    is_model_step,
    is_summarize_step,
    is_tool_step,
    or_none,
    parse_summarize,
    tool_call_id,
)
from bounded_agents.core.fold_health import owed_count
from bounded_agents.core.history.clearing import Cleared, ToolResultClearing, clear_tool_results
from bounded_agents.core.history.powers import (
    policy_summarizer,
    summary_renderer,
    supports_refolding,
)
from bounded_agents.core.messages import ChatMessage, Message, to_chat_messages
from bounded_agents.core.ports import RunTrace, ThreadSummary
from bounded_agents.core.search import SEARCH_TOOL_NAME
from bounded_agents.core.tokens import estimate_message_tokens
from bounded_agents.core.turn.calls import apply_middleware
from bounded_agents.core.turn.kept import as_kept
from bounded_agents.core.turn.public import AgentDefinition
from bounded_agents.core.turn.state import Window

SEARCH_HINT = (
    "The summary is a digest: the exact earlier messages of this thread (and any archived "
    f"notes) can be looked up with the {SEARCH_TOOL_NAME} tool."
)
"""Follows the summary in the prompt of an agent that has the search tool (summary + search):
the model is told where the detail a summary leaves out still is."""

DEGRADED_SHARE = 1
"""While a fold is overdue, the unsummarized messages sent besides the kept window may be as
many, and as many estimated tokens, as the kept window itself times this: the prompt holds at
most twice the window, however long the summarizer stays down."""


def history_prompt(
    definition: AgentDefinition,
    summary: ThreadSummary | None,
    keep: Sequence[Message],
    omitted: int = 0,
) -> list[ChatMessage]:
    """The system prompt, the summary (when there is one), the note on what is left out (when
    a fold is overdue and the cap left messages out) and the kept messages (as given: clear
    their old tool results first with `cleared_history`)."""
    prompt = [ChatMessage(role="system", content=definition.system_prompt)]
    if summary is not None:
        rendered = summary_renderer(definition.policy)(summary.text)
        if SEARCH_TOOL_NAME in definition.tools:
            rendered = f"{rendered}\n{SEARCH_HINT}"
        prompt.append(ChatMessage(role="system", content=rendered))
    if omitted:
        prompt.append(ChatMessage(role="system", content=omission_note(omitted)))
    prompt.extend(to_chat_messages(keep))
    return prompt


def cleared_history(
    definition: AgentDefinition,
    keep: Sequence[Message],
    first_seq: int | None,
    journaled: Mapping[str, Any] | None,
) -> tuple[list[Message], Cleared]:
    """The kept history with its old tool results replaced by placeholders
    (`core/history/clearing.py`) as the clearing `load:thread` journaled says, and what it
    cleared; as is when none was journaled. A pure function of the journal: a replay clears
    the same results whatever the resuming process's policy."""
    clearing = ToolResultClearing.model_validate(journaled) if journaled is not None else None
    if clearing is None:
        return list(keep), Cleared()
    searchable = SEARCH_TOOL_NAME in definition.tools
    return clear_tool_results(keep, clearing, first_seq=first_seq, searchable=searchable)


def omission_note(omitted: int) -> str:
    """What the model is told when a fold is overdue (the summarizer failed, refused or ran out
    of calls this turn) and `omitted` older messages are neither summarized nor sent."""
    noun = "message" if omitted == 1 else "messages"
    return (
        f"{omitted:,} earlier {noun} of this thread are not included here and are not in any "
        "summary yet. If the user refers to something you cannot see, say so rather than guess."
    )


def degraded_history(
    fold: Mapping[str, Any], covered: int, keep: Sequence[Message], *, folded: int = 0
) -> tuple[list[Message], int]:
    """(the newest messages the fold owed but did not cover, within the cap; how many it owed
    and leaves out). Only messages the turn read (journaled with the fold) can ride, so a
    replay builds the same prompt; older ones the read skipped are left out and counted.
    `folded`: the messages this turn's fold summarized (`owed_count`)."""
    through = int(fold["through"])
    owed = [
        m
        for m in (Message.model_validate(x) for x in fold["messages"])
        if covered < (m.seq or 0) <= through
    ]
    budget_messages = max(1, len(keep)) * DEGRADED_SHARE
    budget_tokens = max(1, sum(estimate_message_tokens(m) for m in keep)) * DEGRADED_SHARE
    taken: list[Message] = []
    tokens = 0
    for message in reversed(owed):
        cost = estimate_message_tokens(message)
        if len(taken) >= budget_messages or tokens + cost > budget_tokens:
            break
        taken.append(message)
        tokens += cost
    taken.reverse()
    # With their seqs: a refolding window folds by them (the prompt's messages carry none).
    # Those left out are counted in messages where the turn knows them (`owed_count`): an
    # erased message's seq is not announced missing.
    return taken, owed_count(fold, covered, folded=folded) - len(taken)


def opening_prompt(
    definition: AgentDefinition,
    load: Mapping[str, Any],
    summary: ThreadSummary | None,
    *,
    kept: list[Message],
    user_seq: int | None,
    folds: int = 0,
    folded: int = 0,
) -> tuple[list[ChatMessage], Window | None, int, Cleared]:
    """(the run's first prompt, its window for a refolding policy, messages left out, the
    tool results cleared from it).

    `kept`: the messages `load` kept, with their seqs (`core/turn/kept.py`). `summary` is the
    one this turn's fold left (the one `load` read when there was no fold).
    When the fold this turn owed is not (all) made, what the summary does not cover rides, up
    to the cap, so nothing a fold would have kept is lost from the prompt; past the cap the
    oldest are left out, and the model is told. A refolding policy also gets its kept history
    with seqs (the kept runs are the newest, contiguous to the user's message)."""
    keep = [as_kept(m) for m in kept] if definition.refolds else kept
    first_seq = keep[0].seq if keep else None
    sent, cleared = cleared_history(definition, keep, first_seq, load.get("clearing"))
    omitted = 0
    fold = load.get("fold")
    if fold is not None and definition.summarizer is not None:
        covered = summary.covers_through_seq if summary is not None else 0
        if covered < int(fold["through"]):
            unfolded, omitted = degraded_history(fold, covered, keep, folded=folded)
            keep, sent = [*unfolded, *keep], [*unfolded, *sent]
    prompt = history_prompt(definition, summary, sent, omitted)
    window = None
    if definition.refolds and user_seq is not None and keep:
        window = Window(
            summary=summary,
            keep=keep,
            head=len(prompt),
            folds=folds,
            cleared=cleared,
            clearing=load.get("clearing"),
        )
    return prompt, window, omitted, cleared


def refolded_prompt(
    definition: AgentDefinition,
    prompt: list[ChatMessage],
    window: Window,
    *,
    summary: ThreadSummary,
    folded: int,
) -> list[ChatMessage]:
    """The prompt after a mid-run fold covered the window's `folded` oldest kept messages: a
    new head (the system prompt, the new summary, the kept rest), then what the run added
    since its first call. `window` moves with it."""
    rest = window.keep[folded:]
    first_seq = rest[0].seq if rest else None
    sent, window.cleared = cleared_history(definition, rest, first_seq, window.clearing)
    head = history_prompt(definition, summary, sent)
    in_run = prompt[window.head :]
    window.summary, window.keep, window.head = summary, rest, len(head)
    return [*head, *in_run]


def folded_summary(
    made: Sequence[SummarizePayload], summary: ThreadSummary | None
) -> ThreadSummary | None:
    """The summary after a fold's journaled steps: each accepted chunk (one without
    `rejected`) is the summary the next chunk, and the prompt, start from."""
    for chunk in made:
        if "rejected" not in chunk and "text" in chunk and "covers_through_seq" in chunk:
            summary = ThreadSummary(
                text=chunk["text"], covers_through_seq=chunk["covers_through_seq"]
            )
    return summary


def rebuilt_prompt(
    definition: AgentDefinition,
    trace: RunTrace,
    load: LoadThreadPayload,
    answer: Message | None,
    *,
    kept: list[Message],
    user_seq: int | None,
) -> list[ChatMessage]:
    """A run's LAST model call's prompt, from its journal and the messages it kept
    (`core/turn/kept.py`): the opening prompt as the loop built it, then each tool step fed
    back before the last model call (and, for a refolding policy, each refold between calls),
    through the agent's middleware as the model step sends it."""
    summary = ThreadSummary.model_validate(load["summary"]) if "summary" in load else None
    folded = 0
    if "fold" in load and policy_summarizer(definition.policy) is not None:
        made = _fold_steps(trace, 0)
        summary = folded_summary(made, summary)
        folded = sum(int(m.get("input_messages", 0)) for m in made if "rejected" not in m)
    prompt, window, _, _ = opening_prompt(
        definition, load, summary, kept=kept, user_seq=user_seq, folded=folded
    )
    for step, fed_back in _tool_turns(trace.steps, answer).items():
        prompt.extend(fed_back)
        if window is not None:
            prompt = _replayed_refold(definition, prompt, window, _fold_steps(trace, step))
    messages, _metrics = apply_middleware(definition.middleware, prompt)
    return messages


def _replayed_refold(
    definition: AgentDefinition,
    prompt: list[ChatMessage],
    window: Window,
    made: list[SummarizePayload],
) -> list[ChatMessage]:
    """A mid-run refold again, its fold read from the journal: no fold step, no refold; else
    the policy's count says which kept messages it folded, and a fold that covered them all
    rewrites the prompt's head."""
    policy = definition.policy
    if not made or not supports_refolding(policy):
        return prompt
    tokens = sum(estimate_message_tokens(m) for m in prompt[1:])
    count = max(1, policy.refold_count(window.keep, tokens))  # it folded: at least one
    through = window.keep[min(count, len(window.keep)) - 1].seq or 0
    summary = folded_summary(made, window.summary)
    window.summary = summary
    if summary is None or summary.covers_through_seq < through:
        return prompt
    return refolded_prompt(definition, prompt, window, summary=summary, folded=count)


def _fold_steps(trace: RunTrace, after_model: int) -> list[SummarizePayload]:
    """The payloads of the fold steps journaled after model step `after_model` (0: before the
    first) and before the next one."""
    model, out = 0, []
    for name in trace.steps:
        if is_model_step(name):
            model = _step_number(name)
        if model == after_model and is_summarize_step(name):
            made = or_none(parse_summarize, trace.payloads.get(name))
            if made is not None:
                out.append(made)
    return out


def _tool_turns(steps: list[str], answer: Message | None) -> dict[int, list[ChatMessage]]:
    """By model step, for each that asked for tools before the last one: the assistant message
    with its calls, then one `tool` message per result, as the answer phase appends them.
    Tools run after the last model call (out of steps) were sent to no model: left out.

    The text a model step sent along with its tool calls is in that step's payload, which the
    timeline does not read; the assistant message carries the calls with empty text."""
    if answer is None:
        return {}
    last_model = max((_step_number(s) for s in steps if is_model_step(s)), default=0)
    calls = {c.id: c for c in answer.tool_calls}
    results = {r.call_id: r for r in answer.tool_results}
    by_step: dict[int, list[str]] = {}
    for name in steps:
        if is_tool_step(name) and _step_number(name) < last_model:
            call_id = tool_call_id(name)
            if call_id in calls and call_id in results:
                by_step.setdefault(_step_number(name), []).append(call_id)
    return {
        step: [
            ChatMessage(role="assistant", content="", tool_calls=[calls[i] for i in ids]),
            *(ChatMessage(role="tool", content=results[i].content, tool_call_id=i) for i in ids),
        ]
        for step, ids in by_step.items()
    }


def _step_number(name: str) -> int:
    """n of `model:<n>` or `tool:<n>:<call id>`."""
    part = name.split(":", 2)[1]
    return int(part) if part.isdigit() else 0


def summary_tokens(summary: ThreadSummary | None) -> int:
    """What the summary costs in a prompt (and in a fold's input), estimated."""
    if summary is None:
        return 0
    return estimate_message_tokens(Message(role="system", content=summary.text))


__all__ = [
    "DEGRADED_SHARE",
    "SEARCH_HINT",
    "cleared_history",
    "degraded_history",
    "folded_summary",
    "history_prompt",
    "omission_note",
    "opening_prompt",
    "rebuilt_prompt",
    "refolded_prompt",
    "summary_tokens",
]
