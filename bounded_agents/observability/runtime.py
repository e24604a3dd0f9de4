"""Traces and metrics of runs, taken at the durable runtime: the one seam every checkpoint
already passes through.

`ObservedRuntime` wraps the module's `DurableRuntime`; each `DurableContext` it hands out wraps
the real one, so every `ctx.step(name, fn)` of the loop opens a child span of the run's span
(current while `fn` runs, so a host's own instrumentation of httpx or SQLAlchemy nests under it)
and feeds the metrics. The loop itself knows nothing of either: the figures come from what each
step returns (the very payload the journal keeps) and from the run's report when it ends.

Spans follow the OpenTelemetry GenAI semantic conventions where they apply: the run is an
`invoke_agent {agent}` span, a model call a `chat {model}` span with `gen_ai.usage.*` tokens, a
tool call an `execute_tool {tool}` span; every other checkpoint is a span named as the journal
names it (`load:thread`, `persist:summary`...). Every step span carries
`bounded_agents.checkpoint`, so a trace lines up with `GET /runs/{id}`'s `journal_bytes`. The
history figures live under `bounded_agents.*`.

With no OpenTelemetry SDK configured the API hands out non-recording spans: what is left is a
few attribute dicts per step.

Spans carry no message content unless content capture is on (`capture_content`, from
AGENT_TRACE_CONTENT or OpenTelemetry's `OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`):
a trace is exported to a backend an erasure cannot reach, so by default it holds figures, ids
and names only. A failed step records its exception by type and error code, with the frames of
its stack but not its message, which may quote the input (a provider's 400 does). With capture
on, the run span gets the user's message (`gen_ai.input.messages`), a chat span the answer
(`gen_ai.output.messages`), a tool span the call's arguments and result, and an exception its
message, as the GenAI conventions' opt-in attributes.
"""

from __future__ import annotations

import asyncio
import functools
import time
import traceback
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar

from opentelemetry import trace

from bounded_agents.core.checkpoints import (
    LOAD_THREAD,
    SummarizePayload,
    is_history_step,
    is_model_step,
    is_tool_step,
    kept_count,
    or_none,
    parse_load_thread,
    parse_model,
    parse_summarize,
    parse_tool,
    tool_call_id,
)
from bounded_agents.core.ports import (
    DurableContext,
    DurableRuntime,
    JournalFigures,
    JsonValue,
    RunRecord,
    RunRequest,
    StepFn,
    StepRecorder,
    supports_journal_figures,
)
from bounded_agents.core.report import RunReport
from bounded_agents.errors import AgentError, ThreadBusy
from bounded_agents.observability.attributes import (
    NS,
    Attributes,
    chat_attributes,
    chat_call,
    fold_attributes,
    fold_call,
    input_content,
    load_attributes,
    output_content,
    read_attributes,
    run_attributes,
    tool_attributes,
    tool_content,
)
from bounded_agents.observability.delegates import DELEGATES, PowerDelegate
from bounded_agents.observability.metrics import TurnMetrics

TRACER_NAME = "bounded_agents"
_T = TypeVar("_T")


@dataclass
class _Run:
    request: RunRequest
    span: trace.Span
    started: float
    resumed: bool
    deferred: list[tuple[trace.Span, int]] = field(default_factory=list)
    """The `load:thread` span, ended (at its own end time) once the report says what the read
    returned: the step's payload holds what was kept, not how much was read."""
    kept: int | None = None
    read_replayed: bool = False
    tool_names: dict[str, str] = field(default_factory=dict)
    """Tool call id -> tool name, from the model steps: a tool step's payload names only the id."""
    tool_arguments: dict[str, object] = field(default_factory=dict)
    """Tool call id -> its arguments, kept only with content capture on."""
    figures: JournalFigures | None = None
    """The inner context, when it says which steps it replayed (probed once per run: a
    protocol check per step would cost more than the rest of the step's bookkeeping)."""


class ObservedRuntime:
    """A `DurableRuntime` that traces and meters the runs of `inner` (see the module doc).

    It has exactly the optional powers `inner` has (`supports_*` answers for it as for
    `inner`): constructing one makes an instance of the subclass that delegates those powers
    (`observer_class`), so the probes need no `__getattr__` forwarding and see no power `inner`
    lacks."""

    def __new__(cls, inner: DurableRuntime, **_options: Any) -> ObservedRuntime:
        chosen = observer_class(inner) if cls is ObservedRuntime else cls
        return super().__new__(chosen)

    def __init__(
        self,
        inner: DurableRuntime,
        *,
        metrics: TurnMetrics | None,
        tracing: bool,
        model_name: str,
        provider_name: str,
        tracer_provider: trace.TracerProvider | None = None,
        capture_content: bool = False,
    ) -> None:
        """`capture_content`: put message content in the spans (see the module docstring)."""
        self.inner = inner
        self.metrics = metrics
        self._tracer = trace.get_tracer(TRACER_NAME, tracer_provider=tracer_provider)
        self._tracing = tracing
        self._model = model_name
        self._provider = provider_name
        self._capture = capture_content
        self._runs: dict[str, _Run] = {}
        self._expired: set[str] = set()
        """Runs `claim_expired` took: a reopen of one of them is a resume after a crash."""

    # --- DurableRuntime ----------------------------------------------------------------------

    async def begin(
        self, request: RunRequest, *, shared_first_unit: bool = False
    ) -> DurableContext:
        try:
            ctx = await self.inner.begin(request, shared_first_unit=shared_first_unit)
        except ThreadBusy:
            if self.metrics is not None:
                self.metrics.child(self.metrics.busy, request.agent).inc()
            raise
        return self._watch(request, ctx, resumed=False)

    async def reopen(self, run_id: str) -> tuple[RunRequest, DurableContext]:
        """A resume. Counted by why: `lease_expired` for a run the sweep found (its process
        died), `failed` for a failed run resumed by hand; a finished run only replays."""
        crashed = run_id in self._expired
        self._expired.discard(run_id)
        before = None if crashed else await self.inner.get_run(run_id)
        try:
            request, ctx = await self.inner.reopen(run_id)
        except ThreadBusy:
            record = before or await self.inner.get_run(run_id)
            if self.metrics is not None and record is not None:
                self.metrics.child(self.metrics.busy, record.request.agent).inc()
            raise
        if before is not None and before.status == "completed":
            # The loop refuses it (`RunCompleted`) and never drives it: a span opened here
            # would never end, nor be exported, and its record would stay (found by attack).
            return request, ctx
        if self.metrics is not None:
            reason = "lease_expired" if crashed else "failed"
            self.metrics.child(self.metrics.resumed, request.agent, reason).inc()
        return request, self._watch(request, ctx, resumed=True)

    def keep_alive(self, run_id: str) -> AbstractAsyncContextManager[None]:
        return self._keep_alive(run_id)

    @asynccontextmanager
    async def _keep_alive(self, run_id: str) -> AsyncIterator[None]:
        """A cancelled run never reaches `complete` or `fail`: its spans end here."""
        async with self.inner.keep_alive(run_id):
            try:
                yield
            except asyncio.CancelledError:
                self._end(run_id, "cancelled", "cancelled", None)
                raise

    async def complete(self, run_id: str, report: dict[str, Any], **options: Any) -> None:
        """`options` (a transaction to complete in, say) go to the inner runtime untouched."""
        try:
            await self.inner.complete(run_id, report, **options)
        finally:
            self._end(run_id, "completed", None, report)

    async def fail(
        self, run_id: str, error_code: str, error_message: str, report: dict[str, Any]
    ) -> None:
        try:
            await self.inner.fail(run_id, error_code, error_message, report)
        finally:
            self._end(run_id, "failed", error_code, report)

    async def get_run(self, run_id: str) -> RunRecord | None:
        return await self.inner.get_run(run_id)

    async def claim_expired(self, limit: int) -> list[str]:
        run_ids = await self.inner.claim_expired(limit)
        self._expired.update(run_ids)
        return run_ids

    # --- the run span ------------------------------------------------------------------------

    def _watch(self, request: RunRequest, ctx: DurableContext, *, resumed: bool) -> DurableContext:
        span: trace.Span = trace.INVALID_SPAN
        if self._tracing:
            span = self._tracer.start_span(
                f"invoke_agent {request.agent}",
                kind=trace.SpanKind.INTERNAL,
                attributes={
                    "gen_ai.operation.name": "invoke_agent",
                    "gen_ai.agent.name": request.agent,
                    "gen_ai.conversation.id": request.thread_id,
                    "gen_ai.provider.name": self._provider,
                    "gen_ai.request.model": self._model,
                    NS + "run_id": request.run_id,
                    NS + "resumed": resumed,
                    **(input_content(request.content) if self._capture else {}),
                },
            )
        run = _Run(
            request=request,
            span=span,
            started=time.perf_counter(),
            resumed=resumed,
            figures=ctx if supports_journal_figures(ctx) else None,
        )
        self._runs[request.run_id] = run
        return ObservedContext(ctx, run, self)

    def _end(
        self, run_id: str, outcome: str, error_code: str | None, report: Mapping[str, Any] | None
    ) -> None:
        run = self._runs.pop(run_id, None)
        if run is None:
            return
        elapsed = time.perf_counter() - run.started
        agent = run.request.agent
        if self.metrics is not None:
            self.metrics.child(self.metrics.turns, agent, outcome, error_code or "").inc()
            self.metrics.child(self.metrics.turn_seconds, agent, outcome).observe(elapsed)
            if report and run.kept is not None and not run.read_replayed:
                self.metrics.child(self.metrics.rows_read, agent).observe(
                    report.get("rows_read", 0)
                )
                self.metrics.child(self.metrics.bytes_read, agent).observe(
                    report.get("bytes_read", 0)
                )
                self._meter_memory(agent, report.get("summary"))
        span = run.span
        if span.is_recording():  # the report is parsed only for a span that keeps it
            parsed = RunReport.model_validate(report) if report else None
            read = read_attributes(parsed, run.kept) if parsed is not None else {}
            for deferred, end_ns in run.deferred:
                deferred.set_attributes(read)
                deferred.end(end_time=end_ns)
            span.set_attributes(read)
            if parsed is not None:
                span.set_attributes(run_attributes(parsed))
            span.set_attribute(NS + "status", outcome)
            if error_code is not None:
                span.set_attribute("error.type", error_code)
                span.set_status(trace.Status(trace.StatusCode.ERROR, error_code))
        else:
            for deferred, end_ns in run.deferred:
                deferred.end(end_time=end_ns)
        span.end()

    # --- a step ------------------------------------------------------------------------------

    async def _step(
        self, run: _Run, name: str, inner_step: Callable[[], Awaitable[JsonValue]]
    ) -> JsonValue:
        """`inner_step` (the wrapped context's step, its arguments bound) under a span."""
        span: trace.Span = trace.INVALID_SPAN
        if self._tracing:
            span = self._tracer.start_span(
                name,
                context=trace.set_span_in_context(run.span),
                attributes={NS + "checkpoint": name},
            )
        started = time.perf_counter()
        try:
            if span.is_recording():
                with trace.use_span(
                    span, end_on_exit=False, record_exception=False, set_status_on_exception=False
                ):
                    value = await inner_step()
            else:  # nothing would nest under a span that records nothing
                value = await inner_step()
        except BaseException as exc:
            if not isinstance(exc, asyncio.CancelledError):
                code = exc.code if isinstance(exc, AgentError) else type(exc).__name__
                self._record_exception(span, exc, code)
                span.set_attribute("error.type", code)
                span.set_status(trace.Status(trace.StatusCode.ERROR, code))
            span.end()
            raise
        self._observe(run, span, name, value, time.perf_counter() - started)
        return value

    def _observe(
        self, run: _Run, span: trace.Span, name: str, value: JsonValue, elapsed: float
    ) -> None:
        """What a step returned, as metrics and its span's attributes (the span ends here, or
        with the run for `load:thread`)."""
        replayed = run.figures is not None and name in run.figures.replayed
        if name == LOAD_THREAD:
            load = or_none(parse_load_thread, value)
            run.kept = kept_count(load) if load is not None else None
            run.read_replayed = replayed
            if span.is_recording():
                span.set_attributes({NS + "replayed": replayed, **load_attributes(load)})
                run.deferred.append((span, time.time_ns()))
            else:
                span.end()
            return
        attributes: Attributes = {NS + "replayed": replayed}
        if is_model_step(name):
            made = or_none(parse_model, value)
            for call in made["response"].get("tool_calls", []) if made is not None else ():
                run.tool_names[call["id"]] = call["name"]
                if self._capture:
                    run.tool_arguments[call["id"]] = call["arguments"]
            usage, model = chat_call(made)
            if self.metrics is not None and not replayed:
                self._meter_call(run, "chat", usage, elapsed)
            if span.is_recording():
                attributes.update(self._call_attributes("chat", usage, model))
                attributes.update(chat_attributes(made))
                if self._capture:
                    attributes.update(output_content(made))
                span.update_name(f"chat {model or self._model}")
        elif is_history_step(name):
            fold = or_none(parse_summarize, value)
            usage, model = fold_call(fold)
            if self.metrics is not None and not replayed:
                self._meter_call(run, "history_summary", usage, elapsed)
                self._meter_fold(run, fold)
            if span.is_recording():
                attributes.update(self._call_attributes("history_summary", usage, model))
                attributes.update(fold_attributes(fold))
        elif is_tool_step(name) and span.is_recording():
            call_id = tool_call_id(name)
            tool = run.tool_names.get(call_id, "")
            result = or_none(parse_tool, value)
            attributes.update(tool_attributes(call_id, tool, result))
            if self._capture:
                attributes.update(tool_content(run.tool_arguments.pop(call_id, None), result))
            span.update_name(f"execute_tool {tool}".rstrip())
        if span.is_recording():
            span.set_attributes(attributes)
        span.end()

    def _record_exception(self, span: trace.Span, exc: BaseException, code: str) -> None:
        """The exception as the span's `exception` event. Without content capture, its message
        is the error code and its stack trace the frames alone: the message may quote the
        input (a provider's 400 echoes what it refused), and a trace outlives an erasure."""
        if self._capture:
            span.record_exception(exc)
            return
        if not span.is_recording():
            return
        span.add_event(
            "exception",
            {
                "exception.type": f"{type(exc).__module__}.{type(exc).__qualname__}",
                "exception.message": code,
                "exception.stacktrace": "".join(traceback.format_tb(exc.__traceback__)),
                "exception.escaped": False,
            },
        )

    def _meter_call(self, run: _Run, purpose: str, usage: tuple[int, int], elapsed: float) -> None:
        assert self.metrics is not None
        agent = run.request.agent
        self.metrics.child(self.metrics.model_seconds, agent, purpose).observe(elapsed)
        self.metrics.child(self.metrics.tokens, agent, purpose, "input").inc(usage[0])
        self.metrics.child(self.metrics.tokens, agent, purpose, "output").inc(usage[1])

    def _meter_memory(self, agent: str, summary: object) -> None:
        """The run's memory health (issue 36): what its summary still owes, and whether its
        fold waited out the backoff."""
        assert self.metrics is not None
        if not isinstance(summary, Mapping):
            return
        self.metrics.child(self.metrics.fold_messages_owed, agent).observe(
            int(summary.get("pending", 0))
        )
        if summary.get("outcome") == "backoff":
            self.metrics.child(self.metrics.folds_backed_off, agent).inc()

    def _meter_fold(self, run: _Run, fold: SummarizePayload | None) -> None:
        """A fold step's summary: made (compressed, clipped) or refused."""
        assert self.metrics is not None
        if fold is None:
            return
        agent = run.request.agent
        if "rejected" in fold:
            reason = fold["rejected"][:40]
            self.metrics.child(self.metrics.summaries_rejected, agent, reason).inc()
            return
        self.metrics.child(self.metrics.summaries, agent).inc()
        if fold.get("compressed"):
            self.metrics.child(self.metrics.summaries_compressed, agent).inc()
        if fold.get("clipped_chars"):
            self.metrics.child(self.metrics.summaries_clipped, agent).inc()
        if fold.get("archived_chars"):
            self.metrics.child(self.metrics.summaries_archived, agent).inc()

    def _call_attributes(self, purpose: str, usage: tuple[int, int], model: str) -> Attributes:
        """A chat step (`model:n`) or a summarizer step (`history:summarize[:n]`)."""
        out: Attributes = {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": self._provider,
            "gen_ai.request.model": self._model,
            "gen_ai.usage.input_tokens": usage[0],
            "gen_ai.usage.output_tokens": usage[1],
            NS + "purpose": purpose,
        }
        if model:
            out["gen_ai.response.model"] = model
        return out


_CLASSES: dict[tuple[type[PowerDelegate], ...], type[ObservedRuntime]] = {}


def observer_class(inner: DurableRuntime) -> type[ObservedRuntime]:
    """`ObservedRuntime` with the delegates of the powers `inner` has (one class per set of
    powers, made once): the observed runtime has exactly those powers."""
    mixins = tuple(mixin for probe, mixin in DELEGATES if probe(inner))
    if not mixins:
        return ObservedRuntime
    found = _CLASSES.get(mixins)
    if found is None:
        found = _CLASSES[mixins] = type(
            "ObservedRuntime",
            (*mixins, ObservedRuntime),
            {"__module__": ObservedRuntime.__module__},
        )
    return found


class ObservedContext:
    """The run's `DurableContext`, each step in a span. Everything else is the inner one's,
    delegated one method at a time."""

    def __init__(self, inner: DurableContext, run: _Run, runtime: ObservedRuntime) -> None:
        self.inner = inner
        self._run = run
        self._runtime = runtime

    @property
    def journal_bytes(self) -> dict[str, int]:
        """The inner context's figures (none if it keeps none): the loop copies them into the
        run's report."""
        figures = self._run.figures
        return dict(figures.journal_bytes) if figures is not None else {}

    @property
    def replayed(self) -> list[str]:
        figures = self._run.figures
        return list(figures.replayed) if figures is not None else []

    async def step(
        self,
        name: str,
        fn: StepFn,
        *,
        writes: bool = False,
        record: StepRecorder | None = None,
    ) -> JsonValue:
        run = functools.partial(self.inner.step, name, fn, writes=writes, record=record)
        return await self._runtime._step(self._run, name, run)

    async def patched(self, marker: str) -> bool:
        return await self.inner.patched(marker)

    def unit_of_work(self) -> AbstractAsyncContextManager[None]:
        return self.inner.unit_of_work()
