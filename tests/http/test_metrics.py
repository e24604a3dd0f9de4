"""`/metrics`: scraped over HTTP and parsed with prometheus-client's own parser, then checked
against the run reports of the turns that produced it."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from contextlib import AsyncExitStack
from typing import Any

import httpx
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from bounded_agents.core.ports import RunRecord, RunRequest
from bounded_agents.durable import InlineRuntime
from bounded_agents.errors import ProviderTimeout
from bounded_agents.observability import ObservedRuntime, TurnMetrics
from bounded_agents.providers import EchoModel
from bounded_agents.testing import Gate, ScriptedProvider, reply
from tests.http.conftest import ModuleFactory, make_app, new_thread, open_client, post

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


async def scrape(client: httpx.AsyncClient) -> Samples:
    r = await client.get("/metrics")
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/plain")
    return samples(r.text)


def samples(text: str) -> Samples:
    out: Samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def value(found: Samples, name: str, **labels: str) -> float:
    return found.get((name, frozenset(labels.items())), 0.0)


def total(reports: Iterable[dict[str, Any]], purpose: str, field: str) -> int:
    return sum(c[field] for r in reports for c in r["model_calls"] if c["purpose"] == purpose)


async def test_metrics_count_turns_tokens_reads_and_summaries_as_the_reports_do(
    stack: AsyncExitStack, make_module: ModuleFactory
) -> None:
    module = make_module(model=EchoModel(), history={"max_messages": 4, "summarize": True})
    client = await open_client(stack, make_app(module))
    thread = await new_thread(client)
    reports = []
    for i in range(8):
        r = await post(client, thread, f"turn {i}")
        assert r.status_code == 200
        reports.append(r.json()["report"])
    found = await scrape(client)
    helper = {"agent": "helper"}
    assert value(found, "agent_turns_total", outcome="completed", error="", **helper) == 8
    assert value(found, "agent_turn_duration_seconds_count", outcome="completed", **helper) == 8
    for purpose in ("chat", "history_summary"):
        assert value(found, "agent_tokens_total", purpose=purpose, type="input", **helper) == total(
            reports, purpose, "prompt_tokens"
        )
        assert value(
            found, "agent_tokens_total", purpose=purpose, type="output", **helper
        ) == total(reports, purpose, "completion_tokens")
    calls = sum(1 for r in reports for c in r["model_calls"] if c["purpose"] == "chat")
    assert (
        value(found, "agent_model_call_duration_seconds_count", purpose="chat", **helper) == calls
    )
    folds = sum(r["summary"]["folds"] for r in reports if r["summary"] and r["summary"]["made"])
    assert folds >= 1
    assert value(found, "agent_summaries_total", **helper) == folds
    assert value(found, "agent_turn_rows_read_sum", **helper) == sum(
        r["rows_read"] for r in reports
    )
    assert value(found, "agent_turn_bytes_read_sum", **helper) == sum(
        r["bytes_read"] for r in reports
    )
    assert value(found, "agent_turn_rows_read_count", **helper) == 8
    # bounded: at most the high mark (4 + fold 4) rows, on every turn
    assert value(found, "agent_turn_rows_read_bucket", le="10.0", **helper) == 8


async def test_metrics_count_409s_and_failed_turns(
    stack: AsyncExitStack, make_module: ModuleFactory
) -> None:
    gate = Gate(reply("slow"))
    provider = ScriptedProvider([gate, ProviderTimeout("too slow")])
    client = await open_client(stack, make_app(make_module(model=provider)))
    thread = await new_thread(client)
    first = asyncio.create_task(post(client, thread, "one"))
    await gate.reached()
    assert (await post(client, thread, "two")).status_code == 409
    gate.release.set()
    assert (await first).status_code == 200
    assert (await post(client, thread, "three")).status_code == 502
    found = await scrape(client)
    assert value(found, "agent_thread_busy_total", agent="helper") == 1
    assert value(found, "agent_turns_total", agent="helper", outcome="completed", error="") == 1
    failed = {"agent": "helper", "outcome": "failed", "error": "provider_timeout"}
    assert value(found, "agent_turns_total", **failed) == 1


class _CrashedRuntime(InlineRuntime):
    """An in-process runtime with one run whose process died: what a lease sweep finds."""

    def __init__(self, request: RunRequest) -> None:
        super().__init__()
        self.request = request

    async def claim_expired(self, limit: int) -> list[str]:
        return [self.request.run_id]

    async def reopen(self, run_id: str) -> tuple[RunRequest, Any]:
        return self.request, await self.begin(self.request)

    async def get_run(self, run_id: str) -> RunRecord | None:
        return await super().get_run(run_id) or RunRecord(request=self.request, status="running")


async def test_a_run_resumed_after_its_process_died_is_counted_as_such() -> None:
    request = RunRequest(run_id="r1", thread_id="t1", actor_id="a", agent="helper", content="x")
    metrics = TurnMetrics()
    runtime = ObservedRuntime(
        _CrashedRuntime(request),
        metrics=metrics,
        tracing=False,
        model_name="echo",
        provider_name="echo",
    )
    for run_id in await runtime.claim_expired(10):  # what the module's sweep does
        await runtime.reopen(run_id)
    await runtime.fail("r1", "provider_timeout", "again", {})
    await runtime.reopen("r1")  # a failed run resumed by hand is not a crash
    await runtime.complete("r1", {})
    await runtime.reopen("r1")  # a finished run only replays: no resume at all
    found = samples(generate_latest(metrics.registry).decode())
    assert value(found, "agent_runs_resumed_total", agent="helper", reason="lease_expired") == 1
    assert value(found, "agent_runs_resumed_total", agent="helper", reason="failed") == 1


class SummarizerDown:
    """One model for chat and summaries (`summarize=True` binds the module's own model): the
    chat answers, the summarizer fails while `down`, then answers `length` once, then works."""

    model = "two-faced"

    def __init__(self) -> None:
        self.down = True
        self.cut_once = False

    async def complete(self, request: Any) -> Any:
        from bounded_agents.core.ports import ModelResponse
        from bounded_agents.errors import ProviderError

        if request.purpose == "history_summary":
            if self.down:
                raise ProviderError("provider returned HTTP 503: summarizer overloaded")
            if self.cut_once:
                self.cut_once = False
                return ModelResponse(content="- half a su", finish_reason="length")
            return ModelResponse(content="- the user said turn things", finish_reason="stop")
        return ModelResponse(content="answer", finish_reason="stop")


async def test_a_summarizer_outage_is_counted_and_every_turn_still_answers(
    stack: AsyncExitStack, make_module: ModuleFactory
) -> None:
    """The issue measured [200, 502, 502, 502, 200] while the summarizer was down: now every
    turn answers, each refused fold is counted by outcome, and a later turn folds."""
    model = SummarizerDown()
    module = make_module(model=model, history={"max_messages": 4, "summarize": True})
    client = await open_client(stack, make_app(module))
    thread = await new_thread(client)
    statuses, reports = [], []
    for i in range(18):  # 18 turns, not 12: a backoff of up to 4 turns after the third failure
        if i == 8:
            model.down, model.cut_once = False, True
        r = await post(client, thread, f"turn {i}")
        statuses.append(r.status_code)
        reports.append(r.json()["report"])
    assert statuses == [200] * 18
    reasons = [x for r in reports if r["summary"] for x in r["summary"]["rejected_reasons"]]
    # Issue 36: between failures the thread waits out a growing backoff, so the outage costs
    # fewer calls than turns; each wait is counted.
    assert reasons.count("failed:provider_error") >= 2 and reasons[-1] == "truncated"
    waits = sum(1 for r in reports if r["summary"] and r["summary"]["outcome"] == "backoff")
    found = await scrape(client)
    helper = {"agent": "helper"}
    assert waits >= 2 and value(found, "agent_folds_backed_off_total", **helper) == waits
    assert value(
        found, "agent_summaries_rejected_total", reason="failed:provider_error", **helper
    ) == reasons.count("failed:provider_error")
    assert value(found, "agent_summaries_rejected_total", reason="truncated", **helper) == 1
    stored = sum(r["summary"]["folds"] - r["summary"]["rejected"] for r in reports if r["summary"])
    assert stored >= 1 and value(found, "agent_summaries_total", **helper) == stored
    assert any(r["summary"] and r["summary"]["made"] for r in reports[8:])
