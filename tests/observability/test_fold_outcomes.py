"""What became of a fold reaches an operator: a refused fold, a compression and a clip are on
the run's span and the summarizer step's span, and counted in the metrics; a refused answer is
not counted as a summary made (issue 25: "a hard clip is reported: report field, metric, span
attribute")."""

from __future__ import annotations

from typing import Any

from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from bounded_agents.core.history import HistoryConfig
from bounded_agents.core.messages import Message
from bounded_agents.core.ports import HistoryPolicyContext, HistorySummary, Usage
from bounded_agents.core.report import RunResult
from bounded_agents.module import AgentModule
from tests.factories import assistant, user
from tests.observability.conftest import ModuleFactory, spans_of

NS = "bounded_agents."


def attrs(span: Any) -> dict[str, Any]:
    return dict(span.attributes or {})


def metric(module: AgentModule, name: str, **labels: str) -> float:
    assert module.metrics is not None
    for family in text_string_to_metric_families(generate_latest(module.metrics.registry).decode()):
        for sample in family.samples:
            if sample.name == name and sample.labels == labels:
                return float(sample.value)
    return 0.0


class Scripted:
    """Answers each fold as the test says: "empty", or "verbose" (over the cap; its
    compression is no shorter, so the summary's oldest part is archived: the store keeps a
    `SummaryArchive`)."""

    def __init__(self) -> None:
        self.mode = "empty"

    async def __call__(self, messages: list[Message], ctx: HistoryPolicyContext) -> HistorySummary:
        usage = Usage(prompt_tokens=20, completion_tokens=10)
        if self.mode == "empty":
            return HistorySummary(text="", usage=usage)
        return HistorySummary(text="- a long fact about ORD-1\n" * 400, usage=usage)


async def test_refused_compressed_and_archived_folds_are_on_the_spans_and_in_the_metrics(
    make_module: ModuleFactory, exporter: InMemorySpanExporter
) -> None:
    summarizer = Scripted()
    module = make_module(
        history=HistoryConfig(
            max_messages=4, fold_messages=4, summarize=summarizer, fold_max_tokens=400
        )
    )
    thread = await module.store.create_thread(actor_id="a", agent="helper")
    await module.store.append_messages(
        thread.id, [m for i in range(6) for m in (user(f"q{i}"), assistant(f"a{i}"))]
    )

    async def turn(content: str) -> RunResult:
        return await module.run_turn(
            agent="helper", thread_id=thread.id, actor_id="a", content=content
        )

    refused = await turn("one")
    report = refused.report.summary
    assert report is not None and report.rejected_reasons == ["empty"] and report.omitted
    root, children = spans_of(exporter, refused.run_id)
    a = attrs(root)
    assert a[NS + "summary.rejected"] == 1
    assert a[NS + "summary.pending"] == report.pending
    assert a[NS + "summary.omitted"] == report.omitted
    (step,) = [c for c in children if c.name == "history:summarize"]
    assert attrs(step)[NS + "summary.rejected"] == "empty"
    assert metric(module, "agent_summaries_rejected_total", agent="helper", reason="empty") == 1
    assert metric(module, "agent_summaries_total", agent="helper") == 0, "nothing was made"

    # Issue 36: the thread waits one turn after a refused fold; the wait is on the span and
    # counted, and what the summary owes is observed per turn.
    waited = await turn("waits")
    report = waited.report.summary
    assert report is not None and report.outcome == "backoff" and report.calls == 0
    root, children = spans_of(exporter, waited.run_id)
    assert attrs(root)[NS + "summary.outcome"] == "backoff"
    assert attrs(root)[NS + "summary.failures"] == 1
    assert [c for c in children if c.name == "history:summarize"] == []
    assert metric(module, "agent_folds_backed_off_total", agent="helper") == 1
    assert metric(module, "agent_fold_messages_owed_count", agent="helper") == 2

    summarizer.mode = "verbose"
    archived = await turn("two")
    report = archived.report.summary
    assert report is not None and report.made and (report.archived, report.clipped) == (1, 0)
    root, children = spans_of(exporter, archived.run_id)
    a = attrs(root)
    assert (a[NS + "summary.archived"], a[NS + "summary.clipped"]) == (1, 0)
    assert a[NS + "summary.compressed"] == report.compressed == 0
    assert a[NS + "summary.calls"] == report.calls == 2
    (step,) = [c for c in children if c.name == "history:summarize"]
    assert attrs(step)[NS + "summary.archived_chars"] > 0
    assert metric(module, "agent_summaries_total", agent="helper") == 1
    assert metric(module, "agent_summaries_archived_total", agent="helper") == 1
    assert metric(module, "agent_summaries_clipped_total", agent="helper") == 0
