"""Legacy replay: runs journaled before rolling summaries finish the path they began."""

from __future__ import annotations

import functools
import logging

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
from bounded_agents.core.messages import (
    ChatMessage,
    Message,
    to_chat_messages,
)
from bounded_agents.core.ports import (
    DurableContext,
    HistoryPolicyContext,
    HistorySelection,
    RunRequest,
    Usage,
)
from bounded_agents.core.report import (
    ModelCallReport,
    RunReport,
)
from bounded_agents.core.turn.calls import (
    _booked_model,
    _legacy_load,
)
from bounded_agents.core.turn.fold import FoldPhase
from bounded_agents.core.turn.public import (
    AgentDefinition,
)

log = logging.getLogger("bounded_agents.core.loop")
"""The loop's one logger, whichever turn module logs: log configuration keeps working."""


class ReplayPhase(FoldPhase):
    async def _legacy_load(
        self, ctx: DurableContext, definition: AgentDefinition, hctx: HistoryPolicyContext
    ) -> tuple[list[Message], list[Message]]:
        """A run journaled before rolling summaries: its `load:thread` is always in its journal
        (a journal without one takes the new path), so it is only ever read back."""
        policy = definition.policy
        if await ctx.patched(SELECTED_HISTORY):
            selected = parse_legacy_load(await ctx.step(LOAD_THREAD, _legacy_load))
            keep = [Message.model_validate(m) for m in selected.get("keep", [])]
            return keep, [Message.model_validate(m) for m in selected.get("drop", [])]
        recorded = parse_legacy_load(await ctx.step(LOAD_THREAD, _legacy_load))
        messages = [Message.model_validate(m) for m in recorded.get("messages", [])]
        legacy = (
            policy.window(messages)
            if supports_legacy_window(policy)
            else policy.select(messages, hctx)
        )
        assert isinstance(legacy, HistorySelection)
        return legacy.keep, legacy.drop

    async def _legacy_prompt(
        self,
        request: RunRequest,
        ctx: DurableContext,
        definition: AgentDefinition,
        hctx: HistoryPolicyContext,
        report: RunReport,
        keep: list[Message],
        drop: list[Message],
    ) -> list[ChatMessage]:
        """The old path finishes as it began: a summary it had yet to make summarizes its
        recorded dropped messages, whole, and is not stored as a rolling summary."""
        policy = definition.policy
        prompt = [ChatMessage(role="system", content=definition.system_prompt)]
        summarizer = policy_summarizer(policy)
        if drop and summarizer is not None:
            async with ctx.unit_of_work():
                made = parse_legacy_summarize(
                    await ctx.step(
                        SUMMARIZE,
                        functools.partial(
                            self._summarize_reserved, request.actor_id, summarizer, drop, hctx
                        ),
                    )
                )
                usage = Usage.model_validate(made["usage"])
                await ctx.step(
                    PERSIST_USAGE_HISTORY,
                    functools.partial(
                        self._record_usage,
                        ctx,
                        request,
                        report,
                        "history_summary",
                        _booked_model(None, self.model),
                        usage,
                        made.get("reserved", 0),
                    ),
                )
            report.model_calls.append(
                ModelCallReport(
                    purpose="history_summary",
                    prompt_tokens=usage.prompt_tokens,
                    completion_tokens=usage.completion_tokens,
                    messages_sent=len(drop),
                    messages_original=len(drop),
                )
            )
            prompt.append(
                ChatMessage(role="system", content=summary_renderer(policy)(made["text"]))
            )
        prompt.extend(to_chat_messages(keep))
        return prompt
