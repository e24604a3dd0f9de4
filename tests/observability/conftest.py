"""Observability fixtures: a module on the emptied SQL store whose spans go to an in-memory
exporter (OpenTelemetry's SDK, a dev dependency only), never to the global tracer provider."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from app.main import fake_page
from bounded_agents.core.ports import ModelProvider
from bounded_agents.module import AgentModule
from bounded_agents.providers import EchoModel
from bounded_agents.registry import agent, tool
from bounded_agents.settings import Settings
from bounded_agents.store.sql import SqlAgentStore


@agent(name="helper", system_prompt="You help with pages.")
class HelperAgent:
    @tool
    async def read_page(self, url: str) -> str:
        """Read a page (offline, ~20 KB)."""
        return fake_page(url)


@pytest.fixture
def exporter() -> InMemorySpanExporter:
    return InMemorySpanExporter()


@pytest.fixture
def tracer_provider(exporter: InMemorySpanExporter) -> TracerProvider:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider


ModuleFactory = Callable[..., AgentModule]


@pytest.fixture
def make_module(sql_store: SqlAgentStore, tracer_provider: TracerProvider) -> ModuleFactory:
    def make(
        *,
        model: ModelProvider | None = None,
        history: dict[str, Any] | None = None,
        agents: Sequence[type] = (HelperAgent,),
        **settings: Any,
    ) -> AgentModule:
        return AgentModule.for_root(
            store=sql_store,
            model=model or EchoModel(),
            agents=agents,
            history=history or {"max_messages": 4, "summarize": True},
            settings=Settings(migrate_on_start=False, **settings),
            tracer_provider=tracer_provider,
        )

    return make


def spans_of(
    exporter: InMemorySpanExporter, run_id: str
) -> tuple[ReadableSpan, list[ReadableSpan]]:
    """The run's span and its children, in the order they ended."""
    spans = exporter.get_finished_spans()
    roots = [s for s in spans if (s.attributes or {}).get("bounded_agents.run_id") == run_id]
    assert len(roots) == 1, [s.name for s in spans]
    root = roots[0]
    assert root.context is not None
    children = [
        s for s in spans if s.parent is not None and s.parent.span_id == root.context.span_id
    ]
    return root, children
