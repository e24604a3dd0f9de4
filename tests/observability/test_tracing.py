"""Spans per run and per checkpoint, read back from the SDK's in-memory exporter and checked
against the run reports (the same figures, measured once)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from bounded_agents.core.checkpoints import PERSIST_USER
from bounded_agents.core.ports import (
    POWERS,
    supports_erased_run_sweep,
    supports_journal_figures,
    supports_launch,
    supports_owner_check,
    supports_pruning,
    supports_run_erasure,
    supports_run_executor,
    supports_run_forgetting,
    supports_run_timeline,
)
from bounded_agents.core.report import RunReport, RunResult
from bounded_agents.durable.inline import InlineRuntime
from bounded_agents.errors import ProviderTimeout, RunFailed
from bounded_agents.module import AgentModule
from bounded_agents.observability import ObservedRuntime
from bounded_agents.testing import ScriptedProvider, reply
from tests.observability.conftest import ModuleFactory, spans_of

NS = "bounded_agents."
RUNTIME_POWERS = [p for p in POWERS if p.on == "runtime"]
SINCE = datetime(2025, 1, 1, tzinfo=UTC)


async def turns(module: AgentModule, thread_id: str, contents: list[str]) -> list[RunResult]:
    return [
        await module.run_turn(agent="helper", thread_id=thread_id, actor_id="a", content=c)
        for c in contents
    ]


def attrs(span: Any) -> dict[str, Any]:
    return dict(span.attributes or {})


async def test_a_run_is_a_span_with_a_child_per_checkpoint_carrying_the_history_figures(
    make_module: ModuleFactory, exporter: InMemorySpanExporter
) -> None:
    module = make_module()
    thread = await module.store.create_thread(actor_id="a", agent="helper")
    results = await turns(
        module,
        thread.id,
        ["/read_page https://example.com", *(f"question {i}" for i in range(5))],
    )
    for result in results:
        root, children = spans_of(exporter, result.run_id)
        _assert_the_run_span_holds_its_report(root, result.report, thread.id)
        _assert_a_child_span_per_checkpoint(root, children, result.report)

    first = spans_of(exporter, results[0].run_id)[1]
    (tool,) = [c for c in first if attrs(c).get("gen_ai.operation.name") == "execute_tool"]
    assert tool.name == "execute_tool read_page"
    assert attrs(tool)["gen_ai.tool.name"] == "read_page"

    folded = [r for r in results if r.report.summary is not None and r.report.summary.made]
    assert folded, "the window folded at least once"
    report = folded[0].report
    assert report.summary is not None
    summarize = [
        c for c in spans_of(exporter, folded[0].run_id)[1] if c.name.startswith("history:summarize")
    ]
    assert len(summarize) == report.summary.folds
    sa = attrs(summarize[-1])
    assert sa[NS + "purpose"] == "history_summary"
    assert sa[NS + "summary.covers_through_seq"] == report.summary.covers_through_seq
    assert sa["gen_ai.usage.input_tokens"] == next(
        c.prompt_tokens for c in report.model_calls if c.purpose == "history_summary"
    )


def _assert_the_run_span_holds_its_report(root: Any, report: RunReport, thread_id: str) -> None:
    a = attrs(root)
    assert root.name == "invoke_agent helper"
    assert a["gen_ai.operation.name"] == "invoke_agent"
    assert a["gen_ai.agent.name"] == "helper"
    assert a["gen_ai.conversation.id"] == thread_id
    assert a[NS + "status"] == "completed"
    assert a[NS + "read.rows"] == report.rows_read
    assert a[NS + "read.bytes"] == report.bytes_read
    assert a[NS + "read.bound_messages"] == report.read_bound
    by_purpose: dict[str, list[int]] = {}
    for call in report.model_calls:
        totals = by_purpose.setdefault(call.purpose, [0, 0])
        totals[0] += call.prompt_tokens
        totals[1] += call.completion_tokens
    for purpose, (prompt, completion) in by_purpose.items():
        assert a[f"{NS}tokens.{purpose}.input"] == prompt
        assert a[f"{NS}tokens.{purpose}.output"] == completion
    if report.summary is not None:
        assert a[NS + "summary.made"] == report.summary.made
        assert a[NS + "summary.covers_through_seq"] == report.summary.covers_through_seq
    else:
        assert NS + "summary.made" not in a


def _assert_a_child_span_per_checkpoint(root: Any, children: list[Any], report: RunReport) -> None:
    # one child per journaled checkpoint, named by it (model and tool calls by GenAI's rule)
    assert sorted(attrs(c)[NS + "checkpoint"] for c in children) == sorted(
        n for n in report.journal_bytes if not n.startswith("patch:")
    )
    load = next(c for c in children if c.name == "load:thread")
    la = attrs(load)
    assert la[NS + "read.rows"] == report.rows_read
    assert la[NS + "read.bytes"] == report.bytes_read
    assert la[NS + "history.kept"] + la.get(NS + "history.dropped", 0) == report.rows_read
    assert la[NS + "replayed"] is False
    assert load.end_time is not None and load.start_time is not None
    assert load.end_time <= root.end_time  # type: ignore[operator]
    chats = [c for c in children if attrs(c).get(NS + "purpose") == "chat"]
    assert [c.name for c in chats] == ["chat echo"] * len(chats)
    assert [attrs(c)["gen_ai.usage.input_tokens"] for c in chats] == [
        c.prompt_tokens for c in report.model_calls if c.purpose == "chat"
    ]
    for chat in chats:
        ca = attrs(chat)
        assert ca["gen_ai.operation.name"] == "chat"
        assert ca["gen_ai.request.model"] == "echo"
        assert ca["gen_ai.provider.name"] == "echo"
        assert ca["gen_ai.usage.output_tokens"] >= 0


async def test_a_failed_run_is_an_error_span_and_its_resume_replays_under_a_new_one(
    make_module: ModuleFactory, exporter: InMemorySpanExporter
) -> None:
    provider = ScriptedProvider([ProviderTimeout("slow"), reply("at last")])
    module = make_module(model=provider, history={"max_messages": 10})
    thread = await module.store.create_thread(actor_id="a", agent="helper")
    with pytest.raises(RunFailed) as failed:
        await turns(module, thread.id, ["hello"])
    run_id = failed.value.run_id
    root, children = spans_of(exporter, run_id)
    assert root.status.status_code is StatusCode.ERROR
    assert attrs(root)["error.type"] == "provider_timeout"
    (model,) = [c for c in children if c.name.startswith("model:")]  # never named: it failed
    assert model.status.status_code is StatusCode.ERROR
    assert any(e.name == "exception" for e in model.events)

    exporter.clear()
    await module.loop.resume(run_id)
    root, children = spans_of(exporter, run_id)
    assert attrs(root)[NS + "resumed"] is True
    assert attrs(root)[NS + "status"] == "completed"
    replayed = {attrs(c)[NS + "checkpoint"]: attrs(c)[NS + "replayed"] for c in children}
    assert replayed["load:thread"] is True and replayed["persist:user"] is True
    assert replayed["model:1"] is False and replayed["persist:assistant"] is False


async def test_no_span_is_made_with_tracing_off(
    make_module: ModuleFactory, exporter: InMemorySpanExporter
) -> None:
    module = make_module(tracing=False)
    thread = await module.store.create_thread(actor_id="a", agent="helper")
    await turns(module, thread.id, ["hi"])
    assert exporter.get_finished_spans() == ()


async def test_the_observed_runtime_has_exactly_the_powers_of_the_runtime_it_wraps(
    make_module: ModuleFactory,
) -> None:
    module = make_module()
    thread = await module.store.create_thread(actor_id="a", agent="helper")
    (result,) = await turns(module, thread.id, ["hi"])
    runtime = module.loop.runtime
    assert isinstance(runtime, ObservedRuntime)
    assert [p.probe(runtime) for p in RUNTIME_POWERS] == [
        p.probe(runtime.inner) for p in RUNTIME_POWERS
    ]
    assert not supports_launch(runtime)  # a SqlJournal's: no engine to launch
    names = [name for name, _ in await runtime.inner.steps(result.run_id)]  # type: ignore[attr-defined]
    assert names[0] == PERSIST_USER and names[-1] == "persist:assistant"
    _request, ctx = await runtime.reopen(result.run_id)  # a finished run: it only replays
    assert supports_run_timeline(runtime)  # what the inspector reads, through the wrapper
    (trace,) = await runtime.thread_runs(thread.id, limit=5)
    assert trace.run_id == result.run_id and trace.steps == names

    async def never(tx: object) -> None:
        raise AssertionError("a replayed step does not run")

    assert await ctx.step(PERSIST_USER, never) == {"seq": 1}
    assert supports_journal_figures(ctx) and ctx.replayed == [PERSIST_USER]
    assert list(ctx.journal_bytes) == [PERSIST_USER]


def test_an_observed_runtime_claims_no_power_its_runtime_lacks() -> None:
    runtime = ObservedRuntime(
        InlineRuntime(), metrics=None, tracing=False, model_name="m", provider_name="p"
    )
    assert [p.probe(runtime) for p in RUNTIME_POWERS] == [
        p.probe(runtime.inner) for p in RUNTIME_POWERS
    ]
    assert not supports_run_timeline(runtime) and not supports_pruning(runtime)


class _EveryPower(InlineRuntime):
    """An in-process runtime with every runtime power, each call noted."""

    checks_thread_owner = True  # `begin` is the power; `owner_checked` tells it a check was made

    def owner_checked(self, run_id: str) -> None:
        self.calls.append(("owner_checked", run_id))

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[Any, ...]] = []

    def register_resumer(self, resume: Any) -> None:
        self.calls.append(("register_resumer", resume))

    async def execute(self, run_id: str, attempt: Any) -> Any:
        self.calls.append(("execute", run_id))
        return await attempt()

    async def thread_runs(
        self, thread_id: str, *, limit: int, before_seq: int | None = None
    ) -> list[Any]:
        self.calls.append(("thread_runs", thread_id, limit, before_seq))
        return []

    async def prune_steps(self, older_than_seconds: float, limit: int, *, status: str = "") -> int:
        self.calls.append(("prune_steps", older_than_seconds, limit, status))
        return 7

    async def launch(
        self,
        system_database_url: str,
        *,
        executor_id: str | None = None,
        application_version: str | None = None,
    ) -> None:
        self.calls.append(("launch", system_database_url, executor_id, application_version))

    async def shutdown(self) -> None:
        self.calls.append(("shutdown",))

    async def thread_run_ids(self, thread_id: str) -> list[str]:
        self.calls.append(("thread_run_ids", thread_id))
        return ["r1"]

    async def erase_runs(self, run_ids: Any) -> None:
        self.calls.append(("erase_runs", list(run_ids)))

    async def forget_runs(self, run_ids: Any) -> None:
        self.calls.append(("forget_runs", list(run_ids)))

    async def sweep_erased(self, *, since: Any = None) -> int:
        self.calls.append(("sweep_erased", since))
        return 3


async def test_an_observed_runtime_hands_each_power_to_the_runtime_it_wraps() -> None:
    inner = _EveryPower()
    runtime = ObservedRuntime(inner, metrics=None, tracing=False, model_name="m", provider_name="p")
    assert all(p.probe(runtime) for p in RUNTIME_POWERS)

    async def attempt() -> str:
        return "done"

    resume = object()
    assert supports_run_executor(runtime) and supports_launch(runtime)
    assert supports_run_timeline(runtime) and supports_pruning(runtime)
    runtime.register_resumer(resume)  # type: ignore[arg-type]
    assert await runtime.execute("r1", attempt) == "done"
    assert await runtime.thread_runs("t1", limit=3, before_seq=9) == []
    assert await runtime.prune_steps(60.0, 5, status="failed") == 7
    await runtime.launch("sqlite://", executor_id="e", application_version="v")
    await runtime.shutdown()
    assert supports_run_erasure(runtime)
    assert await runtime.thread_run_ids("t1") == ["r1"]
    await runtime.erase_runs(["r1"])
    assert supports_run_forgetting(runtime)
    await runtime.forget_runs(["r1"])
    assert supports_erased_run_sweep(runtime)
    assert await runtime.sweep_erased(since=SINCE) == 3
    assert supports_owner_check(runtime)
    runtime.owner_checked("r1")
    assert inner.calls == [
        ("register_resumer", resume),
        ("execute", "r1"),
        ("thread_runs", "t1", 3, 9),
        ("prune_steps", 60.0, 5, "failed"),
        ("launch", "sqlite://", "e", "v"),
        ("shutdown",),
        ("thread_run_ids", "t1"),
        ("erase_runs", ["r1"]),
        ("forget_runs", ["r1"]),
        ("sweep_erased", SINCE),
        ("owner_checked", "r1"),
    ]
