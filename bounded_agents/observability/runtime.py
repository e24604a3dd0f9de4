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
from typing import Any

from opentelemetry import trace
from opentelemetry.util.types import AttributeValue

from bounded_agents.core.ports import (
    DurableContext,
    DurableRuntime,
    JsonValue,
    RunRecord,
    RunRequest,
)
from bounded_agents.core.report import RunReport
from bounded_agents.errors import AgentError, ThreadBusy
from bounded_agents.observability.metrics import TurnMetrics

TRACER_NAME = "bounded_agents"
NS = "bounded_agents."

Attributes = dict[str, AttributeValue]


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
        before = None if crashed or self.metrics is None else await self.inner.get_run(run_id)
        try:
            request, ctx = await self.inner.reopen(run_id)
        except ThreadBusy:
            record = before or await self.inner.get_run(run_id)
            if self.metrics is not None and record is not None:
                self.metrics.child(self.metrics.busy, record.request.agent).inc()
            raise
        if self.metrics is not None and (crashed or (before and before.status != "completed")):
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

    def __getattr__(self, name: str) -> Any:
        """Whatever else the inner runtime offers (its journal's timeline, say): the wrapper
        observes runs and changes nothing else, so optional powers probe through it."""
        if name == "inner":
            raise AttributeError(name)
        return getattr(self.inner, name)

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
        span = run.span
        if span.is_recording():  # the report is parsed only for a span that keeps it
            parsed = RunReport.model_validate(report) if report else None
            read = _read_attributes(parsed, run.kept) if parsed is not None else {}
            for deferred, end_ns in run.deferred:
                deferred.set_attributes(read)
                deferred.end(end_time=end_ns)
            span.set_attributes(read)
            if parsed is not None:
                span.set_attributes(_run_attributes(parsed))
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
            if span.is_recording():
                with trace.use_span(
                    span, end_on_exit=False, record_exception=False, set_status_on_exception=False
                ):
                    value = await inner.step(name, fn)
            else:  # nothing would nest under a span that records nothing
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
        # The project's contexts list the steps an attempt read back instead of running (read by
        # attribute: a runtime-checkable protocol check costs more than the rest of the step).
        replayed = name in getattr(inner, "replayed", ())
        kind = name.split(":", 1)[0]
        if name == "load:thread":
            run.kept = len(value["keep"]) if isinstance(value, dict) and "keep" in value else None
            run.read_replayed = replayed
        elif kind == "model" and isinstance(value, dict):
            for call in (value.get("response") or {}).get("tool_calls") or ():
                run.tool_names[str(call.get("id"))] = str(call.get("name"))
        if kind in ("model", "history") and self.metrics is not None and not replayed:
            self._meter_model_call(run, name, value, elapsed)
        if not span.is_recording():  # no SDK: no attributes to build
            span.end()
            return value
        attributes: Attributes = {NS + "replayed": replayed}
        if name == "load:thread":
            attributes.update(_load_attributes(value))
            span.set_attributes(attributes)
            run.deferred.append((span, time.time_ns()))
            return value
        if kind == "model" or kind == "history":
            attributes.update(self._model_attributes(name, value))
            if kind == "model":
                span.update_name(f"chat {attributes.get('gen_ai.response.model') or self._model}")
        elif kind == "tool":
            tool = run.tool_names.get(name.split(":", 2)[-1], "")
            attributes.update(_tool_attributes(name, tool, value))
            span.update_name(f"execute_tool {tool}".rstrip())
        span.set_attributes(attributes)
        span.end()
        return value

    def _meter_model_call(self, run: _Run, name: str, value: JsonValue, elapsed: float) -> None:
        assert self.metrics is not None
        purpose, usage, _ = _model_call(name, value)
        agent = run.request.agent
        self.metrics.child(self.metrics.model_seconds, agent, purpose).observe(elapsed)
        self.metrics.child(self.metrics.tokens, agent, purpose, "input").inc(usage[0])
        self.metrics.child(self.metrics.tokens, agent, purpose, "output").inc(usage[1])
        if purpose != "history_summary" or not isinstance(value, dict):
            return
        if "rejected" in value:
            reason = str(value["rejected"])[:40]
            self.metrics.child(self.metrics.summaries_rejected, agent, reason).inc()
            return
        self.metrics.child(self.metrics.summaries, agent).inc()
        if value.get("compressed"):
            self.metrics.child(self.metrics.summaries_compressed, agent).inc()
        if value.get("clipped_chars"):
            self.metrics.child(self.metrics.summaries_clipped, agent).inc()

    def _model_attributes(self, name: str, value: JsonValue) -> Attributes:
        """A chat step (`model:n`) or a summarizer step (`history:summarize[:n]`)."""
        purpose, (prompt, completion), model = _model_call(name, value)
        out: Attributes = {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": self._provider,
            "gen_ai.request.model": self._model,
            "gen_ai.usage.input_tokens": prompt,
            "gen_ai.usage.output_tokens": completion,
            NS + "purpose": purpose,
        }
        if model:
            out["gen_ai.response.model"] = model
        if not isinstance(value, dict):
            return out
        if purpose == "chat":
            metrics = value.get("metrics") or {}
            out[NS + "messages_sent"] = int(metrics.get("messages_sent", 0))
            out[NS + "window_trimmed"] = bool(metrics.get("window_trimmed", False))
        else:
            if "covers_through_seq" in value:
                out[NS + "summary.covers_through_seq"] = int(value["covers_through_seq"])
            out[NS + "summary.input_messages"] = int(value.get("input_messages", 0))
            out[NS + "summary.input_tokens"] = int(value.get("input_tokens", 0))
            out[NS + "summary.calls"] = int(value.get("calls", 1))
            if "rejected" in value:
                out[NS + "summary.rejected"] = str(value["rejected"])
            for key in ("compressed", "clipped_chars"):
                if value.get(key):
                    out[NS + "summary." + key] = int(value[key])
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
        return list(getattr(self.inner, "replayed", []))

    async def step(self, name: str, fn: Callable[[], Awaitable[JsonValue]]) -> JsonValue:
        return await self._runtime._step(self._run, self.inner, name, fn)

    async def patched(self, marker: str) -> bool:
        return await self.inner.patched(marker)

    def __getattr__(self, name: str) -> Any:
        """Whatever else the inner context offers (a unit of work, its transaction...) is the
        inner context's own: only steps are observed."""
        if name == "inner":
            raise AttributeError(name)
        return getattr(self.inner, name)


def _model_call(name: str, value: JsonValue) -> tuple[str, tuple[int, int], str]:
    """(purpose, (input, output) tokens, response model) of a model or summarizer step's
    journaled result."""
    purpose = "chat" if name.startswith("model:") else "history_summary"
    if not isinstance(value, dict):
        return purpose, (0, 0), ""
    carrier = (value.get("response") or {}) if purpose == "chat" else value
    usage = carrier.get("usage") or {}
    tokens = (int(usage.get("prompt_tokens", 0)), int(usage.get("completion_tokens", 0)))
    return purpose, tokens, str(carrier.get("model") or "")


def _load_attributes(value: JsonValue) -> Attributes:
    """What `load:thread` journaled: how many messages were kept, the summary read, the fold."""
    out: Attributes = {}
    if not isinstance(value, dict):
        return out
    keep = value.get("keep")
    if isinstance(keep, list):
        out[NS + "history.kept"] = len(keep)
    summary = value.get("summary")
    if isinstance(summary, dict):
        out[NS + "summary.covers_through_seq"] = int(summary.get("covers_through_seq", 0))
    fold = value.get("fold")
    if isinstance(fold, dict):
        out[NS + "history.fold_through_seq"] = int(fold.get("through", 0))
    return out


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
    summary = report.summary
    if summary is not None:
        out[NS + "summary.made"] = summary.made
        out[NS + "summary.covers_through_seq"] = summary.covers_through_seq
        out[NS + "summary.folds"] = summary.folds
        out[NS + "summary.calls"] = summary.calls
        # What a fold lost or left for later: the figures an operator alerts on.
        for key in ("rejected", "compressed", "clipped", "pending", "omitted"):
            out[NS + "summary." + key] = getattr(summary, key)
        out[NS + "summary.deferred"] = summary.deferred
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
