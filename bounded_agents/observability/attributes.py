"""The span attributes of a run and its steps, read from the payloads the journal keeps (typed by
`core.checkpoints`) and from the run's report. Pure functions: `runtime.py` decides when."""

from __future__ import annotations

import json

from opentelemetry.util.types import AttributeValue

from bounded_agents.core.checkpoints import (
    LoadThreadPayload,
    ModelPayload,
    SummarizePayload,
    ToolPayload,
    UsagePayload,
    kept_count,
)
from bounded_agents.core.report import RunReport

NS = "bounded_agents."

Attributes = dict[str, AttributeValue]


def tokens(usage: UsagePayload | None) -> tuple[int, int]:
    """(input, output) tokens of a journaled usage."""
    return (usage["prompt_tokens"], usage["completion_tokens"]) if usage else (0, 0)


def chat_call(made: ModelPayload | None) -> tuple[tuple[int, int], str]:
    """((input, output) tokens, response model) of a `model:<n>` step."""
    if made is None:
        return (0, 0), ""
    response = made["response"]
    return tokens(response.get("usage")), response.get("model") or ""


def fold_call(fold: SummarizePayload | None) -> tuple[tuple[int, int], str]:
    """((input, output) tokens, response model) of a `history:summarize[:n]` step."""
    if fold is None:
        return (0, 0), ""
    return tokens(fold.get("usage")), fold.get("model") or ""


def chat_attributes(made: ModelPayload | None) -> Attributes:
    if made is None:
        return {}
    metrics = made["metrics"]
    return {
        NS + "messages_sent": int(metrics.get("messages_sent", 0)),
        NS + "window_trimmed": bool(metrics.get("window_trimmed", False)),
    }


def fold_attributes(fold: SummarizePayload | None) -> Attributes:
    if fold is None:
        return {}
    out: Attributes = {}
    if "covers_through_seq" in fold:
        out[NS + "summary.covers_through_seq"] = fold["covers_through_seq"]
    out[NS + "summary.input_messages"] = fold.get("input_messages", 0)
    out[NS + "summary.input_tokens"] = fold.get("input_tokens", 0)
    out[NS + "summary.calls"] = fold.get("calls", 1)
    if "rejected" in fold:
        out[NS + "summary.rejected"] = fold["rejected"]
    compressed, clipped = fold.get("compressed"), fold.get("clipped_chars")
    if compressed:
        out[NS + "summary.compressed"] = compressed
    if clipped:
        out[NS + "summary.clipped_chars"] = clipped
    archived = fold.get("archived_chars")
    if archived:
        out[NS + "summary.archived_chars"] = archived
    return out


def load_attributes(load: LoadThreadPayload | None) -> Attributes:
    """What `load:thread` journaled: how many messages were kept, the summary read, the fold."""
    if load is None:
        return {}
    out: Attributes = {NS + "history.kept": kept_count(load)}
    if "summary" in load:
        out[NS + "summary.covers_through_seq"] = load["summary"]["covers_through_seq"]
    if "fold" in load:
        out[NS + "history.fold_through_seq"] = load["fold"]["through"]
    return out


def tool_attributes(call_id: str, tool: str, result: ToolPayload | None) -> Attributes:
    out: Attributes = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.call.id": call_id}
    if tool:
        out["gen_ai.tool.name"] = tool
    if result is not None:
        out[NS + "tool.is_error"] = result["is_error"]
        out[NS + "tool.result_chars"] = len(result["content"])
    return out


def read_attributes(report: RunReport, kept: int | None) -> Attributes:
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


def run_attributes(report: RunReport) -> Attributes:
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
        out[NS + "summary.rejected"] = summary.rejected
        out[NS + "summary.compressed"] = summary.compressed
        out[NS + "summary.clipped"] = summary.clipped
        out[NS + "summary.archived"] = summary.archived
        out[NS + "summary.pending"] = summary.pending
        out[NS + "summary.omitted"] = summary.omitted
        out[NS + "summary.deferred"] = summary.deferred
        # Memory health (issue 36): the last fold's outcome and the thread's backoff.
        if summary.outcome is not None:
            out[NS + "summary.outcome"] = summary.outcome
        out[NS + "summary.failures"] = summary.failures
        out[NS + "summary.backoff_turns"] = summary.backoff_turns
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


# --- content (only with content capture on: the GenAI conventions' opt-in attributes) ------


def _json(value: object) -> str:
    return json.dumps(value, ensure_ascii=False)


def input_content(text: str) -> Attributes:
    """The run's user message, as `gen_ai.input.messages` (the GenAI conventions' JSON)."""
    return {
        "gen_ai.input.messages": _json(
            [{"role": "user", "parts": [{"type": "text", "content": text}]}]
        )
    }


def output_content(made: ModelPayload | None) -> Attributes:
    """A model step's answer, its text and the tool calls it asked for, as
    `gen_ai.output.messages`."""
    if made is None:
        return {}
    response = made["response"]
    parts: list[dict[str, object]] = []
    if response.get("content"):
        parts.append({"type": "text", "content": response["content"]})
    for call in response.get("tool_calls", []):
        parts.append(
            {
                "type": "tool_call",
                "id": call["id"],
                "name": call["name"],
                "arguments": call["arguments"],
            }
        )
    return {"gen_ai.output.messages": _json([{"role": "assistant", "parts": parts}])}


def tool_content(arguments: object, result: ToolPayload | None) -> Attributes:
    """A tool call's arguments and result (`gen_ai.tool.call.arguments`/`.result`)."""
    out: Attributes = {}
    if arguments is not None:
        out["gen_ai.tool.call.arguments"] = _json(arguments)
    if result is not None:
        out["gen_ai.tool.call.result"] = result["content"]
    return out
