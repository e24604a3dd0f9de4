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
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from opentelemetry import trace
from opentelemetry.util.types import AttributeValue

from app.core.ports import DurableContext, DurableRuntime, JsonValue, RunRecord, RunRequest
from app.core.report import RunReport
from app.errors import AgentError, ThreadBusy
from app.observability.metrics import TurnMetrics

TRACER_NAME = "bounded_agents"
NS = "bounded_agents."

Attributes = dict[str, AttributeValue]


@runtime_checkable
class _ReplayAware(Protocol):
    """The contexts of this project list the steps an attempt read back instead of running."""

    replayed: list[str]


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


class ObservedRuntime:
    """A `DurableRuntime` that traces and meters the runs of `inner` (see the module doc)."""

    def __init__(
        self,
        inner: DurableRuntime,
        *,
        metrics: TurnMetrics | None,
        tracing: bool,
        model_name: str,
        provider_name: str,
        tracer_provider: trace.TracerProvider | None = None,
    ) -> None:
        self.inner = inner
        self.metrics = metrics
        self._tracer = trace.get_tracer(TRACER_NAME, tracer_provider=tracer_provider)
        self._tracing = tracing
        self._model = model_name
        self._provider = provider_name
        self._runs: dict[str, _Run] = {}
        self._expired: set[str] = set()
        """Runs `expired_runs` reported: a reopen of one of them is a resume after a crash."""

    # --- DurableRuntime ----------------------------------------------------------------------

    async def begin(self, request: RunRequest) -> DurableContext:
        try:
            ctx = await self.inner.begin(request)
        except ThreadBusy:
            if self.metrics is not None:
                self.metrics.busy.labels(request.agent).inc()
            raise
        return self._watch(request, ctx, resumed=False)

    async def reopen(self, run_id: str) -> tuple[RunRequest, DurableContext]:
        try:
            request, ctx = await self.inner.reopen(run_id)
        except ThreadBusy:
            record = await self.inner.get_run(run_id)
            if self.metrics is not None and record is not None:
                self.metrics.busy.labels(record.request.agent).inc()
            raise
        reason = "lease_expired" if run_id in self._expired else "failed"
        self._expired.discard(run_id)
        if self.metrics is not None:
            self.metrics.resumed.labels(request.agent, reason).inc()
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

    async def complete(self, run_id: str, report: dict[str, Any]) -> None:
        try:
            await self.inner.complete(run_id, report)
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

    async def expired_runs(self) -> list[str]:
        run_ids = await self.inner.expired_runs()
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
                },
            )
        run = _Run(request=request, span=span, started=time.perf_counter(), resumed=resumed)
        self._runs[request.run_id] = run
        return ObservedContext(ctx, run, self)

    def _end(
        self, run_id: str, outcome: str, error_code: str | None, report: Mapping[str, Any] | None
    ) -> None:
        run = self._runs.pop(run_id, None)
        if run is None:
            return
        parsed = RunReport.model_validate(report) if report else None
        elapsed = time.perf_counter() - run.started
        agent = run.request.agent
        if self.metrics is not None:
            self.metrics.turns.labels(agent, outcome, error_code or "").inc()
            self.metrics.turn_seconds.labels(agent, outcome).observe(elapsed)
            if parsed is not None and run.kept is not None and not run.read_replayed:
                self.metrics.rows_read.labels(agent).observe(parsed.rows_read)
                self.metrics.bytes_read.labels(agent).observe(parsed.bytes_read)
        read = _read_attributes(parsed, run.kept) if parsed is not None else {}
        for span, end_ns in run.deferred:
            span.set_attributes(read)
            span.end(end_time=end_ns)
        span = run.span
        span.set_attributes(read)
        if parsed is not None:
            span.set_attributes(_run_attributes(parsed))
        span.set_attribute(NS + "status", outcome)
        if error_code is not None:
            span.set_attribute("error.type", error_code)
            span.set_status(trace.Status(trace.StatusCode.ERROR, error_code))
        span.end()

    # --- a step ------------------------------------------------------------------------------

    async def _step(
        self, run: _Run, inner: DurableContext, name: str, fn: Callable[[], Awaitable[JsonValue]]
    ) -> JsonValue:
        span: trace.Span = trace.INVALID_SPAN
        if self._tracing:
            span = self._tracer.start_span(
                name,
                context=trace.set_span_in_context(run.span),
                attributes={NS + "checkpoint": name},
            )
        started = time.perf_counter()
        try:
            with trace.use_span(
                span, end_on_exit=False, record_exception=False, set_status_on_exception=False
            ):
                value = await inner.step(name, fn)
        except BaseException as exc:
            if not isinstance(exc, asyncio.CancelledError):
                span.record_exception(exc)
                code = exc.code if isinstance(exc, AgentError) else type(exc).__name__
                span.set_attribute("error.type", code)
                span.set_status(trace.Status(trace.StatusCode.ERROR, code))
            span.end()
            raise
        elapsed = time.perf_counter() - started
        replayed = isinstance(inner, _ReplayAware) and name in inner.replayed
        kind = name.split(":", 1)[0]
        attributes: Attributes = {NS + "replayed": replayed}
        if name == "load:thread":
            attributes.update(self._load_attributes(run, value, replayed))
            span.set_attributes(attributes)
            run.deferred.append((span, time.time_ns()))
            return value
        if kind == "model" or kind == "history":
            attributes.update(self._model_attributes(run, name, value, elapsed, replayed))
            if isinstance(value, dict) and kind == "model":
                span.update_name(f"chat {attributes.get('gen_ai.response.model') or self._model}")
        elif kind == "tool":
            tool = run.tool_names.get(name.split(":", 2)[-1], "")
            attributes.update(_tool_attributes(name, tool, value))
            span.update_name(f"execute_tool {tool}".rstrip())
        span.set_attributes(attributes)
        span.end()
        return value

    def _load_attributes(self, run: _Run, value: JsonValue, replayed: bool) -> Attributes:
        out: Attributes = {}
        if not isinstance(value, dict):
            return out
        keep = value.get("keep")
        if isinstance(keep, list):
            run.kept = len(keep)
            out[NS + "history.kept"] = len(keep)
        run.read_replayed = replayed
        summary = value.get("summary")
        if isinstance(summary, dict):
            out[NS + "summary.covers_through_seq"] = int(summary.get("covers_through_seq", 0))
        fold = value.get("fold")
        if isinstance(fold, dict):
            out[NS + "history.fold_through_seq"] = int(fold.get("through", 0))
        return out

    def _model_attributes(
        self, run: _Run, name: str, value: JsonValue, elapsed: float, replayed: bool
    ) -> Attributes:
        """A chat step (`model:n`) or a summarizer step (`history:summarize[:n]`)."""
        purpose = "chat" if name.startswith("model:") else "history_summary"
        out: Attributes = {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": self._provider,
            "gen_ai.request.model": self._model,
            NS + "purpose": purpose,
        }
        if not isinstance(value, dict):
            return out
        if purpose == "chat":
            response = value.get("response") or {}
            usage = response.get("usage") or {}
            model = response.get("model") or ""
            for call in response.get("tool_calls") or ():
                run.tool_names[str(call.get("id"))] = str(call.get("name"))
            metrics = value.get("metrics") or {}
            out[NS + "messages_sent"] = int(metrics.get("messages_sent", 0))
            out[NS + "window_trimmed"] = bool(metrics.get("window_trimmed", False))
        else:
            usage = value.get("usage") or {}
            model = value.get("model") or ""
            out[NS + "summary.covers_through_seq"] = int(value.get("covers_through_seq", 0))
            out[NS + "summary.input_messages"] = int(value.get("input_messages", 0))
            out[NS + "summary.input_tokens"] = int(value.get("input_tokens", 0))
        prompt = int(usage.get("prompt_tokens", 0))
        completion = int(usage.get("completion_tokens", 0))
        out["gen_ai.usage.input_tokens"] = prompt
        out["gen_ai.usage.output_tokens"] = completion
        if model:
            out["gen_ai.response.model"] = str(model)
        if self.metrics is not None and not replayed:
            agent = run.request.agent
            self.metrics.model_seconds.labels(agent, purpose).observe(elapsed)
            self.metrics.tokens.labels(agent, purpose, "input").inc(prompt)
            self.metrics.tokens.labels(agent, purpose, "output").inc(completion)
            if purpose == "history_summary":
                self.metrics.summaries.labels(agent).inc()
        return out


class ObservedContext:
    """The run's `DurableContext`, each step in a span. Everything else is the inner one's."""

    def __init__(self, inner: DurableContext, run: _Run, runtime: ObservedRuntime) -> None:
        self.inner = inner
        self._run = run
        self._runtime = runtime

    @property
    def journal_bytes(self) -> dict[str, int]:
        """The inner context's figures: the loop copies them into the run's report."""
        return dict(getattr(self.inner, "journal_bytes", {}))

    @property
    def replayed(self) -> list[str]:
        return list(self.inner.replayed) if isinstance(self.inner, _ReplayAware) else []

    async def step(self, name: str, fn: Callable[[], Awaitable[JsonValue]]) -> JsonValue:
        return await self._runtime._step(self._run, self.inner, name, fn)

    async def patched(self, marker: str) -> bool:
        return await self.inner.patched(marker)


def _tool_attributes(name: str, tool: str, value: JsonValue) -> Attributes:
    out: Attributes = {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.call.id": name.split(":", 2)[-1],
    }
    if tool:
        out["gen_ai.tool.name"] = tool
    if isinstance(value, dict):
        out[NS + "tool.is_error"] = bool(value.get("is_error", False))
        out[NS + "tool.result_chars"] = len(str(value.get("content", "")))
    return out


def _read_attributes(report: RunReport, kept: int | None) -> Attributes:
    """What the turn's read asked for and returned, and how much of it the prompt kept."""
    out: Attributes = {
        NS + "read.rows": report.rows_read,
        NS + "read.bytes": report.bytes_read,
    }
    for key, bound in (
        ("read.bound_messages", report.read_bound),
        ("read.bound_tokens", report.read_token_bound),
        ("read.bound_runs", report.read_run_bound),
        ("read.after_seq", report.read_after_seq),
    ):
        if bound is not None:
            out[NS + key] = bound
    if kept is not None and report.rows_read:
        out[NS + "history.dropped"] = max(0, report.rows_read - kept)
    return out


def _run_attributes(report: RunReport) -> Attributes:
    """Tokens by purpose and what became of the summary, over the whole run."""
    out: Attributes = {}
    totals: dict[str, list[int]] = {}
    for call in report.model_calls:
        prompt_completion = totals.setdefault(call.purpose, [0, 0])
        prompt_completion[0] += call.prompt_tokens
        prompt_completion[1] += call.completion_tokens
    for purpose, (prompt, completion) in totals.items():
        out[f"{NS}tokens.{purpose}.input"] = prompt
        out[f"{NS}tokens.{purpose}.output"] = completion
    out["gen_ai.usage.input_tokens"] = sum(p for p, _ in totals.values())
    out["gen_ai.usage.output_tokens"] = sum(c for _, c in totals.values())
    out[NS + "model_calls"] = len(report.model_calls)
    if report.summary is not None:
        out[NS + "summary.made"] = report.summary.made
        out[NS + "summary.covers_through_seq"] = report.summary.covers_through_seq
        out[NS + "summary.folds"] = report.summary.folds
    out[NS + "journal_bytes"] = sum(report.journal_bytes.values())
    return out


_PROVIDERS = {"OpenAICompatibleProvider": "openai", "EchoModel": "echo"}


def model_names(model: object) -> tuple[str, str]:
    """(`gen_ai.request.model`, `gen_ai.provider.name`) for a provider: the model name it
    declares (as the ledger books it), and `openai` for the OpenAI-compatible adapter (the wire
    protocol it speaks), else the provider's class name."""
    name = getattr(model, "model", None) or getattr(model, "name", None)
    kind = type(model).__name__
    return (name if isinstance(name, str) else kind), _PROVIDERS.get(kind, kind)
