"""AgentLoop: one run answers one user message, every outside effect behind a checkpoint.

Checkpoints, in order (README "How a turn runs"):

    persist:user                  the user's message, so `select` sees it as the newest
    patch:agent:selected-history  (marker; a run journaled before it existed replays the old path)
    load:thread                   the bounded read + `select`; records the SELECTION only
    history:summarize             only when something was dropped and the policy summarizes
    persist:usage:history         the summary's ledger row
    model:<n>                     one per model step (its ledger row is written inside it)
    tool:<n>:<call id>            one per tool call
    persist:assistant             the answer, tool calls and results on ONE message

A replay reads each journaled result back instead of running it: the store is not read again,
`select` and the summarizer are not called again, and the model gets the same prompt byte for
byte. `select` must therefore be pure; anything non-deterministic belongs in `summarize`.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeAlias

from pydantic import BaseModel, ConfigDict

from app.core.context_window import ChatMiddleware
from app.core.history import HistoryPolicy, HistoryPolicyContext, HistorySelection
from app.core.messages import (
    ChatMessage,
    Message,
    ToolCall,
    ToolResult,
    journal_form,
    payload_bytes,
    storable_json,
    storable_text,
    to_chat_messages,
)
from app.core.ports import (
    AgentStore,
    DurableContext,
    DurableRuntime,
    JsonValue,
    Ledger,
    LedgerEntry,
    ModelProvider,
    ModelRequest,
    ModelResponse,
    RunRequest,
    TextDelta,
    Thread,
    ThreadInfoReader,
    ThreadTurnQuery,
    ToolSpec,
    Usage,
    supports_bounded_read,
    supports_streaming,
)
from app.core.report import LedgerRow, ModelCallReport, RunReport, RunResult
from app.core.summary import render_history_summary
from app.core.tokens import estimate_message_tokens
from app.errors import (
    AgentError,
    AgentNotFound,
    DuplicateMessage,
    ProviderBadResponse,
    QuotaExceeded,
    RunFailed,
    RunNotFound,
    ThreadNotFound,
)

log = logging.getLogger(__name__)

SELECTED_HISTORY = "agent:selected-history"
"""The patch marker of the selection-only `load:thread` payload."""
MAX_TOOL_ARGUMENT_DEPTH = 100
"""How deeply a tool call's arguments may nest. Much deeper cannot be journaled or read back
(pydantic's JSON limits are about 250 levels to write and 200 to read), so such an answer fails
its model step as a bad provider response, before anything of it is recorded."""


class ToolBinding(Protocol):
    """A callable tool as the loop sees it: its advertised spec and how to run it."""

    @property
    def spec(self) -> ToolSpec: ...

    async def invoke(self, arguments: dict[str, Any]) -> ToolResult:
        """Run the tool. Bad arguments or a raising tool give an `is_error` result, not an
        exception: the model sees the error and can correct itself."""
        ...


@dataclass(frozen=True)
class AgentDefinition:
    """Everything the loop needs to know about one agent (the module builds it from @agent)."""

    name: str
    system_prompt: str
    policy: HistoryPolicy
    tools: Mapping[str, ToolBinding] = field(default_factory=dict)
    max_steps: int = 8
    """Model calls per run at most; a run still asking for tools after that stops and says so."""
    middleware: Sequence[ChatMiddleware] = ()


class ToolCallEvent(BaseModel):
    model_config = ConfigDict(frozen=True)
    call: ToolCall


class ToolResultEvent(BaseModel):
    model_config = ConfigDict(frozen=True)
    call_id: str
    name: str
    is_error: bool
    content_chars: int


LoopEvent: TypeAlias = TextDelta | ToolCallEvent | ToolResultEvent
EventSink: TypeAlias = Callable[[LoopEvent], Awaitable[None]]


class WindowPreview(BaseModel):
    """What the next turn would send (without its new user message): `GET .../window`."""

    thread_id: str
    agent: str
    read_bound: int | None
    kept: list[Message]
    dropped: list[Message]
    summarizes: bool
    """True when the policy would fold `dropped` into a summary (made only during a real turn)."""
    tokens: list[int]
    """Estimated tokens of each kept message."""
    total_tokens: int


class AgentLoop:
    def __init__(
        self,
        *,
        store: AgentStore,
        runtime: DurableRuntime,
        ledger: Ledger,
        model: ModelProvider,
        agents: Mapping[str, AgentDefinition],
        token_quota: int | None = None,
    ) -> None:
        self.store = store
        self.runtime = runtime
        self.ledger = ledger
        self.model = model
        self.agents = dict(agents)
        self.token_quota = token_quota

    # --- entry points ----------------------------------------------------------------------

    async def run_turn(
        self,
        *,
        agent: str,
        thread_id: str,
        actor_id: str,
        content: str,
        run_id: str,
        on_event: EventSink | None = None,
        thread: Thread | None = None,
    ) -> RunResult:
        """Answer `content` in the thread. Raises `ThreadNotFound` (also for another actor's
        thread), `ThreadBusy`, `QuotaExceeded` before any work; `RunFailed` once it started.

        `thread`, when the caller already loaded it (the HTTP route does), saves the ownership
        read: it is checked against `actor_id` and `agent` in memory instead."""
        definition = self.definition(agent)
        if thread is None or thread.id != thread_id:
            await self.owned_thread(thread_id, actor_id, agent)
        elif thread.actor_id != actor_id or thread.agent != agent:
            raise ThreadNotFound(thread_id)
        if self.token_quota is not None:
            used = await self.ledger.tokens_used(actor_id)
            if used >= self.token_quota:
                raise QuotaExceeded(actor_id, used, self.token_quota)
        request = RunRequest(
            run_id=run_id, thread_id=thread_id, actor_id=actor_id, agent=agent, content=content
        )
        ctx = await self.runtime.begin(request)
        report = RunReport(run_id=run_id)
        return await self._drive(request, ctx, definition, on_event, report, fresh=True)

    async def resume(self, run_id: str, on_event: EventSink | None = None) -> RunResult:
        """Finish a failed or interrupted run from its journal (a finished one replays as is)."""
        record = await self.runtime.get_run(run_id)
        if record is None:
            raise RunNotFound(run_id)
        definition = self.definition(record.request.agent)  # before the claim: never strand it
        request, ctx = await self.runtime.reopen(run_id)
        report = RunReport(run_id=run_id)
        if record.report is not None:
            prior = RunReport.model_validate(record.report)
            # The read happened in an earlier attempt; its figures stay true for this run.
            report.read_bound, report.rows_read, report.bytes_read = (
                prior.read_bound,
                prior.rows_read,
                prior.bytes_read,
            )
        return await self._drive(request, ctx, definition, on_event, report, fresh=False)

    def definition(self, agent: str) -> AgentDefinition:
        try:
            return self.agents[agent]
        except KeyError:
            raise AgentNotFound(agent) from None

    async def owned_thread(self, thread_id: str, actor_id: str, agent: str | None = None) -> Thread:
        """The thread if `actor_id` owns it; `ThreadNotFound` otherwise, missing or not."""
        if isinstance(self.store, ThreadInfoReader):
            thread = await self.store.get_thread_info(thread_id)
        else:
            thread = await self.store.get_thread(thread_id)
        if thread is None or thread.actor_id != actor_id or (agent and thread.agent != agent):
            raise ThreadNotFound(thread_id)
        return thread

    async def preview(
        self, thread_id: str, actor_id: str, thread: Thread | None = None
    ) -> WindowPreview:
        """What the next turn would send of the existing messages, read the way a turn reads.

        `select` runs over them plus a stand-in for the next user message (which always rides),
        so `kept` is exactly the history the next turn keeps. `dropped` lists what this read saw
        and the next turn will not send; under a read bound older messages are not read at all.
        """
        if thread is None or thread.id != thread_id or thread.actor_id != actor_id:
            thread = await self.owned_thread(thread_id, actor_id)
        definition = self.definition(thread.agent)
        policy = definition.policy
        bound = read_bound(policy)
        messages, _title, _answered = await self._read(thread_id, bound)
        ctx = HistoryPolicyContext(
            thread_id=thread_id, agent=thread.agent, actor_id=actor_id, run_id="preview"
        )
        next_message = Message(role="user", content="")
        selection = policy.select([*messages, next_message], ctx)
        kept = [m for m in selection.keep if m is not next_message]
        tokens = [estimate_message_tokens(m) for m in kept]
        return WindowPreview(
            thread_id=thread_id,
            agent=thread.agent,
            read_bound=bound,
            kept=kept,
            dropped=selection.drop,
            summarizes=bool(selection.drop) and _summarizer(policy) is not None,
            tokens=tokens,
            total_tokens=sum(tokens),
        )

    # --- the run ---------------------------------------------------------------------------

    async def _drive(
        self,
        request: RunRequest,
        ctx: DurableContext,
        definition: AgentDefinition,
        on_event: EventSink | None,
        report: RunReport,
        *,
        fresh: bool,
    ) -> RunResult:
        """`fresh`: this attempt is the run's first, so it made every ledger row itself."""
        try:
            async with self.runtime.keep_alive(request.run_id):
                message = await self._run(request, ctx, definition, on_event, report)
        except Exception as exc:
            failure = RunFailed(request.run_id, exc)
            report.status = "failed"
            await self._finish_report(ctx, report, fresh)
            try:
                await self.runtime.fail(
                    request.run_id, failure.cause_code, str(exc), report.model_dump(mode="json")
                )
            except Exception:
                log.exception("run %s: could not record its failure", request.run_id)
            if not isinstance(exc, AgentError):
                log.exception("run %s failed", request.run_id)
            raise failure from exc
        report.status = "completed"
        await self._finish_report(ctx, report, fresh)
        await self.runtime.complete(request.run_id, report.model_dump(mode="json"))
        return RunResult(run_id=request.run_id, message=message, report=report)

    async def _run(
        self,
        request: RunRequest,
        ctx: DurableContext,
        definition: AgentDefinition,
        on_event: EventSink | None,
        report: RunReport,
    ) -> Message:
        policy = definition.policy
        hctx = HistoryPolicyContext(
            thread_id=request.thread_id,
            agent=request.agent,
            actor_id=request.actor_id,
            run_id=request.run_id,
        )
        user = Message(role="user", content=request.content, run_id=request.run_id)
        await ctx.step("persist:user", lambda: self._persist(request.thread_id, user))

        if await ctx.patched(SELECTED_HISTORY):
            recorded = await ctx.step(
                "load:thread", lambda: self._load_selected(request.thread_id, policy, hctx, report)
            )
            keep = [Message.model_validate(m) for m in recorded["keep"]]
            drop = [Message.model_validate(m) for m in recorded.get("drop", [])]
        else:
            recorded = await ctx.step(
                "load:thread", lambda: self._load_whole(request.thread_id, report)
            )
            legacy = policy.select([Message.model_validate(m) for m in recorded["messages"]], hctx)
            keep, drop = legacy.keep, legacy.drop

        prompt = [ChatMessage(role="system", content=definition.system_prompt)]
        summarizer = _summarizer(policy)
        if drop and summarizer is not None:
            summary = await ctx.step(
                "history:summarize", lambda: _summarize(summarizer, drop, hctx)
            )
            usage = Usage.model_validate(summary["usage"])
            await ctx.step(
                "persist:usage:history",
                lambda: self._record_usage(
                    request, report, "history_summary", _model_name(self.model), usage
                ),
            )
            report.model_calls.append(
                ModelCallReport(
                    purpose="history_summary",
                    prompt_tokens=usage.prompt_tokens,
                    completion_tokens=usage.completion_tokens,
                    messages_sent=len(drop),  # all of them go into it
                    messages_original=len(drop),
                )
            )
            render = getattr(policy, "render_summary", None) or render_history_summary
            prompt.append(ChatMessage(role="system", content=render(summary["text"])))
        prompt.extend(to_chat_messages(keep))

        return await self._answer(request, ctx, definition, prompt, on_event, report)

    async def _answer(
        self,
        request: RunRequest,
        ctx: DurableContext,
        definition: AgentDefinition,
        prompt: list[ChatMessage],
        on_event: EventSink | None,
        report: RunReport,
    ) -> Message:
        specs = [binding.spec for binding in definition.tools.values()]
        calls: list[ToolCall] = []
        results: list[ToolResult] = []
        content = ""
        for n in range(1, definition.max_steps + 1):
            recorded = await ctx.step(
                f"model:{n}",
                lambda: self._model_step(request, report, definition, prompt, specs, on_event),
            )
            response = ModelResponse.model_validate(recorded["response"])
            report.model_calls.append(
                ModelCallReport(
                    purpose="chat",
                    prompt_tokens=response.usage.prompt_tokens,
                    completion_tokens=response.usage.completion_tokens,
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
            for call in response.tool_calls:
                if on_event is not None:
                    await on_event(ToolCallEvent(call=call))
                result = ToolResult.model_validate(
                    await ctx.step(f"tool:{n}:{call.id}", _tool_step(definition, call))
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
                prompt.append(
                    ChatMessage(role="tool", content=result.content, tool_call_id=call.id)
                )
        else:
            content = content or f"(stopped after {definition.max_steps} model steps)"

        answer = Message(
            role="assistant",
            content=content,
            tool_calls=calls,
            tool_results=results,
            run_id=request.run_id,
        )
        stored = await ctx.step(
            "persist:assistant", lambda: self._persist(request.thread_id, answer)
        )
        return answer.model_copy(update={"seq": stored.get("seq")})

    # --- steps -----------------------------------------------------------------------------

    async def _persist(self, thread_id: str, message: Message) -> JsonValue:
        """Idempotent: a replay after a crash between the write and its journal entry finds the
        message already stored (one per run and role) and does not store it twice."""
        try:
            stored = await self.store.append_messages(thread_id, [message])
            return {"seq": stored[0].seq}
        except DuplicateMessage:
            return {"seq": None}

    async def _read(
        self, thread_id: str, bound: int | None
    ) -> tuple[list[Message], str | None, bool]:
        if supports_bounded_read(self.store):
            page = await self.store.load_thread_for_turn(
                ThreadTurnQuery(thread_id=thread_id, message_limit=bound)
            )
            if page is None:
                raise ThreadNotFound(thread_id)
            return page.messages, page.title, page.has_assistant_message
        thread = await self.store.get_thread(thread_id)
        if thread is None:
            raise ThreadNotFound(thread_id)
        answered = any(m.role == "assistant" for m in thread.messages)
        return thread.messages, thread.title, answered

    async def _load_selected(
        self, thread_id: str, policy: HistoryPolicy, hctx: HistoryPolicyContext, report: RunReport
    ) -> JsonValue:
        bound = read_bound(policy)
        messages, title, answered = await self._read(thread_id, bound)
        _count_read(report, bound, messages)
        selection: HistorySelection = policy.select(messages, hctx)
        recorded: dict[str, Any] = {"keep": [journal_form(m) for m in selection.keep]}
        if _summarizer(policy) is not None:
            recorded["drop"] = [journal_form(m) for m in selection.drop]
        recorded["title"] = title
        recorded["has_assistant_message"] = answered
        return recorded

    async def _load_whole(self, thread_id: str, report: RunReport) -> JsonValue:
        """The pre-`agent:selected-history` payload: the whole thread. Kept so runs journaled
        that way finish on exactly what they recorded."""
        messages, title, answered = await self._read(thread_id, None)
        _count_read(report, None, messages)
        return {
            "messages": [m.model_dump(mode="json") for m in messages],
            "title": title,
            "has_assistant_message": answered,
        }

    async def _model_step(
        self,
        request: RunRequest,
        report: RunReport,
        definition: AgentDefinition,
        prompt: list[ChatMessage],
        specs: list[ToolSpec],
        on_event: EventSink | None,
    ) -> JsonValue:
        messages, metrics = _apply_middleware(definition.middleware, list(prompt))
        model_request = ModelRequest(messages=messages, tools=specs, purpose="chat")
        if on_event is not None and supports_streaming(self.model):
            response: ModelResponse | None = None
            async for event in self.model.stream(model_request):
                if isinstance(event, ModelResponse):
                    response = event
                elif isinstance(event, TextDelta):
                    await on_event(TextDelta(text=storable_text(event.text)))
                else:
                    raise ProviderBadResponse(
                        f"the provider streamed a {type(event).__name__}, not text or a response"
                    )
            if response is None:
                raise RuntimeError("the provider's stream ended without a final response")
        else:
            response = await self.model.complete(model_request)
        model = storable_text(response.model or _model_name(self.model))
        await self._record_usage(request, report, "chat", model, response.usage)
        for call in response.tool_calls:
            if _nesting_depth(call.arguments) > MAX_TOOL_ARGUMENT_DEPTH:
                raise ProviderBadResponse(
                    f"the arguments of tool call {call.name!r} nest deeper than "
                    f"{MAX_TOOL_ARGUMENT_DEPTH} levels"
                )
        # Made storable before it is journaled: the journal, the stored answer and every later
        # prompt then hold the same text.
        return {"response": storable_json(response.model_dump(mode="json")), "metrics": metrics}

    async def _record_usage(
        self, request: RunRequest, report: RunReport, purpose: str, model: str, usage: Usage
    ) -> JsonValue:
        entry = LedgerEntry(
            run_id=request.run_id,
            thread_id=request.thread_id,
            actor_id=request.actor_id,
            agent=request.agent,
            purpose=purpose,
            model=model,
            prompt_tokens=usage.prompt_tokens,
            completion_tokens=usage.completion_tokens,
        )
        await self.ledger.record(entry)
        report.ledger.append(_ledger_row(entry))
        return {"recorded": True}

    async def _finish_report(self, ctx: DurableContext, report: RunReport, fresh: bool) -> None:
        """A fresh run's ledger rows were collected as they were written; a resumed run reads
        them back, since an earlier attempt may have paid for calls this one replayed."""
        report.journal_bytes = dict(getattr(ctx, "journal_bytes", {}))
        if fresh:
            return
        try:
            entries = await self.ledger.entries_for_run(report.run_id)
        except AgentError:
            log.warning("run %s: ledger rows unavailable for its report", report.run_id)
            report.ledger = []  # this attempt's rows alone would pass for the whole run's
            return
        report.ledger = [_ledger_row(e) for e in entries]


def read_bound(policy: HistoryPolicy) -> int | None:
    """The rows a turn asks the store for: the policy's declared `max_messages`, else all.

    At least 1: the newest message (the turn's own user message) always rides, so a policy
    declaring 0 still needs that row read, or the bounded read would differ from the full one.
    """
    bound = getattr(policy, "max_messages", None)
    return max(1, bound) if isinstance(bound, int) else None


def _nesting_depth(value: Any) -> int:
    """Levels of dicts and lists in a JSON-like value, counted without recursion."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict):
            children: Any = node.values()
        elif isinstance(node, list):
            children = node
        else:
            continue
        deepest = max(deepest, depth)
        stack.extend((child, depth + 1) for child in children)
    return deepest


def _ledger_row(entry: LedgerEntry) -> LedgerRow:
    return LedgerRow(
        purpose=entry.purpose,
        model=entry.model,
        prompt_tokens=entry.prompt_tokens,
        completion_tokens=entry.completion_tokens,
    )


def _summarizer(policy: HistoryPolicy) -> Any:
    return getattr(policy, "summarize", None)


def _count_read(report: RunReport, bound: int | None, messages: list[Message]) -> None:
    report.read_bound = bound
    report.rows_read = len(messages)
    report.bytes_read = sum(payload_bytes(m) for m in messages)


async def _summarize(summarizer: Any, drop: list[Message], hctx: HistoryPolicyContext) -> JsonValue:
    summary = await summarizer(drop, hctx)
    return {"text": storable_text(summary.text), "usage": summary.usage.model_dump(mode="json")}


def _tool_step(definition: AgentDefinition, call: ToolCall) -> Callable[[], Awaitable[JsonValue]]:
    return lambda: _run_tool(definition, call)


async def _run_tool(definition: AgentDefinition, call: ToolCall) -> JsonValue:
    binding = definition.tools.get(call.name)
    if binding is None:
        result = ToolResult(call_id=call.id, content=f"unknown tool {call.name!r}", is_error=True)
    else:
        result = await binding.invoke(dict(call.arguments))
        result = result.model_copy(update={"call_id": call.id})
    return storable_json(result.model_dump(mode="json"))


def _apply_middleware(
    middleware: Sequence[ChatMiddleware], messages: list[ChatMessage]
) -> tuple[list[ChatMessage], dict[str, Any]]:
    metrics: dict[str, Any] = {
        "window_trimmed": False,
        "messages_sent": len(messages),
        "messages_original": len(messages),
        "window_orphans_dropped": 0,
    }
    for mw in middleware:
        messages, m = mw(messages)
        metrics["window_trimmed"] = bool(metrics["window_trimmed"] or m.get("window_trimmed"))
        metrics["window_orphans_dropped"] += int(m.get("window_orphans_dropped", 0))
    metrics["messages_sent"] = len(messages)
    return messages, metrics


def _model_name(model: ModelProvider) -> str:
    name = getattr(model, "model", None) or getattr(model, "name", None)
    return name if isinstance(name, str) else type(model).__name__
