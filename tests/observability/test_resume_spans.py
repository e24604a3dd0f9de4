"""Spans the observed runtime opens must end: a span never ended is never exported, and its
`_Run` record stays in the runtime's dict for the life of the process (attack round 7: every
refused resume of a completed run left one of each)."""

from __future__ import annotations

from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor, TracerProvider

from bounded_agents.errors import RunCompleted
from bounded_agents.module import AgentModule
from bounded_agents.providers import EchoModel
from bounded_agents.registry import agent
from bounded_agents.settings import Settings
from bounded_agents.store.sql import SqlAgentStore


@agent(name="helper", system_prompt="Be brief.")
class Helper:
    pass


class OpenSpans(SpanProcessor):
    """The spans started and not yet ended."""

    def __init__(self) -> None:
        self.open: dict[int, str] = {}

    def on_start(self, span: Span, parent_context: Any = None) -> None:
        self.open[span.context.span_id] = span.name

    def on_end(self, span: ReadableSpan) -> None:
        assert span.context is not None
        self.open.pop(span.context.span_id, None)


@pytest.fixture
def spans() -> OpenSpans:
    return OpenSpans()


def module_on(store: SqlAgentStore, spans: OpenSpans) -> AgentModule:
    provider = TracerProvider()
    provider.add_span_processor(spans)
    return AgentModule.for_root(
        store=store,
        model=EchoModel(),
        agents=[Helper],
        history={"max_messages": 10},
        settings=Settings(migrate_on_start=False),
        tracer_provider=provider,
    )


async def test_resuming_a_completed_run_leaves_no_span_open(
    sql_store: SqlAgentStore, spans: OpenSpans
) -> None:
    """`loop.resume()` of a completed run is refused (`RunCompleted`, docs/reliability.md)
    after the runtime's `reopen`: the observed runtime opens no span for it."""
    module = module_on(sql_store, spans)
    thread = await module.store.create_thread(actor_id="a", agent="helper")
    done = await module.run_turn(agent="helper", thread_id=thread.id, actor_id="a", content="hi")
    assert spans.open == {}
    for _ in range(3):
        with pytest.raises(RunCompleted):
            await module.loop.resume(done.run_id)
    runtime: Any = module.loop.runtime
    assert spans.open == {}, f"spans never ended (never exported): {list(spans.open.values())}"
    assert len(runtime._runs) == 0, f"{len(runtime._runs)} run records kept for good"
