"""What a run's model was sent, rebuilt from the run's journal: the prompt of its last model call.

The journal does not hold the prompts themselves (a model step journals its answer), but it holds
everything the loop built them from, because a replay must build the same prompt byte for byte:
`load:thread` (the kept messages, the summary read, the fold owed) and each `history:summarize*`
step's summary. So the prompt is rebuilt here with the loop's own helpers (`_history_prompt`,
`_degraded_history`, the agent's middleware), not with a copy of their rules that could drift.

Which call: a run with tool steps calls its model several times, each prompt the one before plus
the tool calls and results fed back. The last call's prompt therefore holds everything the model
was given in the run, in order, and it is what the run's answer was made from: that one is "the
input" of the response. (A refolding policy that folds mid-run rewrites the head of later calls:
the refold is replayed here too, so the head is the one the last call was sent.)

The run's pieces are read as the inspector reads them, through `RunTimelineReader.thread_runs`
(one run's trace), and its tool calls and results from its stored answer, which holds them in
the order they ran. A run that has not stored an answer (in flight, failed) lists the first
call's prompt.

Two things are not where this reads: the system prompt is the agent's definition's (a replay
uses it too: the journal does not hold it), and the text a model step sent along with its tool
calls is in `model:<n>`, whose payload the timeline does not read, so that assistant turn is its
calls alone (models mostly send none; a `RunStepsReader` power would close the gap).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from bounded_agents.core.checkpoints import (
    LOAD_THREAD,
    ROLLING_SUMMARY,
    LoadThreadPayload,
    SummarizePayload,
    is_model_step,
    is_summarize_step,
    is_tool_step,
    or_none,
    parse_load_thread,
    parse_summarize,
    patch_step,
    tool_call_id,
)
from bounded_agents.core.history.powers import policy_summarizer, supports_refolding
from bounded_agents.core.loop import AgentDefinition
from bounded_agents.core.messages import ChatMessage, Message
from bounded_agents.core.ports import RunRecord, RunTrace, ThreadSummary, supports_run_timeline
from bounded_agents.core.tokens import estimate_message_tokens
from bounded_agents.core.turn.calls import _apply_middleware
from bounded_agents.core.turn.prompts import _degraded_history, _history_prompt
from bounded_agents.errors import JournalPruned
from bounded_agents.http.openai.errors import UnsupportedParameter
from bounded_agents.module import AgentModule
from bounded_agents.outcome import run_messages


@dataclass
class _Window:
    """What `_refold` needs of the run's history, as the loop's own `_Window` holds it: the
    summary so far, the kept messages (with seqs) and how many prompt messages they fill."""

    summary: ThreadSummary | None
    keep: list[Message]
    head: int


async def sent_prompt(module: AgentModule, run_id: str, record: RunRecord) -> list[ChatMessage]:
    """The messages the run's last model call was sent (see the module's docstring)."""
    request = record.request
    definition = module.loop.definition(request.agent)
    stored = await run_messages(module.store, request.thread_id, run_id)
    user = next((m for m in stored if m.role == "user"), None)
    answer = next((m for m in stored if m.role == "assistant"), None)
    trace = await _trace(module, run_id, request.thread_id, user, record.status)
    if trace.pruned:
        raise JournalPruned(run_id)
    load = or_none(parse_load_thread, trace.payloads.get(LOAD_THREAD))
    if patch_step(ROLLING_SUMMARY) not in trace.steps or load is None:
        raise UnsupportedParameter(
            "response_id", "this response's journal does not say what its model was sent"
        )
    return rebuilt_prompt(definition, trace, load, answer, user.seq if user else None)


async def _trace(
    module: AgentModule, run_id: str, thread_id: str, user: Message | None, status: str
) -> RunTrace:
    """The run's trace: the newest run of its thread below its user message's successor. A run
    in flight is listed once its first unit of work (its user message, `load:thread`) commits."""
    runtime = module.loop.runtime
    traces = []
    if user is not None and user.seq is not None and supports_run_timeline(runtime):
        traces = await runtime.thread_runs(thread_id, limit=1, before_seq=user.seq + 1)
    if not traces or traces[0].run_id != run_id:
        why = (
            "it is in progress and its first model step is not journaled yet"
            if status == "running"
            else "its journal cannot be read"
        )
        raise UnsupportedParameter("response_id", f"this response's input is not known: {why}")
    return traces[0]


def rebuilt_prompt(
    definition: AgentDefinition,
    trace: RunTrace,
    load: LoadThreadPayload,
    answer: Message | None,
    user_seq: int | None,
) -> list[ChatMessage]:
    """The first call's prompt as `FoldPhase._rolling_prompt` built it, then each tool step fed
    back before the last model call (and, for a refolding policy, each refold between calls,
    as `_refold` made it), through the agent's middleware as `_model_step` sends it."""
    keep = [Message.model_validate(m) for m in load["keep"]]
    summary = ThreadSummary.model_validate(load["summary"]) if "summary" in load else None
    omitted = 0
    if "fold" in load and policy_summarizer(definition.policy) is not None:
        summary = _folded(_fold_steps(trace, 0), summary)
        covered = summary.covers_through_seq if summary is not None else 0
        fold: dict[str, Any] = dict(load["fold"])
        if covered < fold["through"]:
            unfolded, omitted = _degraded_history(fold, covered, keep)
            keep = [*unfolded, *keep]
    prompt = _history_prompt(definition, summary, keep, omitted)
    window = None
    if supports_refolding(definition.policy) and user_seq is not None and keep:
        first = user_seq - len(keep) + 1  # as `_rolling_prompt` numbers the kept messages
        kept = [m.model_copy(update={"seq": first + i}) for i, m in enumerate(keep)]
        window = _Window(summary=summary, keep=kept, head=len(prompt))
    for step, turn in _tool_turns(trace.steps, answer).items():
        prompt.extend(turn)
        if window is not None:
            prompt = _refolded(definition, prompt, window, _fold_steps(trace, step))
    messages, _metrics = _apply_middleware(definition.middleware, prompt)
    return messages


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


def _folded(made: list[SummarizePayload], summary: ThreadSummary | None) -> ThreadSummary | None:
    """The summary after a fold's steps: each accepted chunk (one without `rejected`) is the
    summary the next chunk, and the prompt, start from."""
    for chunk in made:
        if "rejected" not in chunk and "text" in chunk and "covers_through_seq" in chunk:
            covers = chunk["covers_through_seq"]
            summary = ThreadSummary(text=chunk["text"], covers_through_seq=covers)
    return summary


def _refolded(
    definition: AgentDefinition,
    prompt: list[ChatMessage],
    window: _Window,
    made: list[SummarizePayload],
) -> list[ChatMessage]:
    """`FoldPhase._refold` again, its fold read from the journal: no fold step, no refold; else
    the policy's count says which kept messages it folded, and a fold that covered them all
    rewrites the prompt's head (the system prompt, the new summary, the kept rest)."""
    policy = definition.policy
    if not made or not supports_refolding(policy):
        return prompt
    tokens = sum(estimate_message_tokens(m) for m in prompt[1:])
    count = max(1, policy.refold_count(window.keep, tokens))  # it folded: at least one
    through = window.keep[min(count, len(window.keep)) - 1].seq or 0
    summary = _folded(made, window.summary)
    window.summary = summary
    if summary is None or summary.covers_through_seq < through:
        return prompt
    rest = window.keep[count:]
    head = _history_prompt(definition, summary, rest)
    in_run = prompt[window.head :]
    window.keep, window.head = rest, len(head)
    return [*head, *in_run]


def _tool_turns(steps: list[str], answer: Message | None) -> dict[int, list[ChatMessage]]:
    """By model step, for each that asked for tools before the last one: the assistant message
    with its calls, then one `tool` message per result, as `StepsPhase._answer` appends them.
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


__all__ = ["rebuilt_prompt", "sent_prompt"]
