"""Model and tool steps: each model call a checkpoint, each tool call one too."""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable

from bounded_agents.core.checkpoints import (
    model_payload,
    model_step,
    parse_model,
    parse_tool,
    tool_step,
)
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
from bounded_agents.core.tool_budget import ToolUse, budgeted_tool
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
        run's end). Each model step commits in one unit with its ledger row and the tool calls
        that fed it; none is held while the model or a tool runs. With a `window` the tools
        commit on their own first, then the history may be folded before the next call. Prefix
        reuse is measured against the previous prompt's digest (`last_prompt`, then each step's)."""
        specs = [binding.spec for binding in definition.tools.values()]
        reported: int | None = None
        calls: list[ToolCall] = []
        results: list[ToolResult] = []
        content, step = "", 0
        pending: list[ToolCall] = []
        run_tools = self._tool_runner(ctx, definition, request.thread_id, calls, results, on_event)
        call_model = functools.partial(
            self._model_step, ctx, request, report, definition, specs=specs, on_event=on_event
        )
        for n in range(1, definition.max_steps + 1):
            if window is not None and hctx is not None and pending:
                async with ctx.unit_of_work():
                    await run_tools(step, pending, prompt)
                pending = []
                prompt = await self._refold(request, ctx, definition, hctx, report, prompt, window)
            async with ctx.unit_of_work():
                await run_tools(step, pending, prompt)
                recorded = await ctx.step(
                    model_step(n), functools.partial(call_model, prompt, last_prompt=last_prompt)
                )
            step, pending = n, []
            response, last_prompt, reported = _reported_step(recorded, report)
            content = response.content
            if not response.tool_calls:
                break
            prompt.append(_asked_for_tools(response))
            pending = list(response.tool_calls)
        else:
            # Out of steps with tools asked for: they run, and the run says it stopped.
            async with ctx.unit_of_work():
                await run_tools(step, pending, prompt)
            content = content or f"(stopped after {definition.max_steps} model steps)"
        answer = Message(
            role="assistant",
            content=content,
            tool_calls=calls,
            tool_results=results,
            run_id=request.run_id,
        )
        return answer, _Digest(last_prompt, reported)

    def _tool_runner(
        self,
        ctx: DurableContext,
        definition: AgentDefinition,
        thread_id: str,
        calls: list[ToolCall],
        results: list[ToolResult],
        on_event: EventSink | None,
    ) -> Callable[[int, list[ToolCall], list[ChatMessage]], Awaitable[None]]:
        """`_tools` for one run: (step, calls asked for, prompt so far)."""
        return functools.partial(
            self._tools,
            ctx,
            definition,
            calls=calls,
            results=results,
            on_event=on_event,
            thread_id=thread_id,
        )

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
        used = ToolUse(calls, results, step_start=len(results))  # the tool budget's tally
        for call in pending:
            if on_event is not None:
                await on_event(ToolCallEvent(call=call))
            run = _tool_step(definition, call, ToolContext(thread_id, tuple(prompt)))
            result = ToolResult.model_validate(
                parse_tool(
                    await ctx.step(
                        tool_step(n, call.id), budgeted_tool(self.tool_budget, call, run, used)
                    )
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
        return model_payload(storable_json(response.model_dump(mode="json")), metrics, digest)

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


def _reported_step(
    recorded: JsonValue, report: RunReport
) -> tuple[ModelResponse, str | None, int | None]:
    """A `model:<n>` step's response, its prompt's digest and the tokens the provider reported
    for it (None: estimated); its call is added to the run's report."""
    made = parse_model(recorded)
    response = ModelResponse.model_validate(made["response"])
    usage = response.usage
    report.model_calls.append(
        ModelCallReport(
            purpose="chat",
            prompt_tokens=usage.prompt_tokens,
            completion_tokens=usage.completion_tokens,
            cached_tokens=usage.cached_tokens,
            **made["metrics"],
        )
    )
    reported = None if usage.estimated else usage.prompt_tokens + usage.completion_tokens
    return response, made.get("prompt_digest"), reported


def _asked_for_tools(response: ModelResponse) -> ChatMessage:
    """The assistant message of a response that asked for tools, as the next prompt holds it."""
    return ChatMessage(role="assistant", content=response.content, tool_calls=response.tool_calls)
