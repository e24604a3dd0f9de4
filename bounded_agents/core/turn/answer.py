"""The answer: model steps and tool calls, each model call a checkpoint, each tool call one too."""

from __future__ import annotations

import asyncio
import hashlib
import logging

from bounded_agents.core.checkpoints import model_payload, parse_model, parse_tool, tool_step
from bounded_agents.core.checkpoints import model_step as model_step_name
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
    JsonValue,
    ModelRequest,
    ModelResponse,
    StepFn,
    TextDelta,
    ToolSpec,
    Transaction,
    Usage,
    supports_streaming,
)
from bounded_agents.core.prefix import PromptChain, prefix_reuse
from bounded_agents.core.report import ModelCallReport, RunReport
from bounded_agents.core.tool_budget import ToolUse, budgeted_tool
from bounded_agents.core.turn.calls import (
    apply_middleware,
    booked_model,
    provider_boundary,
    run_tool,
)
from bounded_agents.core.turn.constants import COMPLETION_RESERVE, MAX_ANSWER_CHARS
from bounded_agents.core.turn.deps import TurnDeps
from bounded_agents.core.turn.fold import refold
from bounded_agents.core.turn.public import (
    EventSink,
    ToolCallEvent,
    ToolContext,
    ToolResultEvent,
)
from bounded_agents.core.turn.spend import record_usage, release, reserve
from bounded_agents.core.turn.state import Digest, Turn
from bounded_agents.errors import ProviderBadResponse, ProviderTimeout

log = logging.getLogger("bounded_agents.core.loop")
"""The loop's one logger, whichever turn module logs: log configuration keeps working."""


async def answer(
    deps: TurnDeps, turn: Turn, prompt: list[ChatMessage], *, last_prompt: str | None
) -> tuple[Message, Digest]:
    """The model steps and tool calls, up to the answer (stored by `finish`, with the run's
    end). Each model step's checkpoint and ledger row ride in the commit that follows it: the
    unit of its tool round (the tools' results durable before the next call), or the answer's.
    No transaction is held while the model or a tool runs. With a window (a refolding policy)
    the history may be folded after a tool round, before the next call. Prefix reuse is
    measured against the previous prompt's digest (`last_prompt`, then each step's)."""
    ctx, definition = turn.ctx, turn.definition
    specs = [binding.spec for binding in definition.tools.values()]
    reported: int | None = None
    calls: list[ToolCall] = []
    results: list[ToolResult] = []
    content, step = "", 0
    pending: list[ToolCall] = []
    chain = PromptChain()
    for n in range(1, definition.max_steps + 1):
        if pending:
            async with ctx.unit_of_work():
                await run_tools(deps, turn, step, pending, prompt, into=(calls, results))
            pending = []
            if turn.window is not None:
                prompt = await refold(deps, turn, prompt)
        recorded = await model_step(
            deps, turn, n, prompt, specs=specs, last_prompt=last_prompt, chain=chain
        )
        step = n
        response, last_prompt, reported = _reported_step(recorded, turn.report)
        # Every step's text, as it was streamed: what a model says beside its tool calls
        # ("Let me check the pricing page.") was shown to the user, so it is kept (found by
        # attack: only the last step's text was stored, and the next prompts lost the rest).
        content += response.content
        if not response.tool_calls:
            break
        response = _with_distinct_call_ids(response, taken={c.id for c in calls})
        prompt.append(_asked_for_tools(response))
        pending = list(response.tool_calls)
    else:
        # Out of steps with tools asked for: they run, and the run says it stopped.
        async with ctx.unit_of_work():
            await run_tools(deps, turn, step, pending, prompt, into=(calls, results))
        content = content or f"(stopped after {definition.max_steps} model steps)"
    message = Message(
        role="assistant",
        content=content,
        tool_calls=calls,
        tool_results=results,
        run_id=turn.request.run_id,
    )
    return message, Digest(last_prompt, reported)


async def run_tools(
    deps: TurnDeps,
    turn: Turn,
    n: int,
    pending: list[ToolCall],
    prompt: list[ChatMessage],
    *,
    into: tuple[list[ToolCall], list[ToolResult]],
) -> None:
    """Run model step `n`'s tool calls, each its own checkpoint `tool:<n>:<call id>`, and add
    each call and result to `into` (the answer's) and to the prompt. A turn-aware tool is told
    the thread and the prompt so far (`ToolContext`). Every call runs within the turn's tool
    budget (`bounded_agents.core.tool_budget`): past it, the model reads a refusal."""
    calls, results = into
    on_event = turn.on_event
    used = ToolUse(calls, results, step_start=len(results))  # the budget's tally, live
    for call in pending:
        if on_event is not None:
            await on_event(ToolCallEvent(call=call))
        context = ToolContext(
            turn.request.thread_id, tuple(prompt), sent_as_is=not turn.definition.middleware
        )
        invoke = _tool_invocation(turn, call, context, deps.limits.tool_timeout)
        budgeted = budgeted_tool(deps.limits.tool_budget, call, invoke, used)
        result = ToolResult.model_validate(
            parse_tool(await turn.ctx.step(tool_step(n, call.id), budgeted))
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


def _tool_invocation(
    turn: Turn, call: ToolCall, context: ToolContext, timeout: float | None
) -> StepFn:
    """A tool step's work: the call has no database work, so it is handed no transaction."""

    async def invoke(tx: Transaction | None) -> JsonValue:
        return await run_tool(turn.definition, call, context, timeout)

    return invoke


async def model_step(
    deps: TurnDeps,
    turn: Turn,
    n: int,
    prompt: list[ChatMessage],
    *,
    specs: list[ToolSpec],
    last_prompt: str | None,
    chain: PromptChain | None = None,
) -> JsonValue:
    """Model step `n` (`model:<n>`): the call, holding no transaction while it runs; its
    checkpoint and its ledger row (`book`) wait for the turn's next commit and commit in it,
    together. `chain`: the run's, so messages the previous step sent are not measured again."""
    request, report = turn.request, turn.report
    messages, metrics = apply_middleware(turn.definition.middleware, list(prompt))
    # One estimate per message serves the metrics, the prefix figures and the reservation.
    costs, digest = (chain or PromptChain()).measure(messages)
    reuse = prefix_reuse(last_prompt, digest, costs)
    metrics.update(
        prefix_reused_messages=reuse.messages,
        prefix_reused_tokens=reuse.tokens,
        previous_prompt_messages=reuse.previous_messages,
        extends_previous=reuse.extends,
        prompt_estimated_tokens=sum(costs),
    )
    model_request = ModelRequest(
        messages=messages, tools=specs, purpose="chat", thread_id=request.thread_id
    )
    paid: list[tuple[str, Usage, int]] = []
    booked: list[bool] = []

    async def call(tx: Transaction | None) -> JsonValue:
        calibrated = deps.learned.tokens.tokens(sum(costs), deps.model_name)
        reserved = await reserve(deps, request.actor_id, calibrated + COMPLETION_RESERVE)
        limit = deps.limits.model_call_timeout
        try:
            # The deadline outside the boundary: a hang is `TimeoutError`, not a provider error.
            async with asyncio.timeout(limit), provider_boundary("model"):
                response = await call_model(deps, model_request, turn.on_event)
        except TimeoutError as exc:
            await release(deps, request.actor_id, reserved)
            raise ProviderTimeout(
                f"the model call took longer than {limit:g} s in all "
                "(AGENT_MODEL_CALL_TIMEOUT_SECONDS)"
            ) from exc
        except ProviderBadResponse as exc:
            if not isinstance(exc.paid, Usage):
                await release(deps, request.actor_id, reserved)
                raise
            # An unusable answer the provider billed all the same: booked on its own, as a
            # step that fails is (the run fails with it), its reservation settled by it.
            billed = ("chat", booked_model(None, deps.model), exc.paid)
            await record_usage(deps, request, report, billed, reserved=reserved)
            raise
        except BaseException:
            await release(deps, request.actor_id, reserved)
            raise
        model = booked_model(response.model, deps.model)
        if not response.usage.estimated:  # the provider counted: learn its ratio
            deps.learned.tokens.observe(deps.model_name, sum(costs), response.usage.prompt_tokens)
        for asked in response.tool_calls:
            if nesting_depth(asked.arguments) > MAX_TOOL_ARGUMENT_DEPTH:
                # The step fails, and its unit with it: the call's spend is booked on its own.
                booked = ("chat", model, response.usage)
                await record_usage(deps, request, report, booked, reserved=reserved)
                raise ProviderBadResponse(
                    f"the arguments of tool call {asked.name!r} nest deeper than "
                    f"{MAX_TOOL_ARGUMENT_DEPTH} levels"
                )
        paid.append((model, response.usage, reserved))
        # Made storable before it is journaled: the journal, the stored answer and every later
        # prompt then hold the same text.
        return model_payload(storable_json(response.model_dump(mode="json")), metrics, digest)

    async def book(value: JsonValue, tx: Transaction | None) -> None:
        model, usage, reserved = paid[0]
        listed = len(report.ledger)
        await record_usage(deps, request, report, ("chat", model, usage), reserved=reserved, tx=tx)
        if booked:  # booked again after the unit it was first written in rolled back
            del report.ledger[listed:]  # one row in the ledger: listed once in the report
        booked.append(True)

    return await turn.ctx.step(
        model_step_name(n), call, writes=deps.shares_transactions, record=book
    )


async def call_model(
    deps: TurnDeps, model_request: ModelRequest, on_event: EventSink | None
) -> ModelResponse:
    """The provider's response, streamed to `on_event` as it comes when the provider can
    stream (a provider that cannot shows its text in one piece)."""
    model = deps.model
    if on_event is None or not supports_streaming(model):
        response = await model.complete(model_request)
        if on_event is not None and response.content:
            # A provider that cannot stream still shows its text as it would have streamed it,
            # in one piece: a client renders every provider the same way.
            await on_event(TextDelta(text=storable_text(response.content)))
        return response
    streamed: ModelResponse | None = None
    chars = 0
    async for event in model.stream(model_request):
        if isinstance(event, ModelResponse):
            streamed = event
        elif isinstance(event, TextDelta):
            chars += len(event.text)
            if chars > MAX_ANSWER_CHARS:
                raise ProviderBadResponse(
                    f"the model's answer passed {MAX_ANSWER_CHARS:,} characters: not a real answer"
                )
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


MAX_CALL_ID_CHARS = 180
"""The longest tool-call id kept as the provider sent it (OpenAI's are about 30, Anthropic's
about 40): a `tool:<n>:<id>` checkpoint name stays within its 200-character column. Only ids
PostgreSQL could never store are renamed, so a run journaled before the rename (on SQLite,
which stored any length) replays under the step names it has, unless its id passed 180."""


def _with_distinct_call_ids(response: ModelResponse, *, taken: set[str]) -> ModelResponse:
    """`response` with each tool-call id this turn already used renamed `<id>_<n>` (the first
    free n from 2). A provider may reuse an id (local servers number calls per response, some
    per step): every call of a turn lands on one stored message, where a result is paired to
    its call by id (the transcript, `/v1` items, search text, erasure), and each call is its
    own checkpoint `tool:<n>:<id>`. A pure function of the recorded response and the calls
    before it, so a replay renames the same way; the model is sent the renamed ids, which
    every provider accepts since it reads them back only to pair its own calls. An id longer
    than `MAX_CALL_ID_CHARS` is replaced by `call_<digest>` first: the checkpoint's name is a
    column of 200 characters (found by attack: a 300-character id failed the turn on
    PostgreSQL, and only there)."""
    seen = set(taken)
    renamed: list[ToolCall] = []
    for call in response.tool_calls:
        if len(call.id) > MAX_CALL_ID_CHARS:
            digest = hashlib.sha256(call.id.encode("utf-8", "surrogatepass")).hexdigest()[:32]
            call = call.model_copy(update={"id": f"call_{digest}"})
        if call.id in seen:
            n = 2
            while f"{call.id}_{n}" in seen:
                n += 1
            call = call.model_copy(update={"id": f"{call.id}_{n}"})
        seen.add(call.id)
        renamed.append(call)
    if renamed == response.tool_calls:
        return response
    return response.model_copy(update={"tool_calls": renamed})


def _asked_for_tools(response: ModelResponse) -> ChatMessage:
    """The assistant message of a response that asked for tools, as the next prompt holds it."""
    return ChatMessage(role="assistant", content=response.content, tool_calls=response.tool_calls)


__all__ = ["answer", "call_model", "model_step", "run_tools"]
