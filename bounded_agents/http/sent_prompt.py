"""What a run's model was sent, rebuilt from the run's journal: the prompt of its last model call.

The journal does not hold the prompts themselves (a model step journals its answer), but it holds
everything the loop built them from, because a replay must build the same prompt byte for byte:
`load:thread` (the kept messages, by seq, the summary read, the fold owed) and each
`history:summarize*` step's summary. So the prompt is rebuilt by the loop's own prompt builder
(`bounded_agents.core.turn.prompt.rebuilt_prompt`); this module only reads what it needs: the
run's journal, its stored messages and the kept ones (`bounded_agents.core.turn.kept`).

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

from bounded_agents.core.checkpoints import (
    LOAD_THREAD,
    ROLLING_SUMMARY,
    or_none,
    parse_load_thread,
    patch_step,
)
from bounded_agents.core.messages import ChatMessage, Message
from bounded_agents.core.ports import RunRecord, RunTrace, supports_run_timeline
from bounded_agents.core.turn.kept import kept_messages, read_kept
from bounded_agents.core.turn.prompt import rebuilt_prompt
from bounded_agents.errors import JournalPruned
from bounded_agents.http.openai.errors import UnsupportedParameter
from bounded_agents.module import AgentModule
from bounded_agents.outcome import run_messages


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
    user_seq = user.seq if user else None
    kept = kept_messages(load, await read_kept(module.store, request.thread_id, [load]), user_seq)
    return rebuilt_prompt(definition, trace, load, answer, kept=kept, user_seq=user_seq)


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


__all__ = ["sent_prompt"]
