"""Calibrated token counts through the real loop, on SQLite and PostgreSQL (issue 39): a model
whose tokenizer counts twice the chars/4 estimate is sent fold chunks past its context (the
policy's `fold_max_tokens`, sized by the estimate) and refuses them as too long; once one of
its chat calls has reported usage, the loop sizes the chunks by the learned ratio and none is
refused. The offline default (no reported usage) stays the plain estimate."""

from __future__ import annotations

import uuid

from bounded_agents.core.calibration import MAX_RATIO
from bounded_agents.core.history import window_history
from bounded_agents.core.ports import ModelRequest, ModelResponse, Usage
from bounded_agents.core.summary import summarize_with_model
from bounded_agents.core.tokens import estimate_message_tokens
from bounded_agents.errors import ProviderContextExceeded
from tests.factories import assistant, user
from tests.loop.conftest import LoopEnv

CONTEXT = 2000
"""The model's context in its own tokens."""
FOLD_MAX_TOKENS = 1400
"""The policy's fold chunk, in the model's tokens: the context less room for the summarizer's
instructions (about 170 estimated tokens, 340 of this model's) and its answer."""


class DoubleCountingModel:
    """Counts twice the estimate: a prompt past `CONTEXT` of those is refused as too long,
    any other reports its real prompt tokens."""

    model = "digits-2x"

    def __init__(self) -> None:
        self.refused = 0
        self.summaries = 0

    async def complete(self, request: ModelRequest) -> ModelResponse:
        real = 2 * sum(estimate_message_tokens(m) for m in request.messages)
        if real > CONTEXT:
            self.refused += 1
            raise ProviderContextExceeded(f"prompt is too long: {real} tokens > {CONTEXT}")
        if request.purpose == "history_summary":
            self.summaries += 1
            content = f"Notes {self.summaries}: orders were discussed."
        else:
            content = "ok"
        usage = Usage(prompt_tokens=real, completion_tokens=3)
        return ModelResponse(content=content, model="digits-2x", usage=usage)


def digits(n: int) -> list:  # type: ignore[type-arg]
    """`n` runs of digit-heavy orders, about 150 estimated tokens a message."""
    return [
        m for i in range(n) for m in (user(f"order {i}: " + "4071 " * 110), assistant(f"noted {i}"))
    ]


async def _fold_once(env: LoopEnv, model: DoubleCountingModel, *, warm: bool) -> int:
    """One turn on a thread past its high mark (a fold owed), on a fresh loop; `warm`: a chat
    call on another thread reported usage first. The chunks the model refused."""
    policy = window_history(
        max_messages=2,
        fold_messages=12,
        summarize=summarize_with_model(model),
        fold_max_tokens=FOLD_MAX_TOKENS,
    )
    loop = env.loop(model, policy, fold_calls=6)
    if warm:
        short = await env.thread(digits(2))
        await loop.run_turn(
            agent="helper",
            thread_id=short,
            actor_id="alice",
            content="hi",
            run_id=str(uuid.uuid4()),
        )
        assert model.refused == 0 and model.summaries == 0  # no fold there: only the chat call
    tid = await env.thread(digits(12))
    result = await loop.run_turn(
        agent="helper", thread_id=tid, actor_id="alice", content="sum?", run_id=str(uuid.uuid4())
    )
    assert result.report.summary is not None
    return model.refused


async def test_a_2x_tokenizer_gets_chunks_refused_before_any_reported_usage(env: LoopEnv) -> None:
    model = DoubleCountingModel()
    assert await _fold_once(env, model, warm=False) > 0


async def test_a_2x_tokenizer_stops_getting_refused_chunks_after_its_first_reported_usage(
    env: LoopEnv,
) -> None:
    model = DoubleCountingModel()
    assert await _fold_once(env, model, warm=True) == 0
    assert model.summaries > 0  # it folded, in chunks that fit


class LyingModel:
    """Reports a billion prompt tokens for every call, whatever it was sent."""

    model = "liar"

    def __init__(self) -> None:
        self.summaries = 0

    async def complete(self, request: ModelRequest) -> ModelResponse:
        if request.purpose == "history_summary":
            self.summaries += 1
        content = (
            f"Notes {self.summaries}: orders." if request.purpose == "history_summary" else "ok"
        )
        usage = Usage(prompt_tokens=10**9, completion_tokens=3)
        return ModelResponse(content=content, model="liar", usage=usage)


async def test_a_provider_lying_about_its_prompt_tokens_shrinks_chunks_boundedly_and_folds(
    env: LoopEnv,
) -> None:
    """An attack: a usage report a million times the estimate is clamped (`MAX_RATIO`), so the
    fold budget shrinks at most that much and the thread still folds and answers."""
    model = LyingModel()
    policy = window_history(
        max_messages=2,
        fold_messages=12,
        summarize=summarize_with_model(model),
        fold_max_tokens=8000,
    )
    loop = env.loop(model, policy, fold_calls=6)
    warm = await env.thread(digits(2))
    await loop.run_turn(
        agent="helper", thread_id=warm, actor_id="alice", content="hi", run_id=str(uuid.uuid4())
    )
    tid = await env.thread(digits(12))

    result = await loop.run_turn(
        agent="helper", thread_id=tid, actor_id="alice", content="sum?", run_id=str(uuid.uuid4())
    )

    assert result.report.summary is not None and model.summaries > 0
    assert loop.deps.learned.tokens.ratio("liar") == MAX_RATIO
    assert result.message.content == "ok"


class ExactlyCountingModel(DoubleCountingModel):
    """`DoubleCountingModel` that can also count a request exactly without running it
    (`TokenCountingProvider`, as Anthropic's count endpoint does), counting its counts."""

    def __init__(self) -> None:
        super().__init__()
        self.counts = 0

    async def count_tokens(self, request: ModelRequest) -> int:
        self.counts += 1
        return 2 * sum(estimate_message_tokens(m) for m in request.messages)


async def test_a_model_that_counts_exactly_is_asked_once_and_its_first_fold_fits(
    env: LoopEnv,
) -> None:
    """No chat call has reported usage yet (a new process, nothing saved), so without the
    count the first chunk is refused (the test above); a model with an exact counter is
    asked once, before the first chunk, and no chunk is refused. The fold's later chunks ask
    nothing more: once per model and process."""
    model = ExactlyCountingModel()
    assert await _fold_once(env, model, warm=False) == 0
    assert model.summaries >= 2 and model.counts == 1, "one count for the fold's chunks"
    assert await _fold_once(env, model, warm=False) == 0  # a new loop: a new process
    assert model.counts == 2, "asked once by each"
