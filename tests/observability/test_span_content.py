"""Spans hold no message content unless content capture is turned on (the OpenTelemetry GenAI
opt-in, `OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`, or AGENT_TRACE_CONTENT): not the
user's text, not the answer, not a tool's output, not a provider error quoting the input (issue
40, break 2's `model:1` span)."""

from __future__ import annotations

import json
import uuid
from typing import Any

import httpx
import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from bounded_agents.core.ports import ModelRequest, ModelResponse
from bounded_agents.errors import RunFailed
from bounded_agents.providers import EchoModel
from bounded_agents.providers.openai.failures import status_failure
from bounded_agents.settings import Settings
from tests.observability.conftest import ModuleFactory


class RefusesWithAnEcho(EchoModel):
    """Echo, but a chat turn saying `refuse` is a 400 quoting the input, as validating servers
    answer."""

    def _respond(self, request: ModelRequest) -> ModelResponse:
        last = request.messages[-1].content
        if request.purpose == "chat" and "refuse" in last:
            body = {"error": {"message": f"Invalid content: {last!r}"}}
            raise status_failure(400, httpx.Headers(), json.dumps(body).encode())
        return super()._respond(request)


def _exported(exporter: InMemorySpanExporter) -> str:
    """Every exported span as its JSON export (name, attributes, events, status)."""
    return "\n".join(span.to_json() for span in exporter.get_finished_spans())


async def _turns(make_module: ModuleFactory, marker: str, **settings: Any) -> None:
    module = make_module(model=RefusesWithAnEcho(), history={"max_messages": 20}, **settings)
    thread = await module.store.create_thread(actor_id="a", agent="helper")
    for content in [f"hello {marker}", f"/read_page https://example.com/{marker}"]:
        await module.run_turn(agent="helper", thread_id=thread.id, actor_id="a", content=content)
    with pytest.raises(RunFailed):
        await module.run_turn(
            agent="helper", thread_id=thread.id, actor_id="a", content=f"refuse {marker}"
        )


async def test_spans_hold_no_message_content_by_default(
    make_module: ModuleFactory, exporter: InMemorySpanExporter, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", raising=False)
    marker = f"MARK{uuid.uuid4().hex}"
    await _turns(make_module, marker)
    exported = _exported(exporter)
    assert "chat echo" in exported and "execute_tool read_page" in exported
    assert marker not in exported
    # the failed step still says what failed, by code and type
    [failed] = [s for s in exporter.get_finished_spans() if s.events]
    assert failed.name == "model:1"  # the step failed before it could be named `chat <model>`
    [event] = failed.events
    assert event.name == "exception"
    assert dict(event.attributes or {})["exception.type"].endswith("ProviderError")
    assert dict(event.attributes or {})["exception.message"] == "provider_error"


@pytest.mark.parametrize(
    "opt_in",
    [
        {"env": "true"},
        {"setting": True},
    ],
)
async def test_content_capture_puts_the_messages_and_the_error_in_the_spans(
    make_module: ModuleFactory,
    exporter: InMemorySpanExporter,
    monkeypatch: pytest.MonkeyPatch,
    opt_in: dict[str, Any],
) -> None:
    monkeypatch.delenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", raising=False)
    settings: dict[str, Any] = {}
    if "env" in opt_in:
        monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", opt_in["env"])
    else:
        settings["trace_content"] = opt_in["setting"]
    marker = f"MARK{uuid.uuid4().hex}"
    await _turns(make_module, marker, **settings)
    spans = exporter.get_finished_spans()
    runs = [s for s in spans if s.name == "invoke_agent helper"]
    assert all(marker in str(dict(s.attributes or {})["gen_ai.input.messages"]) for s in runs)
    chats = [s for s in spans if s.name == "chat echo"]
    assert any(marker in str(dict(s.attributes or {}).get("gen_ai.output.messages")) for s in chats)
    [tool] = [s for s in spans if s.name == "execute_tool read_page"]
    assert marker in str(dict(tool.attributes or {})["gen_ai.tool.call.arguments"])
    assert "gen_ai.tool.call.result" in dict(tool.attributes or {})
    [failed] = [s for s in spans if s.events]
    assert marker in str(dict(failed.events[0].attributes or {})["exception.message"])


def test_the_capture_setting_outranks_the_otel_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "true")
    assert Settings().captures_content() is True
    assert Settings(trace_content=False).captures_content() is False
    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "False")
    assert Settings().captures_content() is False
    monkeypatch.delenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT")
    assert Settings().captures_content() is False
