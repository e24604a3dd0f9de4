"""Calibrated token counts: the chars/4 estimate corrected, per model, by what the provider
reports.

Every window, fold chunk and budget is sized by `estimate_message_tokens` (chars/4). A model
whose tokenizer counts more (digit-heavy text ran 1.4-2.2x on SmolLM2's) is then sent fold
chunks past its context, refused as too long. Providers report the true prompt tokens on every
call, so the ratio reported/estimated is learned per model name, bounded, and applied where the
loop sizes things: `CalibratedCounter.count` (real tokens of messages) and `.budget` (how many
estimated tokens fit a real-token limit).

The loop keeps one `CalibratedCounter` per process (`TurnDeps.learned.tokens`): every chat
call whose usage the provider reported teaches it, under the configured model's name, and the
fold sizes its chunks (`calibrated` budget of the policy's `fold_max_tokens`) and the quota
holds its reservations by it, and token windows are cut at their limits divided by it
(`WindowHistory.calibrated`, through the `CalibratedPolicy` power), in the same estimate the
store keeps per message, so a window and its bounded read still agree.
`CalibratingProvider` does the same for a provider used outside the loop.

Kept across restarts where the ledger can (`RatioBook`: the SQL ledger's `token_ratios` table):
the loop restores the saved ratios at start-up (`AgentLoop.restore_learned`, which the module's
lifespan calls) and saves a ratio after a turn that moved it by more than `SAVE_DRIFT`, in a
transaction of its own, so a turn's commits are what they were and most turns write nothing.
Without one (or without the lifespan) a process relearns from its first reported call. The
estimate stays the default offline (ratio 1.0 until a provider reports).
"""

from __future__ import annotations

import math
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Protocol, runtime_checkable

from bounded_agents.core.messages import ChatMessage, Message
from bounded_agents.core.ports import ModelProvider, ModelRequest, ModelResponse, TextDelta
from bounded_agents.core.ports.powers import supports_streaming
from bounded_agents.core.tokens import estimate_message_tokens

MIN_RATIO = 0.5
MAX_RATIO = 4.0
"""The ratio is clamped to this range: a broken report cannot make every budget 0 or infinite."""

MIN_SAMPLE_TOKENS = 64
"""Prompts smaller than this (estimated) teach nothing: per-message overheads dominate them."""

SAVE_DRIFT = 0.05
"""A learned ratio is saved again once it moved more than this share from the one saved: the
decay moves it a little on every lower report, which is not worth a write each time."""


@runtime_checkable
class TokenCounter(Protocol):
    """Counts a prompt's tokens for one model: the estimate, a calibrated estimate, or an exact
    tokenizer (tiktoken for OpenAI models) plugged in where one exists."""

    def count(self, messages: Sequence[Message | ChatMessage], model: str = "") -> int: ...


class EstimateCounter:
    """The offline default: `estimate_message_tokens` summed, whatever the model."""

    def count(self, messages: Sequence[Message | ChatMessage], model: str = "") -> int:
        return sum(estimate_message_tokens(m) for m in messages)


class CalibratedCounter:
    """The estimate times a per-model ratio learned from reported prompt tokens.

    Learning keeps the largest ratio seen, smoothed down slowly (`decay`): a count that is too
    low gets a chunk refused, one a little too high only sends a smaller chunk, so the
    calibration errs high.
    """

    def __init__(
        self, base: TokenCounter | None = None, *, decay: float = 0.1, floor: float = MIN_RATIO
    ) -> None:
        self.base = base or EstimateCounter()
        self.decay = decay
        self.floor = floor
        """The smallest ratio applied (learned ones below it are kept, not applied): the loop
        uses 1.0, so calibration only ever shrinks a chunk or grows a hold, never sends more
        than the plain estimate allowed (a fake or lying usage report cannot inflate it)."""
        self._ratios: dict[str, float] = {}
        self._saved: dict[str, float] = {}

    def restore(self, ratios: Mapping[str, float]) -> None:
        """Ratios saved by an earlier process (clamped as learned ones are); a ratio this
        process learned already wins."""
        for model, ratio in ratios.items():
            kept = min(max(ratio, MIN_RATIO), MAX_RATIO)
            self._ratios.setdefault(model, kept)
            self._saved[model] = kept

    def unsaved(self) -> dict[str, float]:
        """The learned ratios worth saving: whose APPLIED ratio (at least `floor`) was never
        saved and differs from the default, or moved more than `SAVE_DRIFT` since it was. A
        model counting fewer tokens than the estimate is sized as the default anyway (the
        loop's floor is 1.0): nothing to keep, no write."""
        out = {}
        for model, ratio in self._ratios.items():
            applied = max(self.floor, ratio)
            saved = self._saved.get(model)
            if saved is None:
                if applied > self.floor:
                    out[model] = ratio
            elif abs(applied - max(self.floor, saved)) > SAVE_DRIFT * max(self.floor, saved):
                out[model] = ratio
        return out

    def mark_saved(self, ratios: Mapping[str, float]) -> None:
        self._saved.update(ratios)

    def ratio(self, model: str) -> float:
        """The ratio applied to `model`'s estimates: the learned one, at least `floor`."""
        return max(self.floor, self._ratios.get(model, 1.0))

    def learned(self, model: str) -> float | None:
        """The ratio learned for `model` (None: none reported yet)."""
        return self._ratios.get(model)

    def observe(self, model: str, estimated: int, reported: int) -> None:
        """Learn from one call: `estimated` tokens by the base counter, `reported` by the
        provider."""
        if estimated < MIN_SAMPLE_TOKENS or reported <= 0:
            return
        seen = min(max(reported / estimated, MIN_RATIO), MAX_RATIO)
        known = self._ratios.get(model)
        if known is None or seen >= known:
            self._ratios[model] = seen
        else:
            self._ratios[model] = known - self.decay * (known - seen)

    def count(self, messages: Sequence[Message | ChatMessage], model: str = "") -> int:
        return math.ceil(self.base.count(messages, model) * self.ratio(model))

    def tokens(self, estimated: int, model: str) -> int:
        """`estimated` tokens (by the base counter) as the model's real tokens."""
        return math.ceil(estimated * self.ratio(model))

    def budget(self, tokens: int, model: str) -> int:
        """How many estimated tokens fit in `tokens` of the model's real tokens: what a window,
        a fold chunk or a budget sized in estimated tokens should use."""
        return max(1, math.floor(tokens / self.ratio(model)))


class CalibratingProvider:
    """A `ModelProvider` that teaches a `CalibratedCounter` from every reported usage.

    Wraps any provider; the ratio is learned under the provider's `model` attribute when it has
    one (the name the deployment configured), else the response's model name.
    """

    def __init__(self, inner: ModelProvider, counter: CalibratedCounter) -> None:
        self.inner = inner
        self.counter = counter

    @property
    def model_name(self) -> str:
        return str(getattr(self.inner, "model", "") or "")

    async def complete(self, request: ModelRequest) -> ModelResponse:
        response = await self.inner.complete(request)
        self._learn(request, response)
        return response

    async def stream(self, request: ModelRequest) -> AsyncIterator[TextDelta | ModelResponse]:
        if not supports_streaming(self.inner):
            yield await self.complete(request)
            return
        async for event in self.inner.stream(request):
            if isinstance(event, ModelResponse):
                self._learn(request, event)
            yield event

    def _learn(self, request: ModelRequest, response: ModelResponse) -> None:
        if response.usage.estimated:
            return
        estimated = self.counter.base.count(request.messages, self.model_name)
        self.counter.observe(
            self.model_name or response.model, estimated, response.usage.prompt_tokens
        )


def calibrated_budget(tokens: int, model: object) -> int:
    """`tokens` of the model's real tokens as estimated tokens: the calibrated budget when
    `model` is a `CalibratingProvider`, `tokens` unchanged otherwise (the offline default).
    The one call the loop makes where it sizes a fold chunk or a window by the estimate."""
    if isinstance(model, CalibratingProvider):
        return model.counter.budget(tokens, model.model_name)
    return tokens


__all__ = [
    "MAX_RATIO",
    "MIN_RATIO",
    "MIN_SAMPLE_TOKENS",
    "SAVE_DRIFT",
    "CalibratedCounter",
    "CalibratingProvider",
    "EstimateCounter",
    "TokenCounter",
    "calibrated_budget",
]
