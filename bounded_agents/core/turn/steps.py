"""Model and tool steps: each model call a checkpoint, each tool call one too."""

from __future__ import annotations

import functools
import logging

from bounded_agents.core.messages import (
    MAX_TOOL_ARGUMENT_DEPTH,
    ChatMessage,
    Message,
    ToolCall,
    ToolResult,
    nesting_depth,
    storable_json,
    storable_text,
)
from bounded_agents.core.ports import (
    DurableContext,
    HistoryPolicyContext,
    JsonValue,
    ModelRequest,
    ModelResponse,
    RunRequest,
    TextDelta,
    ToolSpec,
    supports_streaming,
)
from bounded_agents.core.prefix import prefix_reuse
from bounded_agents.core.report import (
    ModelCallReport,
    RunReport,
)
from bounded_agents.core.tokens import estimate_message_tokens
from bounded_agents.core.turn.calls import (
    _apply_middleware,
    _booked_model,
    _provider_boundary,
    _tool_step,
)
from bounded_agents.core.turn.constants import (
    COMPLETION_RESERVE,
)
from bounded_agents.core.turn.public import (
    AgentDefinition,
    EventSink,
    ToolCallEvent,
    ToolContext,
    ToolResultEvent,
)
from bounded_agents.core.turn.replay import ReplayPhase
from bounded_agents.core.turn.state import (
    _Digest,
    _Window,
)
from bounded_agents.errors import (
    ProviderBadResponse,
)

log = logging.getLogger("bounded_agents.core.loop")
"""The loop's one logger, whichever turn module logs: log configuration keeps working."""


class StepsPhase(ReplayPhase):
    async def _answer(
        self,
        request: RunRequest,
        ctx: DurableContext,
        definition: AgentDefinition,
        prompt: list[ChatMessage],
        on_event: EventSink | None,
        report: RunReport,
        window: _Window | None = None,
        hctx: HistoryPolicyContext | None = None,
        last_prompt: str | None = None,
    ) -> tuple[Message, _Digest]:
        """The model steps and tool calls, up to the answer (stored by the caller, with the
        run's end). Each model step commits in one unit with its ledger row and with the tool
        calls that fed it: one transaction per step, none held while the model or a tool runs.
        With a `window` (a policy that re-checks between model calls) the tools commit on
        their own first, then the history may be folded before the next call (`_refold`).
        `last_prompt` (the digest of the thread's previous chat prompt) is what the first
        step's prefix reuse is measured against; each step's digest comes back in its journaled
        payload for the next, and the last one is returned, to be stored with the answer.
        """
        specs = [binding.spec for binding in definition.tools.values()]
        reported: int | None = None
        calls: list[ToolCall] = []
        results: list[ToolResult] = []
        content = ""
        pending: list[ToolCall] = []
        step = 0
        for n in range(1, definition.max_steps + 1):
            if window is not None and hctx is not None and pending:
                async with ctx.unit_of_work():
                    await self._tools(
                        ctx,
                        definition,
                        step,
                        pending,
                        prompt,
                        calls,
                        results,
                        on_event,
                        thread_id=request.thread_id,
                    )
                pending = []
                prompt = await self._refold(request, ctx, definition, hctx, report, prompt, window)
            async with ctx.unit_of_work():
                await self._tools(
                    ctx,
                    definition,
                    step,
                    pending,
                    prompt,
                    calls,
                    results,
                    on_event,
                    thread_id=request.thread_id,
                )
                recorded = await ctx.step(
                    f"model:{n}",
                    functools.partial(
                        self._model_step,
                        ctx,
                        request,
                        report,
                        definition,
                        prompt,
                        specs,
                        on_event,
                        last_prompt,
                    ),
                )
            step, pending = n, []
            response = ModelResponse.model_validate(recorded["response"])
            last_prompt = recorded.get("prompt_digest")
            usage = response.usage
            reported = None if usage.estimated else usage.prompt_tokens + usage.completion_tokens
            report.model_calls.append(
                ModelCallReport(
                    purpose="chat",
                    prompt_tokens=response.usage.prompt_tokens,
                    completion_tokens=response.usage.completion_tokens,
                    cached_tokens=response.usage.cached_tokens,
                    **recorded["metrics"],
                )
            )
            content = response.content
            if not response.tool_calls:
                break
            prompt.append(
                ChatMessage(
                    role="assistant", content=response.content, tool_calls=response.tool_calls
                )
            )
            pending = list(response.tool_calls)
        else:
            # Out of steps while the model still asked for tools: they run (they were asked
            # for), and the run says it stopped.
            async with ctx.unit_of_work():
                await self._tools(
                    ctx,
                    definition,
                    step,
                    pending,
                    prompt,
                    calls,
                    results,
                    on_event,
                    thread_id=request.thread_id,
                )
            content = content or f"(stopped after {definition.max_steps} model steps)"

        answer = Message(
            role="assistant",
            content=content,
            tool_calls=calls,
            tool_results=results,
            run_id=request.run_id,
        )
        return answer, _Digest(last_prompt, reported)

    async def _tools(
        self,
        ctx: DurableContext,
        definition: AgentDefinition,
        n: int,
        pending: list[ToolCall],
        prompt: list[ChatMessage],
        calls: list[ToolCall],
        results: list[ToolResult],
        on_event: EventSink | None,
        *,
        thread_id: str,
    ) -> None:
        """Run model step `n`'s tool calls, each its own checkpoint `tool:<n>:<call id>`. A
        turn-aware tool is told the thread and the prompt so far (`ToolContext`)."""
        for call in pending:
            if on_event is not None:
                await on_event(ToolCallEvent(call=call))
            result = ToolResult.model_validate(
                await ctx.step(
                    f"tool:{n}:{call.id}",
                    _tool_step(definition, call, ToolContext(thread_id, tuple(prompt))),
                )
            )
            if on_event is not None:
                await on_event(
                    ToolResultEvent(
                        call_id=call.id,
                        name=call.name,
                        is_error=result.is_error,
                        content_chars=len(result.content),
                    )
                )
            calls.append(call)
            results.append(result)
            prompt.append(ChatMessage(role="tool", content=result.content, tool_call_id=call.id))

    async def _model_step(
        self,
        ctx: DurableContext,
        request: RunRequest,
        report: RunReport,
        definition: AgentDefinition,
        prompt: list[ChatMessage],
        specs: list[ToolSpec],
        on_event: EventSink | None,
        last_prompt: str | None,
    ) -> JsonValue:
        messages, metrics = _apply_middleware(definition.middleware, list(prompt))
        # One estimate per message serves the metrics, the prefix figures and the reservation.
        costs = [estimate_message_tokens(m) for m in messages]
        reuse, digest = prefix_reuse(last_prompt, messages, costs)
        metrics.update(
            prefix_reused_messages=reuse.messages,
            prefix_reused_tokens=reuse.tokens,
            previous_prompt_messages=reuse.previous_messages,
            extends_previous=reuse.extends,
            prompt_estimated_tokens=sum(costs),
        )
        model_request = ModelRequest(messages=messages, tools=specs, purpose="chat")
        reserved = await self._reserve(request.actor_id, sum(costs) + COMPLETION_RESERVE)
        try:
            async with _provider_boundary("model"):
                response = await self._call_model(model_request, on_event)
        except BaseException:
            await self._release(request.actor_id, reserved)
            raise
        model = _booked_model(response.model, self.model)
        usage = response.usage
        for call in response.tool_calls:
            if nesting_depth(call.arguments) > MAX_TOOL_ARGUMENT_DEPTH:
                # The step fails, and its unit with it: the call's spend is booked on its own.
                await self._record_usage(None, request, report, "chat", model, usage, reserved)
                raise ProviderBadResponse(
                    f"the arguments of tool call {call.name!r} nest deeper than "
                    f"{MAX_TOOL_ARGUMENT_DEPTH} levels"
                )
        await self._record_usage(ctx, request, report, "chat", model, usage, reserved)
        # Made storable before it is journaled: the journal, the stored answer and every later
        # prompt then hold the same text.
        return {
            "response": storable_json(response.model_dump(mode="json")),
            "metrics": metrics,
            "prompt_digest": digest,
        }

    async def _call_model(
        self, model_request: ModelRequest, on_event: EventSink | None
    ) -> ModelResponse:
        if on_event is None or not supports_streaming(self.model):
            response = await self.model.complete(model_request)
            if on_event is not None and response.content:
                # A provider that cannot stream still shows its text as it would have streamed
                # it, in one piece: a client renders every provider the same way.
                await on_event(TextDelta(text=storable_text(response.content)))
            return response
        streamed: ModelResponse | None = None
        async for event in self.model.stream(model_request):
            if isinstance(event, ModelResponse):
                streamed = event
            elif isinstance(event, TextDelta):
                await on_event(TextDelta(text=storable_text(event.text)))
            else:
                raise ProviderBadResponse(
                    f"the provider streamed a {type(event).__name__}, not text or a response"
                )
        if streamed is None:
            raise ProviderBadResponse("the provider's stream ended without a final response")
        return streamed
