"""Calibrated token counts: a model whose tokenizer counts 2x the chars/4 estimate is sent fold
chunks past its context until a provider reports usage; from its first reported usage on, the
chunks sized by `calibrated_budget` fit and none is refused."""

from __future__ import annotations

from bounded_agents.core.calibration import (
    MAX_RATIO,
    CalibratedCounter,
    CalibratingProvider,
    EstimateCounter,
    calibrated_budget,
)
from bounded_agents.core.messages import ChatMessage
from bounded_agents.core.ports import ModelRequest, ModelResponse, Usage
from bounded_agents.core.tokens import estimate_message_tokens
from bounded_agents.errors import ProviderContextExceeded

CONTEXT = 1000
"""The model's context, in its own (real) tokens."""


class DoubleCountingModel:
    """Its tokenizer counts twice the estimate; a prompt past `CONTEXT` real tokens is refused
    as too long, an accepted one reports its real prompt tokens."""

    model = "digits-2x"

    def __init__(self) -> None:
        self.refused = 0

    async def complete(self, request: ModelRequest) -> ModelResponse:
        real = 2 * EstimateCounter().count(request.messages)
        if real > CONTEXT:
            self.refused += 1
            raise ProviderContextExceeded(f"prompt is too long: {real} tokens > {CONTEXT}")
        return ModelResponse(content="ok", usage=Usage(prompt_tokens=real, completion_tokens=3))


def _chunks(messages: list[ChatMessage], budget: int) -> list[list[ChatMessage]]:
    """Greedy chunks of at most `budget` estimated tokens (how a fold cuts what it folds)."""
    chunks: list[list[ChatMessage]] = [[]]
    used = 0
    for m in messages:
        cost = estimate_message_tokens(m)
        if chunks[-1] and used + cost > budget:
            chunks.append([])
            used = 0
        chunks[-1].append(m)
        used += cost
    return chunks


async def _fold(provider: CalibratingProvider, messages: list[ChatMessage]) -> int:
    """Summarize `messages` chunk by chunk; the number of chunks refused for length."""
    refused = 0
    for chunk in _chunks(messages, calibrated_budget(CONTEXT, provider)):
        try:
            await provider.complete(ModelRequest(messages=chunk, purpose="history_summary"))
        except ProviderContextExceeded:
            refused += 1
    return refused


DIGITS = [ChatMessage(role="user", content=f"order {i}: " + "4071 " * 30) for i in range(40)]


async def test_a_2x_tokenizer_stops_getting_refused_chunks_after_its_first_reported_usage() -> None:
    inner = DoubleCountingModel()
    provider = CalibratingProvider(inner, CalibratedCounter())

    assert await _fold(provider, DIGITS) > 0  # uncalibrated: chunks of CONTEXT estimated tokens
    refused_before = inner.refused

    # One chat call reports its usage: the ratio is learned.
    await provider.complete(ModelRequest(messages=DIGITS[:3]))
    assert provider.counter.ratio("digits-2x") == 2.0

    assert await _fold(provider, DIGITS) == 0
    assert inner.refused == refused_before
    assert calibrated_budget(CONTEXT, provider) == CONTEXT // 2


def test_the_ratio_is_bounded_errs_high_and_leaves_other_models_and_small_prompts_alone() -> None:
    counter = CalibratedCounter()
    counter.observe("m", estimated=100, reported=10_000)
    assert counter.ratio("m") == MAX_RATIO
    counter.observe("m", estimated=100, reported=100)
    assert MAX_RATIO > counter.ratio("m") > 1.0  # smoothed down slowly, not dropped
    counter.observe("tiny", estimated=10, reported=40)  # too small to teach anything
    assert counter.ratio("tiny") == 1.0
    assert counter.ratio("other") == 1.0
    assert calibrated_budget(CONTEXT, object()) == CONTEXT  # no calibration: the estimate


def test_the_loops_floor_keeps_a_low_report_from_growing_any_budget() -> None:
    """The loop's counter applies no ratio below 1.0: a model (or a fake) reporting fewer
    tokens than the estimate is sized as by the plain estimate, never sent more."""
    counter = CalibratedCounter(floor=1.0)
    counter.observe("terse", estimated=1000, reported=500)
    assert counter.learned("terse") == 0.5
    assert counter.ratio("terse") == 1.0
    assert counter.budget(8000, "terse") == 8000
