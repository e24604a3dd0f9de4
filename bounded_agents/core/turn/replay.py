"""Legacy replay: runs journaled before rolling summaries finish the path they began."""

from __future__ import annotations

from bounded_agents.core.checkpoints import (
    LOAD_THREAD,
    PERSIST_USAGE_HISTORY,
    SELECTED_HISTORY,
    SUMMARIZE,
    parse_legacy_load,
    parse_legacy_summarize,
)
from bounded_agents.core.history.powers import (
    policy_summarizer,
    summary_renderer,
    supports_legacy_window,
)
from bounded_agents.core.messages import ChatMessage, Message, to_chat_messages
from bounded_agents.core.ports import HistorySelection, JsonValue, Transaction, Usage
from bounded_agents.core.report import ModelCallReport
from bounded_agents.core.turn.calls import booked_model, legacy_load_step
from bounded_agents.core.turn.deps import TurnDeps
from bounded_agents.core.turn.spend import legacy_summarize_reserved, record_usage
from bounded_agents.core.turn.state import Turn


async def legacy_load(turn: Turn) -> tuple[list[Message], list[Message]]:
    """(keep, drop) of a run journaled before rolling summaries: its `load:thread` is always in
    its journal (a journal without one takes the new path), so it is only ever read back."""
    ctx, policy = turn.ctx, turn.definition.policy
    if await ctx.patched(SELECTED_HISTORY):
        selected = parse_legacy_load(await ctx.step(LOAD_THREAD, legacy_load_step))
        keep = [Message.model_validate(m) for m in selected.get("keep", [])]
        return keep, [Message.model_validate(m) for m in selected.get("drop", [])]
    recorded = parse_legacy_load(await ctx.step(LOAD_THREAD, legacy_load_step))
    messages = [Message.model_validate(m) for m in recorded.get("messages", [])]
    legacy = (
        policy.window(messages)
        if supports_legacy_window(policy)
        else policy.select(messages, turn.hctx)
    )
    assert isinstance(legacy, HistorySelection)
    return legacy.keep, legacy.drop


async def legacy_prompt(
    deps: TurnDeps, turn: Turn, keep: list[Message], drop: list[Message]
) -> list[ChatMessage]:
    """The old path finishes as it began: a summary it had yet to make summarizes its recorded
    dropped messages, whole, and is not stored as a rolling summary."""
    ctx, definition, request = turn.ctx, turn.definition, turn.request
    prompt = [ChatMessage(role="system", content=definition.system_prompt)]
    summarizer = policy_summarizer(definition.policy)
    if drop and summarizer is not None:

        async def summarize(tx: Transaction | None) -> JsonValue:
            return await legacy_summarize_reserved(
                deps, request.actor_id, summarizer, drop, turn.hctx
            )

        async with ctx.unit_of_work():
            made = parse_legacy_summarize(await ctx.step(SUMMARIZE, summarize))
            usage = Usage.model_validate(made["usage"])
            booked = ("history_summary", booked_model(None, deps.model), usage)

            async def book(tx: Transaction | None) -> JsonValue:
                reserved = made.get("reserved", 0)
                return await record_usage(
                    deps, request, turn.report, booked, reserved=reserved, tx=tx
                )

            await ctx.step(PERSIST_USAGE_HISTORY, book, writes=deps.shares_transactions)
        turn.report.model_calls.append(
            ModelCallReport(
                purpose="history_summary",
                prompt_tokens=usage.prompt_tokens,
                completion_tokens=usage.completion_tokens,
                messages_sent=len(drop),
                messages_original=len(drop),
            )
        )
        prompt.append(
            ChatMessage(role="system", content=summary_renderer(definition.policy)(made["text"]))
        )
    prompt.extend(to_chat_messages(keep))
    return prompt


__all__ = ["legacy_load", "legacy_prompt"]
